#!/usr/bin/env python3
"""Writes bench/RESULTS.md from the markdown tables a GPU run produced, so no number is typed
by hand. Each --section TITLE=FILE adds a heading and the file's content (a table written by
bench_attention.py, bench_cpu.py, or a log excerpt), in the order given.

Usage: python3 bench/make_results.py --gpu "NVIDIA H200" --commit abc1234 --command "..." \
           --section "GPU attention=out/bench.md" --section "CPU=out/cpu.md" [--output bench/RESULTS.md]
"""
import argparse
import datetime
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--command", required=True, help="the command that produced the files")
    ap.add_argument("--section", action="append", default=[], metavar="TITLE=FILE")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "RESULTS.md"))
    args = ap.parse_args()
    parts = ["# flashtrain benchmark results", "",
             f"Date {args.date}, commit `{args.commit}`, GPU {args.gpu}.", "",
             f"Produced by: `{args.command}`", ""]
    for spec in args.section:
        title, _, path = spec.partition("=")
        if not path or not os.path.exists(path):
            print(f"make_results: section {title!r}: no file {path!r}", file=sys.stderr)
            return 1
        with open(path) as f:
            text = f.read().rstrip()
        if path.endswith((".log", ".txt")):  # plain output: keep its lines as they were printed
            text = "```\n" + text + "\n```"
        else:  # a markdown table or report: its own headings go one level below the section's
            text = "\n".join("#" + line if line.startswith("#") else line for line in text.splitlines())
        parts += [f"## {title}", "", text, ""]
    with open(args.output, "w") as f:
        f.write("\n".join(parts) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
