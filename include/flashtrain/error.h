// flashtrain::Error: the one exception type the library throws for bad input or setup.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace flashtrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace flashtrain

// FT_CHECK(cond, parts...): throws flashtrain::Error with the concatenated parts when cond is false.
#define FT_CHECK(cond, ...)                                                   \
  do {                                                                        \
    if (!(cond)) throw ::flashtrain::Error(::flashtrain::detail::concat(__VA_ARGS__)); \
  } while (0)
