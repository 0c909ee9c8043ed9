// Epilogue of the sm90 forward: normalises O by the row sums, writes lse (natural log, fp32) per
// row, and stores O through shared memory (stmatrix) with one TMA store, which also clips the
// rows past seqlen_q of the last block. A tile whose rows see no key at all writes its zeros and
// -inf straight to global memory without touching shared memory.
#pragma once
#include <cmath>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "fwd_args_sm90.h"
#include "fwd_kernel_traits_sm90.h"
#include "fwd_tile_scheduler_sm90.h"
#include "wgmma_utils_sm90.h"

namespace flashtrain::cuda::sm90 {

template <class Traits>
struct FwdEpilogue {
  using Element = typename Traits::Element;
  using SharedStorage = typename Traits::SharedStorage;
  using TileShapeQK = typename Traits::TileShapeQK;
  using TileShapePV = typename Traits::TileShapePV;

  struct Params {
    typename Traits::TmaStoreO tma_o;
    typename Traits::ShapeQKV shape_o;
    Element* out;  // for tiles without keys, written directly
    int64_t out_batch_stride, out_seq_stride, out_head_stride;
    float* lse;
    int64_t lse_batch_stride, lse_head_stride, lse_row_stride;
    int seqlen_q;
  };

  static Params make_params(const FwdArgs& a) {
    using namespace cute;
    auto mO = make_tensor(make_gmem_ptr(static_cast<Element*>(a.out)),
                          make_layout(make_shape(a.seqlen_q, Traits::kHeadDim, a.heads_q, a.batch),
                                      make_stride(a.out_strides.seq, _1{}, a.out_strides.head, a.out_strides.batch)));
    return Params{make_tma_copy(SM90_TMA_STORE{}, mO, typename Traits::SmemLayoutO{}, select<0, 2>(TileShapeQK{}), _1{}),
                  mO.shape(),
                  static_cast<Element*>(a.out),
                  a.out_strides.batch,
                  a.out_strides.seq,
                  a.out_strides.head,
                  a.lse,
                  a.lse_batch_stride,
                  a.lse_head_stride,
                  a.lse_row_stride,
                  a.seqlen_q};
  }

  static __device__ __forceinline__ void prefetch_descriptors(const Params& p) {
    cute::prefetch_tma_descriptor(p.tma_o.get_tma_descriptor());
  }

  // Run by every consumer thread once its warpgroup's GEMMs are complete. tOrO is the
  // unnormalised fp32 accumulator of the P V tiled MMA.
  template <class FragO, class Softmax>
  static __device__ void store(const Params& p, SharedStorage& s, const WorkTile& tile, FragO& tOrO,
                               const Softmax& softmax, int thread_idx) {
    using namespace cute;
    using cutlass::arch::NamedBarrier;
    constexpr int kRows = decltype(size<0>(accumulator_rowcol(tOrO.layout())))::value;
    float inv_sum[kRows], lse[kRows];
    softmax.finalize(inv_sum, lse);
    Tensor o_rowcol = make_tensor(tOrO.data(), accumulator_rowcol(tOrO.layout()));
    Softmax::scale_rows(o_rowcol, inv_sum);
    Tensor rO = make_fragment_like<Element>(tOrO);
    convert_fragment(tOrO, rO);

    // lse: the lane holding column 0 of its quad writes each of its rows.
    typename Traits::TiledMmaPV mma_pv;
    auto thr_pv = mma_pv.get_thread_slice(thread_idx);
    Tensor tOcO = thr_pv.partition_C(make_identity_tensor(select<0, 1>(TileShapePV{})));
    Tensor coords = make_tensor(tOcO.data(), accumulator_rowcol(tOcO.layout()));
    if (get<1>(coords(0, 0)) == 0) {
      float* lse_head = p.lse + tile.batch * p.lse_batch_stride + tile.head * p.lse_head_stride;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int row = tile.m_block * Traits::kBlockM + get<0>(coords(r, 0));
        if (row < p.seqlen_q) lse_head[row * p.lse_row_stride] = lse[r];
      }
    }

    // Both warpgroups' GEMMs are complete (O may live in Q's buffer) and the previous tile's
    // store has read O's buffer (its issuing thread waited before coming here).
    NamedBarrier::sync(Traits::kNumMmaThreads, static_cast<uint32_t>(FwdBarrier::kEpilogue));
    Tensor sO = make_tensor(make_smem_ptr(s.o_data()), typename Traits::SmemLayoutO{});
    auto smem_copy = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, mma_pv);
    auto thr_copy = smem_copy.get_thread_slice(thread_idx);
    Tensor tRrO = thr_copy.retile_S(rO);
    Tensor tRsO = thr_copy.partition_D(sO);
    copy(smem_copy, tRrO, tRsO);
    // stmatrix writes are generic-proxy; the TMA engine reads through the async proxy.
    cutlass::arch::fence_view_async_shared();
    NamedBarrier::sync(Traits::kNumMmaThreads, static_cast<uint32_t>(FwdBarrier::kEpilogue));

    if (thread_idx == 0) {
      Tensor mO = p.tma_o.get_tma_tensor(p.shape_o)(_, _, tile.head, tile.batch);
      Tensor gO = local_tile(mO, select<0, 2>(TileShapeQK{}), make_coord(tile.m_block, _0{}));
      auto cta_o = p.tma_o.get_slice(_0{});
      copy(p.tma_o, cta_o.partition_S(sO), cta_o.partition_D(gO));
      tma_store_arrive();
      // O's buffer is reused by the next tile (and is Q's when not separate), and the block's
      // shared memory must outlive the store: wait until the engine has read it.
      tma_store_wait<0>();
      if constexpr (!Traits::kSeparateO) cutlass::arch::ClusterBarrier::arrive(&s.q_empty);
    }
  }

  // A work tile none of whose rows sees a key: out = 0 (16-byte stores) and lse = -inf.
  static __device__ void store_empty(const Params& p, const WorkTile& tile, int thread_idx) {
    constexpr int kVecElems = 16 / sizeof(Element);
    constexpr int kVecsPerRow = Traits::kHeadDim / kVecElems;
    const int first_row = tile.m_block * Traits::kBlockM;
    Element* out_head = p.out + tile.batch * p.out_batch_stride + tile.head * p.out_head_stride;
    for (int i = thread_idx; i < Traits::kBlockM * kVecsPerRow; i += Traits::kNumMmaThreads) {
      const int row = first_row + i / kVecsPerRow;
      if (row < p.seqlen_q)
        *reinterpret_cast<uint4*>(out_head + row * p.out_seq_stride + (i % kVecsPerRow) * kVecElems) = uint4{0, 0, 0, 0};
    }
    float* lse_head = p.lse + tile.batch * p.lse_batch_stride + tile.head * p.lse_head_stride;
    for (int r = thread_idx; r < Traits::kBlockM; r += Traits::kNumMmaThreads) {
      if (first_row + r < p.seqlen_q) lse_head[(first_row + r) * p.lse_row_stride] = -INFINITY;
    }
  }
};

}  // namespace flashtrain::cuda::sm90
