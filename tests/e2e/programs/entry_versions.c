/* Entry points asked for at versions newer than the headers cdsa's wrappers come from, on the simulated driver
 * (tests/e2e/test_entry_versions.py runs them; SIM_CUDA_DRIVER_VERSION sets the sim's version, which makes its
 * test-only cuLaunchKernel at 13990 exist, with one more argument than CUDA 13.0's):
 *   future called     a good nll launch on a stream, then a bad one through cuLaunchKernel asked for at 13990,
 *                     then cuCtxSynchronize asked for at 13990 (the same function as at 13000)
 *   future uncalled   the same, but the bad launch goes through the plain cuLaunchKernel (13990's is only asked for)
 *   refused           cuGetProcAddress above the driver's version: what the driver answers, unchanged
 *   hostfunc V        cuLaunchHostFunc asked for at V: from 13010 on the 4-argument cuLaunchHostFunc_v2, called with
 *                     syncMode 1, 0 and 7 (the sim refuses 7: a value cuda.h does not define), else the 3-argument one
 *   multicast V       cuMulticastBindMem and cuMulticastBindAddr asked for at V (from 13010 on, the CUdevice second),
 *                     each bind then undone by a cuMulticastUnbind that must name the same device, offset and size
 * Their own typedefs, not cuda.h's: the program builds against headers of any version. */
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

static int host_calls;
static void on_host(void* data) { host_calls += *(int*)data; }

typedef CUresult (*HostFuncV1)(CUstream, void (*)(void*), void*);
typedef CUresult (*HostFuncV2)(CUstream, void (*)(void*), void*, unsigned int);

static void setup(void) {
  CUdevice dev;
  CUcontext ctx;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

static int case_hostfunc(int version) {
  setup();
  CUstream s;
  check(cuStreamCreate(&s, 0), "cuStreamCreate");
  CUresult r;
  void* fn = proc("cuLaunchHostFunc", version, &r);
  check(r, "cuGetProcAddress(cuLaunchHostFunc)");
  if (!fn) return 1;
  int one = 1;
  printf("cuLaunchHostFunc@%d:", version);
  if (version >= 13010) {
    for (unsigned mode = 0; mode < 3; ++mode) {
      unsigned sync_mode = mode == 2 ? 7 : 1 - mode; /* 1 (CU_HOST_TASK_SPINWAIT), 0 (BLOCKING), 7 (none) */
      r = ((HostFuncV2)fn)(s, on_host, &one, sync_mode);
      check(cuStreamSynchronize(s), "cuStreamSynchronize");
      printf(" syncMode %u -> %d, ran %d;", sync_mode, (int)r, host_calls);
    }
  } else {
    r = ((HostFuncV1)fn)(s, on_host, &one);
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    printf(" 3 arguments -> %d, ran %d;", (int)r, host_calls);
  }
  printf("\n");
  return 0;
}

typedef CUresult (*BindMemV1)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle, size_t, size_t,
                              unsigned long long);
typedef CUresult (*BindMemV2)(CUmemGenericAllocationHandle, CUdevice, size_t, CUmemGenericAllocationHandle, size_t,
                              size_t, unsigned long long);
typedef CUresult (*BindAddrV1)(CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t, unsigned long long);
typedef CUresult (*BindAddrV2)(CUmemGenericAllocationHandle, CUdevice, size_t, CUdeviceptr, size_t, unsigned long long);

static int case_multicast(int version) {
  setup();
  CUmulticastObjectProp mp;
  memset(&mp, 0, sizeof mp);
  mp.numDevices = 1;
  mp.size = (size_t)8 << 20;
  size_t g = 0;
  check(cuMulticastGetGranularity(&g, &mp, CU_MULTICAST_GRANULARITY_MINIMUM), "cuMulticastGetGranularity");
  CUmemGenericAllocationHandle mc, mem;
  check(cuMulticastCreate(&mc, &mp), "cuMulticastCreate");
  check(cuMulticastAddDevice(mc, 0), "cuMulticastAddDevice");
  CUmemAllocationProp ap;
  memset(&ap, 0, sizeof ap);
  ap.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.location.id = 0;
  check(cuMemCreate(&mem, 4 * g, &ap, 0), "cuMemCreate");
  CUdeviceptr p;
  check(cuMemAlloc(&p, g), "cuMemAlloc");
  CUresult r;
  void* bind_mem = proc("cuMulticastBindMem", version, &r);
  check(r, "cuGetProcAddress(cuMulticastBindMem)");
  void* bind_addr = proc("cuMulticastBindAddr", version, &r);
  check(r, "cuGetProcAddress(cuMulticastBindAddr)");
  if (!bind_mem || !bind_addr) return 1;
  CUresult bm, ba;
  if (version >= 13010) {
    bm = ((BindMemV2)bind_mem)(mc, 0, 2 * g, mem, g, g, 0);
    ba = ((BindAddrV2)bind_addr)(mc, 0, 3 * g, p, g, 0);
  } else {
    bm = ((BindMemV1)bind_mem)(mc, 2 * g, mem, g, g, 0);
    ba = ((BindAddrV1)bind_addr)(mc, 3 * g, p, g, 0);
  }
  CUresult um = cuMulticastUnbind(mc, 0, 2 * g, g), ua = cuMulticastUnbind(mc, 0, 3 * g, g);
  printf("cuMulticastBindMem@%d -> %d, unbind -> %d; cuMulticastBindAddr@%d -> %d, unbind -> %d\n", version, (int)bm,
         (int)um, version, (int)ba, (int)ua);
  return 0;
}

int main(int argc, char** argv) {
  const char* c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "future") && argc > 2) return case_future(!strcmp(argv[2], "called"));
  if (!strcmp(c, "refused")) return case_refused();
  if (!strcmp(c, "hostfunc") && argc > 2) return case_hostfunc(atoi(argv[2]));
  if (!strcmp(c, "multicast") && argc > 2) return case_multicast(atoi(argv[2]));
  fprintf(stderr, "usage: %s future called|uncalled | refused | hostfunc V | multicast V\n", argv[0]);
  return 2;
}
