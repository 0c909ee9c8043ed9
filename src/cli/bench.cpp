// `flashtrain bench`: times forward and forward+backward of one shape on one backend (median of
// N timed iterations after warm-up; cudaEvent timing on CUDA) and reports ms and GFLOP/s with
// DESIGN.md §5's FLOP count: fwd = 4 * B * H * Sq * Sk * D (halved when causal), bwd = 2.5 * fwd.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "reference/check.h"

#ifdef FLASHTRAIN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashtrain::cli {

const char* const kBenchHelp =
    "usage: flashtrain bench --backend cpu|cuda [--dtype bf16] [--batch 1] [--heads 8]\n"
    "                        [--seqlen 2048] [--dim 128] [--causal] [--iters 10] [--warmup 2]\n"
    "                        [--json FILE]\n"
    "\n"
    "Times forward and forward+backward (median over --iters after --warmup untimed runs) on\n"
    "random BSHD inputs and prints ms and GFLOP/s, with fwd = 4*B*H*S*S*D (halved when causal),\n"
    "bwd = 2.5*fwd. Progress goes to stderr; --json FILE also writes the results as JSON.\n";

namespace {

// Wall time of one call in ms: cudaEvents around it on the default stream for CUDA (so queued
// work is what is measured), a steady clock for the CPU.
class Timer {
 public:
  explicit Timer(Backend backend) : cuda_(backend == Backend::kCUDA) {
#ifdef FLASHTRAIN_WITH_CUDA
    if (cuda_) {
      cudaEventCreate(&start_);
      cudaEventCreate(&stop_);
    }
#endif
  }
  ~Timer() {
#ifdef FLASHTRAIN_WITH_CUDA
    if (cuda_) {
      cudaEventDestroy(start_);
      cudaEventDestroy(stop_);
    }
#endif
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  double time_ms(const std::function<void()>& fn) {
#ifdef FLASHTRAIN_WITH_CUDA
    if (cuda_) {
      cudaEventRecord(start_, nullptr);
      fn();
      cudaEventRecord(stop_, nullptr);
      const cudaError_t err = cudaEventSynchronize(stop_);
      FT_CHECK(err == cudaSuccess, "bench: CUDA error: ", cudaGetErrorString(err));
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, start_, stop_);
      return ms;
    }
#endif
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  }

 private:
  bool cuda_;
#ifdef FLASHTRAIN_WITH_CUDA
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
#endif
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Measurement {
  std::string name;
  double ms;
  double gflop;
};

}  // namespace

int bench_main(int argc, char** argv) {
  const Args args(argc, argv,
                  {"--backend", "--dtype", "--batch", "--heads", "--seqlen", "--dim", "--iters",
                   "--warmup", "--json"},
                  {"--causal"});
  const Backend backend = parse_backend(args.str("--backend", "cpu"));
  const DType dtype = parse_dtype(args.str("--dtype", "bf16"));
  check::CaseSpec spec;
  spec.name = "bench";
  spec.batch = args.integer("--batch", 1, 1);
  spec.heads_q = spec.heads_k = args.integer("--heads", 8, 1);
  spec.seqlen_q = spec.seqlen_k = args.integer("--seqlen", 2048, 1);
  spec.dim_qk = spec.dim_v = args.integer("--dim", 128, 1);
  spec.dtype = dtype;
  spec.options.causal = args.flag("--causal");
  const int64_t iters = args.integer("--iters", 10, 1);
  const int64_t warmup = args.integer("--warmup", 2, 0);
  const std::string json = args.str("--json", "");
  if (backend == Backend::kCUDA && !cuda_available()) {
    std::fprintf(stderr, "flashtrain bench: --backend cuda but no CUDA device is available\n");
    return 2;
  }

  std::fprintf(stderr, "preparing random inputs ...\n");
  check::Case c(spec);
  const check::Case::Views v = c.prepare(backend);
  const auto fwd = [&] { forward(v.q, v.k, v.v, v.out, v.lse, v.options); };
  const auto fwd_bwd = [&] {
    forward(v.q, v.k, v.v, v.out, v.lse, v.options);
    backward(v.q, v.k, v.v, v.out, v.lse, v.dout, v.dq, v.dk, v.dv, v.options);
  };

  // Correctness before timing: every output written and finite.
  fwd_bwd();
  const check::Outputs o = c.collect(backend);
  for (const auto* t : {&o.out, &o.dq, &o.dk, &o.dv})
    for (double x : *t)
      FT_CHECK(std::isfinite(x), "bench: a non-finite output after the first forward+backward; "
               "run `flashtrain doctor` for details");

  const double sq = static_cast<double>(spec.seqlen_q), sk = static_cast<double>(spec.seqlen_k);
  const double fwd_flop = 4.0 * spec.batch * spec.heads_q * sq * sk * spec.dim_qk *
                          (spec.options.causal ? 0.5 : 1.0);
  constexpr double kBwdFlopRatio = 2.5;  // DESIGN.md §5
  struct Phase {
    const char* name;
    std::function<void()> fn;
    double flop;
  };
  const Phase phases[] = {{"fwd", fwd, fwd_flop}, {"fwd+bwd", fwd_bwd, fwd_flop * (1.0 + kBwdFlopRatio)}};

  Timer timer(backend);
  std::vector<Measurement> results;
  for (const Phase& ph : phases) {
    for (int64_t i = 0; i < warmup; ++i) {
      std::fprintf(stderr, "\r[warm-up %lld/%lld] %-8s", static_cast<long long>(i + 1),
                   static_cast<long long>(warmup), ph.name);
      timer.time_ms(ph.fn);
    }
    std::vector<double> times;
    for (int64_t i = 0; i < iters; ++i) {
      std::fprintf(stderr, "\r[%lld/%lld] %-8s ...      ", static_cast<long long>(i + 1),
                   static_cast<long long>(iters), ph.name);
      times.push_back(timer.time_ms(ph.fn));
    }
    std::fprintf(stderr, "\r%-40s\r", "");
    results.push_back({ph.name, median(times), ph.flop * 1e-9});
  }

  std::printf("backend %s, %s, B=%lld H=%lld S=%lld D=%lld%s, median of %lld\n",
              backend_name(backend), check::dtype_short_name(dtype),
              static_cast<long long>(spec.batch), static_cast<long long>(spec.heads_q),
              static_cast<long long>(spec.seqlen_q), static_cast<long long>(spec.dim_qk),
              spec.options.causal ? " causal" : "", static_cast<long long>(iters));
  for (const Measurement& m : results)
    std::printf("  %-8s %10.3f ms  %10.1f GFLOP/s\n", m.name.c_str(), m.ms, m.gflop / (m.ms * 1e-3));

  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    FT_CHECK(f != nullptr, "--json: cannot open '", json, "' for writing");
    std::fprintf(f,
                 "{\n  \"backend\": \"%s\", \"dtype\": \"%s\", \"batch\": %lld, \"heads\": %lld,\n"
                 "  \"seqlen\": %lld, \"dim\": %lld, \"causal\": %s, \"iters\": %lld,\n  \"results\": [",
                 backend_name(backend), check::dtype_short_name(dtype),
                 static_cast<long long>(spec.batch), static_cast<long long>(spec.heads_q),
                 static_cast<long long>(spec.seqlen_q), static_cast<long long>(spec.dim_qk),
                 spec.options.causal ? "true" : "false", static_cast<long long>(iters));
    for (std::size_t i = 0; i < results.size(); ++i)
      std::fprintf(f, "%s\n    {\"phase\": \"%s\", \"ms\": %.6f, \"gflop_per_s\": %.3f}",
                   i ? "," : "", results[i].name.c_str(), results[i].ms,
                   results[i].gflop / (results[i].ms * 1e-3));
    std::fprintf(f, "\n  ]\n}\n");
    std::fclose(f);
  }
  return 0;
}

}  // namespace flashtrain::cli
