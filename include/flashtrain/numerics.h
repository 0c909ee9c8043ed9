// Numerics telemetry and guard switches. Telemetry is off by default and costs nothing when off.
#pragma once
#include <cstdint>
#include <limits>

namespace flashtrain {

// How non-finite inputs are treated.
enum class NonFiniteInputs : int {
  kPropagate = 0,  // default: no scan; NaN/Inf in an input propagates to the outputs it touches
  kCheck = 1,      // scan q, k, v (and dout in backward) and throw Error naming the tensor and index
};

// Filled by forward()/backward() when AttentionOptions::report is non-null.
// Fields are merged (max/min/sum) across calls until reset() is called.
struct NumericsReport {
  double max_abs_scaled_logit = 0.0;  // max |scale * q.k| after softcap, over unmasked entries
  double lse_min = std::numeric_limits<double>::infinity();   // over rows that see a key
  double lse_max = -std::numeric_limits<double>::infinity();
  int64_t fully_masked_rows = 0;     // rows with no visible key (out = 0, lse = -inf)
  int64_t safe_mode_reruns = 0;      // backward reruns in safe mode after a non-finite gradient or
                                     // intermediate (also when an input was non-finite: the rerun
                                     // cannot help those, NaN in NaN out)
  double max_abs_ds = 0.0;           // max |dS| seen in backward
  int64_t forward_calls = 0;
  int64_t backward_calls = 0;

  void reset() { *this = NumericsReport(); }
};

}  // namespace flashtrain
