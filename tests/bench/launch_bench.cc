// Host cost of one kernel launch, timed call by call inside a tight C loop.
// Loaded by launch_cost.py through ctypes from the bottom of a Python call
// stack of chosen depth, so that cdsa (when preloaded) records real Python
// frames at every launch. The kernel is the simulated driver's fill_f32 on 1
// element; the stream is kept busy by a long sleep_us first, so every launch
// only queues work and no worker wakes up in between.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <vector>

namespace {
inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
}  // namespace

extern "C" int cdsa_bench_launches(int n, int64_t* ns_out) {
  if (cuInit(0) != CUDA_SUCCESS) return 1;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fill, sleep;
  if (cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
      cuModuleLoadData(&mod, "image") || cuModuleGetFunction(&fill, mod, "fill_f32") ||
      cuModuleGetFunction(&sleep, mod, "sleep_us"))
    return 2;
  CUstream s;
  CUdeviceptr buf;
  if (cuStreamCreate(&s, 0) || cuMemAlloc(&buf, 64)) return 3;
  int32_t count = 1;
  float v = 1;
  void* params[3] = {&buf, &count, &v};
  // Warm-up: first launches pay for one-time setup (cdsa's tables, libunwind's caches, interning).
  for (int i = 0; i < 1000; ++i) cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
  cuStreamSynchronize(s);
  int64_t us = 60 * 1000 * 1000;  // keep the stream busy for the whole measurement
  void* sp[1] = {&us};
  cuLaunchKernel(sleep, 1, 1, 1, 1, 1, 1, 0, s, sp, nullptr);
  for (int i = 0; i < n; ++i) {
    int64_t t0 = now_ns();
    CUresult r = cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
    ns_out[i] = now_ns() - t0;
    if (r != CUDA_SUCCESS) return 4;
  }
  return 0;
}
