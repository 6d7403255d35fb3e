// GPU suite case 25b (issue 16): programmatic dependent launch (PDL) on the hardware.
// Pairs on one stream: a primary launched with cuLaunchKernelEx (no attribute), then a secondary launched with
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION. The primary calls cudaTriggerProgrammaticLaunchCompletion
// first, so its dependent may start at once; the secondary calls cudaGridDependencySynchronize before it reads what
// the primary wrote. Kernels' CUfunctions come from cudaGetFuncBySymbol (as NCCL gets its own).
//
//   nvcc -g -O0 -arch=sm_90 pdl_pairs.cu -o pdl_pairs -L$CUDA_HOME/lib64/stubs -lcuda
//   pdl_pairs time N [memop|event]
//                            N pairs, timed after 100 warm-up pairs:
//                            "pdl-time pairs N us_per_pair X overlapped K broken_waits B" (K: secondaries that
//                            started before their primary had written its end flag, i.e. the overlap PDL exists
//                            for; B: secondaries that saw no end flag after cudaGridDependencySynchronize); with
//                            memop (a cuStreamWriteValue32, what a cdsa mark right after every launch was) or event
//                            (a cuEventRecord) between each pair's kernels: what such an operation costs the pair
//   pdl_pairs memop-wait     one pair whose primary spins ~200 ms after triggering, whose secondary never calls
//                            cudaGridDependencySynchronize, then on the same stream a cuStreamWriteValue32 (what a
//                            cdsa mark is), an event record and a plain kernel. Prints
//                            "memop-wait overlapped yes|no memop_waits_for_primary yes|no|untested
//                             event_waits_for_primary ... kernel_waits_for_primary ... memop_ms T"
//                            (the fact kLandedPdlMarkProvesPrimary in shim/record/breadcrumbs.h rests on; untested
//                            when the secondary did not overlap its primary, so nothing was asked), then
//                            " placement plain"
//   pdl_pairs memop-wait waited  the same with cdsa's placement of a PDL group's mark: an event recorded on the
//                            stream and waited on by it before the memop ("placement waited"); its
//                            memop_waits_for_primary must be yes (cdsa takes such a landed mark as proof)
//   pdl_pairs freed-copy free|async-free
//                            info: a cuMemcpyDtoHAsync from an allocation freed before (cuMemFree, or
//                            cuMemAllocAsync + cuMemFreeAsync on the stream): "freed-copy KIND call R sync S"
// Exit 0 when the mode ran (whatever it found), 2 when the device or a call it needs is missing.
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "host_page.h"

namespace {

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ void spin_ns(uint64_t ns) {
  const uint64_t t0 = now_ns();
  while (now_ns() - t0 < ns) {
  }
}

// Pair i's primary: lets its dependent start, works `ns`, then marks its end in done[i].
__global__ void primary_kernel(volatile int* done, int i, uint64_t ns) {
  cudaTriggerProgrammaticLaunchCompletion();
  spin_ns(ns);
  __threadfence_system();
  if (threadIdx.x == 0 && blockIdx.x == 0) done[i] = 1;
  __threadfence_system();
}

// Pair i's secondary: a preamble that does not depend on the primary (it notes whether the primary had ended), then
// the wait, then the dependent part.
__global__ void secondary_kernel(volatile int* done, int* overlapped, int i, uint64_t ns) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && done[i] == 0) atomicAdd(overlapped, 1);
  spin_ns(ns);
  cudaGridDependencySynchronize();
  if (threadIdx.x == 0 && blockIdx.x == 0 && done[i] != 1) atomicAdd(overlapped, 1 << 20);  // wait broken: flagged
}

// A secondary that never waits: records whether its primary had ended when it ran (1: not yet, 2: ended).
__global__ void nowait_secondary_kernel(volatile int* page) {
  if (threadIdx.x == 0 && blockIdx.x == 0) page[1] = page[0] == 0 ? 1 : 2;
  __threadfence_system();
}

// A plain kernel after the pair: the same question for the next kernel (1: primary not ended when it ran).
__global__ void after_kernel(volatile int* page) {
  if (threadIdx.x == 0 && blockIdx.x == 0) page[3] = page[0] == 0 ? 1 : 2;
  __threadfence_system();
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    printf("pdl_pairs: %s failed: %s\n", what, name ? name : "?");
    fflush(stdout);
    exit(2);
  }
}

const char* err_name(CUresult r) {
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  return name ? name : "?";
}

CUfunction function_of(const void* symbol) {
  cudaFunction_t f = nullptr;
  if (cudaGetFuncBySymbol(&f, symbol) != cudaSuccess) {
    printf("pdl_pairs: cudaGetFuncBySymbol failed\n");
    exit(2);
  }
  return reinterpret_cast<CUfunction>(f);
}

CUlaunchConfig config(CUstream s, CUlaunchAttribute* attrs, unsigned n, unsigned grid = 4) {
  CUlaunchConfig c{};
  c.gridDimX = grid, c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = 64, c.blockDimY = c.blockDimZ = 1;
  c.hStream = s;
  c.attrs = n ? attrs : nullptr;
  c.numAttrs = n;
  return c;
}

CUlaunchAttribute pdl_attr() {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.programmaticStreamSerializationAllowed = 1;
  return a;
}

__attribute__((noinline)) void launch_primary(CUfunction f, void** args, CUstream s, unsigned grid = 4) {
  CUlaunchConfig c = config(s, nullptr, 0, grid);
  check(cuLaunchKernelEx(&c, f, args, nullptr), "cuLaunchKernelEx (primary)");  // PRIMARY-LINE
}

__attribute__((noinline)) void launch_secondary(CUfunction f, void** args, CUstream s, unsigned grid = 4) {
  CUlaunchAttribute a[1] = {pdl_attr()};
  CUlaunchConfig c = config(s, a, 1, grid);
  check(cuLaunchKernelEx(&c, f, args, nullptr), "cuLaunchKernelEx (secondary)");  // SECONDARY-LINE
}

CUstream setup() {
  check(cuInit(0), "cuInit");
  CUdevice dev;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  int major = 0;
  check(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
  if (major < 9) {
    printf("pdl_pairs: compute capability %d.x has no programmatic dependent launch\n", major);
    exit(2);
  }
  CUcontext ctx;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return s;
}

int time_pairs(int n, const std::string& between) {
  CUstream s = setup();
  CUfunction prim = function_of(reinterpret_cast<const void*>(primary_kernel));
  CUfunction sec = function_of(reinterpret_cast<const void*>(secondary_kernel));
  const int warm = 100, total = warm + n;
  CUdeviceptr done, overlapped;
  check(cuMemAlloc(&done, sizeof(int) * total), "cuMemAlloc");
  check(cuMemAlloc(&overlapped, sizeof(int)), "cuMemAlloc");
  check(cuMemsetD8(done, 0, sizeof(int) * total), "cuMemsetD8");
  check(cuMemsetD8(overlapped, 0, sizeof(int)), "cuMemsetD8");
  uint64_t prim_ns = 8000, sec_ns = 4000;  // a primary's tail and a secondary's preamble of a few microseconds
  void* page = nullptr;
  CUdeviceptr slot = 0;
  CUevent ev = nullptr;
  if (between == "memop") check(registered_host_page(&page, &slot), "cuMemHostRegister");
  if (between == "event") check(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  auto pair = [&](int i) {
    void* pa[] = {&done, &i, &prim_ns};
    launch_primary(prim, pa, s);
    if (slot) check(cuStreamWriteValue32(s, slot, static_cast<cuuint32_t>(i), 0), "cuStreamWriteValue32");
    if (ev) check(cuEventRecord(ev, s), "cuEventRecord");
    void* sa[] = {&done, &overlapped, &i, &sec_ns};
    launch_secondary(sec, sa, s);
  };
  for (int i = 0; i < warm; ++i) pair(i);
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  check(cuMemsetD8(overlapped, 0, sizeof(int)), "cuMemsetD8");
  auto t0 = std::chrono::steady_clock::now();
  for (int i = warm; i < total; ++i) pair(i);
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  int k = 0;
  check(cuMemcpyDtoH(&k, overlapped, sizeof k), "cuMemcpyDtoH");
  printf("pdl-time pairs %d us_per_pair %.3f overlapped %d broken_waits %d between %s\n", n, us / n,
         k & ((1 << 20) - 1), k >> 20, between.empty() ? "nothing" : between.c_str());
  return 0;
}

const char* answer(int v) { return v == 1 ? "no" : v == 2 ? "yes" : "unknown"; }

// `waited`: cdsa's placement of a PDL group's mark (shim/record/breadcrumbs.cc): an event recorded on the stream and
// waited on by it, then the memop. Documented to wait for the primary (cuEventRecord captures "the contents of
// hStream"); "memop_waits_for_primary no" here would make cdsa's proven marks a wrong certainty.
int memop_wait(bool waited) {
  CUstream s = setup();
  CUfunction prim = function_of(reinterpret_cast<const void*>(primary_kernel));
  CUfunction sec = function_of(reinterpret_cast<const void*>(nowait_secondary_kernel));
  CUfunction after = function_of(reinterpret_cast<const void*>(after_kernel));
  void* page = nullptr;
  CUdeviceptr dev = 0;
  check(registered_host_page(&page, &dev), "cuMemHostRegister");
  volatile int* w = static_cast<volatile int*>(page);  // [0] primary ended, [1] secondary, [2] memop, [3] after
  CUevent ev;
  check(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  int i = 0;
  uint64_t ns = 200000000ull;  // 200 ms after the trigger
  void* pa[] = {&dev, &i, &ns};
  void* sa[] = {&dev};
  void* aa[] = {&dev};
  launch_primary(prim, pa, s, 1);
  launch_secondary(sec, sa, s, 1);
  if (waited) {
    CUevent proof;
    check(cuEventCreate(&proof, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    check(cuEventRecord(proof, s), "cuEventRecord (proof)");
    check(cuStreamWaitEvent(s, proof, CU_EVENT_WAIT_DEFAULT), "cuStreamWaitEvent (proof)");
  }
  check(cuStreamWriteValue32(s, dev + 2 * sizeof(int), 1, 0), "cuStreamWriteValue32");
  check(cuEventRecord(ev, s), "cuEventRecord");
  check(cuLaunchKernel(after, 1, 1, 1, 32, 1, 1, 0, s, aa, nullptr), "cuLaunchKernel (after)");
  auto t0 = std::chrono::steady_clock::now();
  int memop_primary = -1, event_primary = -1;
  double memop_ms = -1;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    if (memop_primary < 0 && w[2] == 1) {
      memop_primary = w[0];
      memop_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    if (event_primary < 0 && cuEventQuery(ev) == CUDA_SUCCESS) event_primary = w[0];
    if (memop_primary >= 0 && event_primary >= 0 && w[3] != 0) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  CUresult sync = cuStreamSynchronize(s);
  const bool overlapped = w[1] == 1;
  auto said = [&](int primary_seen) -> const char* {  // primary_seen: w[0] when the operation was seen done
    if (!overlapped) return "untested";
    return primary_seen < 0 ? "unknown" : primary_seen == 1 ? "yes" : "no";
  };
  printf("memop-wait overlapped %s memop_waits_for_primary %s event_waits_for_primary %s kernel_waits_for_primary %s "
         "memop_ms %.1f sync %s placement %s\n",
         w[1] == 1 ? "yes" : w[1] == 2 ? "no" : "unknown", said(memop_primary), said(event_primary),
         overlapped ? answer(w[3]) : "untested", memop_ms, err_name(sync), waited ? "waited" : "plain");
  return 0;
}

int freed_copy(bool stream_ordered) {
  CUstream s = setup();
  CUdeviceptr p = 0;
  const size_t size = 1 << 20;
  if (stream_ordered) {
    check(cuMemAllocAsync(&p, size, s), "cuMemAllocAsync");
    check(cuMemFreeAsync(p, s), "cuMemFreeAsync");
  } else {
    check(cuMemAlloc(&p, size), "cuMemAlloc");
    check(cuMemFree(p), "cuMemFree");
  }
  int host[4] = {0, 0, 0, 0};
  CUresult call = cuMemcpyDtoHAsync(host, p, sizeof host, s);
  CUresult sync = cuStreamSynchronize(s);
  CUresult after = cuCtxSynchronize();
  printf("freed-copy %s call %s sync %s ctx %s\n", stream_ordered ? "async-free" : "free", err_name(call),
         err_name(sync), err_name(after));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (mode == "time") return time_pairs(argc > 2 ? atoi(argv[2]) : 2000, argc > 3 ? argv[3] : "");
  if (mode == "memop-wait") return memop_wait(argc > 2 && std::string(argv[2]) == "waited");
  if (mode == "freed-copy") return freed_copy(argc > 2 && strcmp(argv[2], "async-free") == 0);
  fprintf(stderr, "usage: pdl_pairs time N [memop|event] | memop-wait [waited] | freed-copy free|async-free\n");
  return 2;
}
