// What the e2e C++ programs on the simulated driver share (driver_cases.cc, pdl_cases.cc, report_first.cc,
// graph_nodes.cc): a checked driver call, the primary context with the sim's module, its kernels by name, and the
// NLL kernel's arguments with targets whose third one the test picks (10 or more: the kernel asserts).
//
// Each program says how a failing call ends it, by defining
//   const e2e::Failure e2e::kFailure{EXIT_STATUS, ON_STDOUT};
// EXIT_STATUS is what its tests expect; ON_STDOUT (report_first.cc) prints "program: WHAT failed: CODE" on stdout,
// so a test can hand the program a hostile stderr; otherwise "program: WHAT failed: NAME" goes to stderr.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace e2e {

struct Failure {
  int exit_status;
  bool on_stdout;
};
extern const Failure kFailure;

inline CUmodule g_mod = nullptr;  // the sim's module ("image": it holds every kernel the sim knows)

inline void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  if (kFailure.on_stdout) {
    printf("program: %s failed: %d\n", what, static_cast<int>(r));
    fflush(stdout);
  } else {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    fprintf(stderr, "program: %s failed: %s\n", what, name ? name : "?");
  }
  exit(kFailure.exit_status);
}

// cuInit, device 0's primary context current on this thread, and the module loaded; returns the context.
inline CUcontext init_primary() {
  check(cuInit(0), "cuInit");
  CUdevice dev;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  check(cuModuleLoadData(&g_mod, "image"), "cuModuleLoadData");
  return ctx;
}

inline CUfunction fn(const char* name) {
  CUfunction f;
  check(cuModuleGetFunction(&f, g_mod, name), name);
  return f;
}

// nll_loss_forward_reduce_cuda_kernel_2d's arguments: 4 targets of 10 classes.
struct NllArgs {
  CUdeviceptr out = 0, target = 0;
  int32_t n = 4, n_classes = 10;
  int64_t ignore = -100;
  void* params[5];
  void** get() {
    params[0] = &out, params[1] = &target, params[2] = &n, params[3] = &n_classes, params[4] = &ignore;
    return params;
  }
};

// Device memory holding the targets {3, 7, third, 1}.
inline CUdeviceptr upload_targets(int64_t third) {
  int64_t t[4] = {3, 7, third, 1};
  CUdeviceptr d;
  check(cuMemAlloc(&d, sizeof t), "cuMemAlloc");
  check(cuMemcpyHtoD(d, t, sizeof t), "cuMemcpyHtoD");
  return d;
}

// The output and the targets, both allocated.
inline NllArgs nll_args(int64_t third) {
  NllArgs a;
  check(cuMemAlloc(&a.out, 4), "cuMemAlloc");
  a.target = upload_targets(third);
  return a;
}

}  // namespace e2e
