#!/usr/bin/env python3
"""Unpacks one .xz file (what scripts/prebuild.sh packs) with Python's lzma, for machines without
the xz tool (the GPU machine): scripts/gpu_ab.sh and the device scripts under bench/results/.
  python3 scripts/unxz.py FILE.xz OUT"""
import argparse
import lzma
import shutil


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("packed", help="the .xz file")
    ap.add_argument("out", help="where the unpacked bytes go")
    a = ap.parse_args()
    with lzma.open(a.packed) as src, open(a.out, "wb") as dst:
        shutil.copyfileobj(src, dst)


if __name__ == "__main__":
    main()
