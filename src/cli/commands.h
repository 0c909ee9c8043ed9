// Subcommands of the `flashtrain` command line tool; each returns the process exit status.
#pragma once

namespace flashtrain::cli {

int doctor_main(int argc, char** argv);  // argv[0] is "doctor"
int bench_main(int argc, char** argv);   // argv[0] is "bench"

extern const char* const kDoctorHelp;
extern const char* const kBenchHelp;

}  // namespace flashtrain::cli
