#!/usr/bin/env python3
"""Where a kernel's warps stall, from the per-instruction table of bench/ncu_kernels.sh (.sass.csv).

Prints the instructions with the most warp-stall samples (share of all samples, the leading stall
reasons) and, with --regions, the share of samples that falls in each named range of instruction
indices (the index is the table row, as printed in the first column). A warp's samples are spread
over time evenly, so a range's share is the share of the warps' time spent there.

With --opcodes N: the N opcodes (first word of the instruction, predicate dropped) with the most
executed warp instructions, with their stall samples; with --versus OTHER.sass.csv also the other
kernel's counts and the difference, to see what one variant executes more of than another.

With --shared N: the shared-memory data pipe's wavefronts (ncu's "L1 Wavefronts Shared" and its
"Ideal") totalled by instruction form (the whole first word, e.g. LDS.64, STS,
HGMMA.64x128x16.F32.BF16, with wgmma's A operand from shared memory or registers told apart), the
N forms with the most, each with its wavefronts an instruction and its excess over the ideal: where
bank conflicts are, and what the pipe spends on operands and row statistics.

With --barriers JSON --kernel KEY: the samples of every mbarrier wait (a SYNCS.PHASECHK try_wait
and the branch / sleep instructions of its retry, where a waiting warp's samples land) totalled by
the barrier it waits on, named from the shared-memory offset in its address and the offsets that
bench/smem_barriers.sh writes for each kernel configuration (KEY, e.g. 'bwd_kernel_sm90 d128 fp16').

With --source LISTING --function NAME: each instruction's source lines, from `nvdisasm -gi` of
the same build's cubin (the kernel's instructions must match the table's one for one: compile the
instantiation with the build's flags, -lineinfo included, e.g. nvcc ... -lineinfo -cubin
bwd_hdim256_bf16_sm90.cu, then .sass-tools/nvdisasm -gi -c FILE.cubin > LISTING); NAME picks the
kernel among the listing's functions (a part of its mangled name, e.g. 'bwd_wide_kernel_sm90' and
'Lb0E' for kDeterministic false: several parts separated by commas must all match). The --top
listing then ends each line with the call chain, innermost first, and --by-line N totals the
samples by the kernel's own source line (the outermost frame).

Example (the sm90 backward's loop phases, indices read off the --top listing and the SASS):
  python3 bench/ncu_stalls.py OUT/bwd_kernel_sm90_s8192_d128_bf16_full.sass.csv --top 20 \\
      --regions 'S issue + dQ staging:1129-1280,softmax:1940-2040'
  python3 bench/ncu_stalls.py OUT/bwd_..._bf16_full.sass.csv --opcodes 20 --versus OUT/bwd_..._fp16_full.sass.csv
"""
import argparse
import csv
import json
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
WAVEFRONTS = "L1 Wavefronts Shared"
IDEAL = "L1 Wavefronts Shared Ideal"


def read_table(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel; row 1 is the header.
    header, data = rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    if SAMPLES not in col or "Source" not in col:
        sys.exit(f"{path}: not an ncu source table (no '{SAMPLES}' / 'Source' columns)")
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    def count(r, name):
        return int(float(r[col[name]].replace(",", "") or 0)) if name in col else 0

    table = []
    for r in data:
        by_reason = {h[len("stall_"):]: int(r[col[h]] or 0) for h in reasons}
        table.append((r[col["Source"]].strip(), int(r[col[SAMPLES]] or 0), by_reason, count(r, EXECUTED),
                      count(r, WAVEFRONTS), count(r, IDEAL)))
    return table


def unpredicated(src):
    """An instruction's words without its predicate: '@!P0 BRA 0x..' -> ['BRA', '0x..']."""
    words = src.split()
    return words[1:] if words and words[0].startswith("@") else words


def opcode(src):
    """The opcode of an instruction without its predicate or modifiers: '@!P0 BRA 0x..' -> 'BRA'."""
    words = unpredicated(src)
    return words[0].split(".")[0] if words else "?"


def by_opcode(table):
    """{opcode: [executed warp instructions, stall samples]}."""
    totals = {}
    for src, samples, _, executed, _, _ in table:
        t = totals.setdefault(opcode(src), [0, 0])
        t[0] += executed
        t[1] += samples
    return totals


def parse_regions(spec):
    regions = []
    for part in spec.split(","):
        name, _, span = part.rpartition(":")
        lo, _, hi = span.partition("-")
        if not name or not lo.isdigit() or not hi.isdigit():
            sys.exit(f"--regions: expected NAME:FIRST-LAST, got '{part}'")
        regions.append((name, int(lo), int(hi)))
    return regions


ADDRESS_OFFSET = re.compile(r"\[[^\]]*?0x([0-9a-fA-F]+)\]")


def barrier_names(path, kernel):
    """{byte offset: name} of one kernel configuration in bench/smem_barriers.sh's JSON; an array's
    element 0 takes the array's name (SASS adds the element's index in a register)."""
    with open(path) as f:
        offsets = json.load(f)
    if kernel not in offsets:
        sys.exit(f"--kernel: '{kernel}' is not in {path} (it has: {', '.join(offsets)})")
    names = {}
    for name, offset in offsets[kernel].items():
        names[offset] = name[:-3] if name.endswith("[0]") else name
    return names


def barrier_waits(table, names):
    """[(name, samples)] of the mbarrier waits, most samples first: each SYNCS.PHASECHK (a try_wait
    or its retry's test) with up to two BRA / NANOSLEEP instructions right after it, where the
    waiting warps' samples land, by its address's offset."""
    totals = {}
    i = 0
    while i < len(table):
        src = table[i][0]
        if opcode(src) != "SYNCS" or "PHASECHK" not in src:
            i += 1
            continue
        m = ADDRESS_OFFSET.search(src)
        offset = int(m.group(1), 16) if m else -1
        name = names.get(offset, f"? offset 0x{offset:x}" if offset >= 0 else "? no offset")
        samples = table[i][1]
        j = i + 1
        while j < len(table) and opcode(table[j][0]) in ("BRA", "NANOSLEEP") and j - i <= 2:
            samples += table[j][1]
            j += 1
        totals[name] = totals.get(name, 0) + samples
        i = j
    return sorted(totals.items(), key=lambda kv: -kv[1])


LINE_INFO = re.compile(r'\s*//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')
INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s*([^;]*);")


def source_lines(listing, function):
    """[(opcode, [frames, innermost first])] per instruction of the one function in an nvdisasm -gi
    listing whose section name contains every comma-separated part of `function`; an instruction
    without line comments of its own keeps the frames before it."""
    parts = function.split(",")
    with open(listing) as f:
        lines = f.read().split("\n")
    starts = [i for i, l in enumerate(lines) if l.startswith(".text.") and all(p in l for p in parts)]
    if len(starts) != 1:
        sys.exit(f"--function '{function}': {len(starts)} functions of {listing} match (need one)")
    out, frames, fresh = [], [], []
    for l in lines[starts[0] + 1:]:
        if l.startswith(".text.") or l.startswith("//----"):
            break
        m = LINE_INFO.match(l)
        if m:
            here = f"{m.group(1).rsplit('/', 1)[-1]}:{m.group(2)}"
            fresh.append(here if not m.group(3) else f"{here} < {m.group(3).rsplit('/', 1)[-1]}:{m.group(4)}")
            continue
        m = INSTRUCTION.match(l)
        if m:
            if fresh:
                # nvdisasm gives the innermost frame first, then each caller's line.
                frames, fresh = [fresh[0].split(" < ")[0]] + [f.split(" < ")[-1] for f in fresh], []
            out.append((opcode(m.group(2)), frames))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("table", help="a .sass.csv written by bench/ncu_kernels.sh")
    ap.add_argument("--top", type=int, default=25, help="how many instructions to list (default 25)")
    ap.add_argument("--regions", help="NAME:FIRST-LAST,... instruction index ranges (inclusive) to total")
    ap.add_argument("--opcodes", type=int, default=0, help="list this many opcodes by executed instructions")
    ap.add_argument("--shared", type=int, default=0,
                    help="list this many instruction forms by shared-memory wavefronts, with their excess")
    ap.add_argument("--versus", help="with --opcodes: a second .sass.csv to compare against")
    ap.add_argument("--barriers", help="bench/smem_barriers.sh's JSON: total the mbarrier waits by barrier")
    ap.add_argument("--kernel", help="with --barriers: the kernel configuration's key in that JSON")
    ap.add_argument("--source", help="nvdisasm -gi listing of the same build's cubin: source lines per instruction")
    ap.add_argument("--function", help="with --source: parts of the kernel's mangled name, comma-separated")
    ap.add_argument("--by-line", type=int, default=0, help="with --source: total the samples of this many "
                                                             "kernel source lines")
    args = ap.parse_args()
    if args.barriers and not args.kernel:
        ap.error("--barriers needs --kernel")
    if args.source and not args.function:
        ap.error("--source needs --function")

    table = read_table(args.table)
    where = None
    if args.source:
        where = source_lines(args.source, args.function)
        mismatch = [i for i, (op, _) in enumerate(where[:len(table)]) if op != opcode(table[i][0])]
        if len(where) != len(table) or mismatch:
            sys.exit(f"--source: {len(where)} instructions against the table's {len(table)}, first opcode "
                     f"mismatch at {mismatch[0] if mismatch else '-'}: not the profiled build")
    total = sum(t[1] for t in table) or 1
    print(f"# {total} stall samples; index, share, leading reasons (share of the instruction's samples), instruction")
    ranked = sorted(range(len(table)), key=lambda i: -table[i][1])[:args.top]
    for i in ranked:
        src, s, by_reason = table[i][:3]
        # Samples the table gives no reason for (on a wgmma: waiting for the tensor cores to take it).
        by_reason = dict(by_reason, unattributed=max(0, s - sum(by_reason.values())))
        lead = sorted(by_reason.items(), key=lambda kv: -kv[1])[:2]
        why = ", ".join(f"{k} {100 * v / s:.0f}%" for k, v in lead if v and s)
        frames = list(dict.fromkeys(where[i][1])) if where else []
        if len(frames) > 4:  # the innermost frame and the kernel's last two; CuTe's layers between
            frames = frames[:1] + ["..."] + frames[-2:]
        chain = "  <- " + " < ".join(frames) if frames else ""
        print(f"{i:6d} {100 * s / total:5.1f}%  {why:34s} {src}{chain}")
    if where and args.by_line:
        by_line = {}
        for (_, frames), t in zip(where, table):
            key = frames[-1] if frames else "?"
            by_line[key] = by_line.get(key, 0) + t[1]
        print("# kernel source line (outermost frame), share of all samples")
        for key, s in sorted(by_line.items(), key=lambda kv: -kv[1])[:args.by_line]:
            print(f"{key:40s} {100 * s / total:5.1f}%")
    if args.regions:
        print("# region, instruction indices, share of all samples")
        for name, lo, hi in parse_regions(args.regions):
            s = sum(t[1] for t in table[lo:hi + 1])
            print(f"{name:32s} {lo:5d}-{hi:<5d} {100 * s / total:5.1f}%")
    if args.barriers:
        print("# mbarrier waits (try_wait and its retry), share of all samples")
        for name, s in barrier_waits(table, barrier_names(args.barriers, args.kernel)):
            print(f"{name:32s} {100 * s / total:5.1f}%")
    if args.opcodes:
        print_opcodes(table, read_table(args.versus) if args.versus else None, args.opcodes)
    if args.shared:
        print_shared(table, args.shared)


def instruction_form(src):
    """The first word of an instruction, predicate dropped; wgmma's told apart by its A operand:
    '@P0 HGMMA.64x64x16.F32.BF16 R1, gdesc[UR4], R2' -> 'HGMMA.64x64x16.F32.BF16 A=smem'."""
    words = unpredicated(src)
    if not words:
        return "?"
    if words[0].startswith("HGMMA") and len(words) > 2:
        return words[0] + (" A=smem" if words[2].startswith("gdesc") else " A=reg")
    return words[0]


def print_shared(table, n):
    totals = {}
    for src, _, _, executed, wavefronts, ideal in table:
        if wavefronts or ideal:
            t = totals.setdefault(instruction_form(src), [0, 0, 0])
            t[0] += executed
            t[1] += wavefronts
            t[2] += ideal
    all_w = sum(t[1] for t in totals.values())
    all_i = sum(t[2] for t in totals.values())
    print(f"# shared-memory wavefronts {all_w} (ideal {all_i}): form, share, wavefronts, "
          "an instruction, excess over ideal")
    for form in sorted(totals, key=lambda f: -totals[f][1])[:n]:
        e, w, i = totals[form]
        print(f"{form:36s} {100 * w / max(all_w, 1):5.1f}% {w:>12d} {w / max(e, 1):6.2f} {w - i:>+12d}")


def print_opcodes(table, other, n):
    mine = by_opcode(table)
    theirs = by_opcode(other) if other is not None else {}
    e_total = sum(v[0] for v in mine.values())
    head = "# opcode, executed warp instructions, stall samples"
    if other is not None:
        o_total = sum(v[0] for v in theirs.values())
        head += f"; then the --versus table's and this minus it (all: {e_total} - {o_total} = {e_total - o_total})"
    print(head)
    for op in sorted(mine, key=lambda o: -mine[o][0])[:n]:
        e, s = mine[op]
        line = f"{op:14s} {e:>12d} {s:>9d}"
        if other is not None:
            oe, os_ = theirs.get(op, [0, 0])
            line += f"   {oe:>12d} {os_:>9d}   {e - oe:>+12d} {s - os_:>+9d}"
        print(line)


if __name__ == "__main__":
    main()
