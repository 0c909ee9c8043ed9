// Register-tile vocabulary of the sm90 consumer warpgroups: issuing a wgmma GEMM asynchronously,
// viewing a wgmma accumulator as (row, column), reinterpreting a converted accumulator as the
// register A operand of the next GEMM, and fp32 -> fp16/bf16 conversion of a fragment.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>

namespace flashtrain::cuda::sm90 {

// C += A * B over every k-block of one warpgroup's tiles (C = A * B when kZeroInit), issued as one
// wgmma batch. kWaitGroups >= 0 waits until at most that many batches are still in flight; -1
// returns at once, so the caller can overlap other work with the tensor cores.
template <bool kZeroInit, int kWaitGroups, class TiledMma, class TensorA, class TensorB, class TensorC>
__device__ __forceinline__ void wgmma_gemm(TiledMma& mma, TensorA const& tA, TensorB const& tB, TensorC& tC) {
  // Shared-memory operands are GMMA descriptor iterators, which CuTe also files under rmem.
  constexpr bool kARegisters = !cute::is_same_v<typename TensorA::iterator, cute::GMMA::DescriptorIterator>;
  if constexpr (kARegisters) cute::warpgroup_fence_operand(const_cast<TensorA&>(tA));
  cute::warpgroup_fence_operand(tC);
  cute::warpgroup_arrive();
  mma.accumulate_ = kZeroInit ? cute::GMMA::ScaleOut::Zero : cute::GMMA::ScaleOut::One;
  CUTLASS_PRAGMA_UNROLL
  for (int kb = 0; kb < cute::size<2>(tA); ++kb) {
    cute::gemm(mma, tA(cute::_, cute::_, kb), tB(cute::_, cute::_, kb), tC);
    mma.accumulate_ = cute::GMMA::ScaleOut::One;
  }
  cute::warpgroup_commit_batch();
  if constexpr (kWaitGroups >= 0) cute::warpgroup_wait<kWaitGroups>();
  cute::warpgroup_fence_operand(tC);
  if constexpr (kARegisters) cute::warpgroup_fence_operand(const_cast<TensorA&>(tA));
}

// Row slab i of a (MMA, MMA_M, X) fragment - an A operand (X = MMA_K) or an accumulator (X =
// MMA_N) - as a fragment of one slab, (MMA, 1, X) over the same registers / descriptors: so that
// the slabs of one GEMM can be issued, and waited for, as separate wgmma batches.
template <class Tensor>
__device__ __forceinline__ auto row_slab(Tensor&& t, int i) {
  auto layout = t.layout();
  static_assert(decltype(cute::rank(layout))::value == 3, "expected an (MMA, MMA_M, X) fragment");
  return cute::make_tensor(t.data() + layout(0, i, 0),
                           cute::make_layout(cute::get<0>(layout), cute::make_layout(cute::_1{}, cute::_0{}),
                                             cute::get<2>(layout)));
}

// A wgmma accumulator fragment ((2, 2, N/8), MMA_M, MMA_N) as (rows, columns) of this thread:
// the middle value mode steps 8 rows, the outer two step 1 and 8 columns.
template <class Layout>
__device__ __forceinline__ constexpr auto accumulator_rowcol(Layout const& acc) {
  static_assert(decltype(cute::rank(acc))::value == 3, "expected an (MMA, MMA_M, MMA_N) accumulator");
  static_assert(decltype(cute::rank(cute::get<0>(acc)))::value == 3, "expected a wgmma accumulator");
  return cute::make_layout(cute::make_layout(cute::get<0, 1>(acc), cute::get<1>(acc)),
                           cute::make_layout(cute::get<0, 0>(acc), cute::get<0, 2>(acc), cute::get<2>(acc)));
}

// The accumulator of an M x N GEMM, once converted to 16-bit, is register for register the A
// operand of an M x (K = N) register-sourced wgmma: pairs of 8-column blocks form one 16-wide
// k-block. Returns the ((2, 2, 2), MMA_M, N/16) layout over the same compact storage.
template <class Layout>
__device__ __forceinline__ constexpr auto accumulator_as_a_operand(Layout const& acc) {
  static_assert(decltype(cute::size<1>(acc))::value == 1 && decltype(cute::size<2>(acc))::value == 1,
                "one wgmma tile per thread expected");
  constexpr int kColBlocks = decltype(cute::size<0, 2>(acc))::value;  // N / 8
  static_assert(kColBlocks % 2 == 0, "N must be a multiple of 16");
  using namespace cute;
  return make_layout(Shape<Shape<_2, _2, _2>, _1, Int<kColBlocks / 2>>{});
}

// Converts a register fragment into `dst` (same number of elements, any layout over the same
// register order): one vectorised cvt per pair, round to nearest even.
template <class EngineSrc, class LayoutSrc, class EngineDst, class LayoutDst>
__device__ __forceinline__ void convert_fragment(cute::Tensor<EngineSrc, LayoutSrc> const& src,
                                                 cute::Tensor<EngineDst, LayoutDst>& dst) {
  using From = typename EngineSrc::value_type;
  using To = typename EngineDst::value_type;
  constexpr int kN = decltype(cute::size(src))::value;
  static_assert(kN == decltype(cute::size(dst))::value, "fragment sizes differ");
  cutlass::NumericArrayConverter<To, From, kN> convert;
  *reinterpret_cast<cutlass::Array<To, kN>*>(dst.data()) =
      convert(*reinterpret_cast<cutlass::Array<From, kN> const*>(src.data()));
}

}  // namespace flashtrain::cuda::sm90
