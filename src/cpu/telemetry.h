// Per-thread numerics telemetry of the CPU backend, merged into a NumericsReport. Only touched
// when AttentionOptions::report is set, so the default path pays nothing.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "flashtrain/numerics.h"

namespace flashtrain::cpu {

struct Telemetry {
  double max_abs_logit = 0.0;
  double lse_min = std::numeric_limits<double>::infinity();
  double lse_max = -std::numeric_limits<double>::infinity();
  int64_t masked_rows = 0;
  double max_abs_ds = 0.0;

  void scores(const float* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      if (std::isfinite(s[i])) max_abs_logit = std::max(max_abs_logit, double(std::fabs(s[i])));
  }
  void row(float lse) {
    if (std::isinf(lse) && lse < 0) {
      ++masked_rows;
      return;
    }
    lse_min = std::min(lse_min, double(lse));
    lse_max = std::max(lse_max, double(lse));
  }
  void ds(const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) max_abs_ds = std::max(max_abs_ds, double(std::fabs(x[i])));
  }
  void merge(const Telemetry& o) {
    max_abs_logit = std::max(max_abs_logit, o.max_abs_logit);
    lse_min = std::min(lse_min, o.lse_min);
    lse_max = std::max(lse_max, o.lse_max);
    masked_rows += o.masked_rows;
    max_abs_ds = std::max(max_abs_ds, o.max_abs_ds);
  }
  void into_forward(NumericsReport& r) const {
    r.max_abs_scaled_logit = std::max(r.max_abs_scaled_logit, max_abs_logit);
    r.lse_min = std::min(r.lse_min, lse_min);
    r.lse_max = std::max(r.lse_max, lse_max);
    r.fully_masked_rows += masked_rows;
  }
  void into_backward(NumericsReport& r) const { r.max_abs_ds = std::max(r.max_abs_ds, max_abs_ds); }
};

}  // namespace flashtrain::cpu
