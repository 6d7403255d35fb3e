/* Entry points asked for at versions newer than the headers cdsa's wrappers come from, on the simulated driver
 * (tests/e2e/test_entry_versions.py runs them; SIM_CUDA_DRIVER_VERSION sets the sim's version, which makes its
 * test-only cuLaunchKernel at 13990 exist, with one more argument than CUDA 13.0's):
 *   future called     a good nll launch on a stream, then a bad one through cuLaunchKernel asked for at 13990,
 *                     then cuCtxSynchronize asked for at 13990 (the same function as at 13000)
 *   future uncalled   the same, but the bad launch goes through the plain cuLaunchKernel (13990's is only asked for)
 *   refused           cuGetProcAddress above the driver's version: what the driver answers, unchanged */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    printf("%s failed: %d\n", what, (int)r);
    exit(1);
  }
}

typedef CUresult (*FutureLaunchFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   CUstream, void**, void**, unsigned);
typedef CUresult (*SyncV2Fn)(CUcontext);

static void* proc(const char* name, int version, CUresult* r) {
  void* fn = NULL;
  CUdriverProcAddressQueryResult status;
  *r = cuGetProcAddress(name, &fn, version, 0, &status);
  return fn;
}

static int case_future(int called) {
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction nll;
  CUstream s;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  check(cuModuleLoadData(&mod, "image"), "cuModuleLoadData");
  check(cuModuleGetFunction(&nll, mod, "nll_loss_forward_reduce_cuda_kernel_2d"), "nll");
  check(cuStreamCreate(&s, 0), "cuStreamCreate");
  CUresult r;
  FutureLaunchFn future = (FutureLaunchFn)proc("cuLaunchKernel", 13990, &r);
  check(r, "cuGetProcAddress(cuLaunchKernel, 13990)");
  SyncV2Fn sync = (SyncV2Fn)proc("cuCtxSynchronize", 13990, &r);
  check(r, "cuGetProcAddress(cuCtxSynchronize, 13990)");
  if (!future || !sync) return 1;

  int64_t good[4] = {3, 7, 1, 0}, bad[4] = {3, 7, 10, 1};
  int32_t n = 4, classes = 10;
  int64_t ignore = -100;
  CUdeviceptr out, tgood, tbad;
  check(cuMemAlloc(&out, 4), "cuMemAlloc");
  check(cuMemAlloc(&tgood, sizeof good), "cuMemAlloc");
  check(cuMemAlloc(&tbad, sizeof bad), "cuMemAlloc");
  check(cuMemcpyHtoD(tgood, good, sizeof good), "cuMemcpyHtoD");
  check(cuMemcpyHtoD(tbad, bad, sizeof bad), "cuMemcpyHtoD");
  void* pgood[5] = {&out, &tgood, &n, &classes, &ignore};
  void* pbad[5] = {&out, &tbad, &n, &classes, &ignore};
  check(cuLaunchKernel(nll, 1, 1, 1, 32, 1, 1, 0, s, pgood, NULL), "good launch");
  if (called)
    check(future(nll, 1, 1, 1, 32, 1, 1, 0, s, pbad, NULL, 13990), "bad launch through the 13990 entry point");
  else
    check(cuLaunchKernel(nll, 1, 1, 1, 32, 1, 1, 0, s, pbad, NULL), "bad launch");
  r = sync(NULL);
  printf("synchronize: %d\n", (int)r);
  return r == CUDA_SUCCESS ? 0 : 3;
}

static int case_refused(void) {
  check(cuInit(0), "cuInit");
  CUresult r;
  void* fn = proc("cuLaunchKernel", 13990, &r);
  printf("cuGetProcAddress(cuLaunchKernel, 13990): %d %s\n", (int)r, fn ? "a function" : "NULL");
  return 0;
}

int main(int argc, char** argv) {
  const char* c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "future") && argc > 2) return case_future(!strcmp(argv[2], "called"));
  if (!strcmp(c, "refused")) return case_refused();
  fprintf(stderr, "usage: %s future called|uncalled | refused\n", argv[0]);
  return 2;
}
