// Completion marks and the verdict on the simulated driver (test_mark_cases.py): the programs of issue 26 that led
// to a wrong certainty, and a small seeded generator of busy-stream programs for the exactness rate.
//
//   mark_cases long-chain plain|ex|pdl
//                                    nll (good targets; through cuLaunchKernel, cuLaunchKernelEx without attributes,
//                                    or as a PDL launch), 100 PDL fill_f32, a PDL nll with bad targets;
//                                    cuStreamSynchronize
//   mark_cases unseen plain|ex|pdl-nosync
//                                    one fill on S1 (cuLaunchKernel, cuLaunchKernelEx, or a PDL launch), then
//                                    cuCtxSynchronize (not for pdl-nosync), then illegal_address on S2 through the
//                                    driver's own cuLaunchKernel, found with libc's dlsym (a launch cdsa cannot see);
//                                    cuCtxSynchronize surfaces it
//   mark_cases replay plain|ex       a captured nll with bad targets replayed on A, after a nll with good targets on B
//                                    (cuLaunchKernel, or cuLaunchKernelEx) that finished first; cuStreamSynchronize(A)
//   mark_cases event-cycles N        N times: retain the primary context, a PDL pair on the NULL stream, sync, release
//   mark_cases event-only            sleep_us, illegal_address (cuLaunchKernelEx), then fill with only a programmatic
//                                    event attribute; cuStreamSynchronize
//   mark_cases busy SEED [settled]   2..4 streams of random fill / good nll launches (some through cuLaunchKernelEx,
//                                    some PDL pairs, some syncs), one nll with bad targets among them, then
//                                    cuCtxSynchronize; prints "FAULTING <global launch number>". settled: the work
//                                    before the failing launch has finished (the driver's own cuStreamQuery, which
//                                    cdsa does not see, says so); else it may still run, and the launches still
//                                    unfinished are rightly candidates too
// Functions named launch_* are noinline so the report can name them.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sim_program.h"

const e2e::Failure e2e::kFailure{3, false};

namespace {

using e2e::check;
using e2e::fn;
using e2e::NllArgs;
using e2e::upload_targets;

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

__attribute__((noinline)) void launch_plain(CUfunction f, void** params, CUstream s) {
  check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr), "cuLaunchKernel");  // PLAIN-SITE
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void launch_ex(CUfunction f, void** params, CUstream s) {
  CUlaunchConfig c = config(s, nullptr, 0);
  check(cuLaunchKernelEx(&c, f, params, nullptr), "cuLaunchKernelEx");  // EX-SITE
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void launch_pdl(CUfunction f, void** params, CUstream s) {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig c = config(s, &a, 1);
  check(cuLaunchKernelEx(&c, f, params, nullptr), "cuLaunchKernelEx (PDL)");  // PDL-SITE
  asm volatile("" ::: "memory");
}

// A launch with only a programmatic event: it records `ev` for others to wait on, and is no PDL secondary.
__attribute__((noinline)) void launch_with_programmatic_event(CUfunction f, void** params, CUstream s, CUevent ev) {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
  a.value.programmaticEvent.event = ev;
  CUlaunchConfig c = config(s, &a, 1);
  check(cuLaunchKernelEx(&c, f, params, nullptr), "cuLaunchKernelEx (programmatic event)");  // EVENT-SITE
  asm volatile("" ::: "memory");
}

CUstream new_stream() {
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return s;
}

int long_chain(const std::string& how) {
  e2e::init_primary();
  CUfunction fill = fn("fill_f32"), nll = fn("nll_loss_forward_reduce_cuda_kernel_2d");
  CUstream s = new_stream();
  Fill f;
  check(cuMemAlloc(&f.p, 64), "cuMemAlloc");
  NllArgs good, bad;
  check(cuMemAlloc(&good.out, 4), "cuMemAlloc");
  bad.out = good.out;
  good.target = upload_targets(2);
  bad.target = upload_targets(10);  // outside [0, 10): the kernel asserts
  if (how == "ex")
    launch_ex(nll, good.get(), s);
  else if (how == "pdl")
    launch_pdl(nll, good.get(), s);
  else
    launch_plain(nll, good.get(), s);
  for (int i = 0; i < 100; ++i) launch_pdl(fill, f.get(), s);
  launch_pdl(nll, bad.get(), s);  // BAD-SITE
  CUresult r = cuStreamSynchronize(s);
  printf("sync: %d\n", static_cast<int>(r));
  return r == CUDA_SUCCESS ? 0 : 1;
}

// The driver's own cuLaunchKernel, found with libc's dlsym (libcdsa.so hooks dlsym; through it the lookup would
// return cdsa's wrapper): a launch through it is one cdsa never sees.
using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
void* unseen(const char* name) {
  void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  auto libc_dlsym =
      reinterpret_cast<void* (*)(void*, const char*)>(libc ? dlvsym(libc, "dlsym", "GLIBC_2.34") : nullptr);
  if (!libc_dlsym && libc)
    libc_dlsym = reinterpret_cast<void* (*)(void*, const char*)>(dlvsym(libc, "dlsym", "GLIBC_2.2.5"));
  void* cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  void* p = libc_dlsym && cuda ? libc_dlsym(cuda, name) : nullptr;
  if (!p) {
    fprintf(stderr, "program: the driver's own %s not found\n", name);
    exit(2);
  }
  return p;
}
LaunchFn unseen_launch() { return reinterpret_cast<LaunchFn>(unseen("cuLaunchKernel")); }

int unseen_fault(const std::string& how) {
  e2e::init_primary();
  CUfunction fill = fn("fill_f32"), illegal = fn("illegal_address");
  LaunchFn raw = unseen_launch();
  CUstream s1 = new_stream(), s2 = new_stream();
  Fill f;
  check(cuMemAlloc(&f.p, 64), "cuMemAlloc");
  if (how == "plain")
    launch_plain(fill, f.get(), s1);
  else if (how == "pdl-nosync")
    launch_pdl(fill, f.get(), s1);
  else
    launch_ex(fill, f.get(), s1);
  if (how != "pdl-nosync")
    check(cuCtxSynchronize(), "cuCtxSynchronize");
  else
    usleep(100000);  // the fill finishes long before the fault; nothing says so
  check(raw(illegal, 1, 1, 1, 1, 1, 1, 0, s2, nullptr, nullptr), "the driver's own cuLaunchKernel");
  // The fault happens before cdsa's next chance to ask whether S1 is done (a query then meets the dead context).
  usleep(100000);
  CUresult r = cuCtxSynchronize();  // SURFACE-SITE
  printf("sync: %d\n", static_cast<int>(r));
  return r == CUDA_SUCCESS ? 0 : 1;
}

int replay(bool ex) {
  e2e::init_primary();
  CUfunction nll = fn("nll_loss_forward_reduce_cuda_kernel_2d");
  CUstream a = new_stream(), b = new_stream();
  NllArgs good, bad;
  check(cuMemAlloc(&good.out, 4), "cuMemAlloc");
  check(cuMemAlloc(&bad.out, 4), "cuMemAlloc");
  good.target = upload_targets(2);
  bad.target = upload_targets(10);
  check(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  launch_plain(nll, bad.get(), a);  // CAPTURE-SITE
  CUgraph g;
  check(cuStreamEndCapture(a, &g), "cuStreamEndCapture");
  CUgraphExec exec;
  check(cuGraphInstantiateWithFlags(&exec, g, 0), "cuGraphInstantiate");
  if (ex)
    launch_ex(nll, good.get(), b);  // B-SITE
  else
    launch_plain(nll, good.get(), b);
  usleep(100000);                                  // B's launch finishes long before the replay
  check(cuGraphLaunch(exec, a), "cuGraphLaunch");  // REPLAY-SITE
  CUresult r = cuStreamSynchronize(a);
  printf("sync: %d\n", static_cast<int>(r));
  return r == CUDA_SUCCESS ? 0 : 1;
}

int event_cycles(int n) {
  check(cuInit(0), "cuInit");
  CUdevice dev;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  Fill f;
  for (int i = 0; i < n; ++i) {
    CUcontext ctx;
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    // The last release frees the context's modules and memory: each cycle loads and allocates anew.
    check(cuModuleLoadData(&e2e::g_mod, "image"), "cuModuleLoadData");
    CUfunction fill = fn("fill_f32");
    check(cuMemAlloc(&f.p, 64), "cuMemAlloc");
    launch_ex(fill, f.get(), nullptr);
    launch_pdl(fill, f.get(), nullptr);
    check(cuStreamSynchronize(nullptr), "cuStreamSynchronize");  // the pair's mark goes out behind its event wait
    check(cuMemFree(f.p), "cuMemFree");
    check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
  }
  printf("cycles: %d\n", n);
  return 0;
}

int event_only() {
  e2e::init_primary();
  CUfunction sleep = fn("sleep_us"), illegal = fn("illegal_address"), fill = fn("fill_f32");
  CUstream s = new_stream();
  CUevent ev;
  check(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  Fill f;
  check(cuMemAlloc(&f.p, 64), "cuMemAlloc");
  int64_t us = 200000;
  void* sleep_params[] = {&us};
  launch_plain(sleep, sleep_params, s);  // keeps the stream busy until both launches below are queued
  launch_ex(illegal, nullptr, s);        // ILLEGAL-SITE
  launch_with_programmatic_event(fill, f.get(), s, ev);
  CUresult r = cuStreamSynchronize(s);
  printf("sync: %d\n", static_cast<int>(r));
  return r == CUDA_SUCCESS ? 0 : 1;
}

// A seeded busy program: several streams, one faulting nll among good ones. The failing launch's global number
// is printed first (the launches are counted as cdsa numbers them: one per successful launch call).
int busy(unsigned seed, bool settled) {
  e2e::init_primary();
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  CUfunction fill = fn("fill_f32"), nll = fn("nll_loss_forward_reduce_cuda_kernel_2d");
  const int nstreams = 2 + pick(3);
  std::vector<CUstream> streams;
  for (int i = 0; i < nstreams; ++i) streams.push_back(new_stream());
  std::vector<Fill> fills(static_cast<size_t>(nstreams));
  for (auto& f : fills) check(cuMemAlloc(&f.p, 64), "cuMemAlloc");
  // Each stream's kernels write their own output (the sim runs streams on threads of their own).
  std::vector<NllArgs> goods(static_cast<size_t>(nstreams));
  const CUdeviceptr targets = upload_targets(2);
  for (auto& g : goods) {
    check(cuMemAlloc(&g.out, 4), "cuMemAlloc");
    g.target = targets;
  }
  NllArgs bad;
  check(cuMemAlloc(&bad.out, 4), "cuMemAlloc");
  bad.target = upload_targets(10);
  const int total = 6 + pick(20), faulting = total - 1 - pick(3);
  const bool pdl_stream = pick(3) == 0;  // stream 0 carries PDL pairs
  uint64_t seq = 0, fault_seq = 0;
  for (int i = 0; i < total; ++i) {
    const int si = pick(nstreams);
    CUstream s = streams[static_cast<size_t>(si)];
    if (i == faulting) {
      if (settled) {
        // Every earlier launch finishes, as the driver's own cuStreamQuery (which cdsa does not see) says; cdsa must
        // tell that from its marks and its own queries.
        auto query = reinterpret_cast<CUresult (*)(CUstream)>(unseen("cuStreamQuery"));
        for (CUstream q : streams)
          for (int t = 0; t < 100000 && query(q) == CUDA_ERROR_NOT_READY; ++t) usleep(100);
        usleep(1000);
      }
      launch_plain(nll, bad.get(), s);  // FAULT-SITE
      fault_seq = ++seq;
      break;  // the fault may come at once: later launches could meet it
    }
    const int what = pick(10);
    if (pdl_stream && si == 0 && what < 3) {
      launch_ex(fill, fills[0].get(), s);
      launch_pdl(fill, fills[0].get(), s);
      seq += 2;
    } else if (what < 4) {
      launch_plain(nll, goods[static_cast<size_t>(si)].get(), s);
      ++seq;
    } else if (what < 6) {
      launch_ex(nll, goods[static_cast<size_t>(si)].get(), s);
      ++seq;
    } else if (what < 9) {
      launch_plain(fill, fills[static_cast<size_t>(si)].get(), s);
      ++seq;
    } else {
      check(cuStreamSynchronize(s), "cuStreamSynchronize");
    }
    if (pick(4) == 0) usleep(2000);  // the work so far finishes
  }
  printf("FAULTING %llu\n", static_cast<unsigned long long>(fault_seq));
  fflush(stdout);
  usleep(20000);
  CUresult r = cuCtxSynchronize();
  printf("sync: %d\n", static_cast<int>(r));
  return r == CUDA_SUCCESS ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string c = argc > 1 ? argv[1] : "", arg = argc > 2 ? argv[2] : "";
  if (c == "long-chain") return long_chain(arg);
  if (c == "unseen") return unseen_fault(arg);
  if (c == "replay") return replay(arg == "ex");
  if (c == "event-cycles") return event_cycles(arg.empty() ? 1000 : atoi(arg.c_str()));
  if (c == "event-only") return event_only();
  if (c == "busy")
    return busy(static_cast<unsigned>(strtoul(arg.c_str(), nullptr, 10)), argc > 3 && strcmp(argv[3], "settled") == 0);
  fprintf(stderr,
          "usage: mark_cases long-chain plain|ex|pdl | unseen plain|ex|pdl-nosync | replay plain|ex | event-cycles N | "
          "event-only | busy SEED [settled]\n");
  return 2;
}
