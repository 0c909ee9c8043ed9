// Accuracy checks of DESIGN.md §4, shared by the GoogleTest suite and `flashtrain doctor`.
//
// compare(): for one output X (any dtype), its float64 ground truth X64 and the same naive
// attention rounded to the input dtype (Xnaive), X passes iff
//     max|X - X64| <= 2 * max|Xnaive - X64| + atol,   atol = kAtolRelative * data scale
// and X is finite wherever X64 is (where X64 is non-finite, i.e. lse = -inf on rows that see no
// key, X must hold the same value). NaN never passes. Where Xnaive overflowed (non-finite while
// X64 is finite) its error there is taken as X64's rounding error in X's dtype, the least any
// result of that dtype can have, so an overflowing baseline neither excuses nor forbids X.
//
// Case / run_case(): a case runner. From a CaseSpec it makes fresh seeded random inputs, runs the
// backend under test (copying to and from the GPU for Backend::kCUDA), the float64 reference and
// the input-dtype naive reference, and compares every output. Outputs are poisoned with NaN
// before each run, so an element the backend never wrote shows up as non-finite, and padding
// around strided outputs is checked to be untouched.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flashtrain/attention.h"

namespace flashtrain::check {

// atol of the §4 rule, relative to the data scale: max|X64| for out and lse, and the largest of
// max|dq64|, max|dk64|, max|dv64| for each gradient (a gradient can cancel to ~0 while its
// rounding noise follows the others). Big enough to absorb fp32 accumulation-order noise (a few
// ulps of 2^-24 summed over a few hundred terms, ~1e-6) where the naive float32 baseline is
// almost exact, and far below one bf16/fp16 ulp (2^-8 / 2^-11), so it never hides a
// half-precision error. When the scale is 0 (e.g. every gradient of a fully masked problem)
// atol is 0 and X must be exactly 0.
constexpr double kAtolRelative = 1e-5;

// One output X compared with X64 and Xnaive, all in logical (row-major) order.
struct Comparison {
  std::string name;
  int64_t count = 0;
  double max_abs_err = 0.0;        // max |X - X64| over elements where X64 is finite
  double naive_max_abs_err = 0.0;  // max |Xnaive - X64| where both are finite
  double ref_max_abs = 0.0;        // max |X64| over finite elements
  double atol = 0.0;
  int64_t nonfinite_mismatch = 0;  // elements where X is non-finite and differs from X64
  int64_t naive_nonfinite = 0;     // elements where Xnaive is non-finite but X64 is not (the
                                   // naive baseline overflowed there)
  bool pass = false;

  double rel_err() const;        // max_abs_err / ref_max_abs
  double naive_rel_err() const;  // naive_max_abs_err / ref_max_abs
  std::string describe() const;  // one line: name, errors, bound, counts, PASS/FAIL
};

// `dtype` is the dtype X is stored in (float32 for lse). atol = kAtolRelative * data_scale;
// a negative data_scale means max|X64|. The case runner passes, for each gradient, the largest
// max|X64| of dq, dk and dv (see kAtolRelative).
Comparison compare(const std::string& name, DType dtype, const std::vector<double>& x,
                   const std::vector<double>& x64, const std::vector<double>& naive,
                   double data_scale = -1.0);

double max_abs_finite(const std::vector<double>& x);

// Memory layout of the tensors a case hands to the backend under test.
enum class Layout {
  kContiguous,  // each tensor dense
  kPackedQKV,   // q, k, v are slices of one [.., S, Hq*Dqk + Hk*Dqk + Hk*Dv] buffer (needs the
                // same q and k lengths); outputs dense
  kPadded,      // every tensor and output (lse included) has padding after each head, row and
                // batch, so no stride is the dense one; the padding is poisoned and checked
};

enum class Alibi { kNone, kPerHead, kPerBatchHead };

struct CaseSpec {
  std::string name;
  // Dense: batch x seqlen_q / seqlen_k. Varlen when seqlens_q is non-empty: one entry per
  // sequence (seqlens_k the same size), batch and seqlen_q/k are then ignored.
  int64_t batch = 1, seqlen_q = 1, seqlen_k = 1;
  std::vector<int32_t> seqlens_q, seqlens_k;
  int64_t heads_q = 1, heads_k = 1, dim_qk = 64, dim_v = 64;
  DType dtype = DType::kBFloat16;
  Layout layout = Layout::kContiguous;
  // Semantics options; cu_seqlens, max_seqlen, alibi_slopes and backend are set by the runner.
  AttentionOptions options;
  Alibi alibi = Alibi::kNone;
  // Standard deviations of the normal random inputs (q, k ~ 30 gives logits around 1e3).
  double q_std = 1.0, k_std = 1.0, v_std = 1.0, dout_std = 1.0;
  bool identity_v = false;  // v[j, :] = e_(j mod Dv): out then holds dropout(P) itself
  bool backward = true;
  uint32_t input_seed = 1;
};

// Results of one run in logical order as double (lse: dense [B, Hq, Sq], varlen [Hq, total_q]).
struct Outputs {
  std::vector<double> out, lse, dq, dk, dv;
  int64_t writes_outside = 0;  // elements of output buffers outside the views that changed
};

struct CaseResult {
  std::vector<Comparison> outputs;  // out, lse (+ dq, dk, dv)
  int64_t writes_outside = 0;
  bool pass = false;
  std::string describe() const;  // multi-line summary, one line per output
};

class Buffer;
struct OutputSet;

// Inputs of one case, generated once; every run reads the same values.
class Case {
 public:
  explicit Case(const CaseSpec& spec);
  ~Case();
  Case(const Case&) = delete;
  Case& operator=(const Case&) = delete;

  const CaseSpec& spec() const { return spec_; }
  // Runs forward (and backward when spec.backward) on `backend`: kCPU / kCUDA produce outputs in
  // the input dtype, in the spec's layout; kReference produces float64 ground truth.
  Outputs run(Backend backend);
  // The naive reference rounded to the input dtype at each materialised stage.
  Outputs run_naive();
  // run(backend), run(kReference), run_naive() and compare().
  CaseResult evaluate(Backend backend);

  // The views and options one run hands to forward()/backward() on `backend` (inputs copied to
  // the GPU for kCUDA, outputs freshly poisoned), for callers that time or repeat the calls
  // themselves. Valid until the next prepare() or run() of this Case.
  struct Views {
    TensorView q, k, v, out, lse, dout, dq, dk, dv;
    AttentionOptions options;
  };
  Views prepare(Backend backend);
  // Copies the outputs of the last prepare()/run() on `backend` back and gathers them.
  Outputs collect(Backend backend);

  struct Tensor;  // a strided view into one Buffer

 private:
  struct Impl;
  OutputSet& outputs_for(Backend backend, bool naive);
  CaseSpec spec_;
  std::unique_ptr<Impl> impl_;
};

inline CaseResult run_case(const CaseSpec& spec, Backend backend) {
  return Case(spec).evaluate(backend);
}

const char* dtype_short_name(DType dtype);  // "fp16", "bf16", "fp32", "fp64", "int32"

}  // namespace flashtrain::check
