// Marks helpers shared by the CPU backend, the reference and the CUDA kernels.
#pragma once
#if defined(__CUDACC__)
#define FT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FT_HOST_DEVICE inline
#endif
