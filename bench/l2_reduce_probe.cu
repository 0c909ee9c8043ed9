// How fast the L2 takes fp32 additions into an L2-resident accumulator, by how they are issued:
// the question behind the D 256 backward's dQ (bench/results/2026-12-05_run22 call 4: 537 M
// one-sector reduction requests, L2 at 82% of peak). Every block adds 64 x 256 fp32 tiles (dQ's
// tile of one step, 64 KB) into a buffer of rows strided like dq_accum ([rows][heads][256]), on
// rotating tiles, in one of four ways:
//   red      each thread red.global.add.f32, a warp covering 128 contiguous bytes per instruction
//   red.v2   red.global.add.v2.f32 (the split-D kernel's way), 256 bytes per warp instruction
//   red.v4   red.global.add.v4.f32, 512 bytes per warp instruction
//   bulk     one thread issues cp.reduce.async.bulk.global.shared::cta.add.f32 of each 1 KB row from
//            a shared-memory tile (the TMA reduction path of the D 64 / 128 kernels, non-tensor form)
// and, for scale, `read`: each warp reads the same bytes with 16-byte loads (the L2's read rate).
// Prints GB/s of each; a way is better for the L2 if it moves more bytes a second.
//
// Build (device): nvcc -O3 -std=c++17 -arch=sm_90a bench/l2_reduce_probe.cu -o l2_reduce_probe
// Usage: l2_reduce_probe [--blocks N] [--steps N] [--heads H] [--rows R]   (--help)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr int kTileRows = 64;
constexpr int kCols = 256;
constexpr int kThreads = 256;

#define CHECK(x)                                                                                  \
  do {                                                                                            \
    cudaError_t e = (x);                                                                          \
    if (e != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s: %s (%s:%d)\n", #x, cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

enum Mode { kRed = 0, kRedV2 = 1, kRedV4 = 2, kBulk = 3, kRead = 4 };
const char* kNames[] = {"red (4 B)", "red.v2 (8 B)", "red.v4 (16 B)", "bulk (1 KB rows)", "read (16 B loads)"};

struct Geometry {
  int tiles;         // tiles of 64 rows in the buffer
  int row_stride;    // floats between rows (heads * 256)
  int heads;
};

__device__ __forceinline__ float* tile_row(float* buf, const Geometry& g, int tile, int head, int row) {
  return buf + (static_cast<long long>(tile) * kTileRows + row) * g.row_stride + head * kCols;
}

template <int kMode>
__global__ void __launch_bounds__(kThreads) probe(float* buf, Geometry g, int steps, float* sink) {
  extern __shared__ __align__(128) float tile[];  // kBulk: 64 x 256 fp32
  const int tid = threadIdx.x;
  if constexpr (kMode == kBulk) {
    for (int i = tid; i < kTileRows * kCols; i += kThreads) tile[i] = 1.0f / (1 + (i & 7));
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
  }
  float acc = 0.0f;
  for (int step = 0; step < steps; ++step) {
    const int unit = (blockIdx.x + step * gridDim.x) % (g.tiles * g.heads);
    const int t = unit / g.heads, head = unit % g.heads;
    if constexpr (kMode == kBulk) {
      if (tid == 0) {
        for (int row = 0; row < kTileRows; ++row) {
          const float* src = tile + row * kCols;
          float* dst = tile_row(buf, g, t, head, row);
          asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
                       "r"(static_cast<unsigned>(__cvta_generic_to_shared(src))), "r"(kCols * 4)
                       : "memory");
        }
        asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 2;\n" ::: "memory");  // the tile is never rewritten
      }
    } else {
      constexpr int kVec = kMode == kRed ? 1 : kMode == kRedV2 ? 2 : 4;  // read: 4
      constexpr int kPerRow = kCols / kVec;
      for (int i = tid; i < kTileRows * kPerRow; i += kThreads) {
        const int row = i / kPerRow, col = (i % kPerRow) * kVec;
        float* p = tile_row(buf, g, t, head, row) + col;
        const float v = 1.0f / (1 + (i & 7));
        if constexpr (kMode == kRed) {
          asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(v) : "memory");
        } else if constexpr (kMode == kRedV2) {
          asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(v), "f"(v) : "memory");
        } else if constexpr (kMode == kRedV4) {
          asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v), "f"(v), "f"(v), "f"(v)
                       : "memory");
        } else {
          float4 x;
          asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                       : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w)
                       : "l"(p));
          acc += x.x + x.y + x.z + x.w;
        }
      }
    }
  }
  if constexpr (kMode == kBulk) {
    if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  }
  if (acc == 12345.0f) *sink = acc;  // keeps the reads
}

template <int kMode>
double run(float* buf, const Geometry& g, int blocks, int steps, float* sink) {
  const int smem = kMode == kBulk ? kTileRows * kCols * 4 : 0;
  CHECK(cudaFuncSetAttribute(probe<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  probe<kMode><<<blocks, kThreads, smem>>>(buf, g, steps, sink);  // warm-up
  CHECK(cudaGetLastError());
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a));
  probe<kMode><<<blocks, kThreads, smem>>>(buf, g, steps, sink);
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  const double bytes = static_cast<double>(blocks) * steps * kTileRows * kCols * 4;
  std::printf("  %-18s %8.3f ms  %7.0f GB/s\n", kNames[kMode], ms, bytes / ms / 1e6);
  return bytes / ms / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 0, steps = 200, heads = 8, rows = 2048;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--blocks") blocks = next();
    else if (a == "--steps") steps = next();
    else if (a == "--heads") heads = next();
    else if (a == "--rows") rows = next();
    else {
      std::printf("Usage: %s [--blocks N (default: 2 per SM)] [--steps N (200)] [--heads H (8)] [--rows R (2048)]\n"
                  "Adds 64 x 256 fp32 tiles into an L2-resident [rows][heads][256] buffer by per-thread\n"
                  "reductions of 4, 8 and 16 bytes and by bulk (TMA) reductions, and reads them; prints GB/s.\n",
                  argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  if (blocks == 0) blocks = 2 * prop.multiProcessorCount;
  Geometry g{rows / kTileRows, heads * kCols, heads};
  const size_t bytes = static_cast<size_t>(rows) * heads * kCols * 4;
  std::printf("%s, %d SMs, L2 %d MB; %d blocks x %d steps of 64 KB into a %.1f MB buffer\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, blocks, steps, bytes / 1048576.0);
  float *buf = nullptr, *sink = nullptr;
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(buf, 0, bytes));
  run<kRed>(buf, g, blocks, steps, sink);
  run<kRedV2>(buf, g, blocks, steps, sink);
  run<kRedV4>(buf, g, blocks, steps, sink);
  run<kBulk>(buf, g, blocks, steps, sink);
  run<kRead>(buf, g, blocks, steps, sink);
  CHECK(cudaFree(buf));
  CHECK(cudaFree(sink));
  return 0;
}
