// Views and conversions of mma.sync register fragments.
//
// An m16n8 fp32 accumulator fragment of TiledMmaFor has layout ((2, 2), MMA_M, MMA_N): value
// (c, r) is column 2 * (lane % 4) + c and row lane / 4 + 8 * r of its 16x8 atom. Softmax and
// masking want it as a (rows, cols) matrix; the PV GEMM wants it as an A operand.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>

namespace flashtrain::cuda {

// ((2, 2), MMA_M, MMA_N) -> ((2, MMA_M), (2, MMA_N)): rows then columns.
template <typename Layout>
__host__ __device__ constexpr auto rowcol_layout(Layout layout) {
  static_assert(decltype(cute::rank(layout))::value == 3, "expects an accumulator fragment layout");
  static_assert(decltype(cute::size<0>(layout))::value == 4, "expects m16n8 accumulator values (2, 2)");
  return cute::make_layout(cute::make_layout(cute::get<0, 1>(layout), cute::get<1>(layout)),
                           cute::make_layout(cute::get<0, 0>(layout), cute::get<2>(layout)));
}

// The same registers (or coordinates, for an identity-tensor partition) seen as (rows, cols).
template <typename Tensor>
__host__ __device__ auto rowcol(Tensor&& t) {
  return cute::make_tensor(t.data(), rowcol_layout(t.layout()));
}

// ((2, 2), MMA_M, MMA_N) accumulator -> ((2, 2, 2), MMA_M, MMA_N / 2) m16n8k16 A operand: two
// neighbouring n8 column blocks of S form one k16 block of P, so P never leaves registers.
template <typename Layout>
__host__ __device__ constexpr auto acc_as_a_layout(Layout layout) {
  static_assert(decltype(cute::size<2>(layout))::value % 2 == 0, "needs an even number of n8 blocks");
  auto split = cute::logical_divide(layout, cute::Shape<cute::Underscore, cute::Underscore, cute::_2>{});
  return cute::make_layout(cute::make_layout(cute::get<0>(split), cute::get<2, 0>(split)), cute::get<1>(split),
                           cute::get<2, 1>(split));
}

// Element-wise conversion of a register fragment to `To` (round to nearest even), packed two at a
// time (cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32).
template <typename To, typename Engine, typename Layout>
__device__ __forceinline__ auto convert_fragment(const cute::Tensor<Engine, Layout>& src) {
  using From = typename Engine::value_type;
  constexpr int kSize = decltype(cute::size(src))::value;
  auto dst = cute::make_fragment_like<To>(src);
  cutlass::NumericArrayConverter<To, From, kSize> convert;
  *reinterpret_cast<cutlass::Array<To, kSize>*>(dst.data()) =
      convert(*reinterpret_cast<const cutlass::Array<From, kSize>*>(src.data()));
  return dst;
}

// Reductions over the four lanes (lane % 4) that share one accumulator row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x + __shfl_xor_sync(0xffffffffu, x, 1);
}

}  // namespace flashtrain::cuda
