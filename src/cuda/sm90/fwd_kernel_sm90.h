// Kernel entry of the sm90a forward: a persistent grid (at most one block per SM) walking the
// (query block, head, batch) work tiles. Warpgroup 0 is the producer (one elected thread issues
// every TMA load; the warpgroup gives its registers away with setmaxnreg), warpgroups 1 .. the
// consumers (64 query rows each: GEMMs, softmax, epilogue; two, or three at D = 64,
// fwd_block_m).
//
// The body exists only in the sm_90a compile pass; other targets in FLASHTRAIN_CUDA_ARCHS get an
// empty kernel, and sm90::refusal() keeps the host from launching it on any other device.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "../../common/mask.h"
#include "device_code_sm90.h"
#include "fwd_epilogue_sm90.h"
#include "fwd_kernel_traits_sm90.h"
#include "fwd_mainloop_sm90.h"
#include "fwd_mask_sm90.h"
#include "fwd_softmax_sm90.h"
#include "fwd_tile_scheduler_sm90.h"


namespace flashtrain::cuda::sm90 {

template <class Traits>
struct FwdParams {
  typename FwdMainloop<Traits>::Params mainloop;
  typename FwdEpilogue<Traits>::Params epilogue;
  PersistentTileScheduler::Params scheduler;
  MaskSpec mask;
  int seqlen_q;
  float scale;
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    fwd_kernel_sm90(const __grid_constant__ FwdParams<Traits> params) {
#ifdef FLASHTRAIN_SM90_DEVICE_CODE
  using Mainloop = FwdMainloop<Traits>;
  using Epilogue = FwdEpilogue<Traits>;
  using SharedStorage = typename Traits::SharedStorage;
  extern __shared__ __align__(Traits::kSmemAlign) char smem[];
  SharedStorage& storage = *reinterpret_cast<SharedStorage*>(smem);

  const int warp_idx = cutlass::canonical_warp_idx_sync();
  const int warp_group = cutlass::canonical_warp_group_idx();
  const bool lane_elected = cute::elect_one_sync();
  if (warp_idx == 0 && lane_elected) {
    Mainloop::prefetch_descriptors(params.mainloop);
    Epilogue::prefetch_descriptors(params.epilogue);
    Mainloop::init_barriers(storage);
  }
  __syncthreads();

  using Scheduler = PersistentTileScheduler;
  using cutlass::arch::ClusterBarrier;
  using Mask = typename Mainloop::Mask;
  const bool dynamic = Scheduler::dynamic(params.scheduler);
  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (warp_idx == 0 && lane_elected) {
      int pipe_base = 0, q_round = 0;
      for (int n = 0;; ++n) {
        int index;
        if (dynamic) {  // claim the tile and hand its index to the consumers
          index = Scheduler::claim_tile(params.scheduler, n);
          ClusterBarrier::wait(&storage.tile_empty[n % 2], static_cast<uint32_t>(((n / 2) & 1) ^ 1));
          // volatile: the compiler keeps the store before the arrive (its asm has no memory clobber)
          *reinterpret_cast<volatile int*>(&storage.tile_index[n % 2]) = index;
          ClusterBarrier::arrive(&storage.tile_full[n % 2]);
          if (!Scheduler::valid(params.scheduler, index)) {
            Scheduler::retire(params.scheduler);
            break;
          }
        } else {
          index = Scheduler::static_tile(n);
          if (!Scheduler::valid(params.scheduler, index)) break;
        }
        const WorkTile tile = Scheduler::tile(params.scheduler, index);
        const Mask mask(params.mask, tile.m_block, params.seqlen_q);
        if (mask.num_tiles() == 0) continue;
        Mainloop::load(params.mainloop, storage, tile, mask, pipe_base, q_round);
        pipe_base += mask.num_tiles();
        ++q_round;
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    const int thread_idx = static_cast<int>(threadIdx.x) - Traits::kThreadsPerWarpGroup;
    typename Traits::TiledMmaPV mma_pv;
    int pipe_base = 0, q_round = 0;
    for (int n = 0;; ++n) {
      int index;
      if (dynamic) {
        ClusterBarrier::wait(&storage.tile_full[n % 2], static_cast<uint32_t>((n / 2) & 1));
        index = *reinterpret_cast<volatile int*>(&storage.tile_index[n % 2]);  // after the wait
        ClusterBarrier::arrive(&storage.tile_empty[n % 2]);
      } else {
        index = Scheduler::static_tile(n);
      }
      if (!Scheduler::valid(params.scheduler, index)) break;
      const WorkTile tile = Scheduler::tile(params.scheduler, index);
      const Mask mask(params.mask, tile.m_block, params.seqlen_q);
      if (mask.num_tiles() == 0) {
        Epilogue::store_empty(params.epilogue, tile, thread_idx);
        continue;
      }
      cute::Tensor tOrO = cute::partition_fragment_C(mma_pv, cute::select<0, 1>(typename Traits::TileShapePV{}));
      constexpr int kRows = decltype(cute::size<0>(accumulator_rowcol(tOrO.layout())))::value;
      OnlineSoftmax<kRows> softmax(params.scale);
      Mainloop::mma(params.mainloop, storage, tile, mask, thread_idx, warp_group - 1, pipe_base, q_round, tOrO,
                    softmax);
      Epilogue::store(params.epilogue, storage, tile, tOrO, softmax, thread_idx);
      pipe_base += mask.num_tiles();
      ++q_round;
    }
  }
#endif
}

}  // namespace flashtrain::cuda::sm90
