// Host cost of one kernel launch, timed call by call inside a tight C loop.
// Loaded by launch_cost.py through ctypes from the bottom of a Python call
// stack of chosen depth, so that cdsa (when preloaded) records real Python
// frames at every launch. The kernel is the simulated driver's fill_f32 on 1
// element; the stream is kept busy by a long sleep_us first, so every launch
// only queues work and no worker wakes up in between.
#include <cuda.h>
#include <stdlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <ctime>
#include <utility>
#include <vector>

namespace {
inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The measured loop: callgrind collects this function alone (launch_cost.py --callgrind). Its first `warm`
// launches are not timed: they let cdsa meet this exact stack once.
__attribute__((noinline)) int measured_launches(CUfunction fill, CUstream s, void** params, int n, int warm,
                                                int64_t* ns_out) {
  for (int i = -warm; i < n; ++i) {
    int64_t t0 = now_ns();
    CUresult r = cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
    if (i >= 0) ns_out[i] = now_ns() - t0;
    if (r != CUDA_SUCCESS) return 4;
  }
  return 0;
}

// 200 distinct launch sites (launch_cost.py --sites): one function each, called in turn from one loop, so every
// site launches from the same stack depth and stack pointer. Each writes its own number after the launch, so no
// two bodies are identical (the linker would fold them into one).
constexpr int kSites = 200;
volatile int g_site_sink = 0;
using SiteFn = CUresult (*)(CUfunction, CUstream, void**);
template <int K>
__attribute__((noinline)) CUresult site(CUfunction fill, CUstream s, void** params) {
  CUresult r = cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
  g_site_sink = K;
  return r;
}
template <int... K>
constexpr std::array<SiteFn, sizeof...(K)> site_table(std::integer_sequence<int, K...>) {
  return {&site<K>...};
}
const std::array<SiteFn, kSites> g_sites = site_table(std::make_integer_sequence<int, kSites>{});
int g_n_sites = 1;  // 1: the one site of measured_launches

// The measured loop over the sites, round-robin (launch_cost.py --sites): callgrind collects it alone.
__attribute__((noinline)) int measured_launches_sites(CUfunction fill, CUstream s, void** params, int n, int warm,
                                                      int64_t* ns_out) {
  for (int i = -warm; i < n; ++i) {
    int64_t t0 = now_ns();
    CUresult r = g_sites[static_cast<unsigned>(i + warm) % kSites](fill, s, params);
    if (i >= 0) ns_out[i] = now_ns() - t0;
    if (r != CUDA_SUCCESS) return 4;
  }
  return 0;
}

// State for single launches made from Python (cdsa_bench_launch_one).
CUfunction g_fill = nullptr;
CUstream g_stream = nullptr;
CUdeviceptr g_buf = 0;
int32_t g_count = 1;
float g_value = 1;
void* g_params[3] = {&g_buf, &g_count, &g_value};

int setup(CUfunction* fill, CUfunction* sleep, CUstream* s, CUdeviceptr* buf) {
  if (cuInit(0) != CUDA_SUCCESS) return 1;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  if (cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
      cuModuleLoadData(&mod, "image") || cuModuleGetFunction(fill, mod, "fill_f32") ||
      cuModuleGetFunction(sleep, mod, "sleep_us"))
    return 2;
  // CDSA_BENCH_NULL_STREAM=1: launch on the legacy NULL stream (cdsa then asks for the current context each time).
  const char* null_stream = getenv("CDSA_BENCH_NULL_STREAM");
  if (null_stream && *null_stream == '1')
    *s = nullptr;
  else if (cuStreamCreate(s, 0))
    return 3;
  if (cuMemAlloc(buf, 64)) return 3;
  return 0;
}

// After the warm-up: waits for it, then keeps the stream busy for the whole measurement (a 60 s sleep kernel), so
// every measured call queues behind it (its arguments are copied at the launch).
void keep_busy(CUfunction sleep, CUstream s) {
  cuStreamSynchronize(s);
  int64_t us = 60 * 1000 * 1000;
  void* sp[1] = {&us};
  cuLaunchKernel(sleep, 1, 1, 1, 1, 1, 1, 0, s, sp, nullptr);
}

int launches(int n, int64_t* ns_out) {
  CUfunction fill, sleep;
  CUstream s;
  CUdeviceptr buf;
  if (int rc = setup(&fill, &sleep, &s, &buf)) return rc;
  int32_t count = 1;
  float v = 1;
  void* params[3] = {&buf, &count, &v};
  // Warm-up: first launches pay for one-time setup (cdsa's tables, libunwind's caches, interning).
  for (int i = 0; i < 1000; ++i) cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
  keep_busy(sleep, s);
  if (g_n_sites > 1) return measured_launches_sites(fill, s, params, n, 2 * kSites, ns_out);
  return measured_launches(fill, s, params, n, 16, ns_out);
}

volatile int g_depth_sink = 0;

// `depth` C frames between the caller and the launch loop.
__attribute__((noinline)) int launches_at_depth(int depth, int n, int64_t* ns_out) {
  int r = depth <= 1 ? launches(n, ns_out) : launches_at_depth(depth - 1, n, ns_out);
  g_depth_sink = g_depth_sink + 1;  // not a tail call: every level stays a frame
  return r;
}

// One launch made from Python (launch_cost.py --sites from Python): callgrind collects it alone.
__attribute__((noinline)) int measured_one() {
  return cuLaunchKernel(g_fill, 1, 1, 1, 1, 1, 1, 0, g_stream, g_params, nullptr) == CUDA_SUCCESS ? 0 : 4;
}

}  // namespace

extern "C" int cdsa_bench_set_sites(int n) {
  g_n_sites = n;
  return kSites;
}

// Prepares cdsa_bench_launch_one: the same kernel, stream and warm-up as cdsa_bench_launches.
extern "C" int cdsa_bench_launch_setup() {
  CUfunction sleep;
  if (int rc = setup(&g_fill, &sleep, &g_stream, &g_buf)) return rc;
  for (int i = 0; i < 1000; ++i) cuLaunchKernel(g_fill, 1, 1, 1, 1, 1, 1, 0, g_stream, g_params, nullptr);
  keep_busy(sleep, g_stream);
  return 0;
}

extern "C" int cdsa_bench_launch_one() { return measured_one(); }

extern "C" int cdsa_bench_launches(int n, int64_t* ns_out) { return launches(n, ns_out); }

// The driver's own work for one breadcrumb, timed alone: `n` cuStreamWriteValue64 on the busy stream, as a launch
// under cdsa enqueues one (launch_cost.py takes it off the timed launches' added cost).
extern "C" int cdsa_bench_memops(int n, int64_t* ns_out) {
  CUfunction fill, sleep;
  CUstream s;
  CUdeviceptr buf;
  if (int rc = setup(&fill, &sleep, &s, &buf)) return rc;
  for (int i = 0; i < 1000; ++i) cuStreamWriteValue64(s, buf, static_cast<cuuint64_t>(i), 0);
  keep_busy(sleep, s);
  for (int i = -16; i < n; ++i) {
    int64_t t0 = now_ns();
    CUresult r = cuStreamWriteValue64(s, buf, static_cast<cuuint64_t>(i + 16), 0);
    if (i >= 0) ns_out[i] = now_ns() - t0;
    if (r != CUDA_SUCCESS) return 4;
  }
  return 0;
}

extern "C" int cdsa_bench_launches_deep(int depth, int n, int64_t* ns_out) {
  return launches_at_depth(depth, n, ns_out);
}
