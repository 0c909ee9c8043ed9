// Prints, as JSON, the shared-memory byte offset of every mbarrier of the sm90 backward kernels'
// SharedStorage, per kernel configuration, so that bench/ncu_stalls.py --barriers can name the
// barrier behind each try_wait in an Nsight Compute source table (SASS addresses them as
// [Rx+URZ+0x38950]: the dynamic shared memory starts at offset 0). Host code only, no GPU needed:
//   nvcc -std=c++17 --expt-relaxed-constexpr -Iinclude -Isrc -I.cutlass/include \
//        -Xcompiler=-Wno-invalid-offsetof bench/smem_barriers.cu -o /tmp/smem_barriers
//   /tmp/smem_barriers > barriers.json
// (bench/smem_barriers.sh does both.)
#include <cstddef>
#include <cstdio>
#include <type_traits>

#include <cutlass/bfloat16.h>
#include <cutlass/half.h>

#include "cuda/sm90/bwd_kernel_traits_sm90.h"
#include "cuda/sm90/bwd_split_traits_sm90.h"

namespace {

bool g_first_field = true;

void field(const char* name, std::size_t offset) {
  std::printf("%s\n    \"%s\": %zu", g_first_field ? "" : ",", name, offset);
  g_first_field = false;
}

void array_field(const char* name, std::size_t offset, std::size_t n) {
  char buf[64];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%s[%zu]", name, i);
    field(buf, offset + i * sizeof(uint64_t));
  }
}

#define FT_ONE(S, m) field(#m, offsetof(S, m))
#define FT_ARR(S, m) array_field(#m, offsetof(S, m), std::extent_v<decltype(S::m)>)

void open_kernel(const char* name, bool first) {
  std::printf("%s  \"%s\": {", first ? "" : ",\n", name);
  g_first_field = true;
}

template <class Traits>
void bwd_kernel(const char* name, bool first) {
  using S = typename Traits::SharedStorage;
  open_kernel(name, first);
  FT_ONE(S, kv_full);
  FT_ARR(S, qdo_full);
  FT_ARR(S, stats_full);
  FT_ARR(S, stage_empty);
  FT_ONE(S, dq_full);
  FT_ONE(S, dq_empty);
  FT_ONE(S, vmax_ready);
  FT_ARR(S, ds_full);
  FT_ARR(S, ds_empty);
  FT_ONE(S, stagger);
  FT_ONE(S, kdq_ready);
  std::printf("\n  }");
}

template <class Traits>
void bwd_split_kernel(const char* name) {
  using S = typename Traits::SharedStorage;
  open_kernel(name, false);
  FT_ONE(S, kv_full);
  FT_ARR(S, qdo_full);
  FT_ARR(S, stats_full);
  FT_ARR(S, stage_empty);
  FT_ARR(S, peer_empty);
  FT_ONE(S, dq_recv_full);
  FT_ONE(S, dq_send_free);
  FT_ARR(S, dq_issued);
  FT_ARR(S, dq_passed);
  std::printf("\n  }");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    std::printf("usage: %s  (prints the sm90 backward kernels' mbarrier offsets as JSON)\n", argv[0]);
    return 0;
  }
  namespace sm90 = flashtrain::cuda::sm90;
  std::printf("{\n");
  bwd_kernel<sm90::BwdTraits<64, cutlass::bfloat16_t>>("bwd_kernel_sm90 d64 bf16", true);
  bwd_kernel<sm90::BwdTraits<64, cutlass::half_t>>("bwd_kernel_sm90 d64 fp16", false);
  bwd_kernel<sm90::BwdTraits<128, cutlass::bfloat16_t>>("bwd_kernel_sm90 d128 bf16", false);
  bwd_kernel<sm90::BwdTraits<128, cutlass::half_t>>("bwd_kernel_sm90 d128 fp16", false);
  bwd_split_kernel<sm90::BwdSplitTraits<256, cutlass::bfloat16_t, 2>>("bwd_split_kernel_sm90 d256 bf16 pair");
  bwd_split_kernel<sm90::BwdSplitTraits<256, cutlass::half_t, 2>>("bwd_split_kernel_sm90 d256 fp16 pair");
  std::printf("\n}\n");
  return 0;
}
