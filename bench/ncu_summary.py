#!/usr/bin/env python3
"""One markdown table from the raw pages bench/ncu_kernels.sh writes (NAME.raw.txt, from
`ncu --import NAME.ncu-rep --page raw --print-units base`): per profiled kernel its duration,
registers, tensor-pipe and shared-memory activity, DRAM traffic, L2 hit rate, issue activity and
the largest warp stall reasons (cycles per issued instruction).

Usage: bench/ncu_summary.py DIR [--markdown FILE]
"""
import argparse
import glob
import os
import re
import sys

STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"


def read_raw(path):
    """{metric: value} of one raw page; values as printed, thousands separators dropped."""
    metrics = {}
    for line in open(path, errors="replace"):
        parts = line.split()
        if len(parts) < 2 or "__" not in parts[0]:
            continue
        value = parts[-1].replace(",", "")
        try:
            metrics[parts[0]] = float(value)
        except ValueError:
            pass
    return metrics


def row(name, m):
    def get(key, scale=1.0, fmt="{:.0f}"):
        return fmt.format(m[key] * scale) if key in m else "-"
    stalls = sorted(((v, k[len(STALL_PREFIX):-len(STALL_SUFFIX)]) for k, v in m.items()
                     if k.startswith(STALL_PREFIX) and k.endswith(STALL_SUFFIX) and "not_issued" not in k),
                    reverse=True)
    top = ", ".join([f"{reason} {v:.2f}" for v, reason in stalls if reason != "selected"][:4])
    total = m.get("smsp__average_warp_latency_per_inst_issued.ratio")
    return [name,
            get("gpu__time_duration.sum", 1e-3, "{:.0f}"),
            get("launch__registers_per_thread"),
            get("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", 1, "{:.1f}"),
            get("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed", 1, "{:.1f}"),
            get("dram__bytes_read.sum", 1e-9, "{:.2f}") + " / " + get("dram__bytes_write.sum", 1e-9, "{:.2f}"),
            get("lts__t_sector_hit_rate.pct", 1, "{:.1f}"),
            get("smsp__issue_active.avg.pct_of_peak_sustained_active", 1, "{:.1f}"),
            f"{total:.2f}" if total is not None else "-",
            top]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="the OUTDIR of bench/ncu_kernels.sh")
    ap.add_argument("--markdown", help="write the table here too")
    args = ap.parse_args()
    paths = sorted(glob.glob(os.path.join(args.dir, "*.raw.txt")))
    if not paths:
        print(f"ncu_summary: no *.raw.txt in {args.dir}", file=sys.stderr)
        return 1
    head = ["kernel, shape", "us", "regs", "tensor pipe %", "smem pipe %", "DRAM GB read / written",
            "L2 hit %", "issue slots %", "cycles / issued inst", "largest stalls (cycles / issued inst)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path in paths:
        name = re.sub(r"\.raw\.txt$", "", os.path.basename(path))
        lines.append("| " + " | ".join(row(name, read_raw(path))) + " |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
