#!/usr/bin/env python3
"""Summarise the sm90 backward's per-block timeline: where the SM time of the main kernel goes.

Needs an extension built with -DFLASHTRAIN_BWD_TRACE=ON (src/cuda/sm90/bwd_trace_sm90.h), run with
FLASHTRAIN_BWD_TRACE=FILE, which each backward launch overwrites, e.g.

  FLASHTRAIN_BWD_TRACE=/tmp/t.bin python3 bench/profile_kernels.py --seq 2048 --dim 128
  python3 bench/bwd_trace.py /tmp/t.bin

Prints, for the blocks with steps, each phase's median time and its share of all blocks' SM time
(the time from a block's start to its last warpgroup's end, plus the gap to the next block on
the same SM): set-up before the consumers start, waiting for K and V, the prologue (bf16, but for
the D 64 default kernel: K's fp16 copy; the second warpgroup's stagger), the steps, the tail (the
last step's dQ), the epilogue (dK and dV), and the gap between blocks.
"""
import argparse
import json
import statistics
import struct
import sys

SLOTS = 16
WG_BASE, PHASES = 4, 6
START, KV, LOOP, LOOP_END, TAIL, END = range(PHASES)


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<8q", data[:64])
    blocks = header[0]
    values = struct.unpack("<%dQ" % (blocks * SLOTS), data[64:64 + blocks * SLOTS * 8])
    recs = [values[i * SLOTS:(i + 1) * SLOTS] for i in range(blocks)]
    return {"blocks": blocks, "head_dim": header[1], "block_m": header[2], "block_n": header[3],
            "clock_khz": header[4]}, recs


def summarise(meta, recs):
    rows = []
    for r in recs:
        g0, g1, sm, steps = r[0], r[1], r[2], r[3]
        if g0 == 0 or g1 <= g0:
            continue
        wg = [r[WG_BASE + PHASES * w:WG_BASE + PHASES * (w + 1)] for w in range(2)]
        ghz = (wg[0][END] - wg[0][START]) / (g1 - g0)  # cycles per ns, this block
        if ghz <= 0:
            continue
        t0 = wg[0][START]

        def ns(w, phase):
            return (wg[w][phase] - t0) / ghz

        rows.append({"sm": sm, "steps": steps, "g0": g0, "ghz": ghz,
                     "end": g0 + max(ns(0, END), ns(1, END)),
                     "phase": [[ns(w, p) for p in range(PHASES)] for w in range(2)]})
    by_sm = {}
    for row in rows:
        by_sm.setdefault(row["sm"], []).append(row)
    gaps = []
    for blocks in by_sm.values():
        blocks.sort(key=lambda x: x["g0"])
        for a, b in zip(blocks, blocks[1:]):
            gaps.append(max(0.0, b["g0"] - a["end"]))
            a["gap"] = gaps[-1]
    work = [r for r in rows if r["steps"] > 0]
    names = [("kv", "K and V wait", KV, None), ("prologue", "prologue (K copy, stagger)", LOOP, KV),
             ("steps", "steps", LOOP_END, LOOP), ("tail", "tail (last dQ)", TAIL, LOOP_END),
             ("epilogue", "epilogue (dK, dV)", END, TAIL)]
    out = {"meta": meta, "blocks_traced": len(rows), "blocks_with_steps": len(work),
           "sms": len(by_sm), "median_steps": statistics.median([r["steps"] for r in work]) if work else 0,
           "median_ghz": statistics.median([r["ghz"] for r in rows]) if rows else 0, "phases": {}}
    busy = sum(r["end"] - r["g0"] + r.get("gap", 0.0) for r in work) or 1.0
    for key, label, hi, lo in names:
        for w in range(2):
            vals = [(r["phase"][w][hi] - (r["phase"][w][lo] if lo is not None else 0.0)) for r in work]
            if not vals:
                continue
            out["phases"]["%s_wg%d" % (key, w)] = {
                "label": "%s, warpgroup %d" % (label, w), "median_us": statistics.median(vals) / 1e3,
                "share": sum(vals) / busy}
    last_end = [max(r["phase"][0][END], r["phase"][1][END]) - r["phase"][0][END] for r in work]
    out["phases"]["wg1_after_wg0"] = {"label": "warpgroup 1 ends after warpgroup 0 by",
                                      "median_us": statistics.median(last_end) / 1e3 if work else 0,
                                      "share": sum(last_end) / busy}
    out["phases"]["gap"] = {"label": "gap to the next block on the SM",
                            "median_us": statistics.median(gaps) / 1e3 if gaps else 0,
                            "share": sum(r.get("gap", 0.0) for r in work) / busy}
    if work:
        per_step = [(r["phase"][0][LOOP_END] - r["phase"][0][LOOP]) / r["steps"] for r in work]
        out["median_step_us"] = statistics.median(per_step) / 1e3
        out["median_block_us"] = statistics.median([r["end"] - r["g0"] for r in work]) / 1e3
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="file written under FLASHTRAIN_BWD_TRACE")
    ap.add_argument("--json", help="also write the summary as JSON here")
    args = ap.parse_args()
    meta, recs = read(args.trace)
    out = summarise(meta, recs)
    print("%d blocks (%d with steps) on %d SMs, D %d, %d x %d tiles, median %d steps, SM clock %.2f GHz "
          "(attribute %.2f)" % (out["blocks_traced"], out["blocks_with_steps"], out["sms"], meta["head_dim"],
                                meta["block_m"], meta["block_n"], out["median_steps"], out["median_ghz"],
                                meta["clock_khz"] / 1e6))
    if "median_step_us" in out:
        print("median block %.2f us, median step %.3f us" % (out["median_block_us"], out["median_step_us"]))
    print("%-46s %10s %8s" % ("phase", "median us", "share"))
    for v in out["phases"].values():
        print("%-46s %10.2f %7.1f%%" % (v["label"], v["median_us"], 100 * v["share"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
