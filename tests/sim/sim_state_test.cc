// Unit test of the simulated CUDA driver: state, sticky errors and the fault text, the error table, cuInit, exit
// and fork (sim_state.cc).
// Part of sim_test; the shared helpers are in sim_test_support.h.

#include "sim_test_support.h"

namespace sim_test {
namespace {

// ======================================================================
// In-process tests (nothing here faults)
// ======================================================================

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

// ======================================================================
// Child-process tests
// ======================================================================

SIM_CHILD_TEST(BeforeCuInit) {
  int n = 0;
  CHILD_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  CUstream s;
  CHILD_EQ(cuStreamCreate(&s, 0), CUDA_ERROR_NOT_INITIALIZED);
  CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_NOT_INITIALIZED);
  CHILD_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_INITIALIZED);
  int v = 0;
  CHILD_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  CHILD_EQ(v, CUDA_VERSION);  // the headers' (13050 for the pinned CUDA 13.5 set)
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
  CUcontext ctx = nullptr;
  CHILD_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  CHILD_EQ(k_sleep(k, s, 30000), CUDA_SUCCESS);
  CHILD_EQ(k_nll(k, s, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(tgt), 5, 5, -100), CUDA_SUCCESS);
  // Many threads (none with a current context) race for the sticky error, each naming the context or its stream.
  std::atomic<int> asserts{0}, others{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      CUresult r;
      if (t % 2 == 0) {
        r = cuCtxSynchronize_v2(ctx);
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

// SIM_CUDA_ASSERT_BLOCK: the block an assert line names, [0,0,0] by default and with "zero", the launch's last block
// with "last" (a grid of (7,2,3): [6,1,2]); read once, so each mode in its own child.
void assert_block_child(const char* mode, const char* block) {
  if (mode != nullptr) setenv("SIM_CUDA_ASSERT_BLOCK", mode, 1);
  Fd2Capture cap;
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  const int64_t targets[3] = {0, 9, 1};
  CUdeviceptr out = child_alloc(4), tgt = child_copy_to_device(targets);
  CUstream s = child_stream();
  int32_t n = 3, classes = 5;
  int64_t ignore = -100;
  void* args[] = {&out, &tgt, &n, &classes, &ignore};
  CHILD_EQ(cuLaunchKernel(k.nll, 7, 2, 3, 32, 1, 1, 0, s, args, nullptr), CUDA_SUCCESS);
  CHILD_EQ(cuStreamSynchronize(s), CUDA_ERROR_ASSERT);
  CHILD_STDERR(cap, std::string("Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [") + block +
                        "], thread: [1,0,0] Assertion `t >= 0 && t < n_classes` failed.\n");
  child_exit_ok();
}

SIM_CHILD_TEST(AssertBlockIsZeroByDefault) { assert_block_child(nullptr, "0,0,0"); }
SIM_CHILD_TEST(AssertBlockZero) { assert_block_child("zero", "0,0,0"); }
SIM_CHILD_TEST(AssertBlockLastIsTheGridsLastBlock) { assert_block_child("last", "6,1,2"); }

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

// The main thread's per-thread stream, used before exit, still works in an exit handler: exit() runs the thread's
// TLS destructors before the atexit handlers (cdsa's exit probe queries and marks it there; the sim's list of a
// thread's per-thread streams was a thread_local vector, freed by then: a use after free, ASan's heap corruption).
void ExitHandlerUsesPerThreadStreamChild() {
  static Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  static CUdeviceptr buf = child_alloc(16);
  static unsigned long long id = 0;
  CHILD_EQ(k_sleep(k, CU_STREAM_PER_THREAD, 1000), CUDA_SUCCESS);
  CHILD_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &id), CUDA_SUCCESS);
  atexit([] {
    unsigned long long again = 0;
    if (cuStreamGetId(CU_STREAM_PER_THREAD, &again) != CUDA_SUCCESS || again != id) _exit(3);
    if (cuStreamWriteValue32(CU_STREAM_PER_THREAD, buf, 7, 0) != CUDA_SUCCESS) _exit(4);
    if (cuStreamSynchronize(CU_STREAM_PER_THREAD) != CUDA_SUCCESS) _exit(5);
    if (load(reinterpret_cast<uint32_t*>(buf)) != 7u) _exit(6);
    fprintf(stderr, "atexit per-thread ok\n");
  });
  child_exit_ok();
}

TEST(SimChildTest, ExitHandlerUsesPerThreadStream) {
  EXPECT_EXIT(ExitHandlerUsesPerThreadStreamChild(), ::testing::ExitedWithCode(0), "atexit per-thread ok");
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
  CUcontext ctx = nullptr;
  CHILD_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);  // before the launch: it may fault at once
  CHILD_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(nll), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr),
           CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Another thread's call observes the fault first and prints (it names the faulted context).
  std::thread([ctx] { CHILD_EQ(cuCtxSetCurrent(ctx), CUDA_ERROR_ASSERT); }).join();
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

// cuDevicePrimaryCtxReset resets the primary context for real (what cudart's exit handlers do before a late exit
// probe): a fault no call observed goes with it, unreported and its text never printed; while the context is
// inactive, calls in it answer 709; retained again it is a new incarnation (new id, its old functions gone).
SIM_CHILD_TEST(PrimaryResetAfterUnobservedFault) {
  Fd2Capture cap;
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  CHILD_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  CUdeviceptr out = 0, tgt = 0;
  CHILD_EQ(cuMemAlloc(&out, 4), CUDA_SUCCESS);
  CHILD_EQ(cuMemAlloc(&tgt, 8), CUDA_SUCCESS);
  const int64_t targets[1] = {7};
  CHILD_EQ(cuMemcpyHtoD(tgt, targets, sizeof targets), CUDA_SUCCESS);
  CHILD_EQ(k_nll(k, nullptr, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(tgt), 1, 5, -100), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the fault has happened; no call observed it
  CHILD_EQ(cuDevicePrimaryCtxReset(1), CUDA_ERROR_INVALID_DEVICE);
  CHILD_EQ(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  CHILD_EQ(cuStreamQuery(nullptr), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHILD_EQ(cuCtxSynchronize_v2(ctx), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext cur = nullptr;
  CHILD_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);  // still current, inactive
  CHILD_CHECK(cur == ctx);
  unsigned flags = 1;
  int active = 1;
  CHILD_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  CHILD_EQ(active, 0);
  const char* name = nullptr;
  CHILD_EQ(cuFuncGetName(&name, k.nll), CUDA_ERROR_INVALID_HANDLE);  // freed with the context
  int v = 0;
  CHILD_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  // Retained again: a new incarnation that works.
  CUcontext again = nullptr;
  CHILD_EQ(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  CHILD_CHECK(again == ctx);  // the same handle
  unsigned long long id = 0;
  CHILD_EQ(cuCtxGetId(again, &id), CUDA_SUCCESS);
  CHILD_CHECK(id > 1);
  CHILD_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  CHILD_EQ(active, 1);
  CHILD_EQ(k_fill(k, nullptr, reinterpret_cast<float*>(out), 1, 1.0f), CUDA_ERROR_INVALID_HANDLE);  // the old function
  Kernels fresh;
  CHILD_EQ(setup(fresh), CUDA_SUCCESS);
  CHILD_EQ(k_fill(fresh, nullptr, reinterpret_cast<float*>(out), 1, 2.0f), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  CHILD_CHECK(reinterpret_cast<float*>(out)[0] == 2.0f);
  CHILD_STDERR(cap, "");
  child_exit_ok();
}

}  // namespace
}  // namespace sim_test
