// Which head-dim pairs the CUDA backend supports, and which of them this build instantiated.
// FLASHTRAIN_HDIMS_BUILT is the CSV of FLASHTRAIN_HDIMS set by CMake (e.g. "64,128"); a pair
// (Dqk, Dv) is built when Dqk is in it (the generator names files after Dqk).
#pragma once

#ifndef FLASHTRAIN_HDIMS_BUILT
#error "FLASHTRAIN_HDIMS_BUILT must be defined by the build (CMakeLists.txt sets it)"
#endif

namespace flashtrain::cuda {

struct HeadDimPair {
  int qk;
  int v;
};

// Every pair the kernels are written for; src/cuda/instantiations/generate.py emits these.
constexpr HeadDimPair kSupportedHeadDims[] = {{64, 64}, {96, 96}, {128, 128}, {192, 128}, {192, 192}, {256, 256}};

constexpr bool head_dims_supported(long qk, long v) {
  for (const HeadDimPair& d : kSupportedHeadDims)
    if (d.qk == qk && d.v == v) return true;
  return false;
}

// Parses the CSV at compile time so dispatch can drop pairs that were not instantiated.
constexpr bool head_dim_built(long qk) {
  const char* s = FLASHTRAIN_HDIMS_BUILT;
  long value = 0;
  bool any = false;
  for (;; ++s) {
    if (*s >= '0' && *s <= '9') {
      value = value * 10 + (*s - '0');
      any = true;
    } else {
      if (any && value == qk) return true;
      value = 0;
      any = false;
      if (*s == '\0') return false;
    }
  }
}

}  // namespace flashtrain::cuda
