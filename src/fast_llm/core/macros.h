// Portability macros shared by host and device code.
#pragma once

#if defined(__CUDACC__)
#define FLM_HOST_DEVICE __host__ __device__
#define FLM_INLINE __forceinline__
#else
#define FLM_HOST_DEVICE
#define FLM_INLINE inline
#endif
