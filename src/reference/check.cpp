// DESIGN.md §4 comparison and the case runner shared by tests and `flashtrain doctor`.
#include "check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>

#include "../api/backends.h"
#include "../api/validate.h"
#include "../common/dtype.h"

#ifdef FLASHTRAIN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashtrain::check {

// ---- comparison ---------------------------------------------------------------------------

namespace {

double ratio(double err, double scale) {
  if (scale > 0.0) return err / scale;
  return err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
}

}  // namespace

double Comparison::rel_err() const { return ratio(max_abs_err, ref_max_abs); }
double Comparison::naive_rel_err() const { return ratio(naive_max_abs_err, ref_max_abs); }

std::string Comparison::describe() const {
  std::ostringstream os;
  os.precision(3);
  os << std::scientific << name << ": max|X-X64| " << max_abs_err << " (rel " << rel_err()
     << "), naive " << naive_max_abs_err << " (rel " << naive_rel_err() << "), bound "
     << 2.0 * naive_max_abs_err + atol << ", max|X64| " << ref_max_abs;
  if (nonfinite_mismatch) os << ", " << nonfinite_mismatch << " non-finite/unwritten of " << count;
  if (naive_nonfinite) os << ", naive non-finite at " << naive_nonfinite;
  os << (pass ? "  PASS" : "  FAIL");
  return os.str();
}

double max_abs_finite(const std::vector<double>& x) {
  double m = 0.0;
  for (double e : x)
    if (std::isfinite(e)) m = std::max(m, std::fabs(e));
  return m;
}

Comparison compare(const std::string& name, DType dtype, const std::vector<double>& x,
                   const std::vector<double>& x64, const std::vector<double>& naive,
                   double data_scale) {
  FT_CHECK(x.size() == x64.size() && naive.size() == x64.size(), "compare(", name,
           "): sizes differ: X has ", x.size(), ", X64 ", x64.size(), ", Xnaive ", naive.size());
  Comparison c;
  c.name = name;
  c.count = static_cast<int64_t>(x64.size());
  bool saw_nan = false;
  for (std::size_t e = 0; e < x64.size(); ++e) {
    if (std::isnan(x[e]) || std::isnan(x64[e])) saw_nan = true;
    if (!std::isfinite(x64[e])) {
      // lse of a row that sees no key: X must be the same infinity (and NaN never equals).
      if (!(x[e] == x64[e])) ++c.nonfinite_mismatch;
      continue;
    }
    c.ref_max_abs = std::max(c.ref_max_abs, std::fabs(x64[e]));
    if (!std::isfinite(x[e]))
      ++c.nonfinite_mismatch;
    else
      c.max_abs_err = std::max(c.max_abs_err, std::fabs(x[e] - x64[e]));
    double naive_err;
    if (std::isfinite(naive[e])) {
      naive_err = std::fabs(naive[e] - x64[e]);
    } else {
      // The naive baseline overflowed here (e.g. fp16 dP = dO.v with a large dO). Credit it
      // with the least error any result stored in `dtype` can have: X64's own rounding error.
      // Where it is finite its error is never below that, as it is a `dtype` value itself.
      ++c.naive_nonfinite;
      naive_err = std::fabs(round_to(dtype, x64[e]) - x64[e]);
    }
    c.naive_max_abs_err = std::max(c.naive_max_abs_err, naive_err);
  }
  c.atol = kAtolRelative * (data_scale < 0.0 ? c.ref_max_abs : data_scale);
  c.pass = !saw_nan && c.nonfinite_mismatch == 0 &&
           c.max_abs_err <= 2.0 * c.naive_max_abs_err + c.atol;
  return c;
}

std::string CaseResult::describe() const {
  std::ostringstream os;
  for (const Comparison& c : outputs) os << "  " << c.describe() << "\n";
  if (writes_outside) os << "  " << writes_outside << " elements written outside the output views\n";
  os << (pass ? "  case PASS" : "  case FAIL");
  return os.str();
}

const char* dtype_short_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat32: return "fp32";
    case DType::kFloat64: return "fp64";
    case DType::kInt32: return "int32";
  }
  return "?";
}

// ---- buffers and strided tensors ----------------------------------------------------------

#ifdef FLASHTRAIN_WITH_CUDA
#define FT_CHECK_CUDA(call)                                                                   \
  do {                                                                                        \
    const cudaError_t err_ = (call);                                                          \
    FT_CHECK(err_ == cudaSuccess, "check: ", #call, " failed: ", cudaGetErrorString(err_));   \
  } while (0)
#endif

// Host memory with an optional device mirror. Poisoned with NaN (or, for int32, a value no
// valid output takes) so that unwritten elements are visible.
class Buffer {
 public:
  Buffer(DType dtype, int64_t elems)
      : dtype_(dtype), elems_(elems), host_(static_cast<std::size_t>(elems) * dtype_size(dtype)) {
    poison();
  }
  ~Buffer() {
#ifdef FLASHTRAIN_WITH_CUDA
    if (device_) cudaFree(device_);
#endif
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  DType dtype() const { return dtype_; }
  int64_t elems() const { return elems_; }
  unsigned char* host() { return host_.data(); }
  const unsigned char* host() const { return host_.data(); }

  void poison() {
    for (int64_t e = 0; e < elems_; ++e) store_from_double(host(), dtype_, e, poison_value());
  }
  bool is_poison(int64_t e) const {
    const std::size_t size = dtype_size(dtype_);
    unsigned char expect[sizeof(double)];
    store_from_double(expect, dtype_, 0, poison_value());
    return std::memcmp(host() + e * size, expect, size) == 0;
  }

  void* data(Device device) {
    if (device == Device::kCPU) return host();
#ifdef FLASHTRAIN_WITH_CUDA
    if (!device_) FT_CHECK_CUDA(cudaMalloc(&device_, std::max<std::size_t>(host_.size(), 1)));
    return device_;
#else
    FT_CHECK(false, "check: built without CUDA, cannot place a buffer on the GPU");
#endif
  }
  void upload() {
#ifdef FLASHTRAIN_WITH_CUDA
    FT_CHECK_CUDA(cudaMemcpy(data(Device::kCUDA), host(), host_.size(), cudaMemcpyHostToDevice));
#endif
  }
  void download() {
#ifdef FLASHTRAIN_WITH_CUDA
    FT_CHECK_CUDA(cudaMemcpy(host(), data(Device::kCUDA), host_.size(), cudaMemcpyDeviceToHost));
#endif
  }

 private:
  double poison_value() const {
    return dtype_ == DType::kInt32 ? -2147483647.0 : std::numeric_limits<double>::quiet_NaN();
  }

  DType dtype_;
  int64_t elems_;
  std::vector<unsigned char> host_;
  void* device_ = nullptr;
};

struct Case::Tensor {
  Buffer* buffer = nullptr;
  int64_t offset = 0;
  int ndim = 0;
  int64_t shape[TensorView::kMaxDims] = {0, 0, 0, 0};
  int64_t stride[TensorView::kMaxDims] = {0, 0, 0, 0};

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
  TensorView view(Device device) const {
    TensorView t;
    t.data = static_cast<unsigned char*>(buffer->data(device)) +
             offset * static_cast<int64_t>(dtype_size(buffer->dtype()));
    t.dtype = buffer->dtype();
    t.device = device;
    t.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
      t.shape[d] = shape[d];
      t.stride[d] = stride[d];
    }
    return t;
  }
  // Calls fn(logical index, element offset in the buffer) in row-major logical order.
  void for_each(const std::function<void(const int64_t*, int64_t)>& fn) const {
    const int64_t n = numel();
    int64_t idx[TensorView::kMaxDims] = {0, 0, 0, 0};
    for (int64_t linear = 0; linear < n; ++linear) {
      int64_t rem = linear, off = offset;
      for (int d = ndim - 1; d >= 0; --d) {
        idx[d] = rem % shape[d];
        rem /= shape[d];
        off += idx[d] * stride[d];
      }
      fn(idx, off);
    }
  }
  std::vector<double> gather() const {
    std::vector<double> values;
    values.reserve(static_cast<std::size_t>(numel()));
    for_each([&](const int64_t*, int64_t off) {
      values.push_back(load_as_double(buffer->host(), buffer->dtype(), off));
    });
    return values;
  }
};

namespace {

using Tensor = Case::Tensor;

// Padding (elements) after each head, row and batch in Layout::kPadded: a multiple of 8 keeps
// rows 16-byte aligned for every dtype, as vectorised GPU loads require.
constexpr int64_t kPad = 8;

// A tensor of `shape` with `pad` elements after every slice of every dim, in a new buffer.
Tensor padded_tensor(std::vector<std::unique_ptr<Buffer>>& owner, DType dtype,
                     const std::vector<int64_t>& shape, int64_t pad) {
  Tensor t;
  t.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.stride[d] = stride;
    stride = shape[d] * stride + pad;  // next outer stride; after dim 0: the buffer size
  }
  owner.push_back(std::make_unique<Buffer>(dtype, std::max<int64_t>(stride, 1)));
  t.buffer = owner.back().get();
  return t;
}

// Logical shape of a BSHD-like tensor with `heads` heads of `dim` (dense [B,S,H,D] or varlen
// [total,H,D]).
std::vector<int64_t> bshd(bool varlen, int64_t batch, int64_t rows, int64_t heads, int64_t dim) {
  if (varlen) return {rows, heads, dim};
  return {batch, rows, heads, dim};
}

}  // namespace

// The output tensors of one kind of run, each in its own buffer.
struct OutputSet {
  std::vector<std::unique_ptr<Buffer>> buffers;
  Tensor out, lse, dq, dk, dv;
  std::vector<const Tensor*> tensors() const { return {&out, &lse, &dq, &dk, &dv}; }
};

// Geometry of a case that the output shapes need.
struct Extents {
  bool varlen;
  int64_t batch, rows_q, rows_k;
};

struct Case::Impl {
  bool varlen = false;
  int64_t batch = 0, rows_q = 0, rows_k = 0;  // dense: S per batch; varlen: totals
  int64_t max_q = 0, max_k = 0;
  std::vector<std::unique_ptr<Buffer>> inputs;
  Tensor q, k, v, dout;
  Buffer* alibi = nullptr;
  Buffer* cu_q = nullptr;
  Buffer* cu_k = nullptr;
  bool uploaded = false;
  int64_t pad = 0;
  // Output buffers, allocated on first use (a benchmark only ever needs `tested`).
  OutputSet tested, reference, naive;
  Extents extents() const { return Extents{varlen, batch, rows_q, rows_k}; }
};

namespace {

void make_outputs(const CaseSpec& s, const Extents& im, OutputSet& o, DType dtype, DType lse_dtype,
                  int64_t pad) {
  o.buffers.clear();
  const std::vector<int64_t> lse_shape =
      im.varlen ? std::vector<int64_t>{s.heads_q, im.rows_q} : std::vector<int64_t>{im.batch, s.heads_q, im.rows_q};
  o.out = padded_tensor(o.buffers, dtype, bshd(im.varlen, im.batch, im.rows_q, s.heads_q, s.dim_v), pad);
  o.lse = padded_tensor(o.buffers, lse_dtype, lse_shape, pad);
  o.dq = padded_tensor(o.buffers, dtype, bshd(im.varlen, im.batch, im.rows_q, s.heads_q, s.dim_qk), pad);
  o.dk = padded_tensor(o.buffers, dtype, bshd(im.varlen, im.batch, im.rows_k, s.heads_k, s.dim_qk), pad);
  o.dv = padded_tensor(o.buffers, dtype, bshd(im.varlen, im.batch, im.rows_k, s.heads_k, s.dim_v), pad);
}

// Elements of the output buffers that lie outside every view and are no longer poison.
int64_t count_writes_outside(const OutputSet& o) {
  int64_t changed = 0;
  for (const auto& buf : o.buffers) {
    std::vector<bool> covered(static_cast<std::size_t>(buf->elems()), false);
    for (const Tensor* t : o.tensors())
      if (t->buffer == buf.get()) t->for_each([&](const int64_t*, int64_t off) { covered[off] = true; });
    for (int64_t e = 0; e < buf->elems(); ++e)
      if (!covered[e] && !buf->is_poison(e)) ++changed;
  }
  return changed;
}

std::vector<int32_t> prefix_sums(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  for (std::size_t i = 0; i < lengths.size(); ++i) cu[i + 1] = cu[i] + lengths[i];
  return cu;
}

}  // namespace

Case::Case(const CaseSpec& spec) : spec_(spec), impl_(std::make_unique<Impl>()) {
  const CaseSpec& s = spec_;
  Impl& im = *impl_;
  im.varlen = !s.seqlens_q.empty();
  if (im.varlen) {
    FT_CHECK(s.seqlens_k.size() == s.seqlens_q.size(), "CaseSpec ", s.name, ": seqlens_q has ",
             s.seqlens_q.size(), " entries but seqlens_k has ", s.seqlens_k.size());
    im.batch = static_cast<int64_t>(s.seqlens_q.size());
    const std::vector<int32_t> cu_q = prefix_sums(s.seqlens_q), cu_k = prefix_sums(s.seqlens_k);
    im.rows_q = cu_q.back();
    im.rows_k = cu_k.back();
    im.max_q = *std::max_element(s.seqlens_q.begin(), s.seqlens_q.end());
    im.max_k = *std::max_element(s.seqlens_k.begin(), s.seqlens_k.end());
    for (auto [cu, dst] : {std::pair{&cu_q, &im.cu_q}, std::pair{&cu_k, &im.cu_k}}) {
      im.inputs.push_back(std::make_unique<Buffer>(DType::kInt32, static_cast<int64_t>(cu->size())));
      *dst = im.inputs.back().get();
      std::memcpy((*dst)->host(), cu->data(), cu->size() * sizeof(int32_t));
    }
  } else {
    im.batch = s.batch;
    im.rows_q = s.seqlen_q;
    im.rows_k = s.seqlen_k;
    im.max_q = s.seqlen_q;
    im.max_k = s.seqlen_k;
  }

  const int64_t pad = s.layout == Layout::kPadded ? kPad : 0;
  if (s.layout == Layout::kPackedQKV) {
    FT_CHECK(im.rows_q == im.rows_k && (!im.varlen || s.seqlens_q == s.seqlens_k), "CaseSpec ",
             s.name, ": packed qkv needs equal q and k lengths, got ", im.rows_q, " and ", im.rows_k);
    const int64_t width = s.heads_q * s.dim_qk + s.heads_k * s.dim_qk + s.heads_k * s.dim_v;
    std::vector<int64_t> packed_shape = im.varlen ? std::vector<int64_t>{im.rows_q, width}
                                                  : std::vector<int64_t>{im.batch, im.rows_q, width};
    Tensor packed = padded_tensor(im.inputs, s.dtype, packed_shape, 0);
    auto slice = [&](int64_t offset, int64_t heads, int64_t dim) {
      Tensor t;
      t.buffer = packed.buffer;
      t.offset = offset;
      const std::vector<int64_t> shape = bshd(im.varlen, im.batch, im.rows_q, heads, dim);
      t.ndim = static_cast<int>(shape.size());
      for (int d = 0; d < t.ndim; ++d) t.shape[d] = shape[d];
      t.stride[t.ndim - 1] = 1;
      t.stride[t.ndim - 2] = dim;
      t.stride[t.ndim - 3] = width;
      if (!im.varlen) t.stride[0] = im.rows_q * width;
      return t;
    };
    im.q = slice(0, s.heads_q, s.dim_qk);
    im.k = slice(s.heads_q * s.dim_qk, s.heads_k, s.dim_qk);
    im.v = slice((s.heads_q + s.heads_k) * s.dim_qk, s.heads_k, s.dim_v);
  } else {
    im.q = padded_tensor(im.inputs, s.dtype, bshd(im.varlen, im.batch, im.rows_q, s.heads_q, s.dim_qk), pad);
    im.k = padded_tensor(im.inputs, s.dtype, bshd(im.varlen, im.batch, im.rows_k, s.heads_k, s.dim_qk), pad);
    im.v = padded_tensor(im.inputs, s.dtype, bshd(im.varlen, im.batch, im.rows_k, s.heads_k, s.dim_v), pad);
  }
  im.dout = padded_tensor(im.inputs, s.dtype, bshd(im.varlen, im.batch, im.rows_q, s.heads_q, s.dim_v), pad);

  // Fresh random inputs, rounded to the input dtype once: every run reads the same values.
  std::mt19937 gen(s.input_seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto fill = [&](const Tensor& t, double std_dev) {
    t.for_each([&](const int64_t*, int64_t off) {
      store_from_double(t.buffer->host(), t.buffer->dtype(), off, std_dev * normal(gen));
    });
  };
  fill(im.q, s.q_std);
  fill(im.k, s.k_std);
  if (s.identity_v) {
    // Row j of every (batch, head) is e_(j mod Dv); j counted inside its sequence.
    const int row_dim = im.varlen ? 0 : 1;
    const std::vector<int32_t> cu_k = im.varlen ? prefix_sums(s.seqlens_k) : std::vector<int32_t>{};
    im.v.for_each([&](const int64_t* idx, int64_t off) {
      int64_t row = idx[row_dim];
      if (im.varlen) row -= *(std::upper_bound(cu_k.begin(), cu_k.end(), row) - 1);
      const int64_t d = idx[im.v.ndim - 1];
      store_from_double(im.v.buffer->host(), s.dtype, off, row % s.dim_v == d ? 1.0 : 0.0);
    });
  } else {
    fill(im.v, s.v_std);
  }
  fill(im.dout, s.dout_std);

  if (s.alibi != Alibi::kNone) {
    // Slopes 2^(-8 (h + 1) / Hq) as in the ALiBi paper; per-batch rows are scaled differently so
    // that a backend reading the wrong row is caught.
    const int64_t rows = s.alibi == Alibi::kPerBatchHead ? im.batch : 1;
    im.inputs.push_back(std::make_unique<Buffer>(DType::kFloat32, rows * s.heads_q));
    im.alibi = im.inputs.back().get();
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t h = 0; h < s.heads_q; ++h)
        store_from_double(im.alibi->host(), DType::kFloat32, b * s.heads_q + h,
                          std::exp2(-8.0 * (h + 1) / s.heads_q) * (1.0 + 0.5 * b));
  }

  im.pad = pad;
}

// The output set a run on `backend` writes (kReference: float64 ground truth), made on first use.
OutputSet& Case::outputs_for(Backend backend, bool naive) {
  Impl& im = *impl_;
  OutputSet& o = naive ? im.naive : backend == Backend::kReference ? im.reference : im.tested;
  if (o.buffers.empty()) {
    if (naive)
      make_outputs(spec_, im.extents(), o, spec_.dtype, DType::kFloat32, 0);
    else if (backend == Backend::kReference)
      make_outputs(spec_, im.extents(), o, DType::kFloat64, DType::kFloat64, 0);
    else
      make_outputs(spec_, im.extents(), o, spec_.dtype, DType::kFloat32, im.pad);
  }
  return o;
}

Case::~Case() = default;

Case::Views Case::prepare(Backend backend) {
  const CaseSpec& s = spec_;
  Impl& im = *impl_;
  const Device device = backend == Backend::kCUDA ? Device::kCUDA : Device::kCPU;
  OutputSet& o = outputs_for(backend, false);
  for (auto& buf : o.buffers) buf->poison();
  if (device == Device::kCUDA) {
    if (!im.uploaded)
      for (auto& buf : im.inputs) buf->upload();
    im.uploaded = true;
    for (auto& buf : o.buffers) buf->upload();
  }
  Views v;
  v.q = im.q.view(device);
  v.k = im.k.view(device);
  v.v = im.v.view(device);
  v.dout = im.dout.view(device);
  v.out = o.out.view(device);
  v.lse = o.lse.view(device);
  v.dq = o.dq.view(device);
  v.dk = o.dk.view(device);
  v.dv = o.dv.view(device);
  v.options = s.options;
  v.options.backend = backend;
  if (im.varlen) {
    v.options.cu_seqlens_q = TensorView::contiguous(im.cu_q->data(device), DType::kInt32,
                                                    {im.batch + 1}, device);
    v.options.cu_seqlens_k = TensorView::contiguous(im.cu_k->data(device), DType::kInt32,
                                                    {im.batch + 1}, device);
    // The CPU computes them from cu_seqlens when left 0; CUDA needs them up front.
    if (device == Device::kCUDA) {
      v.options.max_seqlen_q = im.max_q;
      v.options.max_seqlen_k = im.max_k;
    }
  }
  if (im.alibi) {
    v.options.alibi_slopes =
        s.alibi == Alibi::kPerBatchHead
            ? TensorView::contiguous(im.alibi->data(device), DType::kFloat32, {im.batch, s.heads_q}, device)
            : TensorView::contiguous(im.alibi->data(device), DType::kFloat32, {s.heads_q}, device);
  }
  return v;
}

namespace {

Outputs gather_outputs(const OutputSet& o, bool backward) {
  Outputs r;
  r.out = o.out.gather();
  r.lse = o.lse.gather();
  if (backward) {
    r.dq = o.dq.gather();
    r.dk = o.dk.gather();
    r.dv = o.dv.gather();
  }
  r.writes_outside = count_writes_outside(o);
  return r;
}

}  // namespace

Outputs Case::collect(Backend backend) {
  OutputSet& o = outputs_for(backend, false);
  if (backend == Backend::kCUDA) {
#ifdef FLASHTRAIN_WITH_CUDA
    FT_CHECK_CUDA(cudaDeviceSynchronize());
#endif
    for (auto& buf : o.buffers) buf->download();
  }
  return gather_outputs(o, spec_.backward);
}

Outputs Case::run(Backend backend) {
  const Views v = prepare(backend);
  forward(v.q, v.k, v.v, v.out, v.lse, v.options);
  if (spec_.backward) backward(v.q, v.k, v.v, v.out, v.lse, v.dout, v.dq, v.dk, v.dv, v.options);
  return collect(backend);
}

Outputs Case::run_naive() {
  const Views v = prepare(Backend::kReference);  // inputs and options on the host
  OutputSet& o = outputs_for(Backend::kReference, true);
  for (auto& buf : o.buffers) buf->poison();
  const TensorView out = o.out.view(Device::kCPU), lse = o.lse.view(Device::kCPU);
  reference::forward(make_forward_problem(v.q, v.k, v.v, out, lse, v.options),
                     reference::Rounding::kInputDtype);
  if (spec_.backward)
    reference::backward(make_backward_problem(v.q, v.k, v.v, out, lse, v.dout,
                                              o.dq.view(Device::kCPU), o.dk.view(Device::kCPU),
                                              o.dv.view(Device::kCPU), v.options),
                        reference::Rounding::kInputDtype);
  return gather_outputs(o, spec_.backward);
}

CaseResult Case::evaluate(Backend backend) {
  const Outputs x = run(backend);
  const Outputs x64 = run(Backend::kReference);
  const Outputs naive = run_naive();
  CaseResult r;
  const DType d = spec_.dtype;
  r.outputs.push_back(compare("out", d, x.out, x64.out, naive.out));
  r.outputs.push_back(compare("lse", DType::kFloat32, x.lse, x64.lse, naive.lse));
  if (spec_.backward) {
    // One scale for the three gradients: dq or dk can cancel to ~0 (a row seeing one key has
    // dS = P (dP - D) = 0) while their rounding noise is still set by dP, i.e. by dv's scale.
    const double grad_scale =
        std::max({max_abs_finite(x64.dq), max_abs_finite(x64.dk), max_abs_finite(x64.dv)});
    r.outputs.push_back(compare("dq", d, x.dq, x64.dq, naive.dq, grad_scale));
    r.outputs.push_back(compare("dk", d, x.dk, x64.dk, naive.dk, grad_scale));
    r.outputs.push_back(compare("dv", d, x.dv, x64.dv, naive.dv, grad_scale));
  }
  r.writes_outside = x.writes_outside;
  r.pass = r.writes_outside == 0 &&
           std::all_of(r.outputs.begin(), r.outputs.end(), [](const Comparison& c) { return c.pass; });
  return r;
}

}  // namespace flashtrain::check
