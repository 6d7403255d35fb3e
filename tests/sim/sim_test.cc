// Unit test of the simulated CUDA driver (tests/sim/libcuda.so.1).
//
// Faults are sticky for the whole process, so every scenario that faults (or
// that needs a process where cuInit was never called, or that exercises exit)
// runs in a child process through a gtest death test (threadsafe style:
// the child re-executes this binary) and reports back through its exit code
// and stderr.

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

namespace {

using Clock = std::chrono::steady_clock;

const char* kNllLine =
    "Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [3,0,0] Assertion "
    "`t >= 0 && t < n_classes` failed.\n";

std::string index_line(int i) {
  return "Indexing.cu:1231: indexSelectSmallIndex: block: [0,0,0], thread: [" + std::to_string(i) +
         ",0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n";
}

// ---- kernels -------------------------------------------------------------

struct Kernels {
  CUmodule mod = nullptr;
  CUfunction nll = nullptr, index = nullptr, illegal = nullptr, sleep = nullptr, fill = nullptr;
};

// cuInit + primary context current on this thread + module + functions.
CUresult setup(Kernels& k) {
  CUresult r;
  if ((r = cuInit(0)) != CUDA_SUCCESS) return r;
  CUcontext ctx = nullptr;
  if ((r = cuDevicePrimaryCtxRetain(&ctx, 0)) != CUDA_SUCCESS) return r;
  if ((r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) return r;
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

CUresult set_primary_current() {
  CUcontext ctx = nullptr;
  CUresult r = cuDevicePrimaryCtxRetain(&ctx, 0);
  return r != CUDA_SUCCESS ? r : cuCtxSetCurrent(ctx);
}

CUresult launch(CUfunction f, CUstream s, void** args) {
  return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr);
}

CUresult k_sleep(const Kernels& k, CUstream s, int64_t us) {
  void* args[] = {&us};
  return launch(k.sleep, s, args);
}
CUresult k_fill(const Kernels& k, CUstream s, float* p, int32_t n, float v) {
  CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p);
  void* args[] = {&d, &n, &v};
  return launch(k.fill, s, args);
}
CUresult k_nll(const Kernels& k, CUstream s, float* out, const int64_t* target, int32_t n, int32_t classes,
               int64_t ignore) {
  CUdeviceptr o = reinterpret_cast<CUdeviceptr>(out), t = reinterpret_cast<CUdeviceptr>(target);
  void* args[] = {&o, &t, &n, &classes, &ignore};
  return launch(k.nll, s, args);
}
CUresult k_index(const Kernels& k, CUstream s, float* out, const int64_t* index, int32_t n, int32_t src) {
  CUdeviceptr o = reinterpret_cast<CUdeviceptr>(out), i = reinterpret_cast<CUdeviceptr>(index);
  void* args[] = {&o, &i, &n, &src};
  return launch(k.index, s, args);
}
CUresult k_illegal(const Kernels& k, CUstream s) { return launch(k.illegal, s, nullptr); }

template <class T>
T load(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

void* sym(const char* name) { return dlsym(RTLD_DEFAULT, name); }

// What an id query (cuStreamGetId, cuCtxGetId, a _ptsz variant) answers for `h`: 0, never an id, when it fails.
template <class Get, class H>
unsigned long long id_of(Get get, H h) {
  unsigned long long id = 0;
  return get(h, &id) == CUDA_SUCCESS ? id : 0;
}

// ---- child-process helpers ------------------------------------------------

int g_report_fd = 2;  // where child failures go (the real stderr while fd 2 is captured)

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

void expect_text(Fd2Capture& cap, const std::string& want, int line) {
  std::string got = cap.text();
  if (got != want) {
    cap.restore();
    fprintf(stderr, "stderr mismatch at line %d\n--- want ---\n%s--- got ---\n%s--- end ---\n", line, want.c_str(),
            got.c_str());
    _exit(1);
  }
}
#define CHILD_STDERR(cap, want) expect_text(cap, want, __LINE__)

void child_exit_ok() {
  fflush(stdout);
  fflush(stderr);
  exit(0);
}

// ======================================================================
// In-process tests (nothing here faults)
// ======================================================================

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

TEST_F(SimTest, DeviceContextAndVersion) {
  int v = 0;
  ASSERT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, 13000);
  int n = 0;
  ASSERT_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 1);
  CUdevice dev = -1;
  ASSERT_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  char name[64];
  ASSERT_EQ(cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "cdsa simulated GPU");
  char bus[13];  // cuda.h: "at least 13 characters"
  ASSERT_EQ(cuDeviceGetPCIBusId(bus, sizeof bus, 0), CUDA_SUCCESS);
  EXPECT_STREQ(bus, "0000:3B:00.0");
  EXPECT_EQ(cuDeviceGetPCIBusId(bus, sizeof bus, 1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetPCIBusId(nullptr, 13, 0), CUDA_ERROR_INVALID_VALUE);
  int a = 0;
  ASSERT_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
  EXPECT_EQ(a, 9);
  ASSERT_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0), CUDA_SUCCESS);
  EXPECT_EQ(a, 0);
  ASSERT_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  EXPECT_EQ(a, 132);
  ASSERT_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_SUCCESS);
  EXPECT_EQ(a, 32);
  EXPECT_EQ(cuDeviceGetAttribute(&a, static_cast<CUdevice_attribute>(100000), 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetAttribute(&a, static_cast<CUdevice_attribute>(0), 0), CUDA_ERROR_INVALID_VALUE);

  CUcontext ctx = nullptr, cur = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx);
  EXPECT_EQ(id_of(cuCtxGetId, ctx), 1u);
  EXPECT_EQ(id_of(cuCtxGetId, nullptr), 1u);  // the current context
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);

  // A thread without a current context.
  std::thread([&] {
    CUcontext c = ctx;
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, nullptr);
    unsigned long long id = 0;
    EXPECT_EQ(cuCtxGetId(nullptr, &id), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(k_fill(k, nullptr, nullptr, 0, 1.0f), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    EXPECT_EQ(k_fill(k, nullptr, nullptr, 0, 1.0f), CUDA_SUCCESS);
  }).join();
}

TEST_F(SimTest, ErrorNamesAndStrings) {
  const struct {
    CUresult code;
    const char* name;
    const char* text;
  } cases[] = {
      {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
      {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
      {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
      {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
      {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
      {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
      {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
      {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
      {CUDA_ERROR_ASSERT, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
      {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
       "operation not permitted when stream is capturing"},
  };
  for (const auto& c : cases) {
    const char* s = nullptr;
    ASSERT_EQ(cuGetErrorName(c.code, &s), CUDA_SUCCESS) << c.name;
    EXPECT_STREQ(s, c.name);
    ASSERT_EQ(cuGetErrorString(c.code, &s), CUDA_SUCCESS) << c.name;
    EXPECT_STREQ(s, c.text);
  }
  const char* s = "x";
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
  s = "x";
  EXPECT_EQ(cuGetErrorString(static_cast<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
}

TEST_F(SimTest, StreamIds) {
  using GetId = CUresult (*)(CUstream, unsigned long long*);
  auto get_id_ptsz = reinterpret_cast<GetId>(sym("cuStreamGetId_ptsz"));
  ASSERT_NE(get_id_ptsz, nullptr);

  EXPECT_EQ(id_of(cuStreamGetId, nullptr), 1u);
  EXPECT_EQ(id_of(cuStreamGetId, CU_STREAM_LEGACY), 1u);
  EXPECT_EQ(id_of(get_id_ptsz, CU_STREAM_LEGACY), 1u);

  CUstream a, b;
  ASSERT_EQ(cuStreamCreate(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  unsigned long long ia = 0, ib = 0;
  ASSERT_EQ(cuStreamGetId(a, &ia), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamGetId(b, &ib), CUDA_SUCCESS);
  EXPECT_GE(ia, 1000u);
  EXPECT_GT(ib, ia);
  ASSERT_EQ(cuStreamDestroy(a), CUDA_SUCCESS);
  unsigned long long id = 0;
  EXPECT_EQ(cuStreamGetId(a, &id), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(a), CUDA_ERROR_INVALID_HANDLE);
  CUstream c = stream();
  unsigned long long ic = 0;
  ASSERT_EQ(cuStreamGetId(c, &ic), CUDA_SUCCESS);
  EXPECT_GT(ic, ib);  // never reused

  unsigned long long pt1 = 0, pt2 = 0, pt_null = 0, other = 0, other2 = 0;
  ASSERT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &pt1), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &pt2), CUDA_SUCCESS);
  ASSERT_EQ(get_id_ptsz(nullptr, &pt_null), CUDA_SUCCESS);
  EXPECT_EQ(pt1, pt2);
  EXPECT_EQ(pt1, pt_null);
  EXPECT_NE(pt1, 1u);
  EXPECT_GE(pt1, 1000u);
  std::thread([&] {
    EXPECT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &other), CUDA_SUCCESS);
    EXPECT_EQ(get_id_ptsz(nullptr, &other2), CUDA_SUCCESS);
  }).join();
  EXPECT_EQ(other, other2);
  std::set<unsigned long long> ids{1, ib, ic, pt1, other};
  EXPECT_EQ(ids.size(), 5u);

  EXPECT_EQ(cuStreamDestroy(CU_STREAM_LEGACY), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(b), CUDA_SUCCESS);
}

TEST_F(SimTest, StreamRunsInOrderAsynchronously) {
  CUstream s = stream();
  alignas(64) static uint32_t flags[64];
  memset(flags, 0, sizeof flags);
  ASSERT_EQ(cuMemHostRegister(flags, sizeof flags, 0), CUDA_SUCCESS);
  CUdeviceptr dflags = 0;
  ASSERT_EQ(cuMemHostGetDevicePointer(&dflags, flags, 0), CUDA_SUCCESS);
  EXPECT_EQ(dflags, reinterpret_cast<CUdeviceptr>(flags));
  CUdeviceptr buf = alloc(16 * sizeof(float));
  float* fb = reinterpret_cast<float*>(buf);

  auto t0 = Clock::now();
  ASSERT_EQ(k_sleep(k, s, 100000), CUDA_SUCCESS);
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(k_fill(k, s, fb, 16, static_cast<float>(i)), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamWriteValue32(s, dflags + 4 * i, i + 1, 0), CUDA_SUCCESS);
  }
  // The launch calls returned at once; nothing has run yet.
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(90));
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(load(&flags[0]), 0u);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(100));
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(load(&flags[i]), static_cast<uint32_t>(i + 1));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(fb[i], 63.0f);  // last fill wins: in order

  ASSERT_EQ(cuMemHostUnregister(flags), CUDA_SUCCESS);
}

TEST_F(SimTest, StreamsAreIndependent) {
  CUstream s1, s2;
  ASSERT_EQ(cuStreamCreate(&s1, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&s2, 0), CUDA_SUCCESS);
  CUdeviceptr flag = alloc(8);
  ASSERT_EQ(k_sleep(k, s1, 300000), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue64(s2, flag, 42, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s2), CUDA_SUCCESS);  // does not wait for s1
  EXPECT_EQ(load(reinterpret_cast<uint64_t*>(flag)), 42u);
  EXPECT_EQ(cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamDestroy(s1), CUDA_SUCCESS);  // waits for the sleep, joins
  EXPECT_EQ(cuStreamDestroy(s2), CUDA_SUCCESS);
}

TEST_F(SimTest, CrossStreamEvents) {
  CUstream s1 = stream(), s2 = stream();
  CUevent ev, never;
  ASSERT_EQ(cuEventCreate(&ev, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&never, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(never), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(never), CUDA_SUCCESS);

  CUdeviceptr buf = alloc(4 * sizeof(float)), flag = alloc(4);
  ASSERT_EQ(k_sleep(k, s1, 60000), CUDA_SUCCESS);
  ASSERT_EQ(k_fill(k, s1, reinterpret_cast<float*>(buf), 4, 5.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(ev, s1), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s2, ev, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s2, never, 0), CUDA_SUCCESS);  // no-op
  ASSERT_EQ(cuStreamWriteValue32(s2, flag, 7, 0), CUDA_SUCCESS);

  EXPECT_EQ(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(load(reinterpret_cast<uint32_t*>(flag)), 0u);  // s2 still waits for s1

  ASSERT_EQ(cuStreamSynchronize(s2), CUDA_SUCCESS);
  EXPECT_EQ(load(reinterpret_cast<uint32_t*>(flag)), 7u);
  EXPECT_EQ(cuEventQuery(ev), CUDA_SUCCESS);  // s1 reached the event first
  float host[4] = {};
  ASSERT_EQ(cuMemcpyDtoH(host, buf, sizeof host), CUDA_SUCCESS);
  for (float f : host) EXPECT_EQ(f, 5.0f);

  // Re-recording moves the marker.
  ASSERT_EQ(k_sleep(k, s1, 20000), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(ev, s1), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuEventSynchronize(ev), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(ev), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s1), CUDA_SUCCESS);

  EXPECT_EQ(cuEventDestroy(ev), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(never), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(ev), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(SimTest, SyncMemcpyWaitsForAllStreams) {
  CUstream s = stream();
  CUdeviceptr buf = alloc(8 * sizeof(float));
  ASSERT_EQ(k_sleep(k, s, 40000), CUDA_SUCCESS);
  ASSERT_EQ(k_fill(k, s, reinterpret_cast<float*>(buf), 8, 7.0f), CUDA_SUCCESS);
  ASSERT_EQ(k_sleep(k, CU_STREAM_PER_THREAD, 30000), CUDA_SUCCESS);
  ASSERT_EQ(k_fill(k, CU_STREAM_PER_THREAD, reinterpret_cast<float*>(buf), 4, 3.0f), CUDA_SUCCESS);
  float host[8] = {};
  ASSERT_EQ(cuMemcpyDtoH(host, buf, sizeof host), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(host[i], 7.0f);

  const float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(k_sleep(k, nullptr, 30000), CUDA_SUCCESS);  // legacy stream
  ASSERT_EQ(k_fill(k, nullptr, reinterpret_cast<float*>(buf), 8, -1.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(buf, src, sizeof src), CUDA_SUCCESS);  // after the fill
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(memcmp(reinterpret_cast<void*>(buf), src, sizeof src), 0);

  // Async copies run in stream order.
  float out[8] = {};
  ASSERT_EQ(k_sleep(k, s, 20000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(buf, src, sizeof src, s), CUDA_SUCCESS);
  ASSERT_EQ(k_fill(k, s, reinterpret_cast<float*>(buf), 2, 9.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync(out, buf, sizeof out, s), CUDA_SUCCESS);
  EXPECT_EQ(out[7], 0.0f);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 9.0f);
  EXPECT_EQ(out[1], 9.0f);
  EXPECT_EQ(out[2], 3.0f);
  EXPECT_EQ(out[7], 8.0f);
}

TEST_F(SimTest, KernelsWithoutFaults) {
  CUdeviceptr out = alloc(8 * sizeof(float)), tgt = alloc(8 * sizeof(int64_t));
  const int64_t targets[5] = {0, 2, -100, 4, -100};
  ASSERT_EQ(cuMemcpyHtoD(tgt, targets, sizeof targets), CUDA_SUCCESS);
  auto* fo = reinterpret_cast<float*>(out);
  auto* it = reinterpret_cast<int64_t*>(tgt);
  ASSERT_EQ(k_nll(k, nullptr, fo, it, 5, 5, -100), CUDA_SUCCESS);
  float host[8] = {};
  ASSERT_EQ(cuMemcpyDtoH(host, out, sizeof host), CUDA_SUCCESS);
  EXPECT_TRUE(std::isfinite(host[0]));
  EXPECT_EQ(host[0], 3.0f);  // number of non-ignored targets

  const int64_t index[4] = {3, 0, 1, 3};
  ASSERT_EQ(cuMemcpyHtoD(tgt, index, sizeof index), CUDA_SUCCESS);
  ASSERT_EQ(k_index(k, nullptr, fo, it, 4, 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(host, out, sizeof host), CUDA_SUCCESS);
  EXPECT_EQ(host[0], 3.0f);
  EXPECT_EQ(host[1], 0.0f);
  EXPECT_EQ(host[2], 1.0f);
  EXPECT_EQ(host[3], 3.0f);

  ASSERT_EQ(k_fill(k, nullptr, fo, 8, 2.5f), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(host, out, sizeof host), CUDA_SUCCESS);
  for (float f : host) EXPECT_EQ(f, 2.5f);
  auto t0 = Clock::now();
  ASSERT_EQ(k_sleep(k, nullptr, 30000), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(30));
}

TEST_F(SimTest, ModulesFunctionsAndLaunchValidation) {
  const char* name = nullptr;
  ASSERT_EQ(cuFuncGetName(&name, k.nll), CUDA_SUCCESS);
  EXPECT_STREQ(name, "nll_loss_forward_reduce_cuda_kernel_2d");
  ASSERT_EQ(cuFuncGetName(&name, k.index), CUDA_SUCCESS);
  EXPECT_STREQ(name, "indexSelectSmallIndex");
  ASSERT_EQ(cuFuncGetName(&name, k.sleep), CUDA_SUCCESS);
  EXPECT_STREQ(name, "sleep_us");

  CUfunction f = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&f, k.mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  // A mangled name that contains a known kernel name: same behaviour, name as given.
  ASSERT_EQ(cuModuleGetFunction(&f, k.mod, "_Z8fill_f32Pfif"), CUDA_SUCCESS);
  ASSERT_EQ(cuFuncGetName(&name, f), CUDA_SUCCESS);
  EXPECT_STREQ(name, "_Z8fill_f32Pfif");
  CUdeviceptr buf = alloc(4 * sizeof(float));
  int32_t n = 4;
  float v = 1.5f;
  void* args[] = {&buf, &n, &v};
  ASSERT_EQ(cuLaunchKernel(f, 2, 1, 1, 64, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<float*>(buf)[3], 1.5f);

  // cuLaunchKernelEx.
  v = 2.5f;
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 128;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = CU_STREAM_PER_THREAD;
  ASSERT_EQ(cuLaunchKernelEx(&cfg, k.fill, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<float*>(buf)[0], 2.5f);
  EXPECT_EQ(cuLaunchKernelEx(nullptr, k.fill, args, nullptr), CUDA_ERROR_INVALID_VALUE);

  // Arguments through CU_LAUNCH_PARAM_BUFFER_POINTER.
  struct {
    CUdeviceptr p;
    int32_t n;
    float v;
  } packed{buf, 4, 3.5f};
  size_t size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  ASSERT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra), CUDA_SUCCESS);
  // cuLaunchCooperativeKernel.
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<float*>(buf)[2], 3.5f);
  v = 4.5f;
  ASSERT_EQ(cuLaunchCooperativeKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, nullptr, args), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<float*>(buf)[1], 4.5f);

  EXPECT_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(&buf), 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(k.fill, 0, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 2048, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUstream bogus = reinterpret_cast<CUstream>(&buf);
  EXPECT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, bogus, args, nullptr), CUDA_ERROR_INVALID_HANDLE);

  CUmodule m2 = nullptr;
  ASSERT_EQ(cuModuleLoadData(&m2, "x"), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&f, m2, "fill_f32"), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleUnload(m2), CUDA_SUCCESS);
  EXPECT_EQ(cuFuncGetName(&name, f), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleGetFunction(&f, m2, "fill_f32"), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(SimTest, MemopsAndHostRegistration) {
  alignas(64) static uint64_t host[8];
  memset(host, 0, sizeof host);
  CUdeviceptr d = 0;
  EXPECT_EQ(cuMemHostGetDevicePointer(&d, host, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue32(nullptr, reinterpret_cast<CUdeviceptr>(host), 1, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemHostRegister(host, sizeof host, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister(&host[4], 8, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  ASSERT_EQ(cuMemHostGetDevicePointer(&d, &host[2], 0), CUDA_SUCCESS);
  EXPECT_EQ(d, reinterpret_cast<CUdeviceptr>(&host[2]));
  ASSERT_EQ(cuMemHostGetDevicePointer(&d, host, 0), CUDA_SUCCESS);

  CUstream s = stream();
  ASSERT_EQ(k_sleep(k, s, 30000), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue64(s, d, 0x1122334455667788ull, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32(s, d + 8, 0xabcdu, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue64(s, d + 56, 9, 0), CUDA_SUCCESS);  // last word
  EXPECT_EQ(load(&host[0]), 0u);                                   // not yet: behind the sleep
  // The memop lands without any API call from this thread.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (load(&host[7]) != 9u && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(load(&host[7]), 9u);
  EXPECT_EQ(load(&host[0]), 0x1122334455667788ull);
  EXPECT_EQ(load(reinterpret_cast<uint32_t*>(&host[1])), 0xabcdu);

  EXPECT_EQ(cuStreamWriteValue64(s, d + 60, 1, 0), CUDA_ERROR_INVALID_VALUE);  // crosses the end / misaligned
  EXPECT_EQ(cuStreamWriteValue64(s, d + 64, 1, 0), CUDA_ERROR_INVALID_VALUE);  // past the end
  EXPECT_EQ(cuStreamWriteValue32(s, d + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);   // misaligned
  EXPECT_EQ(cuStreamWriteValue32(s, d, 1, 0x80), CUDA_ERROR_INVALID_VALUE);    // bad flags

  // cuMemAlloc memory is a valid target too; _v2 names are the same functions.
  CUdeviceptr a = 0;
  ASSERT_EQ(cuMemAlloc(&a, 16), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32_v2(s, a + 12, 5, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(load(reinterpret_cast<uint32_t*>(a + 12)), 5u);
  EXPECT_EQ(cuMemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);

  ASSERT_EQ(cuMemHostUnregister(host), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(host), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(cuStreamWriteValue32(s, d, 1, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimTest, GraphCaptureAndReplay) {
  CUstream s = stream(), s2 = stream();
  CUdeviceptr buf = alloc(4 * sizeof(float)), flag = alloc(8);
  auto* fb = reinterpret_cast<float*>(buf);
  float host_out[4] = {};

  EXPECT_EQ(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  ASSERT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);

  float v = 3.0f;
  int32_t n = 4;
  void* args[] = {&buf, &n, &v};
  ASSERT_EQ(k_sleep(k, s, 10000), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr), CUDA_SUCCESS);
  v = 9.0f;  // arguments were copied at capture time
  n = 1;
  ASSERT_EQ(cuStreamWriteValue64(s, flag, 77, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync(host_out, buf, sizeof host_out, s), CUDA_SUCCESS);

  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  float tmp[4];
  EXPECT_EQ(cuMemcpyDtoH(tmp, buf, sizeof tmp), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamSynchronize(s2), CUDA_SUCCESS);  // other streams are fine

  // Global mode: must end on the capturing thread.
  std::thread([&] {
    CUgraph g = nullptr;
    EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  }).join();

  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(load(reinterpret_cast<uint64_t*>(flag)), 0u);  // nothing ran
  EXPECT_EQ(fb[0], 0.0f);

  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  ASSERT_NE(graph, nullptr);
  ASSERT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuStreamEndCapture(s, &graph), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(load(reinterpret_cast<uint64_t*>(flag)), 0u);

  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(fb[i], 3.0f);
  for (float f : host_out) EXPECT_EQ(f, 3.0f);
  EXPECT_EQ(load(reinterpret_cast<uint64_t*>(flag)), 77u);

  // Replays run again, in order, on any stream.
  __atomic_store_n(reinterpret_cast<uint64_t*>(flag), 0, __ATOMIC_RELEASE);
  ASSERT_EQ(cuMemcpyHtoD(buf, host_out, 0), CUDA_SUCCESS);
  const float zeros[4] = {};
  ASSERT_EQ(cuMemcpyHtoD(buf, zeros, sizeof zeros), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s2), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s2), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamSynchronize(s2), CUDA_SUCCESS);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(fb[i], 3.0f);
  EXPECT_EQ(load(reinterpret_cast<uint64_t*>(flag)), 77u);

  // Relaxed capture may end on another thread; a graph may be captured into another capture.
  ASSERT_EQ(cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s2), CUDA_SUCCESS);
  CUgraph g2 = nullptr;
  std::thread([&] { EXPECT_EQ(cuStreamEndCapture(s2, &g2), CUDA_SUCCESS); }).join();
  ASSERT_NE(g2, nullptr);
  CUgraphExec exec2 = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec2, g2, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(buf, zeros, sizeof zeros), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec2, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(fb[1], 3.0f);

  destroy_graphs({exec, exec2}, {graph, g2});
  EXPECT_EQ(cuGraphLaunch(exec, s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(SimTest, GetProcAddress) {
  // At this toolkit's version (CUDA_VERSION), then older ABIs: the newest signature at or below the version asked for.
  const struct {
    const char* query;
    int version;
    cuuint64_t flags;
    const char* exported;
  } cases[] = {
      {"cuLaunchKernel", CUDA_VERSION, 0, "cuLaunchKernel"},
      {"cuLaunchKernel", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz"},
      {"cuLaunchKernelEx", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernelEx_ptsz"},
      {"cuMemAlloc", CUDA_VERSION, 0, "cuMemAlloc_v2"},
      {"cuMemAlloc", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2"},
      {"cuMemFree", CUDA_VERSION, 0, "cuMemFree_v2"},
      {"cuMemcpyHtoD", CUDA_VERSION, 0, "cuMemcpyHtoD_v2"},
      {"cuMemcpyHtoD", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds"},
      {"cuMemcpyDtoHAsync", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyDtoHAsync_v2_ptsz"},
      {"cuStreamWriteValue32", CUDA_VERSION, 0, "cuStreamWriteValue32_v2"},
      {"cuStreamWriteValue32", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuStreamWriteValue32_v2_ptsz"},
      {"cuStreamWriteValue64", CUDA_VERSION, 0, "cuStreamWriteValue64_v2"},
      {"cuStreamBeginCapture", CUDA_VERSION, 0, "cuStreamBeginCapture_v2"},
      {"cuStreamBeginCapture", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuStreamBeginCapture_v2_ptsz"},
      {"cuStreamDestroy", CUDA_VERSION, 0, "cuStreamDestroy_v2"},
      {"cuEventDestroy", CUDA_VERSION, 0, "cuEventDestroy_v2"},
      {"cuMemHostRegister", CUDA_VERSION, 0, "cuMemHostRegister_v2"},
      {"cuMemHostGetDevicePointer", CUDA_VERSION, 0, "cuMemHostGetDevicePointer_v2"},
      {"cuDevicePrimaryCtxRelease", CUDA_VERSION, 0, "cuDevicePrimaryCtxRelease_v2"},
      {"cuGraphInstantiate", CUDA_VERSION, 0, "cuGraphInstantiateWithFlags"},
      {"cuGraphLaunch", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuGraphLaunch_ptsz"},
      {"cuGetProcAddress", CUDA_VERSION, 0, "cuGetProcAddress_v2"},
      {"cuStreamQuery", CUDA_VERSION, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuStreamQuery"},
      {"cuStreamSynchronize", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamSynchronize_ptsz"},
      {"cuMemsetD32Async", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemsetD32Async_ptsz"},
      {"cuMemcpy", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpy_ptds"},
      {"cuLaunchHostFunc", CUDA_VERSION, 0, "cuLaunchHostFunc"},
      {"cuCtxPushCurrent", CUDA_VERSION, 0, "cuCtxPushCurrent_v2"},
      {"cuCtxSynchronize", CUDA_VERSION, 0, "cuCtxSynchronize_v2"},
      {"cuCtxGetDevice", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuCtxGetDevice_v2"},
      {"cuStreamBeginCaptureToGraph", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuStreamBeginCaptureToGraph_ptsz"},
      {"cuLibraryGetKernel", CUDA_VERSION, 0, "cuLibraryGetKernel"},
      {"cuKernelGetName", CUDA_VERSION, 0, "cuKernelGetName"},
      {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"},
      {"cuCtxSynchronize", 12090, 0, "cuCtxSynchronize"},
      {"cuCtxSynchronize", 2000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuCtxSynchronize"},
      {"cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2"},
      {"cuCtxGetDevice", 12000, 0, "cuCtxGetDevice"},
      {"cuGraphInstantiate", 10000, 0, "cuGraphInstantiate"},
      {"cuGraphInstantiate", 11080, 0, "cuGraphInstantiate_v2"},
      {"cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags"},
      {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
      {"cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture"},
      {"cuStreamBeginCapture", 10000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamBeginCapture_ptsz"},
      {"cuStreamWriteValue32", 11000, 0, "cuStreamWriteValue32"},
      {"cuStreamWriteValue32", 11070, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamWriteValue32_v2_ptsz"},
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
      {"cuLaunchKernel", 6050, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuLaunchKernel"},  // no _ptsz before 7000
      {"cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz"},
  };
  void* fn = nullptr;
  for (const auto& c : cases) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    ASSERT_EQ(cuGetProcAddress(c.query, &fn, c.version, c.flags, &status), CUDA_SUCCESS) << c.query << " " << c.version;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    void* want = sym(c.exported);
    ASSERT_NE(want, nullptr) << c.exported << " is not exported";
    EXPECT_EQ(fn, want) << c.query << " at " << c.version << " flags " << c.flags << " should give " << c.exported;
  }
  // Older than the name's first version: not found, and the status says why.
  for (auto [query, version] : {std::pair{"cuStreamBeginCaptureToGraph", 12020}, std::pair{"cuKernelGetName", 12000},
                                std::pair{"cuCtxSynchronize", 1000}}) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    fn = sym("cuInit");
    EXPECT_EQ(cuGetProcAddress(query, &fn, version, 0, &status), CUDA_ERROR_NOT_FOUND) << query;
    EXPECT_EQ(fn, nullptr) << query;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) << query;
  }
  // Exported names are not names cudart asks for: not found, as on the real driver.
  for (const char* exported : {"cuMemAlloc_v2", "cuLaunchKernel_ptsz", "cuCtxSynchronize_v2"}) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    EXPECT_EQ(cuGetProcAddress(exported, &fn, CUDA_VERSION, 0, &status), CUDA_ERROR_NOT_FOUND) << exported;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) << exported;
  }

  // Every contract function resolves by its base name.
  const char* contract[] = {"cuInit",
                            "cuDriverGetVersion",
                            "cuDeviceGet",
                            "cuDeviceGetCount",
                            "cuDeviceGetName",
                            "cuDeviceGetAttribute",
                            "cuDevicePrimaryCtxRetain",
                            "cuDevicePrimaryCtxRelease",
                            "cuCtxSetCurrent",
                            "cuCtxGetCurrent",
                            "cuCtxSynchronize",
                            "cuCtxGetId",
                            "cuStreamCreate",
                            "cuStreamDestroy",
                            "cuStreamSynchronize",
                            "cuStreamQuery",
                            "cuStreamGetId",
                            "cuStreamIsCapturing",
                            "cuStreamBeginCapture",
                            "cuStreamEndCapture",
                            "cuGraphInstantiate",
                            "cuGraphLaunch",
                            "cuGraphExecDestroy",
                            "cuGraphDestroy",
                            "cuEventCreate",
                            "cuEventRecord",
                            "cuEventSynchronize",
                            "cuEventQuery",
                            "cuEventDestroy",
                            "cuStreamWaitEvent",
                            "cuMemAlloc",
                            "cuMemFree",
                            "cuMemcpyHtoD",
                            "cuMemcpyDtoH",
                            "cuMemcpyHtoDAsync",
                            "cuMemcpyDtoHAsync",
                            "cuMemHostRegister",
                            "cuMemHostUnregister",
                            "cuMemHostGetDevicePointer",
                            "cuStreamWriteValue32",
                            "cuStreamWriteValue64",
                            "cuModuleLoadData",
                            "cuModuleGetFunction",
                            "cuFuncGetName",
                            "cuLaunchKernel",
                            "cuLaunchKernelEx",
                            "cuGetProcAddress",
                            "cuGetErrorName",
                            "cuGetErrorString",
                            "cuLaunchCooperativeKernel"};
  for (const char* name : contract) {
    for (cuuint64_t flags : {cuuint64_t{0}, cuuint64_t{CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}}) {
      fn = nullptr;
      EXPECT_EQ(cuGetProcAddress(name, &fn, CUDA_VERSION, flags, nullptr), CUDA_SUCCESS) << name;
      EXPECT_NE(fn, nullptr) << name;
    }
  }

  // The returned pointers work.
  fn = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuDriverGetVersion", &fn, CUDA_VERSION, 0, nullptr), CUDA_SUCCESS);
  int v = 0;
  ASSERT_EQ(reinterpret_cast<CUresult (*)(int*)>(fn)(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, 13000);
  ASSERT_EQ(
      cuGetProcAddress("cuStreamGetId", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
      CUDA_SUCCESS);
  unsigned long long via_ptsz = 0, per_thread = 0;
  ASSERT_EQ(reinterpret_cast<CUresult (*)(CUstream, unsigned long long*)>(fn)(nullptr, &via_ptsz), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &per_thread), CUDA_SUCCESS);
  EXPECT_EQ(via_ptsz, per_thread);

  // The _ptsz twin of cuGetProcAddress_v2 defaults to per-thread variants.
  using GPA = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto gpa_ptsz = reinterpret_cast<GPA>(sym("cuGetProcAddress_v2_ptsz"));
  ASSERT_NE(gpa_ptsz, nullptr);
  ASSERT_EQ(gpa_ptsz("cuLaunchKernel", &fn, CUDA_VERSION, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, sym("cuLaunchKernel_ptsz"));

  // Unknown symbols.
  fn = reinterpret_cast<void*>(&v);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(cuGetProcAddress("cuNoSuchFunction", &fn, CUDA_VERSION, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(cuGetProcAddress(nullptr, &fn, CUDA_VERSION, 0, &status), CUDA_ERROR_INVALID_VALUE);
}

// Names of the functions an ELF shared library exports, read from its .dynsym.
std::vector<std::string> exported_functions(const char* path) {
  std::vector<std::string> names;
  FILE* f = fopen(path, "rb");
  if (f == nullptr) return names;
  std::vector<char> img;
  char chunk[65536];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) img.insert(img.end(), chunk, chunk + got);
  fclose(f);
  auto* eh = reinterpret_cast<const ElfW(Ehdr)*>(img.data());
  auto* sh = reinterpret_cast<const ElfW(Shdr)*>(img.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM) continue;
    const char* strtab = img.data() + sh[sh[i].sh_link].sh_offset;
    auto* syms = reinterpret_cast<const ElfW(Sym)*>(img.data() + sh[i].sh_offset);
    for (size_t j = 0; j < sh[i].sh_size / sizeof(ElfW(Sym)); ++j) {
      if (ELF64_ST_TYPE(syms[j].st_info) == STT_FUNC && syms[j].st_shndx != SHN_UNDEF)
        names.emplace_back(strtab + syms[j].st_name);
    }
  }
  return names;
}

std::string sim_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuInit), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// The sim exports exactly the cu* functions of the toolkit's stub libcuda.so
// (plus the few per-thread twins the stub lacks), and nothing else.
TEST_F(SimTest, ExportsEveryStubName) {
  std::vector<std::string> stub = exported_functions(CDSA_SIM_STUB);
  ASSERT_GT(stub.size(), 500u) << CDSA_SIM_STUB;
  std::vector<std::string> mine = exported_functions(sim_path().c_str());
  std::set<std::string> sim(mine.begin(), mine.end());
  for (const std::string& name : mine) EXPECT_EQ(name.rfind("cu", 0), 0u) << name << " should not be exported";
  size_t cu = 0;
  for (const std::string& name : stub) {
    if (name.rfind("cu", 0) != 0) continue;
    ++cu;
    EXPECT_TRUE(sim.count(name)) << name << " is exported by the stub but not by the sim";
  }
  EXPECT_LE(sim.size(), cu + 4) << "the sim exports names the stub does not";
}

// Every base name cuGetProcAddress knows resolves to an exported function of
// that name's family, with and without the per-thread flag.
TEST_F(SimTest, GetProcAddressAnswersFromTheTable) {
  std::vector<std::string> stub = exported_functions(CDSA_SIM_STUB);
  int found = 0;
  for (const std::string& name : stub) {
    for (cuuint64_t flags : {cuuint64_t{0}, cuuint64_t{CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}}) {
      void* fn = nullptr;
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      CUresult r = cuGetProcAddress(name.c_str(), &fn, CUDA_VERSION, flags, &status);
      if (r == CUDA_ERROR_NOT_FOUND) {  // a versioned or per-thread export, not a base name
        EXPECT_EQ(fn, nullptr);
        EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) << name;
        continue;
      }
      ASSERT_EQ(r, CUDA_SUCCESS) << name;
      Dl_info info{};
      ASSERT_NE(dladdr(fn, &info), 0) << name;
      ASSERT_NE(info.dli_sname, nullptr) << name;
      std::string got = info.dli_sname;
      EXPECT_TRUE(got.rfind(name, 0) == 0 || (name == "cuGraphInstantiate" && got == "cuGraphInstantiateWithFlags"))
          << name << " resolved to " << got;
      EXPECT_EQ(fn, sym(got.c_str())) << name;
      found += flags == 0;
    }
  }
  EXPECT_GT(found, 400);  // cudaTypedefs.h of CUDA 13.0 names 447
}

TEST_F(SimTest, PerThreadDefaultStreams) {
  using Launch = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
  auto launch_ptsz = reinterpret_cast<Launch>(sym("cuLaunchKernel_ptsz"));
  ASSERT_NE(launch_ptsz, nullptr);
  int64_t us = 60000;
  void* args[] = {&us};
  // NULL to a _ptsz entry point is the per-thread stream, not the legacy one.
  ASSERT_EQ(launch_ptsz(k.sleep, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);
  // Another thread's per-thread stream is a different stream.
  CUdeviceptr p = 0;
  std::thread([&] {
    EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    EXPECT_EQ(set_primary_current(), CUDA_SUCCESS);
    EXPECT_EQ(cuMemAlloc(&p, 16), CUDA_SUCCESS);
    EXPECT_EQ(k_fill(k, CU_STREAM_PER_THREAD, reinterpret_cast<float*>(p), 4, 6.0f), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    EXPECT_EQ(reinterpret_cast<float*>(p)[3], 6.0f);
  }).join();
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);  // (waits for every stream)
}

TEST_F(SimTest, CopiesMemsetsHostFunctionsAndContextStack) {
  CUstream s = stream();
  CUdeviceptr a = alloc(64), b = alloc(64);
  size_t free_mem = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo(&free_mem, &total), CUDA_SUCCESS);
  EXPECT_GT(total, free_mem);

  ASSERT_EQ(cuMemsetD32(a, 0x01020304u, 16), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD(b, a, 64), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint32_t*>(b)[15], 0x01020304u);
  ASSERT_EQ(cuMemsetD8(b, 0xab, 3), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(b)[2], 0xab);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(b)[3], 0x01);
  EXPECT_EQ(cuMemsetD32(a + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);

  // Async forms and host functions run in stream order.
  struct Probe {
    CUdeviceptr b;
    uint32_t seen = 0;
    std::atomic<int> calls{0};
  } probe{b};
  auto host_fn = [](void* p) {
    auto* pr = static_cast<Probe*>(p);
    pr->seen = reinterpret_cast<uint32_t*>(pr->b)[0];
    pr->calls.fetch_add(1);
  };
  ASSERT_EQ(k_sleep(k, s, 20000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32Async(a, 7, 16, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyAsync(b, a, 64, s), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchHostFunc(s, host_fn, &probe), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(b, 0, 64, s), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 0);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 1);
  EXPECT_EQ(probe.seen, 7u);
  EXPECT_EQ(reinterpret_cast<uint32_t*>(b)[0], 0u);
  ASSERT_EQ(cuMemcpy(b, a, 64), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint32_t*>(b)[9], 7u);

  // Captured host functions and memsets replay.
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32Async(b, 5, 16, s), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchHostFunc(s, host_fn, &probe), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 1);
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 2);
  EXPECT_EQ(probe.seen, 5u);
  EXPECT_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);

  // Context stack.
  CUcontext ctx = nullptr, popped = nullptr, cur = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent(ctx), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, ctx);
  ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx);
  std::thread([&] {
    CUcontext c = nullptr;
    EXPECT_EQ(cuCtxPopCurrent(&c), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxPushCurrent(ctx), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, ctx);
    EXPECT_EQ(cuCtxPopCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, nullptr);
  }).join();
}

TEST_F(SimTest, ManyThreadsManyStreams) {
  constexpr int kThreads = 4, kIters = 40;
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  CUdeviceptr counters = alloc(kThreads * kIters * 4);
  CUstream shared = stream();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto check = [&](CUresult r) {
        if (r != CUDA_SUCCESS) failures.fetch_add(1);
      };
      check(cuCtxSetCurrent(ctx));
      CUstream s;
      check(cuStreamCreate(&s, 0));
      CUevent ev;
      check(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
      CUdeviceptr buf = 0;
      check(cuMemAlloc(&buf, 64 * sizeof(float)));
      for (int i = 0; i < kIters; ++i) {
        check(k_fill(k, s, reinterpret_cast<float*>(buf), 64, static_cast<float>(i)));
        check(cuStreamWriteValue32(s, counters + 4 * (t * kIters + i), i + 1, 0));
        check(cuEventRecord(ev, s));
        check(cuStreamWaitEvent(shared, ev, 0));
        check(cuStreamWriteValue32(shared, counters + 4 * (t * kIters + i), i + 1, 0));
        if (i % 8 == 0) check(cuStreamQuery(s) == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : cuStreamQuery(s));
        if (i % 10 == 0) check(cuEventSynchronize(ev));
      }
      check(cuStreamSynchronize(s));
      float host[64];
      check(cuMemcpyDtoH(host, buf, sizeof host));
      for (float f : host)
        if (f != static_cast<float>(kIters - 1)) failures.fetch_add(1);
      check(cuMemFree(buf));
      check(cuEventDestroy(ev));
      check(cuStreamDestroy(s));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  auto* c = reinterpret_cast<uint32_t*>(counters);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kIters; ++i) EXPECT_EQ(load(&c[t * kIters + i]), static_cast<uint32_t>(i + 1));
}

// cudart 12+/13 path: cuLibraryLoadData + cuLibraryGetKernel, the CUkernel
// launched cast to CUfunction; cuBLASLt's: cuKernelGetFunction.
TEST_F(SimTest, LibraryKernelsAreTheirOwnHandleKind) {
  CUlibrary lib = nullptr;
  static const char image[] = "fatbin";
  ASSERT_EQ(cuLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  CUkernel kern = nullptr, again = nullptr;
  ASSERT_EQ(cuLibraryGetKernel(&kern, lib, "_Z8fill_f32Pfif"), CUDA_SUCCESS);  // mangled: contains fill_f32
  ASSERT_EQ(cuLibraryGetKernel(&again, lib, "_Z8fill_f32Pfif"), CUDA_SUCCESS);
  EXPECT_EQ(kern, again);
  CUkernel none = nullptr;
  EXPECT_EQ(cuLibraryGetKernel(&none, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);

  const char* name = nullptr;
  EXPECT_EQ(cuFuncGetName(&name, reinterpret_cast<CUfunction>(kern)), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuKernelGetName(&name, kern), CUDA_SUCCESS);
  EXPECT_STREQ(name, "_Z8fill_f32Pfif");
  EXPECT_EQ(cuKernelGetName(&name, reinterpret_cast<CUkernel>(k.fill)), CUDA_ERROR_INVALID_HANDLE);

  CUdeviceptr buf = alloc(8 * sizeof(float));
  auto* fb = reinterpret_cast<float*>(buf);
  int32_t n = 8;
  float v = 5.0f;
  void* args[] = {&buf, &n, &v};
  ASSERT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(kern), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(fb[i], 5.0f);

  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 32, cfg.blockDimY = cfg.blockDimZ = 1;
  v = 6.0f;
  ASSERT_EQ(cuLaunchKernelEx(&cfg, reinterpret_cast<CUfunction>(kern), args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(fb[7], 6.0f);

  // cuKernelGetFunction: a CUfunction that cuFuncGetName names and that launches.
  CUfunction f = nullptr, f2 = nullptr;
  ASSERT_EQ(cuKernelGetFunction(&f, kern), CUDA_SUCCESS);
  ASSERT_EQ(cuKernelGetFunction(&f2, kern), CUDA_SUCCESS);
  EXPECT_EQ(f, f2);
  EXPECT_NE(reinterpret_cast<void*>(f), reinterpret_cast<void*>(kern));
  ASSERT_EQ(cuFuncGetName(&name, f), CUDA_SUCCESS);
  EXPECT_STREQ(name, "_Z8fill_f32Pfif");
  EXPECT_EQ(cuKernelGetName(&name, reinterpret_cast<CUkernel>(f)), CUDA_ERROR_INVALID_HANDLE);
  v = 7.0f;
  ASSERT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(fb[0], 7.0f);
  EXPECT_EQ(cuKernelGetFunction(&f2, reinterpret_cast<CUkernel>(k.fill)), CUDA_ERROR_INVALID_HANDLE);

  // Unloading the library invalidates its kernels and their functions.
  ASSERT_EQ(cuLibraryUnload(lib), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(kern), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelGetName(&name, kern), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryLoadData(&lib, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

// cuModuleLoad and cuLibraryLoadFromFile: any readable file is an image.
TEST_F(SimTest, LoadFromPath) {
  char path[] = "/tmp/sim_test_cubin_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "cubin", 5), 5);
  close(fd);
  CUmodule mod = nullptr;
  ASSERT_EQ(cuModuleLoad(&mod, path), CUDA_SUCCESS);
  CUfunction f = nullptr;
  ASSERT_EQ(cuModuleGetFunction(&f, mod, "sleep_us"), CUDA_SUCCESS);
  const char* name = nullptr;
  ASSERT_EQ(cuFuncGetName(&name, f), CUDA_SUCCESS);
  EXPECT_STREQ(name, "sleep_us");
  EXPECT_EQ(cuModuleUnload(mod), CUDA_SUCCESS);
  CUlibrary lib = nullptr;
  ASSERT_EQ(cuLibraryLoadFromFile(&lib, path, nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuLibraryUnload(lib), CUDA_SUCCESS);
  unlink(path);
  EXPECT_EQ(cuModuleLoad(&mod, path), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(cuModuleLoad(&mod, "/tmp"), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(cuLibraryLoadFromFile(&lib, path, nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(cuModuleLoad(nullptr, path), CUDA_ERROR_INVALID_VALUE);
}

// CUDA 13's context-taking forms (cudaDeviceSynchronize = cuCtxSynchronize_v2).
TEST_F(SimTest, ContextV2EntryPoints) {
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  CUstream s = stream();
  ASSERT_EQ(k_sleep(k, s, 20000), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuCtxSynchronize_v2(nullptr), CUDA_SUCCESS);  // null: the current context; waits for every stream
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  ASSERT_EQ(k_sleep(k, s, 20000), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize_v2(ctx), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  CUdevice dev = -1;
  ASSERT_EQ(cuCtxGetDevice_v2(&dev, ctx), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  dev = -1;
  ASSERT_EQ(cuCtxGetDevice_v2(&dev, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cuCtxGetDevice_v2(nullptr, ctx), CUDA_ERROR_INVALID_VALUE);
  CUctx_st* bogus = reinterpret_cast<CUctx_st*>(&dev);
  EXPECT_EQ(cuCtxSynchronize_v2(bogus), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxGetDevice_v2(&dev, bogus), CUDA_ERROR_INVALID_CONTEXT);
  std::thread([&] {  // no current context: null names none
    EXPECT_EQ(cuCtxSynchronize_v2(nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxGetDevice_v2(&dev, nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSynchronize_v2(ctx), CUDA_SUCCESS);
  })
      .join();
}

// cuStreamBeginCaptureToGraph: capture appends to an existing graph; such a
// graph (like a conditional node's body) rejects memory-operation nodes.
TEST_F(SimTest, CaptureToGraph) {
  CUstream s = stream();
  CUdeviceptr buf = alloc(4 * sizeof(float)), flag = alloc(8);
  auto* fb = reinterpret_cast<float*>(buf);

  CUgraph graph = nullptr;
  ASSERT_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCaptureToGraph(s, nullptr, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_INVALID_VALUE);
  CUgraphNode dep = nullptr;
  EXPECT_EQ(cuStreamBeginCaptureToGraph(s, graph, &dep, nullptr, 1, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBeginCaptureToGraph(nullptr, graph, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(cuStreamBeginCaptureToGraph(s, graph, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_ERROR_ILLEGAL_STATE);  // still being captured into
  ASSERT_EQ(k_fill(k, s, fb, 4, 2.5f), CUDA_SUCCESS);
  CUgraph out = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &out), CUDA_SUCCESS);
  EXPECT_EQ(out, graph);  // the same graph, now holding the captured work
  EXPECT_EQ(fb[0], 0.0f);

  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(fb[i], 2.5f);

  // A stream write captured into it: instantiation fails; without it, fine.
  CUgraph with_memop = nullptr;
  ASSERT_EQ(cuGraphCreate(&with_memop, 0), CUDA_SUCCESS);
  using CaptureToGraph =
      CUresult (*)(CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t, CUstreamCaptureMode);
  auto to_graph_ptsz = reinterpret_cast<CaptureToGraph>(sym("cuStreamBeginCaptureToGraph_ptsz"));
  ASSERT_EQ(to_graph_ptsz(s, with_memop, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32(s, flag, 1, 0), CUDA_SUCCESS);
  ASSERT_EQ(k_fill(k, s, fb, 4, 1.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamEndCapture(s, &out), CUDA_SUCCESS);
  CUgraphExec bad = nullptr;
  EXPECT_EQ(cuGraphInstantiateWithFlags(&bad, with_memop, 0), CUDA_ERROR_NOT_SUPPORTED);
  using Instantiate5 = CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);
  EXPECT_EQ(reinterpret_cast<Instantiate5>(sym("cuGraphInstantiate_v2"))(&bad, with_memop, nullptr, nullptr, 0),
            CUDA_ERROR_NOT_SUPPORTED);
  // The same work captured the ordinary way instantiates.
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32(s, flag, 1, 0), CUDA_SUCCESS);
  CUgraph ordinary = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &ordinary), CUDA_SUCCESS);
  CUgraphExec good = nullptr;
  EXPECT_EQ(cuGraphInstantiateWithFlags(&good, ordinary, 0), CUDA_SUCCESS);

  destroy_graphs({exec, good}, {graph, with_memop, ordinary});
}

TEST_F(SimTest, SixtyFourBitMemopsByDefault) {
  int a = -1;
  ASSERT_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0), CUDA_SUCCESS);
  EXPECT_EQ(a, 1);  // as on an H200
}

// A name the sim does not implement answers 801 once initialised.
TEST_F(SimTest, UnimplementedExportsAnswerNotSupported) {
  for (const char* name : {"cuArrayCreate", "cuTexRefSetAddress_v2", "cuMemPoolCreate", "cuGetExportTable"}) {
    auto fn = reinterpret_cast<CUresult (*)()>(sym(name));
    ASSERT_NE(fn, nullptr) << name;
    EXPECT_EQ(fn(), CUDA_ERROR_NOT_SUPPORTED) << name;
  }
}

// ======================================================================
// Child-process tests
// ======================================================================

using SimChildTest = ::testing::Test;

// Device memory of `bytes` bytes (for a child: a failure ends it).
CUdeviceptr child_alloc(size_t bytes) {
  CUdeviceptr d = 0;
  CHILD_EQ(cuMemAlloc(&d, bytes), CUDA_SUCCESS);
  return d;
}

// A new stream (for a child: a failure ends it).
CUstream child_stream() {
  CUstream s = nullptr;
  CHILD_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  return s;
}

// Device memory holding a copy of `host` (for a child: a failure ends it).
template <class T, size_t N>
CUdeviceptr child_copy_to_device(const T (&host)[N]) {
  CUdeviceptr d = child_alloc(sizeof host);
  CHILD_EQ(cuMemcpyHtoD(d, host, sizeof host), CUDA_SUCCESS);
  return d;
}

// A child that leaves 30 s of work queued and exits: it exits 0, within 10 s, its stderr matching `text`.
void expect_prompt_exit(void (*child)(), const char* text) {
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

SIM_CHILD_TEST(BeforeCuInit) {
  int n = 0;
  CHILD_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  CUstream s;
  CHILD_EQ(cuStreamCreate(&s, 0), CUDA_ERROR_NOT_INITIALIZED);
  CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_NOT_INITIALIZED);
  CHILD_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_INITIALIZED);
  int v = 0;
  CHILD_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  CHILD_EQ(v, 13000);
  const char* name = nullptr;
  CHILD_EQ(cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &name), CUDA_SUCCESS);
  CHILD_CHECK(strcmp(name, "CUDA_ERROR_NOT_INITIALIZED") == 0);
  void* fn = nullptr;
  CHILD_EQ(cuGetProcAddress("cuInit", &fn, CUDA_VERSION, 0, nullptr), CUDA_SUCCESS);
  CHILD_CHECK(fn == dlsym(RTLD_DEFAULT, "cuInit"));
  CHILD_EQ(reinterpret_cast<CUresult (*)(unsigned)>(fn)(0), CUDA_SUCCESS);
  CHILD_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  // No current context yet.
  CHILD_EQ(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
  CUdeviceptr p;
  CHILD_EQ(cuMemAlloc(&p, 4), CUDA_ERROR_INVALID_CONTEXT);
  child_exit_ok();
}

SIM_CHILD_TEST(NllAssertIsStickyAndPrintedOnce) {
  Fd2Capture cap;
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  const int64_t targets[5] = {0, 1, -100, 7, 9};  // first offender: i = 3
  CUdeviceptr out = child_alloc(4), tgt = child_copy_to_device(targets);
  CHILD_EQ(k_nll(k, nullptr, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(tgt), 5, 5, -100), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the fault has happened by now
  CHILD_STDERR(cap, "");                                       // but no call has returned it yet
  CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_ASSERT);
  CHILD_STDERR(cap, kNllLine);
  // Sticky for every later call; the text is not repeated.
  CHILD_EQ(cuStreamQuery(nullptr), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_ASSERT);
  CUdeviceptr p;
  CHILD_EQ(cuMemAlloc(&p, 4), CUDA_ERROR_ASSERT);
  CHILD_EQ(k_fill(k, nullptr, reinterpret_cast<float*>(out), 1, 1.0f), CUDA_ERROR_ASSERT);
  CUstream s;
  CHILD_EQ(cuStreamCreate(&s, 0), CUDA_ERROR_ASSERT);
  int n = 0;
  CHILD_EQ(cuDeviceGetCount(&n), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuInit(0), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuMemFree(out), CUDA_ERROR_ASSERT);
  float host = 0;
  CHILD_EQ(cuMemcpyDtoH(&host, tgt, 4), CUDA_ERROR_ASSERT);
  // These keep working.
  const char* str = nullptr;
  CHILD_EQ(cuGetErrorName(CUDA_ERROR_ASSERT, &str), CUDA_SUCCESS);
  CHILD_CHECK(strcmp(str, "CUDA_ERROR_ASSERT") == 0);
  CHILD_EQ(cuGetErrorString(CUDA_ERROR_ASSERT, &str), CUDA_SUCCESS);
  CHILD_CHECK(strcmp(str, "device-side assert triggered") == 0);
  int v = 0;
  CHILD_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  void* fn = nullptr;
  CHILD_EQ(cuGetProcAddress("cuLaunchKernel", &fn, CUDA_VERSION, 0, nullptr), CUDA_SUCCESS);
  CHILD_CHECK(fn != nullptr);
  CHILD_STDERR(cap, kNllLine);
  child_exit_ok();
}

SIM_CHILD_TEST(IndexSelectPrintsEveryOffender) {
  Fd2Capture cap;
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  const int64_t index[6] = {0, 5, 2, -1, 4, 3};  // src_size 4: offenders 1, 3, 4
  CUdeviceptr out = child_alloc(6 * 4), idx = child_copy_to_device(index);
  CUstream s = child_stream();
  CHILD_EQ(k_index(k, s, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(idx), 6, 4), CUDA_SUCCESS);
  CHILD_EQ(cuStreamSynchronize(s), CUDA_ERROR_ASSERT);
  CHILD_STDERR(cap, index_line(1) + index_line(3) + index_line(4));
  CHILD_EQ(cuStreamDestroy(s), CUDA_ERROR_ASSERT);  // released anyway
  CHILD_STDERR(cap, index_line(1) + index_line(3) + index_line(4));
  child_exit_ok();
}

SIM_CHILD_TEST(IllegalAddressHasNoText) {
  Fd2Capture cap;
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  CUevent ev;
  CHILD_EQ(cuEventCreate(&ev, 0), CUDA_SUCCESS);
  CHILD_EQ(k_sleep(k, CU_STREAM_PER_THREAD, 30000), CUDA_SUCCESS);  // so the next calls come first
  CHILD_EQ(k_illegal(k, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  CHILD_EQ(cuEventRecord(ev, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  CHILD_EQ(cuEventSynchronize(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHILD_EQ(cuEventQuery(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  const char* str = nullptr;
  CHILD_EQ(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &str), CUDA_SUCCESS);
  CHILD_CHECK(strcmp(str, "CUDA_ERROR_ILLEGAL_ADDRESS") == 0);
  CHILD_EQ(cuGetErrorString(CUDA_ERROR_ILLEGAL_ADDRESS, &str), CUDA_SUCCESS);
  CHILD_CHECK(strcmp(str, "an illegal memory access was encountered") == 0);
  CHILD_STDERR(cap, "");
  child_exit_ok();
}

SIM_CHILD_TEST(StickyAcrossThreadsTextOnce) {
  Fd2Capture cap;
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  const int64_t targets[5] = {0, 1, 2, 50, 60};
  CUdeviceptr out = child_alloc(4), tgt = child_copy_to_device(targets);
  CUstream s = child_stream();
  CHILD_EQ(k_sleep(k, s, 30000), CUDA_SUCCESS);
  CHILD_EQ(k_nll(k, s, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(tgt), 5, 5, -100), CUDA_SUCCESS);
  // Many threads (none with a current context) race for the sticky error.
  std::atomic<int> asserts{0}, others{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      CUresult r;
      if (t % 2 == 0) {
        r = cuCtxSynchronize();
      } else {
        while ((r = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY) std::this_thread::yield();
      }
      (r == CUDA_ERROR_ASSERT ? asserts : others).fetch_add(1);
    });
  }
  for (auto& th : threads) th.join();
  CHILD_EQ(asserts.load(), 8);
  CHILD_EQ(others.load(), 0);
  std::string line =
      "Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [3,0,0] Assertion "
      "`t >= 0 && t < n_classes` failed.\n";
  CHILD_STDERR(cap, line);
  // The launching thread sees it too.
  CHILD_EQ(cuStreamQuery(s), CUDA_ERROR_ASSERT);
  CHILD_STDERR(cap, line);
  child_exit_ok();
}

SIM_CHILD_TEST(FaultDiscardsQueuedWorkOnEveryStream) {
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  alignas(64) static uint32_t crumbs[4];
  CHILD_EQ(cuMemHostRegister(crumbs, sizeof crumbs, 0), CUDA_SUCCESS);
  CUdeviceptr d = 0;
  CHILD_EQ(cuMemHostGetDevicePointer(&d, crumbs, 0), CUDA_SUCCESS);
  CUstream s1 = child_stream(), s2 = child_stream();
  // s2: a long sleep that is running when the fault happens, then a breadcrumb.
  CHILD_EQ(cuStreamWriteValue32(s2, d + 12, 4, 0), CUDA_SUCCESS);
  CHILD_EQ(k_sleep(k, s2, 200000), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(s2, d + 4, 2, 0), CUDA_SUCCESS);
  while (load(&crumbs[3]) != 4u) std::this_thread::yield();  // s2's worker is at the sleep
  // s1: breadcrumb, short sleep, the fault, breadcrumb.
  CHILD_EQ(cuStreamWriteValue32(s1, d + 8, 3, 0), CUDA_SUCCESS);
  CHILD_EQ(k_sleep(k, s1, 40000), CUDA_SUCCESS);
  CHILD_EQ(k_illegal(k, s1), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(s1, d, 1, 0), CUDA_SUCCESS);
  // Nothing has faulted yet: non-waiting calls succeed.
  CHILD_EQ(cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
  child_alloc(4);
  // Waits for the running sleep on s2, then reports the fault.
  auto t0 = Clock::now();
  CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHILD_CHECK(Clock::now() - t0 >= std::chrono::milliseconds(100));
  CHILD_EQ(load(&crumbs[2]), 3u);  // before the fault: landed
  CHILD_EQ(load(&crumbs[0]), 0u);  // behind the fault: discarded
  CHILD_EQ(load(&crumbs[1]), 0u);  // behind the running sleep: discarded
  CHILD_EQ(cuStreamWriteValue32(s1, d, 1, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHILD_EQ(cuMemHostUnregister(crumbs), CUDA_ERROR_ILLEGAL_ADDRESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHILD_EQ(load(&crumbs[0]), 0u);
  child_exit_ok();
}

SIM_CHILD_TEST(GraphReplayFaults) {
  Fd2Capture cap;
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  const int64_t index[2] = {0, 1};
  CUdeviceptr out = child_alloc(16), idx = child_copy_to_device(index);
  CUstream s = child_stream();
  CHILD_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  CHILD_EQ(k_index(k, s, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(idx), 2, 2), CUDA_SUCCESS);
  CUgraph g;
  CHILD_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  CUgraphExec x;
  CHILD_EQ(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  CHILD_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS);
  CHILD_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);  // valid indices
  const int64_t bad[2] = {0, 2};
  CHILD_EQ(cuMemcpyHtoD(idx, bad, sizeof bad), CUDA_SUCCESS);
  CHILD_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS);  // now index 1 is out of range
  CHILD_EQ(cuStreamSynchronize(s), CUDA_ERROR_ASSERT);
  CHILD_STDERR(cap, index_line(1));
  CHILD_EQ(cuGraphLaunch(x, s), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuGraphExecDestroy(x), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuGraphDestroy(g), CUDA_ERROR_ASSERT);
  child_exit_ok();
}

// A process that exits with work queued exits promptly.
void ExitWithQueuedWorkIsPromptChild() {
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  CUstream s = child_stream();
  static CUdeviceptr flag = child_alloc(8);
  for (int i = 0; i < 4; ++i) {
    CHILD_EQ(k_sleep(k, s, 30 * 1000 * 1000), CUDA_SUCCESS);  // 30 s each
    CHILD_EQ(k_sleep(k, CU_STREAM_PER_THREAD, 30 * 1000 * 1000), CUDA_SUCCESS);
    CHILD_EQ(k_sleep(k, nullptr, 30 * 1000 * 1000), CUDA_SUCCESS);
  }
  CHILD_EQ(cuStreamWriteValue32(s, flag, 1, 0), CUDA_SUCCESS);
  static CUstream gs = s;
  // An exit handler registered after the sim was loaded still sees a working sim.
  atexit([] {
    if (cuStreamQuery(gs) != CUDA_ERROR_NOT_READY || cuStreamQuery(nullptr) != CUDA_ERROR_NOT_READY) {
      fprintf(stderr, "atexit: stream should still be busy\n");
      _exit(3);
    }
    unsigned long long id = 0;
    if (cuStreamGetId(gs, &id) != CUDA_SUCCESS || id < 1000) _exit(4);
    fprintf(stderr, "atexit handler ok\n");
  });
  child_exit_ok();
}

TEST(SimChildTest, ExitWithQueuedWorkIsPrompt) {
  expect_prompt_exit(ExitWithQueuedWorkIsPromptChild, "atexit handler ok");
}

void ExitHandlerCanSynchronizeChild() {
  static Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  static CUstream s = child_stream();
  static CUdeviceptr flag = child_alloc(8);
  CHILD_EQ(k_sleep(k, s, 30000), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue64(s, flag, 5, 0), CUDA_SUCCESS);
  atexit([] {
    if (cuCtxSynchronize() != CUDA_SUCCESS) _exit(3);
    if (load(reinterpret_cast<uint64_t*>(flag)) != 5u) _exit(4);
    // Launch, then synchronize again, from the exit handler.
    if (k_fill(k, s, reinterpret_cast<float*>(flag), 1, 1.0f) != CUDA_SUCCESS) _exit(5);
    if (cuStreamSynchronize(s) != CUDA_SUCCESS) _exit(6);
    if (reinterpret_cast<float*>(flag)[0] != 1.0f) _exit(7);
    fprintf(stderr, "atexit sync ok\n");
  });
  child_exit_ok();
}

TEST(SimChildTest, ExitHandlerCanSynchronize) {
  EXPECT_EXIT(ExitHandlerCanSynchronizeChild(), ::testing::ExitedWithCode(0), "atexit sync ok");
}

// Calls made after the sim's own destructor (from a library finalized after it)
// still work: queued and new work is discarded, waits return at once.
void AfterSimShutdownChild() {
  static Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  static CUstream s = child_stream();
  static CUdeviceptr buf = child_alloc(16);
  CHILD_EQ(k_sleep(k, s, 30 * 1000 * 1000), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(s, buf, 1, 0), CUDA_SUCCESS);
  CHILD_EQ(k_sleep(k, nullptr, 30 * 1000 * 1000), CUDA_SUCCESS);
  sim_test_call_at_late_fini([] {
    if (cuStreamQuery(s) != CUDA_SUCCESS) {  // would be NOT_READY had the sim not shut down yet
      fprintf(stderr, "late: the sim has not shut down before this library's destructor\n");
      _exit(3);
    }
    auto t0 = Clock::now();
    if (cuCtxSynchronize() != CUDA_SUCCESS) _exit(4);
    if (k_fill(k, s, reinterpret_cast<float*>(buf), 4, 1.0f) != CUDA_SUCCESS) _exit(5);
    if (cuStreamWriteValue32(s, buf + 4, 2, 0) != CUDA_SUCCESS) _exit(6);
    CUevent ev;
    if (cuEventCreate(&ev, 0) != CUDA_SUCCESS || cuEventRecord(ev, s) != CUDA_SUCCESS) _exit(7);
    if (cuEventSynchronize(ev) != CUDA_SUCCESS || cuEventQuery(ev) != CUDA_SUCCESS) _exit(8);
    if (cuStreamSynchronize(s) != CUDA_SUCCESS || cuStreamQuery(CU_STREAM_PER_THREAD) != CUDA_SUCCESS) _exit(9);
    CUstream s2;
    if (cuStreamCreate(&s2, 0) != CUDA_SUCCESS || k_sleep(k, s2, 1000000) != CUDA_SUCCESS) _exit(10);
    if (cuStreamDestroy(s2) != CUDA_SUCCESS) _exit(11);
    uint32_t host[2] = {9, 9};
    if (cuMemcpyDtoH(host, buf, sizeof host) != CUDA_SUCCESS) _exit(12);
    if (host[0] != 0 || host[1] != 0) _exit(13);  // discarded, never ran
    if (Clock::now() - t0 > std::chrono::seconds(2)) _exit(14);
    if (cuMemFree(buf) != CUDA_SUCCESS || cuStreamDestroy(s) != CUDA_SUCCESS) _exit(15);
    fprintf(stderr, "late calls ok\n");
  });
  child_exit_ok();
}

TEST(SimChildTest, CallsAfterSimShutdown) { expect_prompt_exit(AfterSimShutdownChild, "late calls ok"); }

// fork(): the child (here without exec) gets a working sim of its own and
// exits cleanly although the parent's workers do not exist in it.
[[maybe_unused]] void ForkChildUsesSimChild() {
  static Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  CUstream s = child_stream();
  CUdeviceptr buf = child_alloc(4 * sizeof(float));
  CHILD_EQ(k_sleep(k, s, 300000), CUDA_SUCCESS);  // running in the parent at fork time
  CHILD_EQ(k_sleep(k, nullptr, 300000), CUDA_SUCCESS);
  CHILD_EQ(k_fill(k, s, reinterpret_cast<float*>(buf), 4, 1.0f), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  fflush(stderr);
  pid_t pid = fork();
  CHILD_CHECK(pid >= 0);
  if (pid == 0) {
    auto t0 = Clock::now();
    CHILD_EQ(cuStreamQuery(s), CUDA_SUCCESS);  // the parent's work is not ours
    CHILD_EQ(k_fill(k, s, reinterpret_cast<float*>(buf), 2, 2.0f), CUDA_SUCCESS);
    CHILD_EQ(k_fill(k, CU_STREAM_PER_THREAD, reinterpret_cast<float*>(buf) + 3, 1, 4.0f), CUDA_SUCCESS);
    CHILD_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    float host[4];
    CHILD_EQ(cuMemcpyDtoH(host, buf, sizeof host), CUDA_SUCCESS);
    CHILD_CHECK(host[0] == 2.0f && host[1] == 2.0f && host[2] == 0.0f && host[3] == 4.0f);
    CHILD_EQ(k_sleep(k, s, 10 * 1000 * 1000), CUDA_SUCCESS);  // cut short at exit
    CHILD_CHECK(Clock::now() - t0 < std::chrono::milliseconds(250));
    exit(0);
  }
  int status = -1;
  CHILD_EQ(waitpid(pid, &status, 0), pid);
  CHILD_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The parent is unaffected.
  CHILD_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  CHILD_EQ(reinterpret_cast<float*>(buf)[0], 1.0f);
  CHILD_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  child_exit_ok();
}

TEST(SimChildTest, ForkChildUsesSim) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support new threads after a multi-threaded fork";
#else
  auto t0 = Clock::now();
  EXPECT_EXIT(ForkChildUsesSimChild(), ::testing::ExitedWithCode(0), "");
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
#endif
}

// The assert text goes through stdio's stderr, never write(2): with stderr
// pointed at a memory stream, fd 2 sees nothing. The call that prints it is
// the first to observe the fault, on whatever thread.
SIM_CHILD_TEST(AssertTextThroughStdio) {
  Fd2Capture cap;
  char* mem = nullptr;
  size_t len = 0;
  FILE* real_stderr = stderr;
  stderr = open_memstream(&mem, &len);
  CHILD_CHECK(stderr != nullptr);
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  CUlibrary lib = nullptr;
  CHILD_EQ(cuLibraryLoadData(&lib, "fatbin", nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  CUkernel nll = nullptr;
  CHILD_EQ(cuLibraryGetKernel(&nll, lib, "nll_loss_forward_reduce_cuda_kernel_2d"), CUDA_SUCCESS);
  const int64_t targets[5] = {0, 1, -100, 7, 9};
  CUdeviceptr out = child_alloc(4), tgt = child_copy_to_device(targets);
  int32_t n = 5, classes = 5;
  int64_t ignore = -100;
  void* args[] = {&out, &tgt, &n, &classes, &ignore};
  CHILD_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(nll), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr),
           CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Another thread's call observes the fault first and prints.
  std::thread([] {
    CUcontext c = nullptr;
    CHILD_EQ(cuCtxGetCurrent(&c), CUDA_ERROR_ASSERT);
  }).join();
  fflush(stderr);
  CHILD_CHECK(std::string(mem, len) == kNllLine);
  CHILD_EQ(cuCtxSynchronize_v2(nullptr), CUDA_ERROR_ASSERT);
  fflush(stderr);
  CHILD_CHECK(std::string(mem, len) == kNllLine);  // once
  fclose(stderr);
  stderr = real_stderr;
  free(mem);
  CHILD_STDERR(cap, "");  // nothing reached fd 2 by write(2)
  child_exit_ok();
}

// SIM_CUDA_NO_64BIT_MEMOPS=1: attribute 122 is 0 and 64-bit writes fail; 32-bit ones work.
SIM_CHILD_TEST(No64BitMemops) {
  setenv("SIM_CUDA_NO_64BIT_MEMOPS", "1", 1);
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  int a = -1;
  CHILD_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0), CUDA_SUCCESS);
  CHILD_EQ(a, 0);
  CHILD_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 0), CUDA_SUCCESS);
  CUdeviceptr flag = child_alloc(8);
  CHILD_EQ(cuStreamWriteValue64(nullptr, flag, 5, 0), CUDA_ERROR_NOT_SUPPORTED);
  using Write64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
  CHILD_EQ(reinterpret_cast<Write64>(sym("cuStreamWriteValue64_v2_ptsz"))(nullptr, flag, 5, 0),
           CUDA_ERROR_NOT_SUPPORTED);
  CHILD_EQ(cuStreamWriteValue32(nullptr, flag, 5, 0), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  CHILD_EQ(load(reinterpret_cast<uint32_t*>(flag)), 5u);
  child_exit_ok();
}

// SIM_CUDA_PROC_LOG=<file>: every cuGetProcAddress request, one line each.
SIM_CHILD_TEST(ProcAddressLog) {
  char path[] = "/tmp/sim_test_proclog_XXXXXX";
  int fd = mkstemp(path);
  CHILD_CHECK(fd >= 0);
  close(fd);
  setenv("SIM_CUDA_PROC_LOG", path, 1);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st;
  CHILD_EQ(cuGetProcAddress("cuCtxSynchronize", &fn, 13000, 0, &st), CUDA_SUCCESS);
  CHILD_EQ(cuGetProcAddress("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
           CUDA_SUCCESS);
  CHILD_EQ(cuGetProcAddress("cuKernelGetName", &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
  CHILD_EQ(cuGetProcAddress("cuNoSuch", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
  FILE* f = fopen(path, "r");
  CHILD_CHECK(f != nullptr);
  char buf[1024] = {};
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  unlink(path);
  std::string want =
      "cuCtxSynchronize 13000 0 -> 0 0 cuCtxSynchronize_v2\n"
      "cuLaunchKernel 12000 2 -> 0 0 cuLaunchKernel_ptsz\n"
      "cuKernelGetName 12000 0 -> 500 2 -\n"
      "cuNoSuch 13000 0 -> 500 1 -\n";
  if (std::string(buf, got) != want) {
    dprintf(g_report_fd, "log:\n%s--- want ---\n%s", buf, want.c_str());
    _exit(1);
  }
  child_exit_ok();
}

// Unimplemented names: NOT_INITIALIZED before cuInit, the sticky error (and
// its text) after a fault, like any call that can surface one.
SIM_CHILD_TEST(UnimplementedAfterFault) {
  Fd2Capture cap;
  auto array_create = reinterpret_cast<CUresult (*)()>(sym("cuArrayCreate_v2"));
  CHILD_CHECK(array_create != nullptr);
  CHILD_EQ(array_create(), CUDA_ERROR_NOT_INITIALIZED);
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  CHILD_EQ(array_create(), CUDA_ERROR_NOT_SUPPORTED);
  CHILD_EQ(k_illegal(k, nullptr), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHILD_EQ(array_create(), CUDA_ERROR_ILLEGAL_ADDRESS);
  auto export_table = reinterpret_cast<CUresult (*)()>(sym("cuGetExportTable"));
  CHILD_EQ(export_table(), CUDA_ERROR_NOT_SUPPORTED);  // cannot surface a fault
  child_exit_ok();
}

// cuDevicePrimaryCtxReset stands in for the driver's teardown at exit: after it every call answers 4, also after
// a fault that no call observed, and the assert text is never printed.
SIM_CHILD_TEST(TeardownAfterUnobservedFault) {
  Fd2Capture cap;
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  CUdeviceptr out = 0, tgt = 0;
  CHILD_EQ(cuMemAlloc(&out, 4), CUDA_SUCCESS);
  CHILD_EQ(cuMemAlloc(&tgt, 8), CUDA_SUCCESS);
  const int64_t targets[1] = {7};
  CHILD_EQ(cuMemcpyHtoD(tgt, targets, sizeof targets), CUDA_SUCCESS);
  CHILD_EQ(k_nll(k, nullptr, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(tgt), 1, 5, -100), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the fault has happened; no call observed it
  CHILD_EQ(cuDevicePrimaryCtxReset(1), CUDA_ERROR_INVALID_DEVICE);
  CHILD_EQ(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  CHILD_EQ(cuStreamQuery(nullptr), CUDA_ERROR_DEINITIALIZED);
  CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_DEINITIALIZED);
  CUcontext ctx = nullptr;
  CHILD_EQ(cuCtxGetCurrent(&ctx), CUDA_ERROR_DEINITIALIZED);
  int v = 0;
  CHILD_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  CHILD_STDERR(cap, "");
  child_exit_ok();
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
