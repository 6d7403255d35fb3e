// GPU suite case 25c (issue 16, info): GPU coredumps enabled through the driver API, then a kernel that faults
// with an illegal address (700). Records what the driver prints or logs (does it name the kernel?), whether the
// process survives, how long the fault takes to surface, and whether the 13.2 coredump callbacks exist and fire.
// Record only: nothing in cdsa depends on it.
//
//   nvcc -g -O0 -arch=sm_90 coredump.cu -o coredump -L$CUDA_HOME/lib64/stubs -lcuda
//   coredump DIR        the dump (if any) goes to DIR/core.cuda; its size is capped by RLIMIT_FSIZE (64 MiB,
//                       SIGXFSZ ignored), the generation flags ask for a lightweight dump of the faulted context
//                       only, logged only where the driver knows LOG_ONLY, and without abort()
// stdout, one fact a line: "coredump-flags ...", "coredump-callbacks start yes|no complete yes|no",
// "coredump-log <driver log line>", "coredump-callback start|complete ms T", "coredump-fault sync R ms T",
// "coredump-file bytes N", "coredump-survived yes". Exit 0 when it survived to the end.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

__global__ void illegal_address_kernel(int* p) { *reinterpret_cast<volatile int*>(p) = 1; }  // FAULT-KERNEL

// 13.2's generation flags the 13.0 headers lack (issue 16 (c)).
constexpr unsigned kFaultedContextsOnly = 1u << 7;
constexpr unsigned kLogOnly = 1u << 31;

// cuda.h 13.2: typedef void (CUDA_CB *CUcoredumpStatusCallback)(void* userData, int pid, CUdevice dev);
// CUresult cuCoredumpRegisterStartCallback(CUcoredumpStatusCallback, void* userData, CUcoredumpCallbackHandle* out);
using StatusCallback = void (*)(void* user, int pid, CUdevice dev);
using RegisterCallback = CUresult (*)(StatusCallback, void*, void**);

std::chrono::steady_clock::time_point g_t0;
std::atomic<long> g_start_us{-1}, g_complete_us{-1};

long since_us() {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - g_t0).count());
}

void on_start(void*, int, CUdevice) { g_start_us = since_us(); }
void on_complete(void*, int, CUdevice) { g_complete_us = since_us(); }

void on_log(void*, CUlogLevel level, char* message, size_t length) {
  std::string m(message, length);
  while (!m.empty() && (m.back() == '\n' || m.back() == '\r')) m.pop_back();
  printf("coredump-log level %d: %s\n", static_cast<int>(level), m.c_str());
}

const char* err_name(CUresult r) {
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  return name ? name : "?";
}

bool set_flags(unsigned flags) {
  size_t size = sizeof(int);
  int v = static_cast<int>(flags);
  return cuCoredumpSetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &v, &size) == CUDA_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string dir = argc > 1 ? argv[1] : ".";
  // The dump cannot fill the disk: files of this process stop at 64 MiB (the write fails instead of killing it).
  signal(SIGXFSZ, SIG_IGN);
  rlimit cap{64ull << 20, 64ull << 20};
  setrlimit(RLIMIT_FSIZE, &cap);
  if (cuInit(0) != CUDA_SUCCESS) {
    printf("coredump: no device\n");
    return 2;
  }
  CUlogsCallbackHandle log_handle = nullptr;
  CUresult lr = cuLogsRegisterCallback(on_log, nullptr, &log_handle);
  printf("coredump-logs-callback %s\n", err_name(lr));

  // Before any context: the global settings apply to contexts made after them.
  bool on = true;
  size_t bsize = sizeof on;
  CUresult er = cuCoredumpSetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &on, &bsize);
  const std::string file = dir + "/core.cuda";
  size_t fsize = file.size() + 1;
  CUresult fr = cuCoredumpSetAttributeGlobal(CU_COREDUMP_FILE, const_cast<char*>(file.c_str()), &fsize);
  const unsigned base = CU_COREDUMP_LIGHTWEIGHT_FLAGS | CU_COREDUMP_SKIP_ABORT;
  const char* accepted = "none";
  if (set_flags(base | kFaultedContextsOnly | kLogOnly))
    accepted = "lightweight+skip_abort+faulted_contexts_only+log_only";
  else if (set_flags(base | kFaultedContextsOnly))
    accepted = "lightweight+skip_abort+faulted_contexts_only";
  else if (set_flags(base))
    accepted = "lightweight+skip_abort";
  printf("coredump-flags enable %s file %s generation %s\n", err_name(er), err_name(fr), accepted);

  // The 13.2 callbacks, through cuGetProcAddress (the 13.0 headers lack them).
  void* start_fn = nullptr;
  void* complete_fn = nullptr;
  CUdriverProcAddressQueryResult q1{}, q2{};
  cuGetProcAddress("cuCoredumpRegisterStartCallback", &start_fn, 13020, CU_GET_PROC_ADDRESS_DEFAULT, &q1);
  cuGetProcAddress("cuCoredumpRegisterCompleteCallback", &complete_fn, 13020, CU_GET_PROC_ADDRESS_DEFAULT, &q2);
  void* h1 = nullptr;
  void* h2 = nullptr;
  CUresult r1 = start_fn ? reinterpret_cast<RegisterCallback>(start_fn)(on_start, nullptr, &h1) : CUDA_ERROR_NOT_FOUND;
  CUresult r2 =
      complete_fn ? reinterpret_cast<RegisterCallback>(complete_fn)(on_complete, nullptr, &h2) : CUDA_ERROR_NOT_FOUND;
  printf("coredump-callbacks start %s (%s) complete %s (%s)\n", start_fn ? "yes" : "no", err_name(r1),
         complete_fn ? "yes" : "no", err_name(r2));

  CUdevice dev;
  CUcontext ctx;
  if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    printf("coredump: no context\n");
    return 2;
  }
  cudaFunction_t f = nullptr;
  if (cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(illegal_address_kernel)) != cudaSuccess) {
    printf("coredump: cudaGetFuncBySymbol failed\n");
    return 2;
  }
  int* bad = reinterpret_cast<int*>(0x10);
  void* args[] = {&bad};
  g_t0 = std::chrono::steady_clock::now();
  CUresult lr2 = cuLaunchKernel(reinterpret_cast<CUfunction>(f), 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr);  // LAUNCH-LINE
  CUresult sr = cuCtxSynchronize();
  printf("coredump-fault launch %s sync %s ms %.1f\n", err_name(lr2), err_name(sr), since_us() / 1000.0);
  if (g_start_us >= 0) printf("coredump-callback start ms %.1f\n", g_start_us / 1000.0);
  if (g_complete_us >= 0) printf("coredump-callback complete ms %.1f\n", g_complete_us / 1000.0);
  struct stat st{};
  if (stat(file.c_str(), &st) == 0)
    printf("coredump-file bytes %lld\n", static_cast<long long>(st.st_size));
  else
    printf("coredump-file none\n");
  printf("coredump-survived yes\n");
  return 0;
}
