// GPU suite case 25a (issue 16): a graph built node by node with cuGraphAddKernelNode, replayed, then its node
// changed in the exec with cuGraphExecKernelNodeSetParams to a kernel that asserts; the next replay faults (710).
// cdsa's report must name the asserting kernel, the replay line (REPLAY-LINE) and the line that changed the node
// (UPDATE-LINE), not the kernel the node was made with. Driver API for the graph, nvcc for the kernels; the
// kernels' CUfunctions come from cudaGetFuncBySymbol (as NCCL gets its own).
//
//   nvcc -g -O0 -arch=sm_90 graph_node_update.cu -o graph_update -L$CUDA_HOME/lib64/stubs -lcuda
//   graph_update        # exit 3 after the fault (the program's own message on stdout), 0 if nothing failed
#include <cuda.h>
#include <cuda_runtime.h>

#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

__global__ void fill_kernel(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 1.0f;
}

__global__ void checked_index_kernel(float* out, const int64_t* index, int n, int size) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    assert(index[i] >= 0 && index[i] < size);
    out[i] = static_cast<float>(index[i]);
  }
}

static void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    printf("graph_update: %s failed: %s\n", what, name ? name : "?");
    fflush(stdout);
    exit(3);
  }
}

static CUfunction function_of(const void* symbol) {
  cudaFunction_t f = nullptr;
  if (cudaGetFuncBySymbol(&f, symbol) != cudaSuccess) {
    printf("graph_update: cudaGetFuncBySymbol failed\n");
    exit(2);
  }
  return reinterpret_cast<CUfunction>(f);
}

static CUDA_KERNEL_NODE_PARAMS node_params(CUfunction f, void** args) {
  CUDA_KERNEL_NODE_PARAMS p = {};
  p.func = f;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 32, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  return p;
}

__attribute__((noinline)) static void replay(CUgraphExec exec, CUstream s) {
  check(cuGraphLaunch(exec, s), "cuGraphLaunch");  // REPLAY-LINE
}

__attribute__((noinline)) static void change_node(CUgraphExec exec, CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  check(cuGraphExecKernelNodeSetParams(exec, node, p), "cuGraphExecKernelNodeSetParams");  // UPDATE-LINE
}

int main() {
  if (cudaFree(nullptr) != cudaSuccess) {  // the primary context, current on this thread
    printf("graph_update: no CUDA device\n");
    return 2;
  }
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  float* out = nullptr;
  int64_t* index = nullptr;
  const int64_t bad[4] = {1, 2, 1000, 3};
  if (cudaMalloc(&out, 64 * sizeof(float)) != cudaSuccess || cudaMalloc(&index, sizeof bad) != cudaSuccess ||
      cudaMemcpy(index, bad, sizeof bad, cudaMemcpyHostToDevice) != cudaSuccess) {
    printf("graph_update: allocation failed\n");
    return 2;
  }
  int n = 4, size = 100;
  void* fill_args[] = {&out, &n};
  void* index_args[] = {&out, &index, &n, &size};

  CUgraph graph;
  check(cuGraphCreate(&graph, 0), "cuGraphCreate");
  CUDA_KERNEL_NODE_PARAMS fill = node_params(function_of(reinterpret_cast<const void*>(fill_kernel)), fill_args);
  CUgraphNode node;
  check(cuGraphAddKernelNode(&node, graph, nullptr, 0, &fill), "cuGraphAddKernelNode");  // ADD-LINE
  CUgraphExec exec;
  check(cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
  replay(exec, s);
  check(cuStreamSynchronize(s), "first replay");
  printf("first replay ok\n");
  fflush(stdout);

  CUDA_KERNEL_NODE_PARAMS checked =
      node_params(function_of(reinterpret_cast<const void*>(checked_index_kernel)), index_args);
  change_node(exec, node, &checked);
  replay(exec, s);
  CUresult r = cuStreamSynchronize(s);
  printf("second replay: %d\n", static_cast<int>(r));
  fflush(stdout);
  return r == CUDA_SUCCESS ? 0 : 3;
}
