/* A second driver layer between the program and libcuda (a tracing or
 * virtualising shim): it resolves libcuda.so.1's cuLaunchKernel with dlsym
 * (and so gets cdsa's wrapper back) and forwards every launch to it. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>

typedef CUresult (*LaunchFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
static int g_forwarded;

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream s, void** params, void** extra) {
  static LaunchFn next;
  if (!next) {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    next = h ? (LaunchFn)dlsym(h, "cuLaunchKernel") : NULL;
    if (!next) return CUDA_ERROR_NOT_INITIALIZED;
  }
  ++g_forwarded;
  return next(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

int layer_forwarded(void) { return g_forwarded; }
