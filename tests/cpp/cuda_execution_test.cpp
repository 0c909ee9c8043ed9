// CUDA execution context (AttentionOptions::stream / workspace): a caller-provided stream and
// workspace (of the size the dq-aware query returns) give the same bits as the defaults. Runs
// where a GPU is present (scripts/gpu_check.sh); skipped on machines without one.
#include <gtest/gtest.h>

#include <cstring>

#include "test_util.h"

#ifdef FLASHTRAIN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashtrain::testing {
namespace {

TEST(CudaExecution, CallerStreamAndWorkspaceMatchDefaults) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device on this machine";
#ifdef FLASHTRAIN_WITH_CUDA
  check::CaseSpec s = dense_spec("stream + workspace", 2, 173, 301, 8, 2, 128, 128, DType::kBFloat16);
  s.options.causal = true;
  s.options.deterministic = true;  // bitwise comparison below
  FLASHTRAIN_SKIP_IF_HEAD_DIM_NOT_BUILT(s, Backend::kCUDA);
  check::Case c(s);
  const check::Outputs defaults = c.run(Backend::kCUDA);

  check::Case::Views v = c.prepare(Backend::kCUDA);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  v.options.stream = stream;
  // dq is dense here, so the backward keeps its row statistics (D, lse in log2 units and the safe
  // pass's fix of it, 4 bytes each per query row and head) in dq's memory and the workspace
  // shrinks by them; the exact smaller size must suffice.
  const std::size_t bytes = backward_workspace_size(v.q, v.k, v.v, v.dq, v.options);
  const std::size_t without_dq = backward_workspace_size(v.q, v.k, v.v, v.options);
  EXPECT_GE(without_dq, bytes + 3 * sizeof(float) * 8 * 2 * 173) << "Hq 8, B 2, Sq 173";
  void* workspace = nullptr;
  if (bytes) {
    ASSERT_EQ(cudaMalloc(&workspace, bytes), cudaSuccess);
  }
  v.options.workspace = workspace;
  v.options.workspace_bytes = bytes;
  forward(v.q, v.k, v.v, v.out, v.lse, v.options);
  backward(v.q, v.k, v.v, v.out, v.lse, v.dout, v.dq, v.dk, v.dv, v.options);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const check::Outputs explicit_ctx = c.collect(Backend::kCUDA);
  cudaFree(workspace);
  cudaStreamDestroy(stream);

  auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
  };
  EXPECT_TRUE(same(defaults.out, explicit_ctx.out));
  EXPECT_TRUE(same(defaults.lse, explicit_ctx.lse));
  EXPECT_TRUE(same(defaults.dq, explicit_ctx.dq));
  EXPECT_TRUE(same(defaults.dk, explicit_ctx.dk));
  EXPECT_TRUE(same(defaults.dv, explicit_ctx.dv));
#endif
}

}  // namespace
}  // namespace flashtrain::testing
