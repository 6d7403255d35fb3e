/* Case 16: a driver-API program (cuModuleLoadData + cuLaunchKernel, no runtime API), built with -g -lcuda.
 * Usage: driver_api KERNEL.ptx */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

static void check(const char* what, CUresult r) {
  if (r != CUDA_SUCCESS) {
    const char* name = "?";
    cuGetErrorName(r, &name);
    printf("%s returned %d %s\n", what, (int)r, name);
    exit(1);
  }
}

static char* read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    perror(path);
    exit(2);
  }
  buf[n] = 0;
  fclose(f);
  return buf;
}

__attribute__((noinline)) static void launch_via_driver(CUfunction f, CUstream s) {
  int bad = 1;
  void* args[] = {&bad};
  check("cuLaunchKernel", cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL)); /* DRIVER-LAUNCH-LINE */
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: driver_api KERNEL.ptx\n");
    return 2;
  }
  char* ptx = read_file(argv[1]);
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction f;
  CUstream s;
  check("cuInit", cuInit(0));
  check("cuDeviceGet", cuDeviceGet(&dev, 0));
  check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
  check("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
  check("cuModuleLoadData", cuModuleLoadData(&mod, ptx));
  check("cuModuleGetFunction", cuModuleGetFunction(&f, mod, "driver_assert_kernel"));
  check("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  launch_via_driver(f, s);
  check("cuStreamSynchronize", cuStreamSynchronize(s));
  printf("no fault?\n");
  return 0;
}
