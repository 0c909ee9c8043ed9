// Forward epilogue: the normalised fp32 output accumulator is rounded to the input dtype, staged
// through shared memory (so global stores are whole 128-bit rows whatever the MMA layout) and
// written to rows [0, valid_rows) of the output tile; each row's lse is written by the lane that
// holds the row's first column.
#pragma once
#include <cute/tensor.hpp>

#include "../common/fragment.h"
#include "../common/gmem_copy.h"
#include "../common/kernel_traits.h"

namespace flashtrain::cuda::sm80 {

// acc_o: output accumulator fragment (already normalised); lse[r]: lse of rowcol row r;
// smem: the block's shared memory, free for reuse (no thread reads Q any more); gO: the
// (kBlockM, kDimV) global output tile; lse_row0: &lse of the tile's first row.
template <typename Traits, typename AccO, int kRows, typename GlobalO>
__device__ __forceinline__ void fwd_epilogue(const AccO& acc_o, const float (&lse)[kRows], char* smem,
                                             GlobalO& gO, float* lse_row0, int64_t lse_row_stride,
                                             int valid_rows) {
  using namespace cute;
  using Element = typename Traits::Element;
  const int tid = threadIdx.x;
  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);

  Tensor sO = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Traits::SmemO{});
  Tensor rO = convert_fragment<Element>(acc_o);
  auto store_smem = make_tiled_copy_C(SmemStoreAtom<Element>{}, mma);
  auto thr_store_smem = store_smem.get_thread_slice(tid);
  copy(store_smem, thr_store_smem.retile_S(rO), thr_store_smem.partition_D(sO));

  // lse: the lane holding column 0 of a row writes it (one lane per row).
  Tensor coord = rowcol(thr_mma.partition_C(make_identity_tensor(Shape<Int<Traits::kBlockM>, Int<Traits::kDimV>>{})));
  static_assert(decltype(size<0>(coord))::value == kRows, "one lse per accumulator row");
  if (get<1>(coord(0, 0)) == 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = get<0>(coord(r, 0));
      if (row < valid_rows) lse_row0[row * lse_row_stride] = lse[r];
    }
  }
  __syncthreads();

  typename Traits::CopyV::Store store_gmem;
  auto thr_store_gmem = store_gmem.get_thread_slice(tid);
  Tensor cO = make_identity_tensor(Shape<Int<Traits::kBlockM>, Int<Traits::kDimV>>{});
  copy_rows<false>(store_gmem, thr_store_gmem.partition_S(sO), thr_store_gmem.partition_D(gO),
                   thr_store_gmem.partition_S(cO), valid_rows);
}

}  // namespace flashtrain::cuda::sm80
