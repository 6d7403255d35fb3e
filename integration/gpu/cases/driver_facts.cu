// Case 23 (issue 7): facts about the real CUDA 13 driver, as a <<<>>> program built by nvcc (static cudart).
// Usage: driver_facts MODE
//   attr           prints "attr 122 V rc R" (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) and the result of one
//                  cuStreamWriteValue32 and one cuStreamWriteValue64 into registered host memory
//   assert-thread  an asserting kernel; a helper thread synchronizes the device first, then the main thread; prints
//                  "main tid T" / "helper tid T" (fact_logger.so says which thread and function print the text)
//   names          launches named_kernel with <<<>>>; prints the handles cudaGetKernel and cudaGetFuncBySymbol give
//                  (fact_logger.so logs the handle cudart passes to cuLaunchKernel and what cuFuncGetName and
//                  cuKernelGetName answer for it)
//   capture-if     cudaStreamBeginCaptureToGraph (cuStreamBeginCaptureToGraph) into the body of an IF conditional
//                  node, a kernel captured there, instantiate, launch; prints the return codes and whether the body ran
//   exit-nosync    an asserting kernel, then return from main without any synchronize
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cassert>
#include <cstdio>
#include <cstring>
#include <thread>

#include "host_page.h"

__global__ void named_kernel(int* p) {
  if (p) p[threadIdx.x] += 1;
}
__global__ void body_kernel(int* p) { atomicAdd(p, 1); }
__global__ void facts_assert_kernel(int bad) { assert(bad == 0); }

static long tid() { return (long)syscall(SYS_gettid); }

static int attr() {
  cudaFree(0);
  CUdevice dev;
  cuCtxGetDevice(&dev);
  int v = -1;
  CUresult r = cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev);
  printf("attr 122 %d rc %d\n", v, (int)r);
  void* page = nullptr;
  CUdeviceptr d = 0;
  r = registered_host_page(&page, &d);
  if (r != CUDA_SUCCESS) {
    printf("host register rc %d\n", (int)r);
    return 1;
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  CUresult r32 = cuStreamWriteValue32((CUstream)s, d, 7, 0);
  CUresult r64 = cuStreamWriteValue64((CUstream)s, d + 8, 9, 0);
  cudaStreamSynchronize(s);
  printf("memop32 rc %d value %u\nmemop64 rc %d value %llu\n", (int)r32, ((volatile unsigned*)page)[0], (int)r64,
         ((volatile unsigned long long*)page)[1]);
  return 0;
}

static int assert_thread() {
  cudaFree(0);
  printf("main tid %ld\n", tid());
  fflush(stdout);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  facts_assert_kernel<<<1, 32, 0, s>>>(1);
  cudaError_t eh = cudaSuccess;
  std::thread helper([&] {
    printf("helper tid %ld\n", tid());
    fflush(stdout);
    eh = cudaDeviceSynchronize();
  });
  helper.join();
  cudaError_t em = cudaStreamSynchronize(s);
  printf("helper sync %d, main sync %d\n", (int)eh, (int)em);
  return 0;
}

static int names() {
  cudaFree(0);
  cudaKernel_t k = nullptr;
  cudaFunction_t f = nullptr;
  cudaError_t ek = cudaGetKernel(&k, named_kernel);
  cudaError_t ef = cudaGetFuncBySymbol(&f, (const void*)named_kernel);
  named_kernel<<<1, 32>>>(nullptr);
  cudaError_t es = cudaDeviceSynchronize();
  printf("cudaGetKernel %p rc %d\ncudaGetFuncBySymbol %p rc %d\nsync %d\n", (void*)k, (int)ek, (void*)f, (int)ef,
         (int)es);
  return 0;
}

static int capture_if() {
  cudaFree(0);
  int* counter = nullptr;
  cudaMalloc(&counter, sizeof(int));
  cudaMemset(counter, 0, sizeof(int));
  cudaGraph_t graph;
  cudaGraphCreate(&graph, 0);
  cudaGraphConditionalHandle handle;
  cudaError_t e = cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault);
  // cudaGraphNodeParams has a deleted default constructor in C++ (a union of non-trivial members): zeroed storage.
  alignas(cudaGraphNodeParams) static unsigned char storage[sizeof(cudaGraphNodeParams)];
  cudaGraphNodeParams& params = *reinterpret_cast<cudaGraphNodeParams*>(storage);
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = handle;
  params.conditional.type = cudaGraphCondTypeIf;
  params.conditional.size = 1;
  cudaGraphNode_t node;
  if (e == cudaSuccess) e = cudaGraphAddNode(&node, graph, nullptr, nullptr, 0, &params);
  if (e != cudaSuccess) {
    printf("capture-if setup failed: %d %s\n", (int)e, cudaGetErrorName(e));
    return 1;
  }
  cudaGraph_t body = params.conditional.phGraph_out[0];
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaError_t eb = cudaStreamBeginCaptureToGraph(s, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal);
  body_kernel<<<1, 1, 0, s>>>(counter);
  cudaGraph_t captured = nullptr;
  cudaError_t ee = cudaStreamEndCapture(s, &captured);
  cudaGraphExec_t exec = nullptr;
  cudaError_t ei = cudaGraphInstantiate(&exec, graph, 0);
  cudaError_t el = ei == cudaSuccess ? cudaGraphLaunch(exec, s) : ei;
  cudaStreamSynchronize(s);
  int ran = -1;
  cudaMemcpy(&ran, counter, sizeof ran, cudaMemcpyDeviceToHost);
  printf("capture-if begin %d end %d instantiate %d launch %d body_ran %d\n", (int)eb, (int)ee, (int)ei, (int)el, ran);
  return ei == cudaSuccess && ran == 1 ? 0 : 1;
}

__attribute__((noinline)) static void launch_and_leave(cudaStream_t s) {
  facts_assert_kernel<<<1, 32, 0, s>>>(1);  // NOSYNC-LINE
}

static int exit_nosync() {
  cudaFree(0);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  launch_and_leave(s);
  printf("exiting without a synchronize\n");
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "attr")) return attr();
  if (!strcmp(mode, "assert-thread")) return assert_thread();
  if (!strcmp(mode, "names")) return names();
  if (!strcmp(mode, "capture-if")) return capture_if();
  if (!strcmp(mode, "exit-nosync")) return exit_nosync();
  fprintf(stderr, "usage: driver_facts attr|assert-thread|names|capture-if|exit-nosync\n");
  return 2;
}
