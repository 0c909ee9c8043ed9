#!/usr/bin/env bash
# Compiles kernel instantiation files for sm_90a with ptxas's report (no GPU needed) and prints,
# per kernel, the spills and every C751x note: C7514 / C7515 / C7518 "wgmma.mma_async
# instructions are serialized ...", C7517 "warpgroup.wait is injected ...". ptxas gives them as
# info, not as warnings, and they cost a wgmma kernel far more than a few spilled bytes (run 27:
# C7515, then C7514 / C7517 / C7518, 12-23% slower backward). Exits 1 when any kernel has one.
# Needs the CUTLASS headers in .cutlass (scripts/fetch_cutlass.sh). Two files compile in about
# two minutes on two cores; run it on every kernel change before a device call.
#   scripts/ptxas_check.sh src/cuda/instantiations/bwd_hdim256_bf16_sm90.cu [more .cu files]
#   HDIMS="64;128" scripts/ptxas_check.sh ...   (the FLASHTRAIN_HDIMS_BUILT the files expect)
#   scripts/ptxas_check.sh --order FILE.cu   also prints where ptxas put each sm90 kernel's wgmma
#     issues, waits, MUFU and F2FP runs (bench/sass_order.py; cuobjdump from scripts/fetch_sass_tools.sh)
#   scripts/ptxas_check.sh --spills FILE.cu  also splits each kernel's local-memory instructions
#     between the consumers (the warps that raise their registers) and the rest (bench/sass_spills.py):
#     a spill in the consumers' loop costs every step, one in the producer's warps next to nothing
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]] && { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
sass=""  # order or spills: read the kernels' SASS with bench/sass_$sass.py
[[ "$1" == "--order" || "$1" == "--spills" ]] && { sass=${1#--}; shift; }
[[ -z $sass || -x .sass-tools/cuobjdump ]] || { echo "ptxas_check: .sass-tools/cuobjdump missing (scripts/fetch_sass_tools.sh)" >&2; exit 2; }
[[ -d .cutlass/include ]] || { echo "ptxas_check: .cutlass/include missing (scripts/fetch_cutlass.sh)" >&2; exit 2; }
status=0
for src in "$@"; do
  log=$(mktemp)
  obj=/dev/null
  [[ -n $sass ]] && obj=$(mktemp --suffix=.cubin)
  echo "== $src"
  if ! nvcc -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED=1 "-DFLASHTRAIN_HDIMS_BUILT=\"${HDIMS:-64;128;256}\"" \
      -DFLASHTRAIN_WITH_CUDA=1 -Iinclude -Isrc -I.cutlass/include -O3 -DNDEBUG -Xcompiler=-fPIC \
      -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -std=c++17 \
      -Xptxas=-v -Xptxas=-warn-spills -x cu $([[ -n $sass ]] && echo -cubin || echo -c) "$src" -o "$obj" > "$log" 2>&1; then
    tail -20 "$log"; status=1; rm -f "$log"; [[ -n $sass ]] && rm -f "$obj"; continue
  fi
  # ptxas names the function on its "Function properties" line; the spills follow on the next.
  awk '/Function properties for/ { fn = $NF }
       /^ *[0-9]+ bytes stack frame/ && ($5 != 0 || $9 != 0) { printf "  spills  %s %s / %s bytes\n", fn, $5, $9 }
       /C751[0-9]/ { n = split($0, w, " "); printf "  %s %s\n", substr($0, index($0, "(C751"), 7), w[n] }' "$log" |
    c++filt | sed "s/'//g"
  grep -qE "C751[0-9]" "$log" && status=1
  [[ -n $sass ]] && { PATH="$PWD/.sass-tools:$PATH" .sass-tools/cuobjdump -sass "$obj" | python3 "bench/sass_$sass.py"; rm -f "$obj"; }
  rm -f "$log"
done
exit $status
