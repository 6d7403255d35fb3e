/* Case 16: a driver-API program (cuModuleLoadData + cuLaunchKernel, no runtime API), built with -g -lcuda.
 * Case 16b (reload): driver_other_kernel is launched from a first module, which is unloaded; the module is loaded
 * again (up to 8 times) and driver_assert_kernel taken from it asserts. Prints "handle reused: yes|no" (whether the
 * driver gave the new kernel the old one's CUfunction address: a name kept by handle would then be the old one's).
 * Usage: driver_api KERNEL.ptx [reload] */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  check("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (argc > 2 && !strcmp(argv[2], "reload")) {
    CUfunction first;
    check("cuModuleGetFunction", cuModuleGetFunction(&first, mod, "driver_other_kernel"));
    int ok = 0;
    void* args[] = {&ok};
    check("cuLaunchKernel (other)", cuLaunchKernel(first, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    check("cuStreamSynchronize", cuStreamSynchronize(s));
    f = NULL;
    for (int round = 0; round < 8 && f != first; ++round) {
      check("cuModuleUnload", cuModuleUnload(mod));
      check("cuModuleLoadData", cuModuleLoadData(&mod, ptx));
      check("cuModuleGetFunction", cuModuleGetFunction(&f, mod, "driver_assert_kernel"));
    }
    printf("handle reused: %s\n", f == first ? "yes" : "no");
    fflush(stdout);
  } else {
    check("cuModuleGetFunction", cuModuleGetFunction(&f, mod, "driver_assert_kernel"));
  }
  launch_via_driver(f, s);
  check("cuStreamSynchronize", cuStreamSynchronize(s));
  printf("no fault?\n");
  return 0;
}
