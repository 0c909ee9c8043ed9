// FLASHTRAIN_SM90_DEVICE_CODE is defined in the sm_90a compile pass only: kernel bodies using
// wgmma, TMA and setmaxnreg are compiled there, and other targets in FLASHTRAIN_CUDA_ARCHS get
// empty kernels (sm90::refusal / bwd_refusal keep the host from launching them elsewhere).
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASHTRAIN_SM90_DEVICE_CODE 1
#endif
