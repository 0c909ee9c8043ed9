#include "attention_ops.h"

#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "flashtrain/attention.h"
#include "tensor_view.h"

namespace flashtrain::torch_binding {

// Named returns document the layout; lse is float32 [B, Hq, Sq] (dense) or [Hq, total_q] (varlen).
const char* const kForwardSchema =
    "fwd(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
    "int max_seqlen_q, int max_seqlen_k, float dropout_p, float? softmax_scale, bool causal, "
    "bool causal_top_left, int window_left, int window_right, float softcap, "
    "Tensor? alibi_slopes, Tensor? rng_state, Tensor(a!)? report=None) -> (Tensor out, Tensor lse)";
const char* const kBackwardSchema =
    "bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
    "Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, "
    "float dropout_p, float? softmax_scale, bool causal, bool causal_top_left, int window_left, "
    "int window_right, float softcap, Tensor? alibi_slopes, Tensor? rng_state, "
    "bool deterministic, Tensor(a!)? report=None, int precision=0) "
    "-> (Tensor dq, Tensor dk, Tensor dv)";
const char* const kBackendSchema =
    "backend(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
    "int max_seqlen_q, int max_seqlen_k, float dropout_p, float? softmax_scale, bool causal, "
    "bool causal_top_left, int window_left, int window_right, float softcap, "
    "Tensor? alibi_slopes) -> str";

namespace {

// rng_state holds (seed, offset) as two int64 on the host; the bits are reinterpreted as uint64.
constexpr int64_t kRngStateElements = 2;

// Tag python/flashtrain/ops.py looks for to raise ValueError (keep the two in sync).
constexpr const char* kValueErrorTag = "[flashtrain ValueError] ";

// Runs `body`, turning flashtrain::Error into a torch error carrying the library's message behind
// kValueErrorTag. The error is raised by libc10 (torchCheckFail) instead of being thrown here:
// an exception object thrown from this library and caught inside torch must come from the same
// C++ runtime as torch's, which a toolchain that links libstdc++ statically into the extension
// breaks (the GPU machine's build crashed on the first one).
template <typename Body>
auto with_python_errors(Body&& body) -> decltype(body()) {
  std::string message;
  try {
    return body();
  } catch (const Error& e) {
    message = std::string(kValueErrorTag) + e.what();
  }
  c10::detail::torchCheckFail(__func__, __FILE__, static_cast<uint32_t>(__LINE__), message.c_str());
}

void read_rng_state(const c10::optional<at::Tensor>& rng_state, double dropout_p,
                    AttentionOptions& options) {
  if (!rng_state.has_value()) {
    FT_CHECK(dropout_p == 0.0, "rng_state (seed, offset) is required when dropout_p > 0, got "
             "dropout_p = ", dropout_p, " and no rng_state");
    return;
  }
  const at::Tensor& t = *rng_state;
  FT_CHECK(t.device().is_cpu() && t.scalar_type() == at::kLong && t.numel() == kRngStateElements,
           "rng_state must be a CPU int64 tensor of ", kRngStateElements,
           " elements (seed, offset), got ", c10::toString(t.scalar_type()), " shape ", t.sizes(),
           " on ", t.device().str());
  const at::Tensor host = t.contiguous();
  const int64_t* values = host.data_ptr<int64_t>();
  options.seed = static_cast<uint64_t>(values[0]);
  options.offset = static_cast<uint64_t>(values[1]);
}

// report: an optional CPU float64 tensor of kReportFields elements holding a NumericsReport's
// fields in declaration order (python/flashtrain/numerics.py names them). The call merges its
// telemetry into it, as flashtrain::forward/backward merge into a NumericsReport.
constexpr int64_t kReportFields = 8;

class ReportTensor {
 public:
  explicit ReportTensor(const c10::optional<at::Tensor>& t) : tensor_(t) {
    if (!tensor_.has_value()) return;
    const at::Tensor& r = *tensor_;
    FT_CHECK(r.device().is_cpu() && r.scalar_type() == at::kDouble && r.numel() == kReportFields &&
                 r.is_contiguous(),
             "report must be a contiguous CPU float64 tensor of ", kReportFields,
             " elements (the NumericsReport fields), got ", c10::toString(r.scalar_type()), " shape ",
             r.sizes(), " on ", r.device().str());
    const double* f = r.data_ptr<double>();
    report_.max_abs_scaled_logit = f[0];
    report_.lse_min = f[1];
    report_.lse_max = f[2];
    report_.fully_masked_rows = static_cast<int64_t>(f[3]);
    report_.safe_mode_reruns = static_cast<int64_t>(f[4]);
    report_.max_abs_ds = f[5];
    report_.forward_calls = static_cast<int64_t>(f[6]);
    report_.backward_calls = static_cast<int64_t>(f[7]);
  }
  NumericsReport* get() { return tensor_.has_value() ? &report_ : nullptr; }
  void write_back() {
    if (!tensor_.has_value()) return;
    double* f = tensor_->data_ptr<double>();
    f[0] = report_.max_abs_scaled_logit;
    f[1] = report_.lse_min;
    f[2] = report_.lse_max;
    f[3] = static_cast<double>(report_.fully_masked_rows);
    f[4] = static_cast<double>(report_.safe_mode_reruns);
    f[5] = report_.max_abs_ds;
    f[6] = static_cast<double>(report_.forward_calls);
    f[7] = static_cast<double>(report_.backward_calls);
  }

 private:
  c10::optional<at::Tensor> tensor_;
  NumericsReport report_;
};

// bwd's precision argument: the values of flashtrain::Precision (0 default, 1 high).
Precision read_precision(int64_t precision) {
  FT_CHECK(precision == static_cast<int64_t>(Precision::kDefault) ||
               precision == static_cast<int64_t>(Precision::kHigh),
           "precision must be 0 (default) or 1 (high), got ", precision);
  return static_cast<Precision>(precision);
}

// Everything but the tensors q, k, v (and backward's extra tensors).
AttentionOptions make_options(const c10::optional<at::Tensor>& cu_seqlens_q,
                              const c10::optional<at::Tensor>& cu_seqlens_k,
                              int64_t max_seqlen_q, int64_t max_seqlen_k, double dropout_p,
                              c10::optional<double> softmax_scale, bool causal,
                              bool causal_top_left, int64_t window_left, int64_t window_right,
                              double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                              const c10::optional<at::Tensor>& rng_state,
                              const ExecutionContext& context) {
  AttentionOptions o;
  if (softmax_scale.has_value()) o.softmax_scale = *softmax_scale;
  o.causal = causal;
  o.align = causal_top_left ? CausalAlign::kTopLeft : CausalAlign::kBottomRight;
  o.window_left = window_left;
  o.window_right = window_right;
  o.softcap = softcap;
  o.alibi_slopes = to_view(alibi_slopes, "alibi_slopes");
  o.dropout_p = dropout_p;
  read_rng_state(rng_state, dropout_p, o);
  o.cu_seqlens_q = to_view(cu_seqlens_q, "cu_seqlens_q");
  o.cu_seqlens_k = to_view(cu_seqlens_k, "cu_seqlens_k");
  o.max_seqlen_q = max_seqlen_q;
  o.max_seqlen_k = max_seqlen_k;
  o.stream = context.stream;
  return o;
}

// lse: float32 [B, Hq, Sq] for dense q [B, Sq, Hq, D], [Hq, total_q] for varlen q [total_q, Hq, D].
at::Tensor empty_lse(const at::Tensor& q) {
  const auto options = q.options().dtype(at::kFloat);
  if (q.dim() == 3) return at::empty({q.size(1), q.size(0)}, options);
  return at::empty({q.size(0), q.size(2), q.size(1)}, options);
}

// The outputs are shaped from q's layout (rank 4 dense, rank 3 varlen) and v's head dim. When
// those ranks are off, the library's input validation says what is wrong (with every other
// problem it finds); otherwise forward/backward validate everything, outputs included.
void require_output_ranks(const at::Tensor& q, const at::Tensor& v, const TensorView& qv,
                          const TensorView& kv, const TensorView& vv, const AttentionOptions& o) {
  if ((q.dim() == 3 || q.dim() == 4) && v.dim() >= 1) return;
  choose_backend(qv, kv, vv, o);
  throw Error(detail::concat("q must have rank 4 [B, S, H, D] or rank 3 [total, H, D] (varlen) "
                             "and v rank >= 1, got q shape ", qv.shape_string(), " and v shape ",
                             vv.shape_string()));
}

}  // namespace

std::string backend_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const c10::optional<at::Tensor>& cu_seqlens_q,
                       const c10::optional<at::Tensor>& cu_seqlens_k, int64_t max_seqlen_q,
                       int64_t max_seqlen_k, double dropout_p,
                       c10::optional<double> softmax_scale, bool causal, bool causal_top_left,
                       int64_t window_left, int64_t window_right, double softcap,
                       const c10::optional<at::Tensor>& alibi_slopes) {
  return with_python_errors([&] {
    // The dropout mask's key does not change which backend runs; a placeholder keeps the
    // rng_state rule quiet.
    AttentionOptions o = make_options(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                      0.0, softmax_scale, causal, causal_top_left, window_left,
                                      window_right, softcap, alibi_slopes, c10::nullopt, {});
    o.dropout_p = dropout_p;
    const BackendChoice choice =
        choose_backend(to_view(q, "q"), to_view(k, "k"), to_view(v, "v"), o);
    return std::string(backend_name(choice.backend));
  });
}

std::tuple<at::Tensor, at::Tensor> forward_op(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const c10::optional<at::Tensor>& cu_seqlens_q, const c10::optional<at::Tensor>& cu_seqlens_k,
    int64_t max_seqlen_q, int64_t max_seqlen_k, double dropout_p,
    c10::optional<double> softmax_scale, bool causal, bool causal_top_left, int64_t window_left,
    int64_t window_right, double softcap, const c10::optional<at::Tensor>& alibi_slopes,
    const c10::optional<at::Tensor>& rng_state, const c10::optional<at::Tensor>& report,
    const ExecutionContext& context) {
  return with_python_errors([&] {
    const TensorView qv = to_view(q, "q"), kv = to_view(k, "k"), vv = to_view(v, "v");
    ReportTensor telemetry(report);
    AttentionOptions o =
        make_options(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                     softmax_scale, causal, causal_top_left, window_left, window_right, softcap,
                     alibi_slopes, rng_state, context);
    o.report = telemetry.get();
    require_output_ranks(q, v, qv, kv, vv, o);
    std::vector<int64_t> out_shape(q.sizes().begin(), q.sizes().end());
    out_shape.back() = v.size(-1);
    at::Tensor out = at::empty(out_shape, q.options());
    at::Tensor lse = empty_lse(q);
    forward(qv, kv, vv, to_view(out, "out"), to_view(lse, "lse"), o);
    telemetry.write_back();
    return std::make_tuple(out, lse);
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_op(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const c10::optional<at::Tensor>& cu_seqlens_q,
    const c10::optional<at::Tensor>& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    double dropout_p, c10::optional<double> softmax_scale, bool causal, bool causal_top_left,
    int64_t window_left, int64_t window_right, double softcap,
    const c10::optional<at::Tensor>& alibi_slopes, const c10::optional<at::Tensor>& rng_state,
    bool deterministic, const c10::optional<at::Tensor>& report, int64_t precision,
    const ExecutionContext& context) {
  return with_python_errors([&] {
    const TensorView qv = to_view(q, "q"), kv = to_view(k, "k"), vv = to_view(v, "v");
    ReportTensor telemetry(report);
    AttentionOptions o =
        make_options(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                     softmax_scale, causal, causal_top_left, window_left, window_right, softcap,
                     alibi_slopes, rng_state, context);
    o.deterministic = deterministic;
    o.precision = read_precision(precision);
    o.report = telemetry.get();
    require_output_ranks(q, v, qv, kv, vv, o);
    // Gradients are contiguous whatever the inputs' strides (the fake registration says the same).
    at::Tensor dq = at::empty(q.sizes(), q.options());
    at::Tensor dk = at::empty(k.sizes(), k.options());
    at::Tensor dv = at::empty(v.sizes(), v.options());
    at::Tensor workspace;
    if (context.torch_workspace) {
      const std::size_t bytes = backward_workspace_size(qv, kv, vv, to_view(dq, "dq"), o);
      if (bytes > 0) {
        workspace = at::empty({static_cast<int64_t>(bytes)}, q.options().dtype(at::kByte));
        o.workspace = workspace.data_ptr();
        o.workspace_bytes = bytes;
      }
    }
    backward(qv, kv, vv, to_view(out, "out"), to_view(lse, "lse"), to_view(dout, "dout"),
             to_view(dq, "dq"), to_view(dk, "dk"), to_view(dv, "dv"), o);
    telemetry.write_back();
    return std::make_tuple(dq, dk, dv);
  });
}

}  // namespace flashtrain::torch_binding
