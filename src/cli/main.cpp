// `flashtrain`: the command line entry point. Dispatches to a subcommand; every subcommand and the
// command itself answer --help.
#include <cstdio>
#include <cstring>
#include <exception>

#include "commands.h"
#include "flashtrain/error.h"

namespace {

const char* const kUsage =
    "usage: flashtrain <command> [options]\n"
    "\n"
    "commands:\n"
    "  doctor   check every backend present against the float64 reference (DESIGN.md section 4)\n"
    "  bench    time forward and forward+backward of one attention shape\n"
    "\n"
    "Run `flashtrain <command> --help` for the options of a command.\n";

bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace flashtrain::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char* command = argv[1];
  struct Sub {
    const char* name;
    int (*main)(int, char**);
    const char* help;
  };
  const Sub subs[] = {{"doctor", doctor_main, kDoctorHelp}, {"bench", bench_main, kBenchHelp}};
  for (const Sub& sub : subs) {
    if (std::strcmp(command, sub.name) != 0) continue;
    if (wants_help(argc - 1, argv + 1)) {
      std::fputs(sub.help, stdout);
      return 0;
    }
    try {
      return sub.main(argc - 1, argv + 1);
    } catch (const flashtrain::Error& e) {
      std::fprintf(stderr, "flashtrain %s: %s\n", sub.name, e.what());
      return 2;
    }
  }
  std::fprintf(stderr, "flashtrain: unknown command '%s'\n\n%s", command, kUsage);
  return 2;
}
