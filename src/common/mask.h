// Score transform shared by every backend: softcap, ALiBi and the causal / sliding-window mask.
// The semantics are stated in include/flashtrain/attention.h.
#pragma once
#include <cstdint>
#include <cmath>

#include "host_device.h"

namespace flashtrain {

// Mask of one (batch, head) with its own lengths. `diag` = alignment offset: row i's diagonal
// column is i + diag (Sk - Sq bottom-right, 0 top-left). left/right < 0 means unbounded;
// causal is folded into right = 0 by validation.
struct MaskSpec {
  int64_t diag;
  int64_t left;
  int64_t right;
  int64_t seqlen_k;

  // Visible columns of row i are [col_begin(i), col_end(i)); empty when begin >= end.
  FT_HOST_DEVICE int64_t col_begin(int64_t i) const {
    const int64_t b = left < 0 ? 0 : i + diag - left;
    return b < 0 ? 0 : b;
  }
  FT_HOST_DEVICE int64_t col_end(int64_t i) const {
    const int64_t e = right < 0 ? seqlen_k : i + diag + right + 1;
    return e > seqlen_k ? seqlen_k : e;
  }
  FT_HOST_DEVICE bool visible(int64_t i, int64_t j) const {
    return j >= col_begin(i) && j < col_end(i);
  }
  // An upper bound (causal or right window) without a lower one: row i sees more keys than row
  // i - 1, and key j more rows than key j + 1. The sm90 launchers order tiles longest first then.
  FT_HOST_DEVICE bool upper_bound_only() const { return right >= 0 && left < 0; }
};

// Applies softcap and ALiBi to an already scaled logit s of (i, j). `slope` is 0 without ALiBi.
template <typename T>
FT_HOST_DEVICE T transform_score(T s, T softcap, T slope, int64_t i, int64_t j, int64_t diag) {
  if (softcap > T(0)) s = softcap * tanh(s / softcap);
  if (slope != T(0)) {
    const int64_t dist = i + diag - j;
    s -= slope * static_cast<T>(dist < 0 ? -dist : dist);
  }
  return s;
}

}  // namespace flashtrain
