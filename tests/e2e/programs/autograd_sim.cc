// A stand-in for PyTorch's native frames in the autograd test (tests/e2e/test_seed_cases.py): a forward op
// named like ATen's (at::native::embedding) called from Python, and a backward node named like the generated
// ones (torch::autograd::generated::EmbeddingBackward0::apply) launching from a separate native thread, as the
// autograd engine's device threads do (they have no Python frames).
#include <cuda.h>

#include <thread>

namespace at::native {
__attribute__((noinline)) int embedding(CUfunction index_select, CUdeviceptr out, CUdeviceptr ids, int n, int rows) {
  void* args[] = {&out, &ids, &n, &rows};
  int rc = cuLaunchKernel(index_select, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr);
  asm volatile("" ::: "memory");  // keep this frame (no tail call)
  return rc;
}
}  // namespace at::native

namespace torch::autograd::generated {
struct EmbeddingBackward0 {
  __attribute__((noinline)) int apply(CUfunction kernel);
};
int EmbeddingBackward0::apply(CUfunction kernel) {
  int rc = cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
  asm volatile("" ::: "memory");
  return rc;
}
}  // namespace torch::autograd::generated

extern "C" int forward_embedding(CUfunction index_select, CUdeviceptr out, CUdeviceptr ids, int n, int rows) {
  int rc = at::native::embedding(index_select, out, ids, n, rows);
  asm volatile("" ::: "memory");
  return rc;
}

extern "C" int run_backward_on_engine_thread(CUcontext ctx, CUfunction kernel) {
  int rc = -1;
  std::thread engine([&] {
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return;
    torch::autograd::generated::EmbeddingBackward0 node;
    rc = node.apply(kernel);
  });
  engine.join();
  return rc;
}
