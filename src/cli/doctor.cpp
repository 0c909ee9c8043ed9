// `flashtrain doctor`: a stability suite run on every backend present. Each case (normal, causal
// in both alignments, window, GQA, varlen, odd lengths, logits around 1e3, a large upstream
// gradient, fully masked rows) runs forward and backward with fresh random inputs and is judged
// by DESIGN.md §4's rule (src/reference/check.h). Prints one row per case x backend x dtype with
// the max relative error of out, lse, dq, dk, dv against float64, the same for naive attention in
// the input dtype, and PASS/FAIL; exits 1 on any FAIL.
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "reference/check.h"

namespace flashtrain::cli {

const char* const kDoctorHelp =
    "usage: flashtrain doctor [--backend cpu|cuda|all] [--quick]\n"
    "\n"
    "Runs forward and backward on a set of stability cases for every backend present and\n"
    "compares out, lse, dq, dk, dv with the float64 reference. A cell reads\n"
    "  backend_rel_err (naive_rel_err)\n"
    "where rel_err = max|X - X64| / max|X64| and naive is plain attention in the input dtype.\n"
    "A case passes when max|X - X64| <= 2 * max|Xnaive - X64| + atol for every output and every\n"
    "output element was written and finite where the reference is.\n"
    "\n"
    "  --backend B   cpu, cuda or all (default all: every backend present)\n"
    "  --quick       small shapes and fewer cases (a few seconds on the CPU)\n"
    "\n"
    "Exit status: 0 all PASS, 1 any FAIL, 2 bad usage or no backend.\n";

namespace {

using check::CaseSpec;

// Shapes: odd lengths everywhere so no tile divides them.
struct Shape {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_k, dim;
};

std::vector<CaseSpec> doctor_cases(bool quick) {
  // Head dims every GPU build instantiates (64 quick, 128 full); quick keeps sequences short.
  const Shape base = quick ? Shape{2, 67, 93, 2, 2, 64} : Shape{2, 173, 211, 4, 4, 128};
  auto make = [&](const std::string& name) {
    CaseSpec s;
    s.name = name;
    s.batch = base.batch;
    s.seqlen_q = base.seqlen_q;
    s.seqlen_k = base.seqlen_k;
    s.heads_q = base.heads_q;
    s.heads_k = base.heads_k;
    s.dim_qk = s.dim_v = base.dim;
    return s;
  };
  std::vector<CaseSpec> cases;
  cases.push_back(make("normal"));
  {
    CaseSpec s = make("causal bottom-right");
    s.options.causal = true;
    cases.push_back(s);
  }
  {
    CaseSpec s = make("causal top-left");
    s.options.causal = true;
    s.options.align = CausalAlign::kTopLeft;
    cases.push_back(s);
  }
  {
    CaseSpec s = make("window (29, 11)");
    s.options.window_left = 29;
    s.options.window_right = 11;
    cases.push_back(s);
  }
  {
    CaseSpec s = make("GQA 8/2");
    s.heads_q = 8;
    s.heads_k = 2;
    cases.push_back(s);
  }
  {
    CaseSpec s = make("varlen (incl. 0, 1)");
    s.seqlens_q = quick ? std::vector<int32_t>{37, 0, 1} : std::vector<int32_t>{37, 0, 1, 150};
    s.seqlens_k = quick ? std::vector<int32_t>{50, 3, 1} : std::vector<int32_t>{50, 3, 1, 131};
    s.options.causal = true;
    cases.push_back(s);
  }
  {
    CaseSpec s = make("seqlen_q 1");
    s.seqlen_q = 1;
    cases.push_back(s);
  }
  {
    CaseSpec s = make("logits ~1e3");
    s.q_std = s.k_std = 30.0;  // scale * q.k = q.k / sqrt(D) has std 900 at any D
    cases.push_back(s);
  }
  {
    CaseSpec s = make("large dO (1e4)");
    s.dout_std = 1e4;  // naive fp16 dP = dO.v overflows; a backend keeping dP in fp32 must not
    cases.push_back(s);
  }
  {
    CaseSpec s = make("fully masked rows");
    // Top-left window (left 4): rows i >= Sk + 4 see no key.
    s.seqlen_q = base.seqlen_k + 40;
    s.options.window_left = 4;
    s.options.align = CausalAlign::kTopLeft;
    cases.push_back(s);
  }
  if (quick) {
    // The quick suite keeps the cases that catch the most: masking, GQA, varlen, extremes.
    std::vector<CaseSpec> kept;
    for (const CaseSpec& s : cases)
      if (s.name != "causal top-left" && s.name != "seqlen_q 1") kept.push_back(s);
    cases = kept;
  }
  return cases;
}

std::string cell(const check::Comparison& c) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1e (%.1e)", c.rel_err(), c.naive_rel_err());
  return buf;
}

}  // namespace

int doctor_main(int argc, char** argv) {
  const Args args(argc, argv, {"--backend"}, {"--quick"});
  const std::string which = args.str("--backend", "all");
  FT_CHECK(which == "cpu" || which == "cuda" || which == "all",
           "--backend must be cpu, cuda or all, got '", which, "'");
  const bool quick = args.flag("--quick");

  std::vector<Backend> backends;
  if (which != "cuda") backends.push_back(Backend::kCPU);
  if (which != "cpu") {
    if (cuda_available())
      backends.push_back(Backend::kCUDA);
    else if (which == "cuda") {
      std::fprintf(stderr, "flashtrain doctor: --backend cuda but no CUDA device is available\n");
      return 2;
    }
    else
      std::printf("cuda: not available (built without CUDA or no device); checking cpu only\n");
  }

  const std::vector<CaseSpec> cases = doctor_cases(quick);
  std::printf("%-22s %-5s %-5s %-19s %-19s %-19s %-19s %-19s %s\n", "case", "back", "dtype",
              "out", "lse", "dq", "dk", "dv", "result");
  int rows = 0, failures = 0;
  for (const Backend backend : backends) {
    std::vector<DType> dtypes = {DType::kFloat16, DType::kBFloat16};
    if (backend == Backend::kCPU) dtypes.push_back(DType::kFloat32);
    for (const CaseSpec& base : cases) {
      for (const DType dtype : dtypes) {
        CaseSpec spec = base;
        spec.dtype = dtype;
        spec.input_seed = static_cast<uint32_t>(1000 + rows);  // fresh inputs per row
        ++rows;
        std::printf("%-22s %-5s %-5s ", spec.name.c_str(), backend_name(backend),
                    check::dtype_short_name(dtype));
        std::fflush(stdout);
        try {
          const check::CaseResult r = check::run_case(spec, backend);
          for (const check::Comparison& c : r.outputs) std::printf("%-19s ", cell(c).c_str());
          std::printf("%s\n", r.pass ? "PASS" : "FAIL");
          if (!r.pass) {
            ++failures;
            std::printf("%s\n", r.describe().c_str());
          }
        } catch (const Error& e) {
          ++failures;
          std::printf("FAIL (error)\n  %s\n", e.what());
        }
        std::fflush(stdout);
      }
    }
  }
  std::printf("\n%d of %d rows passed (cell: rel err vs float64, in parentheses the naive "
              "input-dtype baseline's)\n", rows - failures, rows);
  return failures ? 1 : 0;
}

}  // namespace flashtrain::cli
