// A CUDA program as nvcc builds it (with static or shared cudart): its first
// runtime call makes cudart fetch every driver entry point through
// cuGetProcAddress. On the simulated driver cudart stops at cuGetExportTable,
// after its requests; tests/e2e/test_real_runtimes.py checks each request.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void touch(int* p) {
  if (p) *p = 1;
}

int main() {
  int n = -1;
  cudaError_t e = cudaGetDeviceCount(&n);
  printf("cudaGetDeviceCount: %s\n", cudaGetErrorName(e));
  return 0;
}
