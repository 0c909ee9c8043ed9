#!/usr/bin/env python3
"""The deterministic backward's dQ turns with a hand-over latency: main's walks against the
descending one (run 66, about.txt), on the benchmark grid's shapes.

The lock-step model of tests/cpp/test_sm90_fwd.cpp lets a key tile take its turn at a Q tile the
step after the tile before it took its own. Here each turn also costs time: blocks run in launch
order on `--sms` slots (list scheduling); a block computes its steps one after another (1 time unit
each); its dQ warp adds step s's dQ (taking --add) once the step is computed, the step before is
added, and the Q tile's previous visitor has released its turn, and releases the turn --fence
after the add; at most --stages computed steps wait for their add. The model then says how much of
a grid that never idles each walk keeps (work / slots / makespan), for a range of hand-overs.

Walks (causal self-attention unless --no-causal):
  rotated     main's causal walk: key tile n from its diagonal Q tile up, turns counting down from
              the diagonal, each head's tiles launched in descending order, heads one after another
  wavefront   main's walk without a mask where the rotated one does not pack: ascending walks and
              turns, heads one after another
  descending  run 66: walks from the last Q tile down, turns ascending, all heads' tile 0, then
              every tile 1, ...
  default     the default mode (no turns), band order

Usage: handoff_model.py [--dims 64,128,256] [--seqlens 4096,16384] [--no-causal]
"""
import argparse
import heapq

TILES = {64: (128, 128), 128: (64, 128), 256: (64, 80)}  # sm90 backward Q x key tiles


def share(seqlen, block_m, block_n, units, sms, walk, add, fence, stages, causal):
    m_tiles = (seqlen + block_m - 1) // block_m
    n_tiles = (seqlen + block_n - 1) // block_n
    if walk == "rotated":
        order = [(u, n) for u in range(units) for n in reversed(range(n_tiles))]
    elif walk == "wavefront":
        order = [(u, n) for u in range(units) for n in range(n_tiles)]
    else:
        order = [(u, n) for n in range(n_tiles) for u in range(units)]
    released = {}
    slots = [0.0] * sms
    work, makespan = 0, 0.0
    for u, n in order:
        first = (n * block_n) // block_m if causal else 0
        q_tiles = list(range(m_tiles - 1, first - 1, -1)) if walk == "descending" else list(range(first, m_tiles))
        work += len(q_tiles)
        start = heapq.heappop(slots)
        computed, added = start, []
        for s, m in enumerate(q_tiles):
            begin = computed if s < stages or walk == "default" else max(computed, added[s - stages])
            computed = begin + 1.0
            if walk == "default":
                added.append(computed)
                continue
            if walk == "rotated":
                diagonal = (min((m + 1) * block_m, seqlen) - 1) // block_n
                before = (u, m, n + 1) if n + 1 <= diagonal else None
            else:  # ascending turns: the key tile below
                before = (u, m, n - 1) if n >= 1 else None
            turn = released[before] if before is not None else 0.0
            done = max(computed, added[-1] if added else 0.0, turn) + add
            added.append(done)
            released[(u, m, n)] = done + fence
        finish = added[-1] if added else start
        makespan = max(makespan, finish)
        heapq.heappush(slots, finish)
    return work / sms / makespan


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--no-causal", action="store_true", help="no causal mask (main: rotated where it packs, else wavefront)")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--stages", type=int, default=2, help="computed steps that may wait for their dQ add")
    ap.add_argument("--handovers", default="0.3+0.3,0.5+0.5,0.5+1.0,1.0+1.0",
                    help="add+fence times in steps, comma-separated")
    args = ap.parse_args()
    causal = not args.no_causal
    handovers = [tuple(float(x) for x in h.split("+")) for h in args.handovers.split(",")]
    print("| D | S | units | default | " + " | ".join(f"add {a} + fence {f}: main / descending" for a, f in handovers) + " |")
    print("|---" * (4 + len(handovers)) + "|")
    for d in (int(x) for x in args.dims.split(",")):
        block_m, block_n = TILES[d]
        for s in (int(x) for x in args.seqlens.split(",")):
            units = 16384 // s * (2048 // d)
            n_tiles = (s + block_n - 1) // block_n
            packs = n_tiles <= args.sms and 20 * (args.sms // n_tiles) * n_tiles >= 17 * args.sms
            main_walk = "rotated" if causal or packs else "wavefront"
            cells = []
            for a, f in handovers:
                before = share(s, block_m, block_n, units, args.sms, main_walk, a, f, args.stages, causal)
                after = share(s, block_m, block_n, units, args.sms, "descending", a, f, args.stages, causal)
                cells.append(f"{main_walk} {before:.3f} / {after:.3f}")
            default = share(s, block_m, block_n, units, args.sms, "default", 0, 0, args.stages, causal)
            print(f"| {d} | {s} | {units} | {default:.3f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
