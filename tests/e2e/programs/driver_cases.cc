// End-to-end cases for C++ programs on the simulated driver. Each subcommand is
// one case; tests/e2e/test_native_cases.py runs them under LD_PRELOAD=libcdsa.so.
// Functions named launch_* are noinline so the report can name them.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "sim_program.h"

const e2e::Failure e2e::kFailure{1, false};

namespace {

using e2e::check;
using e2e::fn;
using e2e::nll_args;
using e2e::NllArgs;

void init() { e2e::init_primary(); }

// ---- case: the seed's loss, native frames only ----
__attribute__((noinline)) void launch_loss(CUfunction f, NllArgs& a) {
  check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, a.get(), nullptr), "cuLaunchKernel");  // LAUNCH-SITE
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) CUresult read_loss(NllArgs& a) {
  float v = 0;
  CUresult r = cuMemcpyDtoH(&v, a.out, sizeof v);  // SURFACE-SITE
  asm volatile("" ::: "memory");
  return r;
}

int case_nll(int64_t target) {
  init();
  NllArgs a = nll_args(target);
  launch_loss(fn("nll_loss_forward_reduce_cuda_kernel_2d"), a);
  printf("loss call returned\n");
  fflush(stdout);
  CUresult r = read_loss(a);
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  printf("read_loss: %s\n", name ? name : "?");
  return r == CUDA_SUCCESS ? 0 : 3;
}

// ---- case: the three ways to reach the driver ----
using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);

__attribute__((noinline)) CUresult launch_via_linked(CUfunction f, void** p) {
  return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, p, nullptr);
}

__attribute__((noinline)) CUresult launch_via_dlsym(CUfunction f, void** p) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  auto launch = reinterpret_cast<LaunchFn>(dlsym(h, "cuLaunchKernel"));
  return launch(f, 1, 1, 1, 32, 1, 1, 0, nullptr, p, nullptr);
}

__attribute__((noinline)) CUresult launch_via_proc_address(CUfunction f, void** p) {
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status;
  check(cuGetProcAddress_v2("cuLaunchKernel", &pfn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status),
        "cuGetProcAddress_v2");
  return reinterpret_cast<LaunchFn>(pfn)(f, 1, 1, 1, 32, 1, 1, 0, nullptr, p, nullptr);
}

int case_routes(const char* faulting) {
  init();
  CUfunction fill = fn("fill_f32"), nll = fn("nll_loss_forward_reduce_cuda_kernel_2d");
  CUdeviceptr buf;
  check(cuMemAlloc(&buf, 64), "cuMemAlloc");
  int32_t n = 16;
  float v = 1;
  void* fp[3] = {&buf, &n, &v};
  NllArgs bad = nll_args(10);
  struct {
    const char* name;
    CUresult (*launch)(CUfunction, void**);
  } routes[] = {{"linked", launch_via_linked}, {"dlsym", launch_via_dlsym}, {"proc_address", launch_via_proc_address}};
  for (auto& r : routes) {
    bool fault = faulting && !strcmp(faulting, r.name);
    check(r.launch(fault ? nll : fill, fault ? bad.get() : fp), r.name);
  }
  CUresult r = cuCtxSynchronize();
  printf("synchronize: %d\n", static_cast<int>(r));
  return r == CUDA_SUCCESS ? 0 : 3;
}

// ---- case: C++ exceptions and a forked child that never uses CUDA ----
__attribute__((noinline)) void thrower(int i) {
  if (i % 2) throw std::runtime_error("odd " + std::to_string(i));
  throw i;
}

int count_caught() {
  int caught = 0;
  for (int i = 0; i < 100; ++i) {
    try {
      thrower(i);
    } catch (const std::runtime_error& e) {
      caught += strncmp(e.what(), "odd", 3) == 0;
    } catch (int v) {
      caught += v == i;
    }
  }
  return caught;
}

int case_exceptions_and_fork() {
  int before = count_caught();
  init();
  CUfunction fill = fn("fill_f32");
  CUdeviceptr buf;
  check(cuMemAlloc(&buf, 64), "cuMemAlloc");
  int32_t n = 16;
  float v = 2;
  void* fp[3] = {&buf, &n, &v};
  check(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, fp, nullptr), "cuLaunchKernel");
  int after = count_caught();
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    // Never touches CUDA; exits through exit() so atexit handlers (cdsa's too) run here.
    printf("child caught %d\n", count_caught());
    fflush(stdout);
    exit(7);
  }
  int status = 0;
  waitpid(child, &status, 0);
  float out[2];
  check(cuMemcpyDtoH(out, buf, sizeof out), "cuMemcpyDtoH");
  printf("caught before %d after %d; child exit %d; value %.1f\n", before, after,
         WIFEXITED(status) ? WEXITSTATUS(status) : -1, out[0]);
  return 0;
}

// ---- case: launch and exit without synchronizing ----
int case_no_sync() {
  init();
  NllArgs a = nll_args(10);
  launch_loss(fn("nll_loss_forward_reduce_cuda_kernel_2d"), a);
  printf("exiting without synchronizing\n");
  return 0;
}

// ---- cases: the paths the real CUDA 13 runtime takes ----
// cudart 12+/13 loads with cuLibraryLoadData and launches the CUkernel from
// cuLibraryGetKernel cast to CUfunction; cuBLASLt takes cuKernelGetFunction and
// cuLaunchKernelEx. cudaDeviceSynchronize is the cuCtxSynchronize that
// cuGetProcAddress_v2 returns at version 13000 (cuCtxSynchronize_v2).
CUkernel library_kernel(const char* name) {
  static CUlibrary lib = nullptr;
  if (lib == nullptr)
    check(cuLibraryLoadData(&lib, "fatbin", nullptr, nullptr, 0, nullptr, nullptr, 0), "cuLibraryLoadData");
  CUkernel k;
  check(cuLibraryGetKernel(&k, lib, name), name);
  return k;
}

CUresult synchronize_v2() {
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status;
  check(cuGetProcAddress_v2("cuCtxSynchronize", &pfn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status),
        "cuGetProcAddress_v2(cuCtxSynchronize, 13000)");
  return reinterpret_cast<CUresult (*)(CUcontext)>(pfn)(nullptr);  // SYNC-V2-SITE
}

__attribute__((noinline)) void launch_kernel_handle(CUkernel k, NllArgs& a) {
  auto f = reinterpret_cast<CUfunction>(k);                                         // as cudart 13 passes it
  CUresult r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, a.get(), nullptr);  // KERNEL-SITE
  check(r, "cuLaunchKernel(CUkernel)");
}

CUlaunchConfig one_block() {
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 32, cfg.blockDimY = cfg.blockDimZ = 1;
  return cfg;
}

__attribute__((noinline)) void launch_kernel_handle_ex(CUkernel k, NllArgs& a) {
  CUlaunchConfig cfg = one_block();
  CUresult r = cuLaunchKernelEx(&cfg, reinterpret_cast<CUfunction>(k), a.get(), nullptr);  // KERNEL-EX-SITE
  check(r, "cuLaunchKernelEx(CUkernel)");
}

__attribute__((noinline)) void launch_kernel_function(CUkernel k, NllArgs& a) {
  CUfunction f;
  check(cuKernelGetFunction(&f, k), "cuKernelGetFunction");
  CUlaunchConfig cfg = one_block();
  CUresult r = cuLaunchKernelEx(&cfg, f, a.get(), nullptr);  // FUNCTION-SITE
  check(r, "cuLaunchKernelEx(cuKernelGetFunction)");
}

// Inductor's static launcher: cuModuleLoad of a cubin path, cuModuleGetFunction (a mangled name), cuLaunchKernel.
__attribute__((noinline)) void launch_module_load(NllArgs& a) {
  CUmodule m;
  check(cuModuleLoad(&m, "/proc/self/exe"), "cuModuleLoad");  // the sim loads any readable file
  CUfunction f;
  check(cuModuleGetFunction(&f, m, "_Z38nll_loss_forward_reduce_cuda_kernel_2dPfPKliil"), "cuModuleGetFunction");
  CUresult r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, a.get(), nullptr);  // MODULE-LOAD-SITE
  check(r, "cuLaunchKernel(cuModuleLoad)");
}

// how: launch | launch-ex | get-function | module-load. Faults unless target is -100.
int case_cukernel(const char* how, int64_t target) {
  init();
  NllArgs a = nll_args(target);
  CUkernel k = library_kernel("_Z38nll_loss_forward_reduce_cuda_kernel_2dPfPKliil");
  std::string h = how;
  if (h == "launch")
    launch_kernel_handle(k, a);
  else if (h == "launch-ex")
    launch_kernel_handle_ex(k, a);
  else if (h == "module-load")
    launch_module_load(a);
  else
    launch_kernel_function(k, a);
  CUresult r = synchronize_v2();
  if (r != CUDA_SUCCESS) check(r, "cuCtxSynchronize_v2");  // the program's own error, after the report
  printf("synchronize_v2: ok\n");
  return 0;
}

// ---- case: a module unloaded, its function handle's address reused by another kernel of a new module ----
__attribute__((noinline)) void launch_reloaded(CUfunction f, NllArgs& a) {
  check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, a.get(), nullptr), "cuLaunchKernel");  // RELOAD-SITE
  asm volatile("" ::: "memory");
}

// Loads a module, launches fill_f32 from it (cdsa caches the name by handle), unloads it, then loads the module again
// and takes nll_loss_forward_reduce_cuda_kernel_2d from it, which faults. Prints whether the new handle is the old
// one's address (the allocator gave it back: then a name kept by handle would be the old kernel's).
int case_module_reload(const char* how) {
  init();
  const bool library = std::string(how) == "library";
  CUmodule m = nullptr;
  CUlibrary l = nullptr;
  auto load_and_get = [&](const char* name) {  // a new module (library) and its kernel `name`
    CUfunction f;
    if (library) {
      check(cuLibraryLoadData(&l, "image", nullptr, nullptr, 0, nullptr, nullptr, 0), "cuLibraryLoadData");
      CUkernel k;
      check(cuLibraryGetKernel(&k, l, name), "cuLibraryGetKernel");
      f = reinterpret_cast<CUfunction>(k);
    } else {
      check(cuModuleLoadData(&m, "image"), "cuModuleLoadData");
      check(cuModuleGetFunction(&f, m, name), "cuModuleGetFunction");
    }
    return f;
  };
  CUfunction first = load_and_get("fill_f32");
  CUdeviceptr buf;
  check(cuMemAlloc(&buf, 64), "cuMemAlloc");
  int n = 16;
  float v = 1;
  void* fill_args[] = {&buf, &n, &v};
  check(cuLaunchKernel(first, 1, 1, 1, 32, 1, 1, 0, nullptr, fill_args, nullptr), "cuLaunchKernel (fill)");
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  // Unloaded and loaded again until the allocator hands the old address to the new kernel (a few rounds at most).
  CUfunction second = nullptr;
  for (int round = 0; round < 8 && second != first; ++round) {
    check(library ? cuLibraryUnload(l) : cuModuleUnload(m), "unload");
    second = load_and_get("nll_loss_forward_reduce_cuda_kernel_2d");
  }
  printf("handle reused: %s\n", second == first ? "yes" : "no");
  fflush(stdout);
  NllArgs a = nll_args(10);
  launch_reloaded(second, a);
  CUresult r = cuCtxSynchronize();  // SURFACE-SITE
  return r == CUDA_SUCCESS ? 0 : 3;
}

// Capture into an existing graph (cuStreamBeginCaptureToGraph, as cudart,
// JAX/XLA and PyTorch's conditional nodes do), replay it, then replay it after
// its input went bad.
__attribute__((noinline)) void capture_into(CUgraph graph, CUstream s, NllArgs& a) {
  CUresult r = cuStreamBeginCaptureToGraph(s, graph, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
  check(r, "cuStreamBeginCaptureToGraph");
  CUfunction f = fn("nll_loss_forward_reduce_cuda_kernel_2d");
  r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, a.get(), nullptr);  // GRAPH-CAPTURE-SITE
  check(r, "cuLaunchKernel (capture)");
  CUgraph out;
  check(cuStreamEndCapture(s, &out), "cuStreamEndCapture");
}

__attribute__((noinline)) void replay(CUgraphExec exec, CUstream s) {
  check(cuGraphLaunch(exec, s), "cuGraphLaunch");  // GRAPH-REPLAY-SITE
  asm volatile("" ::: "memory");
}

int case_capture_to_graph() {
  init();
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  NllArgs a = nll_args(5);
  CUgraph graph;
  check(cuGraphCreate(&graph, 0), "cuGraphCreate");
  capture_into(graph, s, a);
  CUgraphExec exec;
  check(cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  check(cuGraphLaunch(exec, s), "cuGraphLaunch (first)");
  check(cuStreamSynchronize(s), "cuStreamSynchronize (first)");
  printf("first replay ok\n");
  fflush(stdout);
  int64_t bad[4] = {3, 7, 10, 1};
  check(cuMemcpyHtoD(a.target, bad, sizeof bad), "cuMemcpyHtoD");
  replay(exec, s);
  CUresult r = synchronize_v2();
  printf("synchronize_v2: %d\n", static_cast<int>(r));
  return r == CUDA_SUCCESS ? 0 : 3;
}

// The fault happens, nothing surfaces it, and the driver is torn down at exit before cdsa's exit probe runs (as
// cudart's own exit handlers may do): this handler is registered after cdsa's, so it runs first, through the
// exported entry point (cdsa's wrapper sees it). Under SIM_CUDA_TEARDOWN_AT_EXIT=1 the simulated driver tears
// itself down instead, by no entry point (a driver's own exit path), and no handler is registered here.
void tear_down_driver() { cuDevicePrimaryCtxReset(0); }

int case_teardown_at_exit(int64_t target) {
  init();
  NllArgs a = nll_args(target);
  // The uploads finished (a synchronous copy may return before its work ran): without a code or the device's text
  // of the fault (a driver torn down unseen prints none), only the marks can name the launch.
  cuCtxSynchronize();
  launch_loss(fn("nll_loss_forward_reduce_cuda_kernel_2d"), a);  // TEARDOWN-LAUNCH-SITE
  usleep(200000);                                                // the kernel faults; no call observes it
  if (!getenv("SIM_CUDA_TEARDOWN_AT_EXIT")) atexit(tear_down_driver);
  printf("exiting; the driver is torn down first\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string c = argc > 1 ? argv[1] : "";
  if (c == "nll") return case_nll(argc > 2 ? atoll(argv[2]) : 10);
  if (c == "routes") return case_routes(argc > 2 ? argv[2] : nullptr);
  if (c == "exceptions-fork") return case_exceptions_and_fork();
  if (c == "no-sync") return case_no_sync();
  if (c == "cukernel" && argc > 2) return case_cukernel(argv[2], argc > 3 ? atoll(argv[3]) : 10);
  if (c == "capture-to-graph") return case_capture_to_graph();
  if (c == "module-reload" && argc > 2) return case_module_reload(argv[2]);
  if (c == "teardown-at-exit") return case_teardown_at_exit(10);
  if (c == "teardown-at-exit-ok") return case_teardown_at_exit(-100);
  fprintf(stderr,
          "usage: %s nll TARGET | routes [linked|dlsym|proc_address] | exceptions-fork | no-sync"
          " | cukernel launch|launch-ex|get-function|module-load [TARGET] | capture-to-graph | module-reload module|library"
          " | teardown-at-exit[-ok]\n",
          argv[0]);
  return 2;
}
