// Cases 14, 15, 17, 20, 21: a CUDA 13 program launching with <<<>>> (built by nvcc with the default static cudart,
// and again with -cudart shared, both -g). Usage: native_faults MODE [N]
//   assert       5 good launches, an asserting kernel (launch #6), 14 more, then a synchronize: 710
//   illegal      the same with an illegal-address kernel: 700
//   count N      N good launches, no fault (does every <<<>>> reach cdsa's wrapped driver entry points?)
//   launches N   N tiny launches, timed: prints "elapsed_s <seconds>" (launch-bound cost)
//   memop-cost   host and GPU time per tiny launch, alone and followed by one cuStreamWriteValue64 into
//                registered host memory (cdsa's breadcrumb), as the gpu-probe measures it
#include <cuda.h>
#include <cuda_runtime.h>
#include <cassert>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "host_page.h"

__global__ void ok_kernel(int* p) {
  if (p) p[threadIdx.x] += 1;
}
__global__ void assert_kernel(int bad) { assert(bad == 0); }
// Address 0x10 (the null page) can be no host mapping's address under unified addressing, so the write always
// faults (an offset from p might land in some mapping). p stays a parameter: the launch line is what is checked.
__global__ void illegal_kernel(int* p) { *(volatile int*)(p ? 0x10 : 0x20) = 1; }

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

__attribute__((noinline)) void launch_bad(cudaStream_t s) {
  assert_kernel<<<1, 32, 0, s>>>(1);  // LAUNCH-LINE
}

__attribute__((noinline)) void launch_illegal(cudaStream_t s, int* buf) {
  illegal_kernel<<<1, 1, 0, s>>>(buf);  // ILLEGAL-LINE
}

static int fault_case(bool assert_mode) {
  int* buf = nullptr;
  cudaMalloc(&buf, 1024 * sizeof(int));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  for (int i = 0; i < 5; ++i) ok_kernel<<<1, 32, 0, s>>>(buf);
  if (assert_mode)
    launch_bad(s);
  else
    launch_illegal(s, buf);
  for (int i = 0; i < 14; ++i) ok_kernel<<<1, 32, 0, s>>>(buf);
  cudaError_t e = cudaStreamSynchronize(s);  // SYNC-LINE
  printf("synchronize returned %d %s\n", (int)e, cudaGetErrorName(e));
  return e == cudaSuccess ? 0 : 1;
}

static int memop_cost() {
  cudaFree(0);
  void* page = nullptr;
  CUdeviceptr dslot = 0;
  CUresult r = registered_host_page(&page, &dslot);
  if (r != CUDA_SUCCESS) {
    printf("memop-cost: host register failed: %d\n", (int)r);
    return 1;
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int n = 100000;
  for (int with = 0; with < 2; ++with) {
    for (int i = 0; i < 2000; ++i) {
      ok_kernel<<<1, 32, 0, s>>>(nullptr);
      if (with) cuStreamWriteValue64((CUstream)s, dslot, i, 0);
    }
    cudaStreamSynchronize(s);
    double t0 = now_s();
    cudaEventRecord(e0, s);
    for (int i = 0; i < n; ++i) {
      ok_kernel<<<1, 32, 0, s>>>(nullptr);
      if (with) cuStreamWriteValue64((CUstream)s, dslot, i, 0);
    }
    cudaEventRecord(e1, s);
    double t1 = now_s();
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    printf("memop-cost %s host_us %.3f gpu_us %.3f\n", with ? "launch+memop" : "launch", (t1 - t0) * 1e6 / n,
           ms * 1000.0 / n);
  }
  printf("memop-cost slot %llu (expect %d)\n", (unsigned long long)*(volatile unsigned long long*)page, n - 1);
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "assert";
  long n = argc > 2 ? atol(argv[2]) : 1000;
  if (!strcmp(mode, "assert")) return fault_case(true);
  if (!strcmp(mode, "illegal")) return fault_case(false);
  if (!strcmp(mode, "memop-cost")) return memop_cost();
  if (!strcmp(mode, "count") || !strcmp(mode, "launches")) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    ok_kernel<<<1, 32, 0, s>>>(nullptr);  // warm-up (module load), not counted in the timing
    cudaStreamSynchronize(s);
    double t0 = now_s();
    for (long i = 1; i < n; ++i) ok_kernel<<<1, 32, 0, s>>>(nullptr);
    cudaError_t e = cudaStreamSynchronize(s);
    printf("launched %ld elapsed_s %.6f status %d\n", n, now_s() - t0, (int)e);
    return e == cudaSuccess ? 0 : 1;
  }
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
