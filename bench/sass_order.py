#!/usr/bin/env python3
"""The order ptxas gave a kernel's wgmma issues, waits and softmax work, from `cuobjdump -sass`.

Reads a SASS listing (a file, or standard input) and prints, for each kernel whose name matches
--kernel, its instructions of a few classes in address order, runs of one class collapsed to
INDEX:CLASSxCOUNT (INDEX is the instruction's position in the function, the index ncu's .sass.csv
rows use). Classes: HGMMA (wgmma), WAIT<n> (WARPGROUP.DEPBAR.LE gsb0, n: warpgroup_wait<n>), MUFU,
F2FP (conversions), FMNMX, STS / LDS (shared stores / loads), SYNCS (mbarrier arrive / wait),
BAR.SYNC / BAR.ARV (named barriers), BRA.

What it is for: ptxas moves a wgmma wait up to the top of its basic block, over register-only work
that does not need it (run 31: the forward's softmax ran after the wait meant to follow it). The
PTX keeps the source order; only the SASS shows where the waits and the MUFU / F2FP runs ended up.
Used by scripts/ptxas_check.sh --order, which compiles the file and disassembles it.
"""
import argparse
import re
import sys

CLASSES = (("HGMMA", "HGMMA"), ("WARPGROUP.DEPBAR", None), ("MUFU", "MUFU"), ("F2FP", "F2FP"),
           ("FMNMX", "FMNMX"), ("STS", "STS"), ("LDS", "LDS"), ("SYNCS", "SYNCS"),
           ("BAR.SYNC", "BAR.SYNC"), ("BAR.ARV", "BAR.ARV"), ("BRA", "BRA"))


def opcode(instruction):
    """The opcode of one SASS instruction, its predicate dropped ("" for none)."""
    words = instruction.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def classify(instruction):
    """The class of one SASS instruction (its predicate dropped), or None."""
    op = opcode(instruction)
    if not op:
        return None
    for prefix, name in CLASSES:
        if op == prefix or op.startswith(prefix + "."):
            if name is None:  # WARPGROUP.DEPBAR.LE gsb0, 0xN
                return "WAIT<%d>" % int(instruction.rsplit(",", 1)[-1].strip(), 0)
            return name
    return None


def listing(lines):
    """(name, [(address, instruction), ...]) per function of a cuobjdump -sass listing."""
    name, body = None, []
    for line in lines:
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2)))
    if name:
        yield name, body


def functions(lines):
    """(name, [(index, class), ...]) per function of a cuobjdump -sass listing."""
    for name, body in listing(lines):
        seq = []
        for address, instruction in body:
            cls = classify(instruction)
            if cls:
                seq.append((address // 16, cls))
        yield name, seq


def collapse(seq):
    out, start, prev, count = [], None, None, 0
    for index, cls in seq:
        if cls == prev:
            count += 1
            continue
        if prev:
            out.append("%d:%sx%d" % (start, prev, count))
        start, prev, count = index, cls, 1
    if prev:
        out.append("%d:%sx%d" % (start, prev, count))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("listing", nargs="?", help="cuobjdump -sass output (default: standard input)")
    ap.add_argument("--kernel", default="sm90", help="regex a kernel's mangled name must match (default sm90)")
    ap.add_argument("--width", type=int, default=100, help="characters per output line")
    args = ap.parse_args(argv)
    lines = open(args.listing) if args.listing else sys.stdin
    pattern = re.compile(args.kernel)
    for name, seq in functions(lines):
        if not pattern.search(name):
            continue
        print("==", name)
        line = " "
        for item in collapse(seq):
            if len(line) + len(item) + 1 > args.width:
                print(line)
                line = " "
            line += " " + item
        print(line)


if __name__ == "__main__":
    main()
