// End-to-end cases for programmatic dependent launch (PDL) and for several contexts, on the simulated driver.
// tests/e2e/test_pdl_cases.py runs them under LD_PRELOAD=libcdsa.so, with SIM_CUDA_PDL_LOG naming the sim's count
// of PDL launches that lost their overlap (tests/sim/README.md).
//
//   pdl_cases pairs N            N PDL pairs on one stream (other attributes and `extra` arguments mixed in); exit 0
//   pdl_cases fault secondary|primary|primary-distinct
//                                4 clean pairs, then a pair whose secondary (or primary) asserts, then 2 more pairs;
//                                primary-distinct: the clean pairs' primaries are another kernel than the failing one
//   pdl_cases capture            a launch, then a capture into an existing graph on the same stream: the graph must
//                                hold no memop (the sim refuses to instantiate it then), replayed once
//   pdl_cases two-contexts       a created context keeps a kernel busy while the primary context's kernel faults (700)
// Functions named launch_* are noinline so the report can name them.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sim_program.h"

const e2e::Failure e2e::kFailure{3, false};

namespace {

using e2e::check;
using e2e::fn;
using e2e::NllArgs;
using e2e::upload_targets;

CUcontext init() { return e2e::init_primary(); }

struct Fill {
  CUdeviceptr p = 0;
  int32_t n = 16;
  float v = 1;
  void* params[3];
  void** get() {
    params[0] = &p, params[1] = &n, params[2] = &v;
    return params;
  }
};

CUlaunchConfig config(CUstream s, CUlaunchAttribute* attrs, unsigned n) {
  CUlaunchConfig c{};
  c.gridDimX = c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = 32, c.blockDimY = c.blockDimZ = 1;
  c.hStream = s;
  c.attrs = attrs;
  c.numAttrs = n;
  return c;
}

CUlaunchAttribute pdl_attr() {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.programmaticStreamSerializationAllowed = 1;
  return a;
}

// The primary: a plain launch, sometimes with other attributes (they must pass through untouched).
__attribute__((noinline)) void launch_primary(CUfunction f, void** params, CUstream s, int i) {
  CUlaunchAttribute attrs[2]{};
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attrs[0].value.clusterDim.x = attrs[0].value.clusterDim.y = attrs[0].value.clusterDim.z = 1;
  attrs[1].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
  attrs[1].value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
  CUlaunchConfig c = config(s, attrs, i % 2 ? 2 : 0);
  check(cuLaunchKernelEx(&c, f, params, nullptr), "cuLaunchKernelEx (primary)");  // PRIMARY-SITE
  asm volatile("" ::: "memory");
}

// The secondary: programmatic stream serialization, its arguments in `extra` every other time.
__attribute__((noinline)) void launch_secondary(CUfunction f, void** params, const void* buf, size_t size, CUstream s,
                                                int i) {
  CUlaunchAttribute attrs[1] = {pdl_attr()};
  CUlaunchConfig c = config(s, attrs, 1);
  size_t sz = size;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(buf), CU_LAUNCH_PARAM_BUFFER_SIZE, &sz,
                   CU_LAUNCH_PARAM_END};
  if (i % 2)
    check(cuLaunchKernelEx(&c, f, nullptr, extra), "cuLaunchKernelEx (secondary, extra)");  // SECONDARY-SITE
  else
    check(cuLaunchKernelEx(&c, f, params, nullptr), "cuLaunchKernelEx (secondary)");  // SECONDARY-SITE-2
  asm volatile("" ::: "memory");
}

// The fill kernel's argument buffer, as CU_LAUNCH_PARAM_BUFFER_POINTER wants it (natural alignment).
struct FillBuffer {
  CUdeviceptr p;
  int32_t n;
  float v;
};

int pairs(int n) {
  init();
  CUfunction fill = fn("fill_f32");
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  Fill a, b;
  check(cuMemAlloc(&a.p, 64), "cuMemAlloc");
  check(cuMemAlloc(&b.p, 64), "cuMemAlloc");
  b.v = 2;
  FillBuffer buf{b.p, b.n, b.v};
  CUevent done;
  check(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  for (int i = 0; i < n; ++i) {
    launch_primary(fill, a.get(), s, i);
    launch_secondary(fill, b.get(), &buf, sizeof buf, s, i);
    if (i == n / 2) {
      // A query between pairs (a capture check, as cuBLAS makes): it must not place a mark.
      CUstreamCaptureStatus st;
      check(cuStreamIsCapturing(s, &st), "cuStreamIsCapturing");
    }
  }
  check(cuEventRecord(done, s), "cuEventRecord");
  check(cuEventSynchronize(done), "cuEventSynchronize");
  float got[2] = {0, 0};
  check(cuMemcpyDtoH(&got[0], a.p, 4), "cuMemcpyDtoH");
  check(cuMemcpyDtoH(&got[1], b.p, 4), "cuMemcpyDtoH");
  printf("pairs %d: %.0f %.0f\n", n, got[0], got[1]);
  return 0;
}

int fault(bool in_secondary, bool distinct) {
  init();
  CUfunction fill = fn("fill_f32"), nll = fn("nll_loss_forward_reduce_cuda_kernel_2d");
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  Fill f;
  check(cuMemAlloc(&f.p, 64), "cuMemAlloc");
  FillBuffer fbuf{f.p, f.n, f.v};
  NllArgs good, bad;
  check(cuMemAlloc(&good.out, 4), "cuMemAlloc");
  bad.out = good.out;
  good.target = upload_targets(2);
  bad.target = upload_targets(10);  // outside [0, 10): the kernel asserts
  // In every pair the asserting kernel's place is taken by nll: the clean pairs run it with good targets.
  for (int i = 0; i < 7; ++i) {
    NllArgs& n = i == 4 ? bad : good;
    if (in_secondary) {
      launch_primary(fill, f.get(), s, i);
      launch_secondary(nll, n.get(), nullptr, 0, s, 0);
    } else if (distinct && i != 4) {
      launch_primary(fill, f.get(), s, i);
      launch_secondary(fill, f.get(), &fbuf, sizeof fbuf, s, i);
    } else {
      launch_primary(nll, n.get(), s, i);
      launch_secondary(fill, f.get(), &fbuf, sizeof fbuf, s, i);
    }
  }
  CUresult r = cuStreamSynchronize(s);  // SURFACE-SITE
  printf("sync: %d\n", static_cast<int>(r));
  return r == CUDA_SUCCESS ? 0 : 1;
}

int capture() {
  init();
  CUfunction fill = fn("fill_f32");
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  Fill a;
  check(cuMemAlloc(&a.p, 64), "cuMemAlloc");
  launch_primary(fill, a.get(), s, 0);  // its mark is deferred: it must not land in the graph below
  CUgraph g;
  check(cuGraphCreate(&g, 0), "cuGraphCreate");
  check(cuStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),
        "cuStreamBeginCaptureToGraph");
  a.v = 5;
  launch_primary(fill, a.get(), s, 0);
  CUgraph out;
  check(cuStreamEndCapture(s, &out), "cuStreamEndCapture");
  CUgraphExec exec;
  // The sim refuses (CUDA_ERROR_NOT_SUPPORTED) a graph captured into an existing one that holds a memop node.
  check(cuGraphInstantiateWithFlags(&exec, out, 0), "cuGraphInstantiate");
  check(cuGraphLaunch(exec, s), "cuGraphLaunch");
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  float v = 0;
  check(cuMemcpyDtoH(&v, a.p, 4), "cuMemcpyDtoH");
  printf("replayed: %.0f\n", v);
  return 0;
}

__attribute__((noinline)) void launch_other_context(CUfunction sleep, CUstream s) {
  int64_t us = 300000;
  void* params[] = {&us};
  check(cuLaunchKernel(sleep, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr), "cuLaunchKernel (other context)");  // OTHER-SITE
}

__attribute__((noinline)) void launch_faulting(CUfunction bad, CUstream s) {
  check(cuLaunchKernel(bad, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr), "cuLaunchKernel");  // LAUNCH-SITE
}

int two_contexts() {
  CUcontext primary = init();
  CUcontext other;
  check(cuCtxCreate(&other, nullptr, 0, 0), "cuCtxCreate");  // current on this thread now
  CUmodule mod;
  check(cuModuleLoadData(&mod, "image"), "cuModuleLoadData");
  CUfunction sleep;
  check(cuModuleGetFunction(&sleep, mod, "sleep_us"), "sleep_us");
  CUstream busy;
  check(cuStreamCreate(&busy, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  launch_other_context(sleep, busy);
  check(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  launch_faulting(fn("illegal_address"), s);
  CUresult r = cuCtxSynchronize();  // SURFACE-SITE
  printf("sync: %d\n", static_cast<int>(r));
  return r == CUDA_SUCCESS ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string c = argc > 1 ? argv[1] : "";
  if (c == "pairs") return pairs(argc > 2 ? atoi(argv[2]) : 100);
  if (c == "fault")
    return fault(argc > 2 && strcmp(argv[2], "secondary") == 0, argc > 2 && strcmp(argv[2], "primary-distinct") == 0);
  if (c == "capture") return capture();
  if (c == "two-contexts") return two_contexts();
  fprintf(stderr, "usage: pdl_cases pairs N | fault secondary|primary|primary-distinct | capture | two-contexts\n");
  return 2;
}
