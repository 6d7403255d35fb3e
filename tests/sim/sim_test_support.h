// What the simulated driver's unit test (sim_test: sim_*_test.cc, one file per area of the sim, and
// sim_test_main.cc) shares: the kernels' launch helpers, the child-process checks, the in-process fixture.
//
// Faults are sticky for the whole process, so every scenario that faults (or
// that needs a process where cuInit was never called, or that exercises exit)
// runs in a child process through a gtest death test (threadsafe style:
// the child re-executes this binary) and reports back through its exit code
// and stderr.

#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern "C" void sim_test_call_at_late_fini(void (*cb)());  // late_fini_helper.cc

namespace sim_test {

using Clock = std::chrono::steady_clock;

inline const char* kNllLine =
    "Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [3,0,0] Assertion "
    "`t >= 0 && t < n_classes` failed.\n";

inline std::string index_line(int i) {
  return "Indexing.cu:1231: indexSelectSmallIndex: block: [0,0,0], thread: [" + std::to_string(i) +
         ",0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n";
}

// ---- kernels -------------------------------------------------------------

struct Kernels {
  CUmodule mod = nullptr;
  CUfunction nll = nullptr, index = nullptr, illegal = nullptr, sleep = nullptr, fill = nullptr;
};

// A module loaded in the calling thread's current context, and its functions.
inline CUresult load_kernels(Kernels& k) {
  CUresult r;
  static const char image[] = "any image";
  if ((r = cuModuleLoadData(&k.mod, image)) != CUDA_SUCCESS) return r;
  const std::pair<CUfunction*, const char*> fns[] = {
      {&k.nll, "nll_loss_forward_reduce_cuda_kernel_2d"},
      {&k.index, "indexSelectSmallIndex"},
      {&k.illegal, "illegal_address"},
      {&k.sleep, "sleep_us"},
      {&k.fill, "fill_f32"},
  };
  for (auto& [f, name] : fns)
    if ((r = cuModuleGetFunction(f, k.mod, name)) != CUDA_SUCCESS) return r;
  return CUDA_SUCCESS;
}

// cuInit + primary context current on this thread + module + functions.
inline CUresult setup(Kernels& k) {
  CUresult r;
  if ((r = cuInit(0)) != CUDA_SUCCESS) return r;
  CUcontext ctx = nullptr;
  if ((r = cuDevicePrimaryCtxRetain(&ctx, 0)) != CUDA_SUCCESS) return r;
  if ((r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) return r;
  return load_kernels(k);
}

// Polls `done` every 100 us until it holds or `limit` passes; whether it held.
template <class Pred>
bool wait_until(Pred done, std::chrono::milliseconds limit) {
  auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

inline CUresult set_primary_current() {
  CUcontext ctx = nullptr;
  CUresult r = cuDevicePrimaryCtxRetain(&ctx, 0);
  return r != CUDA_SUCCESS ? r : cuCtxSetCurrent(ctx);
}

inline CUresult launch(CUfunction f, CUstream s, void** args) {
  return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr);
}

inline CUresult k_sleep(const Kernels& k, CUstream s, int64_t us) {
  void* args[] = {&us};
  return launch(k.sleep, s, args);
}
inline CUresult k_fill(const Kernels& k, CUstream s, float* p, int32_t n, float v) {
  CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p);
  void* args[] = {&d, &n, &v};
  return launch(k.fill, s, args);
}
inline CUresult k_nll(const Kernels& k, CUstream s, float* out, const int64_t* target, int32_t n, int32_t classes,
               int64_t ignore) {
  CUdeviceptr o = reinterpret_cast<CUdeviceptr>(out), t = reinterpret_cast<CUdeviceptr>(target);
  void* args[] = {&o, &t, &n, &classes, &ignore};
  return launch(k.nll, s, args);
}
inline CUresult k_index(const Kernels& k, CUstream s, float* out, const int64_t* index, int32_t n, int32_t src) {
  CUdeviceptr o = reinterpret_cast<CUdeviceptr>(out), i = reinterpret_cast<CUdeviceptr>(index);
  void* args[] = {&o, &i, &n, &src};
  return launch(k.index, s, args);
}
inline CUresult k_illegal(const Kernels& k, CUstream s) { return launch(k.illegal, s, nullptr); }

template <class T>
T load(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

inline void* sym(const char* name) { return dlsym(RTLD_DEFAULT, name); }

// What an id query (cuStreamGetId, cuCtxGetId, a _ptsz variant) answers for `h`: 0, never an id, when it fails.
template <class Get, class H>
unsigned long long id_of(Get get, H h) {
  unsigned long long id = 0;
  return get(h, &id) == CUDA_SUCCESS ? id : 0;
}

// ---- child-process helpers ------------------------------------------------

inline int g_report_fd = 2;  // where child failures go (the real stderr while fd 2 is captured)

#define CHILD_CHECK(cond)                                                                   \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      dprintf(g_report_fd, "CHILD_CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      _exit(1);                                                                             \
    }                                                                                       \
  } while (0)
#define CHILD_EQ(a, b)                                                                                        \
  do {                                                                                                        \
    auto va_ = (a);                                                                                           \
    auto vb_ = (b);                                                                                           \
    if (!(va_ == vb_)) {                                                                                      \
      dprintf(g_report_fd, "CHILD_EQ failed at %s:%d: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__, #a, #b, \
              static_cast<long long>(va_), static_cast<long long>(vb_));                                      \
      _exit(1);                                                                                               \
    }                                                                                                         \
  } while (0)

// Redirects fd 2 into a temporary file until text() is called.
class Fd2Capture {
 public:
  Fd2Capture() {
    fflush(stderr);
    saved_ = dup(2);
    g_report_fd = saved_;
    tmp_ = tmpfile();
    dup2(fileno(tmp_), 2);
  }
  std::string text() {  // what was written so far (capture continues)
    std::string s;
    fflush(stderr);
    long end = lseek(fileno(tmp_), 0, SEEK_END);
    s.resize(static_cast<size_t>(end));
    if (end > 0) pread(fileno(tmp_), s.data(), s.size(), 0);
    return s;
  }
  void restore() {
    if (saved_ < 0) return;
    fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
    g_report_fd = 2;
  }
  ~Fd2Capture() {
    restore();
    fclose(tmp_);
  }

 private:
  int saved_ = -1;
  FILE* tmp_ = nullptr;
};

inline void expect_text(Fd2Capture& cap, const std::string& want, int line) {
  std::string got = cap.text();
  if (got != want) {
    cap.restore();
    fprintf(stderr, "stderr mismatch at line %d\n--- want ---\n%s--- got ---\n%s--- end ---\n", line, want.c_str(),
            got.c_str());
    _exit(1);
  }
}
#define CHILD_STDERR(cap, want) expect_text(cap, want, __LINE__)

inline void child_exit_ok() {
  fflush(stdout);
  fflush(stderr);
  exit(0);
}


class SimTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(setup(k), CUDA_SUCCESS); }
  // What stream() and alloc() made is released here, each with CUDA_SUCCESS: the streams first (destroying one waits
  // for its queued work), then the memory that work may still have been writing.
  void TearDown() override {
    for (CUstream s : streams_) EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    for (CUdeviceptr d : allocs_) EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
  }
  // A new stream (flags 0), destroyed at the end of the test. Call from the test's own thread.
  CUstream stream() {
    CUstream s = nullptr;
    EXPECT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    if (s != nullptr) streams_.push_back(s);
    return s;
  }
  // `bytes` of device memory, freed at the end of the test. Call from the test's own thread.
  CUdeviceptr alloc(size_t bytes) {
    CUdeviceptr d = 0;
    EXPECT_EQ(cuMemAlloc(&d, bytes), CUDA_SUCCESS);
    if (d != 0) allocs_.push_back(d);
    return d;
  }
  // Destroys each instance, then each graph, expecting CUDA_SUCCESS.
  static void destroy_graphs(std::initializer_list<CUgraphExec> execs, std::initializer_list<CUgraph> graphs) {
    for (CUgraphExec x : execs) EXPECT_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
    for (CUgraph g : graphs) EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  }
  Kernels k;

 private:
  std::vector<CUstream> streams_;
  std::vector<CUdeviceptr> allocs_;
};


using SimChildTest = ::testing::Test;

// Device memory of `bytes` bytes (for a child: a failure ends it).
inline CUdeviceptr child_alloc(size_t bytes) {
  CUdeviceptr d = 0;
  CHILD_EQ(cuMemAlloc(&d, bytes), CUDA_SUCCESS);
  return d;
}

// A new stream (for a child: a failure ends it).
inline CUstream child_stream() {
  CUstream s = nullptr;
  CHILD_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  return s;
}

// Device memory holding a copy of `host` (for a child: a failure ends it).
template <class T, size_t N>
inline CUdeviceptr child_copy_to_device(const T (&host)[N]) {
  CUdeviceptr d = child_alloc(sizeof host);
  CHILD_EQ(cuMemcpyHtoD(d, host, sizeof host), CUDA_SUCCESS);
  return d;
}

// A child that leaves 30 s of work queued and exits: it exits 0, within 10 s, its stderr matching `text`.
inline void expect_prompt_exit(void (*child)(), const char* text) {
  auto t0 = Clock::now();
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), text);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
}

// A test whose body runs in a forked child (a sim fault is sticky for the whole process): it passes when the child
// exits 0; a CHILD_* check that fails ends the child with 1 and says why.
#define SIM_CHILD_TEST(name)                                                                 \
  void name##Child();                                                                        \
  TEST(SimChildTest, name) { EXPECT_EXIT(name##Child(), ::testing::ExitedWithCode(0), ""); } \
  void name##Child()

}  // namespace sim_test
