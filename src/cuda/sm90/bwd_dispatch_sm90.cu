// sm90::bwd_refusal and sm90::run_bwd (in progress: the sm90 backward main kernel is being
// written; until it lands every problem is refused and the sm80 path runs it).
#include <string>

#include "launch.h"

namespace flashtrain::cuda::sm90 {

std::string bwd_refusal(const Problem&) { return "sm90: backward kernel not built yet"; }

void run_bwd(const Problem&, void*, cudaStream_t) {}

}  // namespace flashtrain::cuda::sm90
