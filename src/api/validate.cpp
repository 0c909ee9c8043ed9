// One small function per rule; each returns an empty string when the rule holds, otherwise a
// sentence naming the argument and the values seen. Rules run in two stages (what the tensors
// are, then how they fit together) so that later rules can assume earlier ones.
#include "validate.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "../common/dtype.h"
#include "../common/philox.h"
#include "backends.h"

namespace flashtrain {
namespace {

using detail::concat;

struct Named {
  const char* name;
  const TensorView* t;
};

class Reasons {
 public:
  void add(std::string reason) {
    if (!reason.empty()) list_.push_back(std::move(reason));
  }
  void throw_if_any(const char* what) const {
    if (list_.empty()) return;
    std::ostringstream os;
    os << "flashtrain." << what << ": invalid arguments:";
    for (const auto& r : list_) os << "\n  - " << r;
    throw Error(os.str());
  }

 private:
  std::vector<std::string> list_;
};

std::string rule_present(const Named& n) {
  if (!n.t->defined()) return concat(n.name, " is required but was not given");
  if (n.t->data == nullptr && n.t->numel() > 0)
    return concat(n.name, " has a null data pointer (shape ", n.t->shape_string(), ")");
  return {};
}

std::string rule_rank(const Named& n, int expected, const char* layout) {
  if (n.t->ndim != expected)
    return concat(n.name, " must have rank ", expected, " ", layout, ", got rank ", n.t->ndim,
                  " with shape ", n.t->shape_string());
  return {};
}

std::string rule_nonnegative_shape(const Named& n) {
  for (int d = 0; d < n.t->ndim; ++d)
    if (n.t->shape[d] < 0) return concat(n.name, " has a negative size ", n.t->shape_string());
  return {};
}

std::string rule_last_dim_contiguous(const Named& n) {
  const TensorView& t = *n.t;
  if (t.ndim > 0 && t.shape[t.ndim - 1] > 1 && t.stride[t.ndim - 1] != 1)
    return concat(n.name, " must have a contiguous last dim (stride 1), got stride ",
                  t.stride[t.ndim - 1], " for shape ", t.shape_string());
  return {};
}

std::string rule_same_dtype(const Named& a, const Named& b) {
  if (a.t->dtype != b.t->dtype)
    return concat(b.name, " has dtype ", dtype_name(b.t->dtype), " but ", a.name, " has dtype ",
                  dtype_name(a.t->dtype), "; they must match");
  return {};
}

std::string rule_float_input_dtype(const Named& n, bool reference) {
  const DType d = n.t->dtype;
  if (d == DType::kFloat16 || d == DType::kBFloat16 || d == DType::kFloat32) return {};
  if (reference && d == DType::kFloat64) return {};
  return concat(n.name, " has dtype ", dtype_name(d),
                "; supported: float16, bfloat16, float32", reference ? ", float64" : "");
}

std::string rule_output_dtype(const Named& out, DType input, bool reference) {
  if (out.t->dtype == input) return {};
  if (reference && out.t->dtype == DType::kFloat64) return {};
  return concat(out.name, " has dtype ", dtype_name(out.t->dtype), " but must be ",
                dtype_name(input), " like q", reference ? " (or float64 on the reference backend)" : "");
}

std::string rule_lse_dtype(const Named& lse, bool reference) {
  if (lse.t->dtype == DType::kFloat32) return {};
  if (reference && lse.t->dtype == DType::kFloat64) return {};
  return concat(lse.name, " has dtype ", dtype_name(lse.t->dtype), " but must be float32");
}

std::string rule_same_device(const Named& ref, const Named& n) {
  if (!n.t->defined()) return {};
  if (n.t->device != ref.t->device || n.t->device_index != ref.t->device_index)
    return concat(n.name, " is on ", device_name(n.t->device), ":", n.t->device_index, " but ",
                  ref.name, " is on ", device_name(ref.t->device), ":", ref.t->device_index);
  return {};
}

std::string rule_dim_equals(const Named& n, int dim, int64_t expected, const char* what,
                            const char* source) {
  if (n.t->shape[dim] != expected)
    return concat(n.name, " has ", what, " ", n.t->shape[dim], " but ", source, " gives ", expected,
                  " (", n.name, " shape ", n.t->shape_string(), ")");
  return {};
}

std::string rule_same_shape(const Named& a, const Named& b) {
  bool same = a.t->ndim == b.t->ndim;
  for (int d = 0; same && d < a.t->ndim; ++d) same = a.t->shape[d] == b.t->shape[d];
  if (!same)
    return concat(b.name, " has shape ", b.t->shape_string(), " but must have the shape of ", a.name,
                  ", ", a.t->shape_string());
  return {};
}

std::string rule_heads_divide(int64_t hq, int64_t hk) {
  if (hq < 1) return concat("q has ", hq, " heads; at least 1 is required");
  if (hk < 1) return concat("k has ", hk, " heads; at least 1 is required");
  if (hq % hk != 0)
    return concat("k has ", hk, " heads, which must divide q's ", hq, " heads (GQA)");
  return {};
}

std::string rule_head_dim(const char* name, int64_t d) {
  if (d < 1) return concat(name, " has head dim ", d, "; at least 1 is required");
  return {};
}

std::string rule_window(const AttentionOptions& o) {
  if (o.window_left < -1 || o.window_right < -1)
    return concat("window (left, right) = (", o.window_left, ", ", o.window_right,
                  ") is invalid: each must be -1 (unbounded) or >= 0");
  if (o.causal && o.window_right > 0)
    return concat("window_right = ", o.window_right,
                  " conflicts with causal = true (causal means window_right = 0)");
  return {};
}

std::string rule_dropout(double p) {
  if (!(p >= 0.0 && p < 1.0)) return concat("dropout_p = ", p, " must be in [0, 1)");
  return {};
}

std::string rule_scale(const std::optional<double>& scale) {
  if (scale && !(std::isfinite(*scale) && *scale > 0.0))
    return concat("softmax_scale = ", *scale, " must be finite and > 0");
  return {};
}

std::string rule_softcap(double cap) {
  if (!(std::isfinite(cap) && cap >= 0.0))
    return concat("softcap = ", cap, " must be finite and > 0 (or 0 to turn it off)");
  return {};
}

std::string rule_alibi(const AttentionOptions& o, int64_t batch, int64_t hq) {
  const TensorView& a = o.alibi_slopes;
  if (!a.defined()) return {};
  if (a.data == nullptr) return "alibi_slopes has a null data pointer";
  if (a.dtype != DType::kFloat32)
    return concat("alibi_slopes has dtype ", dtype_name(a.dtype), " but must be float32");
  const bool per_head = a.ndim == 1 && a.shape[0] == hq;
  const bool per_batch = a.ndim == 2 && a.shape[0] == batch && a.shape[1] == hq;
  if (!per_head && !per_batch)
    return concat("alibi_slopes has shape ", a.shape_string(), " but must be [", hq, "] or [",
                  batch, ", ", hq, "] (Hq = ", hq, ", B = ", batch, ")");
  if (!a.is_contiguous()) return "alibi_slopes must be contiguous";
  return {};
}

std::string rule_cu_seqlens_tensor(const char* name, const TensorView& cu, int64_t batch_plus_1,
                                   const TensorView& q) {
  if (!cu.defined()) return concat(name, " is required when q has rank 3 (varlen layout)");
  if (cu.data == nullptr) return concat(name, " has a null data pointer");
  if (cu.dtype != DType::kInt32)
    return concat(name, " has dtype ", dtype_name(cu.dtype), " but must be int32");
  if (cu.ndim != 1 || cu.shape[0] < 2)
    return concat(name, " must be a 1-D tensor of B + 1 >= 2 offsets, got shape ", cu.shape_string());
  if (batch_plus_1 > 0 && cu.shape[0] != batch_plus_1)
    return concat(name, " has ", cu.shape[0], " entries but cu_seqlens_q has ", batch_plus_1,
                  " (both must be B + 1)");
  if (cu.stride[0] != 1) return concat(name, " must be contiguous, got stride ", cu.stride[0]);
  if (cu.device != q.device || cu.device_index != q.device_index)
    return concat(name, " is on ", device_name(cu.device), " but q is on ", device_name(q.device));
  return {};
}

// Values of cu_seqlens (host tensors only: reading device memory would synchronise).
std::string rule_cu_seqlens_values(const char* name, const std::vector<int32_t>& cu, int64_t rows,
                                   const char* tensor) {
  if (cu.front() != 0) return concat(name, "[0] = ", cu.front(), " but must be 0");
  for (std::size_t i = 1; i < cu.size(); ++i)
    if (cu[i] < cu[i - 1])
      return concat(name, " decreases at index ", i, ": ", cu[i - 1], " then ", cu[i]);
  if (cu.back() > rows)
    return concat(name, " ends at ", cu.back(), ", past the ", rows, " rows of ", tensor);
  return {};
}

std::string rule_no_overlap(const Named& a, const Named& b) {
  if (!a.t->defined() || !b.t->defined() || a.t->numel() == 0 || b.t->numel() == 0) return {};
  if (a.t->device != b.t->device) return {};
  if (a.t->byte_begin() < b.t->byte_end() && b.t->byte_begin() < a.t->byte_end())
    return concat(a.name, " (output) overlaps ", b.name, " in memory (", a.name, " at ",
                  static_cast<const void*>(a.t->byte_begin()), ", ", b.name, " at ",
                  static_cast<const void*>(b.t->byte_begin()), "); outputs must not alias");
  return {};
}

std::string rule_max_seqlen(const char* name, int64_t value) {
  if (value < 0) return concat(name, " = ", value, " must be >= 0");
  return {};
}

std::vector<int32_t> read_host_int32(const TensorView& t) {
  std::vector<int32_t> values(static_cast<std::size_t>(t.shape[0]));
  std::memcpy(values.data(), t.data, values.size() * sizeof(int32_t));
  return values;
}

Strides3 strides_of(const TensorView& t, bool varlen) {
  if (varlen) return Strides3{0, t.stride[0], t.stride[1]};
  return Strides3{t.stride[0], t.stride[1], t.stride[2]};
}

// Common to forward and backward: everything about q, k, v, out, lse and the options.
Problem resolve(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                const TensorView& lse, const std::vector<Named>& extra_outputs,
                const std::vector<Named>& extra_inputs, const AttentionOptions& o, const char* what) {
  const bool reference = o.backend == Backend::kReference;
  const bool with_outputs = out.defined() || lse.defined();  // false: inputs and options only
  const Named nq{"q", &q}, nk{"k", &k}, nv{"v", &v}, nout{"out", &out}, nlse{"lse", &lse};
  std::vector<Named> all = {nq, nk, nv};
  if (with_outputs) {
    all.push_back(nout);
    all.push_back(nlse);
  }
  all.insert(all.end(), extra_inputs.begin(), extra_inputs.end());
  all.insert(all.end(), extra_outputs.begin(), extra_outputs.end());

  // Stage 1: what each tensor is.
  Reasons r;
  for (const Named& n : all) r.add(rule_present(n));
  r.throw_if_any(what);
  const bool varlen = q.ndim == 3;
  const int rank = varlen ? 3 : 4;
  const char* layout = varlen ? "[total, H, D] (varlen)" : "[B, S, H, D]";
  for (const Named& n : all) {
    if (n.t == &lse) continue;
    r.add(rule_rank(n, rank, layout));
  }
  if (with_outputs)
    r.add(rule_rank(nlse, varlen ? 2 : 3, varlen ? "[Hq, total_q] (varlen)" : "[B, Hq, Sq]"));
  if (!varlen && o.cu_seqlens_q.defined())
    r.add(concat("cu_seqlens_q is given but q has rank ", q.ndim,
                 "; varlen q must have rank 3 [total_q, Hq, D]"));
  for (const Named& n : all) r.add(rule_nonnegative_shape(n));
  for (const Named& n : all) r.add(rule_last_dim_contiguous(n));
  r.add(rule_float_input_dtype(nq, reference));
  r.add(rule_same_dtype(nq, nk));
  r.add(rule_same_dtype(nq, nv));
  for (const Named& n : extra_inputs) r.add(rule_output_dtype(n, q.dtype, reference));
  if (with_outputs) {
    r.add(rule_output_dtype(nout, q.dtype, reference));
    r.add(rule_lse_dtype(nlse, reference));
  }
  for (const Named& n : extra_outputs) r.add(rule_output_dtype(n, q.dtype, reference));
  for (const Named& n : all) r.add(rule_same_device(nq, n));
  r.add(rule_same_device(nq, Named{"alibi_slopes", &o.alibi_slopes}));
  r.throw_if_any(what);

  // Stage 2: how they fit together, and the options.
  Problem p;
  p.dtype = q.dtype;
  p.device = q.device;
  p.device_index = q.device_index;
  p.varlen = varlen;
  const int hd = rank - 2, dd = rank - 1;  // head and head-dim axes
  p.heads_q = q.shape[hd];
  p.heads_k = k.shape[hd];
  p.dim_qk = q.shape[dd];
  p.dim_v = v.shape[dd];
  r.add(rule_heads_divide(p.heads_q, p.heads_k));
  r.add(rule_head_dim("q", p.dim_qk));
  r.add(rule_head_dim("v", p.dim_v));
  r.add(rule_dim_equals(nk, dd, p.dim_qk, "head dim", "q"));
  r.add(rule_dim_equals(nv, hd, p.heads_k, "heads", "k"));
  r.add(rule_dim_equals(nv, dd - 2, k.shape[dd - 2], "sequence length", "k"));
  if (varlen) {
    p.total_q = q.shape[0];
    p.total_k = k.shape[0];
    r.add(rule_cu_seqlens_tensor("cu_seqlens_q", o.cu_seqlens_q, 0, q));
    r.add(rule_cu_seqlens_tensor("cu_seqlens_k", o.cu_seqlens_k,
                                 o.cu_seqlens_q.defined() ? o.cu_seqlens_q.shape[0] : 0, q));
    r.add(rule_max_seqlen("max_seqlen_q", o.max_seqlen_q));
    r.add(rule_max_seqlen("max_seqlen_k", o.max_seqlen_k));
  } else {
    p.batch = q.shape[0];
    p.max_seqlen_q = q.shape[1];
    p.max_seqlen_k = k.shape[1];
    p.total_q = p.batch * p.max_seqlen_q;
    p.total_k = p.batch * p.max_seqlen_k;
    r.add(rule_dim_equals(nk, 0, p.batch, "batch", "q"));
    r.add(rule_dim_equals(nv, 0, p.batch, "batch", "q"));
  }
  r.throw_if_any(what);

  if (varlen) {
    p.batch = o.cu_seqlens_q.shape[0] - 1;
    p.cu_seqlens_q = static_cast<const int32_t*>(o.cu_seqlens_q.data);
    p.cu_seqlens_k = static_cast<const int32_t*>(o.cu_seqlens_k.data);
    if (p.device == Device::kCPU) {
      p.host_cu_seqlens_q = read_host_int32(o.cu_seqlens_q);
      p.host_cu_seqlens_k = read_host_int32(o.cu_seqlens_k);
      r.add(rule_cu_seqlens_values("cu_seqlens_q", p.host_cu_seqlens_q, p.total_q, "q"));
      r.add(rule_cu_seqlens_values("cu_seqlens_k", p.host_cu_seqlens_k, p.total_k, "k"));
    }
    p.max_seqlen_q = o.max_seqlen_q;
    p.max_seqlen_k = o.max_seqlen_k;
  }
  // out [.., Sq, Hq, Dv] and lse.
  TensorView expect_out = q;
  expect_out.shape[dd] = p.dim_v;
  if (with_outputs) {
    r.add(rule_same_shape(Named{"q with v's head dim", &expect_out}, nout));
    if (varlen) {
      r.add(rule_dim_equals(nlse, 0, p.heads_q, "heads", "q"));
      r.add(rule_dim_equals(nlse, 1, p.total_q, "rows", "q (total_q)"));
    } else {
      r.add(rule_dim_equals(nlse, 0, p.batch, "batch", "q"));
      r.add(rule_dim_equals(nlse, 1, p.heads_q, "heads", "q"));
      r.add(rule_dim_equals(nlse, 2, p.max_seqlen_q, "sequence length", "q"));
    }
  }
  r.add(rule_window(o));
  r.add(rule_dropout(o.dropout_p));
  r.add(rule_scale(o.softmax_scale));
  r.add(rule_softcap(o.softcap));
  r.add(rule_alibi(o, p.batch, p.heads_q));
  // Outputs must alias neither inputs nor each other.
  std::vector<Named> outputs;
  if (with_outputs) outputs = {nout, nlse};
  std::vector<Named> inputs = {nq, nk, nv};
  if (!extra_outputs.empty()) {  // backward: out and lse become inputs
    inputs.push_back(nout);
    inputs.push_back(nlse);
    inputs.insert(inputs.end(), extra_inputs.begin(), extra_inputs.end());
    outputs = extra_outputs;
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (const Named& in : inputs) r.add(rule_no_overlap(outputs[i], in));
    for (std::size_t j = i + 1; j < outputs.size(); ++j) r.add(rule_no_overlap(outputs[i], outputs[j]));
  }
  r.throw_if_any(what);

  if (varlen && p.device == Device::kCPU) {
    for (int64_t b = 0; b < p.batch; ++b) {
      p.max_seqlen_q = std::max<int64_t>(p.max_seqlen_q, p.seqlen_q(b));
      p.max_seqlen_k = std::max<int64_t>(p.max_seqlen_k, p.seqlen_k(b));
    }
  }
  p.scale = o.softmax_scale ? *o.softmax_scale : 1.0 / std::sqrt(static_cast<double>(p.dim_qk));
  p.softcap = o.softcap;
  p.align = o.align;
  p.causal = o.causal;
  p.window_left = o.window_left;
  p.window_right = o.causal ? 0 : o.window_right;
  p.alibi_slopes = static_cast<const float*>(o.alibi_slopes.data);
  p.alibi_batch_stride = o.alibi_slopes.ndim == 2 ? p.heads_q : 0;
  p.dropout_p = o.dropout_p;
  p.dropout_threshold = dropout_threshold(o.dropout_p);
  p.seed = o.seed;
  p.offset = o.offset;
  p.deterministic = o.deterministic;
  p.precision = o.precision;
  p.report = o.report;
  p.stream = o.stream;
  p.workspace = o.workspace;
  p.workspace_bytes = o.workspace_bytes;
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out;
  p.lse = lse;
  p.sq = strides_of(q, varlen);
  p.sk = strides_of(k, varlen);
  p.sv = strides_of(v, varlen);
  p.so = strides_of(out, varlen);
  if (with_outputs && varlen) {
    p.lse_batch_stride = 0;
    p.lse_head_stride = lse.stride[0];
    p.lse_row_stride = lse.stride[1];
  } else if (with_outputs) {
    p.lse_batch_stride = lse.stride[0];
    p.lse_head_stride = lse.stride[1];
    p.lse_row_stride = lse.stride[2];
  }
  return p;
}

}  // namespace

Problem make_input_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                           const AttentionOptions& options) {
  return resolve(q, k, v, TensorView{}, TensorView{}, {}, {}, options, "choose_backend");
}

Problem make_forward_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& out, const TensorView& lse,
                             const AttentionOptions& options) {
  return resolve(q, k, v, out, lse, {}, {}, options, "forward");
}

Problem make_backward_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const TensorView& lse, const TensorView& dout,
                              const TensorView& dq, const TensorView& dk, const TensorView& dv,
                              const AttentionOptions& options) {
  const Named ndout{"dout", &dout}, ndq{"dq", &dq}, ndk{"dk", &dk}, ndv{"dv", &dv};
  Problem p = resolve(q, k, v, out, lse, {ndq, ndk, ndv}, {ndout}, options, "backward");
  Reasons r;
  r.add(rule_same_shape(Named{"out", &out}, ndout));
  r.add(rule_same_shape(Named{"q", &q}, ndq));
  r.add(rule_same_shape(Named{"k", &k}, ndk));
  r.add(rule_same_shape(Named{"v", &v}, ndv));
  r.throw_if_any("backward");
  p.dout = dout;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.sdo = strides_of(dout, p.varlen);
  p.sdq = strides_of(dq, p.varlen);
  p.sdk = strides_of(dk, p.varlen);
  p.sdv = strides_of(dv, p.varlen);
  return p;
}

namespace {

// Row-major index of the first non-finite element of a host tensor, -1 if none.
int64_t first_nonfinite_host(const TensorView& t, double* value) {
  const int64_t n = t.numel();
  for (int64_t linear = 0; linear < n; ++linear) {
    int64_t rem = linear, offset = 0;
    for (int d = t.ndim - 1; d >= 0; --d) {
      offset += (rem % t.shape[d]) * t.stride[d];
      rem /= t.shape[d];
    }
    const double x = load_as_double(t.data, t.dtype, offset);
    if (!std::isfinite(x)) {
      *value = x;
      return linear;
    }
  }
  return -1;
}

}  // namespace

void check_finite_inputs(const Problem& p, bool backward) {
  struct Input {
    const char* name;
    const TensorView* t;
  };
  std::vector<Input> inputs = {{"q", &p.q}, {"k", &p.k}, {"v", &p.v}};
  if (backward) inputs.push_back({"dout", &p.dout});
  for (const Input& in : inputs) {
    const TensorView& t = *in.t;
    double x = 0.0;
    // The scan is the one place the API reads tensor data; on the GPU it is a kernel (and a
    // synchronisation, the price of asking for check mode).
    const int64_t linear = t.device == Device::kCUDA ? cuda::first_nonfinite(t, p.stream, &x)
                                                     : first_nonfinite_host(t, &x);
    if (linear < 0) continue;
    int64_t idx[TensorView::kMaxDims] = {0, 0, 0, 0};
    int64_t rem = linear;
    for (int d = t.ndim - 1; d >= 0; --d) {
      idx[d] = rem % t.shape[d];
      rem /= t.shape[d];
    }
    std::ostringstream os;
    os << "non-finite input: " << in.name << '[';
    for (int d = 0; d < t.ndim; ++d) os << (d ? ", " : "") << idx[d];
    os << "] = " << x << " (nonfinite_inputs = check)";
    throw Error(os.str());
  }
}

}  // namespace flashtrain
