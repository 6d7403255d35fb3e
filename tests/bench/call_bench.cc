// Host cost of a hot non-launch driver call (cuCtxGetCurrent: PyTorch's device
// guards make it, and cuDevicePrimaryCtxGetState, on every operator), through
// the linked symbol and through a cuGetProcAddress pointer, as cudart reaches
// it. Prints "<route> <ns per call>" for the median of several timed batches.
// Run bare and under LD_PRELOAD=libcdsa.so by call_cost.py.
//
// usage: call_bench CALLS [BATCHES]
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

namespace {
inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

template <typename F>
double ns_per_call(F call, long calls, int batches) {
  std::vector<double> per;
  for (int b = 0; b < batches; ++b) {
    int64_t t0 = now_ns();
    for (long i = 0; i < calls; ++i)
      if (call() != CUDA_SUCCESS) exit(4);
    per.push_back(static_cast<double>(now_ns() - t0) / static_cast<double>(calls));
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  long calls = argc > 1 ? atol(argv[1]) : 1000000;
  int batches = argc > 2 ? atoi(argv[2]) : 7;
  CUdevice dev;
  CUcontext ctx, cur;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 2;
  using GetCurrentFn = CUresult (*)(CUcontext*);
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult found;
  if (cuGetProcAddress_v2("cuCtxGetCurrent", &pfn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found) || !pfn) return 3;
  auto via_proc_address = reinterpret_cast<GetCurrentFn>(pfn);
  unsigned flags;
  int active;
  printf("cuCtxGetCurrent(linked) %.1f\n", ns_per_call([&] { return cuCtxGetCurrent(&cur); }, calls, batches));
  printf("cuCtxGetCurrent(cuGetProcAddress) %.1f\n",
         ns_per_call([&] { return via_proc_address(&cur); }, calls, batches));
  printf("cuDevicePrimaryCtxGetState(linked) %.1f\n",
         ns_per_call([&] { return cuDevicePrimaryCtxGetState(dev, &flags, &active); }, calls, batches));
  return 0;
}
