/* End-to-end cases of the interposition layer on the simulated driver, one per
 * subcommand (tests/e2e/test_interposition.py runs them):
 *   stdio-quiet         a driver call prints through every stdio route, on two threads, and succeeds
 *   stdio-assert        another thread's driver call prints the assert lines; this thread's call
 *                       then returns 710
 *   layers N [fault]    N launches through a second driver layer that resolves libcuda with dlsym
 *   dlsym-all FILE      dlsym(libcuda.so.1, name) for every name in FILE: null, cdsa or driver */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    printf("%s failed: %d\n", what, (int)r);
    exit(1);
  }
}

static CUmodule g_mod;
static void init(void) {
  CUdevice dev;
  CUcontext ctx;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  check(cuModuleLoadData(&g_mod, "image"), "cuModuleLoadData");
}

static void* open_lib(const char* name) {
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("dlopen %s: %s\n", name, dlerror());
    exit(1);
  }
  return h;
}

typedef CUresult (*QueryFn)(CUstream);
typedef CUresult (*SyncFn)(void);
static QueryFn g_query;

static void* query_on_thread(void* stream) {
  CUresult r = g_query((CUstream)stream);
  return (void*)(long)r;
}

static int case_stdio(int with_assert) {
  init();
  void* h = open_lib("libe2e_stdio_driver.so");
  g_query = (QueryFn)dlsym(h, "cuStreamQuery");
  SyncFn sync = (SyncFn)dlsym(h, "cuCtxSynchronize");
  pthread_t t;
  void* rv;
  if (!with_assert) check(g_query(0), "cuStreamQuery on the main thread");
  pthread_create(&t, NULL, query_on_thread, with_assert ? (void*)1 : (void*)0);
  pthread_join(t, &rv);
  check((CUresult)(long)rv, "cuStreamQuery on a thread");
  CUresult r = sync();
  printf("synchronize: %d\n", (int)r);
  return r == CUDA_SUCCESS ? 0 : 3;
}

typedef CUresult (*LaunchFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);

static int case_layers(int n, int fault) {
  init();
  CUfunction fill, nll;
  check(cuModuleGetFunction(&fill, g_mod, "fill_f32"), "fill_f32");
  check(cuModuleGetFunction(&nll, g_mod, "nll_loss_forward_reduce_cuda_kernel_2d"), "nll");
  void* h = open_lib("libe2e_layer_driver.so");
  LaunchFn launch = (LaunchFn)dlsym(h, "cuLaunchKernel");
  int (*forwarded)(void) = (int (*)(void))dlsym(h, "layer_forwarded");
  if (!launch || !forwarded) return 1;
  CUdeviceptr buf, out, target;
  check(cuMemAlloc(&buf, 64), "cuMemAlloc");
  int32_t count = 16;
  float v = 1;
  void* fp[3] = {&buf, &count, &v};
  for (int i = 0; i < n; ++i) check(launch(fill, 1, 1, 1, 32, 1, 1, 0, NULL, fp, NULL), "launch through the layer");
  if (fault) {
    int64_t t[4] = {3, 7, 10, 1};
    int32_t nt = 4, classes = 10;
    int64_t ignore = -100;
    check(cuMemAlloc(&out, 4), "cuMemAlloc");
    check(cuMemAlloc(&target, sizeof t), "cuMemAlloc");
    check(cuMemcpyHtoD(target, t, sizeof t), "cuMemcpyHtoD");
    void* np[5] = {&out, &target, &nt, &classes, &ignore};
    check(launch(nll, 1, 1, 1, 32, 1, 1, 0, NULL, np, NULL), "faulting launch through the layer");
  }
  CUresult r = cuCtxSynchronize();
  printf("forwarded by the layer: %d\nsynchronize: %d\n", forwarded(), (int)r);
  return r == CUDA_SUCCESS ? 0 : 3;
}

static int case_dlsym_all(const char* file) {
  FILE* f = fopen(file, "r");
  if (!f) return 1;
  void* h = open_lib("libcuda.so.1");
  char name[256];
  while (fscanf(f, "%255s", name) == 1) {
    void* p = dlsym(h, name);
    Dl_info info;
    const char* where = "null";
    if (p) where = dladdr(p, &info) && info.dli_fname && strstr(info.dli_fname, "libcdsa") ? "cdsa" : "driver";
    printf("%s %s\n", name, where);
  }
  fclose(f);
  return 0;
}

int main(int argc, char** argv) {
  const char* c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "stdio-quiet")) return case_stdio(0);
  if (!strcmp(c, "stdio-assert")) return case_stdio(1);
  if (!strcmp(c, "layers")) return case_layers(argc > 2 ? atoi(argv[2]) : 3, argc > 3 && !strcmp(argv[3], "fault"));
  if (!strcmp(c, "dlsym-all") && argc > 2) return case_dlsym_all(argv[2]);
  fprintf(stderr, "usage: %s stdio-quiet | stdio-assert | layers N [fault] | dlsym-all FILE\n", argv[0]);
  return 2;
}
