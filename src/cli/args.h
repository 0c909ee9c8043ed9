// A small `--name value` / `--flag` parser shared by the subcommands. Unknown options and missing
// or malformed values throw flashtrain::Error naming the option and the text seen.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "flashtrain/attention.h"
#include "flashtrain/error.h"

namespace flashtrain::cli {

class Args {
 public:
  // `valued` options take a value, `flags` do not; argv[0] (the subcommand) is skipped.
  Args(int argc, char** argv, const std::set<std::string>& valued, const std::set<std::string>& flags) {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (flags.count(a)) {
        flags_.insert(a);
      } else if (valued.count(a)) {
        FT_CHECK(i + 1 < argc, "option ", a, " needs a value");
        values_[a] = argv[++i];
      } else {
        FT_CHECK(false, "unknown option '", a, "' (see --help)");
      }
    }
  }

  bool flag(const std::string& name) const { return flags_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& fallback) const {
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  int64_t integer(const std::string& name, int64_t fallback, int64_t min_value) const {
    const auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    FT_CHECK(end != it->second.c_str() && *end == '\0' && v >= min_value, "option ", name,
             " needs an integer >= ", min_value, ", got '", it->second, "'");
    return v;
  }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
};

inline DType parse_dtype(const std::string& s) {
  if (s == "fp16" || s == "float16") return DType::kFloat16;
  if (s == "bf16" || s == "bfloat16") return DType::kBFloat16;
  if (s == "fp32" || s == "float32") return DType::kFloat32;
  FT_CHECK(false, "--dtype must be fp16, bf16 or fp32, got '", s, "'");
  return DType::kFloat32;
}

inline Backend parse_backend(const std::string& s) {
  if (s == "cpu") return Backend::kCPU;
  if (s == "cuda") return Backend::kCUDA;
  FT_CHECK(false, "--backend must be cpu or cuda, got '", s, "'");
  return Backend::kCPU;
}

}  // namespace flashtrain::cli
