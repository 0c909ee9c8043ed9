// A timeline of the sm90 backward main kernel, for finding where a block's time goes outside its
// steps. Only in a build configured with -DFLASHTRAIN_BWD_TRACE=ON (otherwise every call below
// compiles to nothing): one thread of each consumer warpgroup records clock64() at the phases of
// its block, and after each launch the host writes the records to the file named by the
// environment variable FLASHTRAIN_BWD_TRACE (bench/bwd_trace.py reads and summarises it).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "../common/cuda_check.h"

namespace flashtrain::cuda::sm90 {

#ifdef FLASHTRAIN_BWD_TRACE
inline constexpr bool kBwdTrace = true;
#else
inline constexpr bool kBwdTrace = false;
#endif

// A block's record: kBwdTraceSlots 64-bit values; warpgroup w's phases in slots kTraceWgBase + kPhases w + phase.
inline constexpr int kBwdTraceSlots = 16;
enum BwdTraceSlot : int {
  kTraceGlobalStart = 0,  // %globaltimer (ns) at the kernel's start (warpgroup 0)
  kTraceGlobalEnd = 1,    // %globaltimer after warpgroup 0's epilogue
  kTraceSm = 2,           // %smid
  kTraceSteps = 3,        // the block's steps
  kTraceWgBase = 4,
};
enum BwdTracePhase : int {
  kPhaseStart = 0,     // clock64() at the kernel's start
  kPhaseKv = 1,        // K and V landed
  kPhaseLoop = 2,      // prologue done: K's fp16 copy (bf16 but stats_copy_k), stagger passed
  kPhaseLoopEnd = 3,   // the step loop left
  kPhaseTail = 4,      // last dQ issued, scaled and staged
  kPhaseEnd = 5,       // dK and dV written
  kPhases = 6,
};
static_assert(kTraceWgBase + 2 * kPhases <= kBwdTraceSlots, "two warpgroups' phases in a record");

__device__ __forceinline__ uint64_t trace_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Records `value` in slot `slot` of this block's record (first thread of a warpgroup only).
__device__ __forceinline__ void bwd_trace(uint64_t* trace, int mma_tid, int slot, uint64_t value) {
  if constexpr (kBwdTrace) {
    if (mma_tid % 128 == 0) {
      const uint64_t block = blockIdx.x + static_cast<uint64_t>(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z);
      trace[block * kBwdTraceSlots + slot] = value;
    }
  }
}
// clock64() at `phase` of this thread's warpgroup.
__device__ __forceinline__ void bwd_trace_phase(uint64_t* trace, int mma_tid, int phase) {
  if constexpr (kBwdTrace) bwd_trace(trace, mma_tid, kTraceWgBase + kPhases * (mma_tid / 128) + phase, clock64());
}

// Host: a zeroed record per block (nullptr unless tracing).
inline uint64_t* bwd_trace_buffer(int64_t blocks, cudaStream_t stream) {
  if constexpr (!kBwdTrace) return nullptr;
  static uint64_t* buffer = nullptr;
  static int64_t capacity = 0;
  const int64_t bytes = blocks * kBwdTraceSlots * static_cast<int64_t>(sizeof(uint64_t));
  if (bytes > capacity) {
    if (buffer != nullptr) FT_CUDA_CHECK(cudaFree(buffer), "bwd trace: cudaFree");
    FT_CUDA_CHECK(cudaMalloc(&buffer, bytes), "bwd trace: cudaMalloc");
    capacity = bytes;
  }
  FT_CUDA_CHECK(cudaMemsetAsync(buffer, 0, bytes, stream), "bwd trace: cudaMemsetAsync");
  return buffer;
}

// Host: after the launch, the records into $FLASHTRAIN_BWD_TRACE (overwritten per launch): a
// header of 8 int64 (blocks, head dim, kBlockM, kBlockN, SM clock kHz, 0, 0, 0), then the records.
inline void bwd_trace_dump(const uint64_t* trace, int64_t blocks, int head_dim, int block_m, int block_n,
                           cudaStream_t stream) {
  if constexpr (!kBwdTrace) return;
  const char* path = std::getenv("FLASHTRAIN_BWD_TRACE");
  if (path == nullptr || trace == nullptr) return;
  std::vector<uint64_t> host(static_cast<size_t>(blocks) * kBwdTraceSlots);
  FT_CUDA_CHECK(cudaStreamSynchronize(stream), "bwd trace: sync");
  FT_CUDA_CHECK(cudaMemcpy(host.data(), trace, host.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost),
                "bwd trace: copy");
  int device = 0, khz = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device), "bwd trace: cudaGetDevice");
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device), "bwd trace: clock rate");
  const int64_t header[8] = {blocks, head_dim, block_m, block_n, khz, 0, 0, 0};
  if (FILE* f = std::fopen(path, "wb")) {
    std::fwrite(header, sizeof(header), 1, f);
    std::fwrite(host.data(), sizeof(uint64_t), host.size(), f);
    std::fclose(f);
  }
}

}  // namespace flashtrain::cuda::sm90
