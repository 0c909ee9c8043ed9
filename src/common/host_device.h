// Marks helpers shared by the CPU backend, the reference and the CUDA kernels.
#pragma once
#if defined(__CUDACC__)
#define FT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FT_HOST_DEVICE inline
#endif

// Loop unrolling hint for device code; a no-op for the host compiler (which unrolls on its own).
#if defined(__CUDACC__)
#define FT_UNROLL _Pragma("unroll")
#else
#define FT_UNROLL
#endif
