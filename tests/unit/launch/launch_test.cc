// The launch path (shim/record/launch.h) on its own: linked with the record and common stages only (no fault stage,
// no report, no symbolizer), over a driver table this file defines. What a launch leaves behind: its record in the
// ring, its stream's numbers and breadcrumb, the exit probe's handle; what the protocol holds: the launch in flight
// until it is recorded, the launch filter, the kernel's name.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "shim/common/config.h"
#include "shim/common/driver.h"
#include "shim/common/started.h"
#include "shim/common/thread_slots.h"
#include "shim/record/assert_capture.h"
#include "shim/record/graph_capture.h"
#include "shim/record/launch.h"
#include "shim/record/recorder.h"

namespace cdsa {

// ---------------------------------------------------------------- the driver this test stands in for
namespace {

// Without its newline: the capture publishes only whole lines, so what the breadcrumb's call printed is kept only
// because the launch path keeps it.
constexpr const char* kAssertLine = "k.cu:1: k: block: [0,0,0], thread: [0,0,0] Assertion `x` failed.";

struct FakeDriver {
  std::atomic<bool> capturing{false};             // cuStreamIsCapturing: every stream captures
  std::atomic<CUresult> write_result{CUDA_SUCCESS};  // what cuStreamWriteValue64 answers
  std::atomic<bool> print_assert{false};          // ... after printing the device's assert line on stderr
  std::atomic<bool> func_names{true};             // cuFuncGetName knows the handles
  std::atomic<int> writes{0};
  std::atomic<bool> rename{false};     // cuFuncGetName names 0xf1 "_Z7reusedv" (its address reused)
  std::atomic<int> primary_active{1};  // what cuDevicePrimaryCtxGetState answers
};
FakeDriver g_fake;

CUcontext fake_ctx() { return reinterpret_cast<CUcontext>(0xc0); }
// A stream of another context than the current one (cuStreamGetCtx says so).
constexpr uintptr_t kOtherCtxStream = 10;
CUcontext other_ctx() { return reinterpret_cast<CUcontext>(0xc1); }

}  // namespace

const Driver& driver() noexcept {
  static const Driver d = [] {
    Driver t;
    t.StreamGetId = [](CUstream s, unsigned long long* id) {
      *id = 1000 + reinterpret_cast<uintptr_t>(s);
      return CUDA_SUCCESS;
    };
    t.CtxGetCurrent = [](CUcontext* c) {
      *c = fake_ctx();
      return CUDA_SUCCESS;
    };
    t.CtxGetId = [](CUcontext, unsigned long long* id) {
      *id = 5;
      return CUDA_SUCCESS;
    };
    t.FuncGetName = [](const char** name, CUfunction f) {
      if (!g_fake.func_names) return CUDA_ERROR_INVALID_HANDLE;
      *name = reinterpret_cast<uintptr_t>(f) == 0xf1 ? (g_fake.rename ? "_Z7reusedv" : "_Z7kernel1v") : "_Z7kernel2v";
      return CUDA_SUCCESS;
    };
    t.StreamGetCtx = [](CUstream s, CUcontext* c) {
      *c = reinterpret_cast<uintptr_t>(s) == kOtherCtxStream ? other_ctx() : fake_ctx();
      return CUDA_SUCCESS;
    };
    t.DevicePrimaryCtxGetState = [](CUdevice, unsigned* flags, int* active) {
      *flags = 0;
      *active = g_fake.primary_active;
      return CUDA_SUCCESS;
    };
    t.StreamIsCapturing = [](CUstream, CUstreamCaptureStatus* st) {
      *st = g_fake.capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
      return CUDA_SUCCESS;
    };
    // Host memory is device memory here: a mark lands as it is written.
    t.MemHostRegister = [](void*, size_t, unsigned) { return CUDA_SUCCESS; };
    t.MemHostGetDevicePointer = [](CUdeviceptr* d, void* p, unsigned) {
      *d = reinterpret_cast<CUdeviceptr>(p);
      return CUDA_SUCCESS;
    };
    t.DeviceGetAttribute = [](int* v, CUdevice_attribute, CUdevice) {
      *v = 1;
      return CUDA_SUCCESS;
    };
    t.CtxGetDevice = [](CUdevice* d) {
      *d = 0;
      return CUDA_SUCCESS;
    };
    // A PDL group's mark goes behind an event recorded on the stream and waited on (shim/record/breadcrumbs.h).
    t.EventCreate = [](CUevent* e, unsigned) {
      *e = reinterpret_cast<CUevent>(0xe1);
      return CUDA_SUCCESS;
    };
    t.EventRecord = [](CUevent, CUstream) { return CUDA_SUCCESS; };
    t.StreamWaitEvent = [](CUstream, CUevent, unsigned) { return CUDA_SUCCESS; };
    t.EventDestroy = [](CUevent) { return CUDA_SUCCESS; };
    t.StreamWriteValue64 = [](CUstream, CUdeviceptr at, cuuint64_t v, unsigned) {
      ++g_fake.writes;
      if (g_fake.print_assert) fputs(kAssertLine, stderr);
      CUresult r = g_fake.write_result;
      if (r == CUDA_SUCCESS) *reinterpret_cast<uint64_t*>(at) = v;
      return r;
    };
    return t;
  }();
  return d;
}

namespace {

CUfunction func(uintptr_t v) { return reinterpret_cast<CUfunction>(v); }
CUstream stream(uintptr_t v) { return reinterpret_cast<CUstream>(v); }

LaunchInfo kernel_on(uintptr_t s, uintptr_t f = 0xf1) {
  LaunchInfo li;
  li.func = func(f);
  li.stream = stream(s);
  li.grid[0] = 128;
  li.block[0] = 256;
  li.shared_mem = 64;
  return li;
}

// The protocol as the driver wrappers run it, for one successful launch.
void launch(const LaunchInfo& li) {
  LaunchScope scope(li.func, li.stream, li.per_thread);
  scope.succeeded(li);
}

std::vector<LaunchRecord> ring() {
  std::vector<LaunchRecord> out;
  ring_snapshot(&out);
  return out;
}

StreamState* state_of(uintptr_t s) { return stream_state(stream_slot(1000 + s)); }

class Launch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("CDSA_NATIVE_DEPTH", "0", 1);  // stacks are the recorder's test; no unwinder here
    setenv("CDSA_PYTHON_DEPTH", "0", 1);
    load_config();
    ASSERT_TRUE(recorder_init());
    graph_capture_init();
    mark_started();  // warm-up (shim/intercept/lifecycle.cc) is not linked: the test starts cdsa
  }
  void SetUp() override {
    g_fake.capturing = false;
    g_fake.write_result = CUDA_SUCCESS;
    g_fake.print_assert = false;
    g_fake.func_names = true;
    g_fake.rename = false;
    set_launch_filter(nullptr);
  }
};

TEST_F(Launch, ASuccessfulLaunchIsRecordedWithItsStreamNumbersAndBreadcrumb) {
  const uint64_t before = launches_recorded();
  launch(kernel_on(1));
  launch(kernel_on(1, 0xf2));
  std::vector<LaunchRecord> r = ring();
  ASSERT_GE(r.size(), 2u);
  ASSERT_EQ(launches_recorded(), before + 2);
  const LaunchRecord& a = r[r.size() - 2];
  const LaunchRecord& b = r.back();
  EXPECT_EQ(b.seq, a.seq + 1);
  EXPECT_EQ(a.stream_id, 1001u);
  EXPECT_EQ(a.ctx_id, 5u);
  EXPECT_EQ(b.stream_seq, a.stream_seq + 1);
  EXPECT_STREQ(string_at(a.kernel_name), "_Z7kernel1v");
  EXPECT_STREQ(string_at(b.kernel_name), "_Z7kernel2v");
  EXPECT_EQ(a.grid[0], 128u);
  EXPECT_EQ(a.block[0], 256u);
  EXPECT_EQ(a.shared_mem, 64u);
  EXPECT_EQ(a.kind, LaunchKind::Kernel);
  EXPECT_EQ(a.flags, 0);
  StreamState* st = state_of(1);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->launched.load(), b.stream_seq);
  // A stream that carries no PDL launch: each launch's mark is placed at once, in its own call.
  EXPECT_EQ(st->breadcrumb_launched.load(), b.stream_seq);
  EXPECT_EQ(st->deferred.load(), 0u);
  EXPECT_FALSE(b.flags & kFlagSharesMark);
  // A cuLaunchKernelEx launch without PDL attributes too: it may be a PDL primary, but a deferred mark would leave
  // it a tail nothing proves (issue 26), so only a stream that has carried a PDL launch defers.
  LaunchInfo ex = kernel_on(1);
  ex.kind = LaunchKind::KernelEx;
  launch(ex);
  EXPECT_EQ(st->deferred.load(), 0u);
  EXPECT_EQ(st->breadcrumb_launched.load(), st->launched.load());
  // The exit probe's handle and context for the stream.
  EXPECT_EQ(st->last_handle.load(), 1u);
  EXPECT_EQ(st->last_ctx.load(), reinterpret_cast<uintptr_t>(fake_ctx()));
}

TEST_F(Launch, ALaunchUnderStreamCaptureIsRecordedAsCapturedWithoutAMark) {
  launch(kernel_on(2));
  StreamState* st = state_of(2);
  ASSERT_NE(st, nullptr);
  const uint64_t launched = st->launched.load();
  const int writes = g_fake.writes;
  g_fake.capturing = true;
  note_capture_begin(stream(2), false);  // as the wrapper of cuStreamBeginCapture does
  launch(kernel_on(2));
  note_capture_end(stream(2), false, nullptr);
  LaunchRecord r = ring().back();
  EXPECT_TRUE(r.flags & kFlagCaptured);
  EXPECT_EQ(r.stream_seq, 0u);               // it does not run: no number on its stream
  EXPECT_EQ(st->launched.load(), launched);  // nor a mark, which would freeze into the graph
  EXPECT_EQ(g_fake.writes, writes);
}

TEST_F(Launch, AMarkThatMeetsTheFaultKeepsTheDevicesTextAndTheStreamsMarksExact) {
  launch(kernel_on(3));
  g_fake.write_result = CUDA_ERROR_ASSERT;
  g_fake.print_assert = true;
  {
    DriverCallScope call;  // the program's driver call, inside which cdsa writes its mark
    launch(kernel_on(3));
    EXPECT_NE(kept_device_text().find("Assertion `x` failed."), std::string::npos);  // kept before the call ends
  }
  fputc('\n', stderr);
  StreamState* st = state_of(3);
  ASSERT_NE(st, nullptr);
  // The second launch's own mark, placed in its call, met the fault: no later mark can land either, and the launch
  // was submitted the instant before, so it counts as marked (pending).
  EXPECT_EQ(st->breadcrumb_launched.load(), st->launched.load());
  EXPECT_EQ(st->deferred.load(), 0u);
}

TEST_F(Launch, APdlLaunchFoldsTheMarkBeforeItAndSaysSo) {
  LaunchInfo first = kernel_on(6);  // a PDL launch: from now on the stream's marks wait for its next operation
  first.kind = LaunchKind::KernelEx;
  first.programmatic = true;
  launch(first);
  launch(kernel_on(6));  // the primary: first's mark goes out before it, its own is deferred
  const int writes = g_fake.writes;
  LaunchInfo li = kernel_on(6);
  li.kind = LaunchKind::KernelEx;
  li.programmatic = true;
  {
    LaunchScope scope(li.func, li.stream, li.per_thread, MarkBefore::Fold);
    scope.succeeded(li);
  }
  EXPECT_EQ(g_fake.writes, writes);  // nothing of cdsa's between the two kernels
  LaunchRecord r = ring().back();
  EXPECT_TRUE(r.flags & kFlagProgrammatic);
  EXPECT_TRUE(r.flags & kFlagSharesMark);
  launch(kernel_on(6));  // a plain launch after it places the PDL launch's mark, which covers both
  EXPECT_EQ(g_fake.writes, writes + 1);
  StreamState* st = state_of(6);
  EXPECT_EQ(st->breadcrumb_launched.load(), st->launched.load() - 1);
  EXPECT_FALSE(ring().back().flags & kFlagSharesMark);
  // The stream has carried a PDL launch: from now on even a plain launch's mark is deferred.
  EXPECT_EQ(st->deferred.load(), st->launched.load());
}

// A successful synchronizing call proves what its stream (or every stream of its context) had recorded before it
// began (SyncProof), and places the stream's deferred mark first.
TEST_F(Launch, ASuccessfulSyncProvesWhatItsStreamHadRecorded) {
  launch(kernel_on(8));
  LaunchInfo ex = kernel_on(8);
  ex.kind = LaunchKind::KernelEx;
  launch(ex);  // deferred
  StreamState* st = state_of(8);
  const uint64_t seen = st->launched.load();
  SyncProof p = SyncProof::stream(stream(8), false);  // places the deferred mark too
  EXPECT_EQ(st->breadcrumb_launched.load(), seen);
  launch(ex);  // after the call began: not covered
  p.succeeded();
  EXPECT_EQ(st->synced.load(), seen);
  SyncProof c = SyncProof::context(nullptr);  // the current context: every stream first met in it
  c.succeeded();
  EXPECT_EQ(st->synced.load(), st->launched.load());
}

// Device work that is no launch keeps its place among its stream's launches, the NULL stream's too (a synchronous copy:
// Kind::DefaultStreamWork, no stream argument); a successful synchronizing call proves it, as it proves the launches
// recorded before it began (StreamState::ops_synced).
TEST_F(Launch, WorkThatIsNoLaunchKeepsItsPlaceAndASyncProvesIt) {
  launch(kernel_on(11));
  note_stream_work(stream(11), false);  // a copy after the launch
  StreamState* st = state_of(11);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->ops.load(), 1u);
  EXPECT_EQ(st->op_at[0].load(), st->launched.load() + 1);
  SyncProof p = SyncProof::stream(stream(11), false);
  note_stream_work(stream(11), false);  // after the sync began: not covered
  p.succeeded();
  EXPECT_EQ(st->ops_synced.load(), 1u);
  note_stream_work(nullptr, false);  // the NULL stream's, as a cuMemcpyHtoD's
  StreamState* null_stream = state_of(0);
  ASSERT_NE(null_stream, nullptr);
  EXPECT_EQ(null_stream->ops.load(), 1u);
  EXPECT_EQ(null_stream->op_at[0].load(), null_stream->launched.load() + 1);
  SyncProof c = SyncProof::context(nullptr);  // the context's every stream, work that is no launch included
  c.succeeded();
  EXPECT_EQ(null_stream->ops_synced.load(), 1u);
  EXPECT_EQ(st->ops_synced.load(), 2u);
}

TEST_F(Launch, TheFilterDropsOnlyTheInterposersLaunches) {
  set_launch_filter([](const LaunchInfo&) noexcept { return true; });
  const uint64_t before = launches_recorded();
  launch(kernel_on(4));
  EXPECT_EQ(launches_recorded(), before);
  LaunchInfo li = kernel_on(4);
  launch_begin(li.func);
  launch_succeeded(&li, 1, LaunchSource::Cupti);
  EXPECT_EQ(launches_recorded(), before + 1);
}

TEST_F(Launch, ALaunchIsInFlightFromBeginUntilItEnds) {
  std::atomic<int> step{0};
  auto other = [&](bool succeed) {
    std::thread t([&] {
      LaunchInfo li = kernel_on(5);
      launch_begin(li.func);
      step = 1;
      while (step != 2) std::this_thread::yield();
      if (succeed)
        launch_succeeded(&li, 1, LaunchSource::Cupti);
      else
        launch_failed();
      step = 3;
    });
    while (step != 1) std::this_thread::yield();
    EXPECT_EQ(other_threads_launches_in_flight(), 1);
    step = 2;
    while (step != 3) std::this_thread::yield();
    EXPECT_EQ(other_threads_launches_in_flight(), 0);
    t.join();
    step = 0;
  };
  other(true);
  other(false);
}

TEST_F(Launch, AFrontEndsKernelNameServesAHandleTheDriverCannotName) {
  g_fake.func_names = false;
  note_kernel_name(func(0xf7), "_Z9from_cuptiv");
  note_kernel_name(func(0xf7), "_Z9from_cuptiv");  // the same name again: kept as it is
  launch(kernel_on(6, 0xf7));
  EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z9from_cuptiv");
  launch(kernel_on(6, 0xf8));  // neither knows it: no name
  EXPECT_EQ(ring().back().kernel_name, kNoString);
  // Issue 26 item 6 under CUPTI alone: the handle's address was given to another kernel (its context went, which
  // CUPTI alone does not show cdsa): the name CUPTI gives at the launch replaces the stale one.
  note_kernel_name(func(0xf7), "_Z5laterv");  // with interposition the kept name stays (its wrappers forget)
  launch(kernel_on(6, 0xf7));
  EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z9from_cuptiv");
  note_kernel_name(func(0xf7), "_Z5laterv", /*replace: CUPTI alone*/ true);
  launch(kernel_on(6, 0xf7));
  EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z5laterv");
}

// Issue 26 item 6: a context destroyed, or a primary one reset or released for the last time, frees its functions'
// handles, and the driver hands their addresses out again for other kernels: the names kept by handle are asked
// again. A release that leaves the primary context active keeps them.
TEST_F(Launch, KernelNamesAreAskedAgainOnceTheirContextIsGone) {
  g_fake.rename = false;
  launch(kernel_on(9, 0xf1));
  EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z7kernel1v");
  g_fake.rename = true;  // the driver now names another kernel at that address
  g_fake.primary_active = 1;
  note_primary_context_released(0, CUDA_SUCCESS);  // references left: the handles live on
  launch(kernel_on(9, 0xf1));
  EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z7kernel1v");
  g_fake.primary_active = 0;
  note_primary_context_released(0, CUDA_SUCCESS);  // the last reference
  launch(kernel_on(9, 0xf1));
  EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z7reusedv");
  g_fake.rename = false;
  note_context_torn_down();  // cuCtxDestroy
  launch(kernel_on(9, 0xf1));
  EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z7kernel1v");
}

// Issue 26 item 5: a created stream's context is the driver's answer (cuStreamGetCtx), not the context current at
// its first launch; a context's synchronization proves only its own streams' work.
TEST_F(Launch, AStreamsContextIsTheDriversAnswerAndItsSyncProvesOnlyItsStreams) {
  launch(kernel_on(kOtherCtxStream));
  StreamState* st = state_of(kOtherCtxStream);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->last_ctx.load(), reinterpret_cast<uintptr_t>(other_ctx()));
  LaunchInfo ex = kernel_on(kOtherCtxStream);
  ex.kind = LaunchKind::KernelEx;
  launch(ex);
  const uint64_t synced = st->synced.load();
  SyncProof here = SyncProof::context(nullptr);  // the current context: not this stream's
  here.succeeded();
  EXPECT_EQ(st->synced.load(), synced);
  SyncProof its = SyncProof::context(other_ctx());
  its.succeeded();
  EXPECT_EQ(st->synced.load(), st->launched.load());
  EXPECT_EQ(synchronized_context(other_ctx()), reinterpret_cast<uintptr_t>(other_ctx()));
  EXPECT_EQ(synchronized_context(nullptr), reinterpret_cast<uintptr_t>(fake_ctx()));
}

// The thread's memo of the kernel-name map serves a handle only while no value was stored into the map since: a
// new value for the handle (another front end's put) is what the next launch records; a put for another handle
// that shares the memo's entry leaves both served right.
TEST_F(Launch, AKernelNameStoredAfterTheThreadRememberedTheOldOneIsTheOneRecorded) {
  launch(kernel_on(7, 0xf1));
  launch(kernel_on(7, 0xf1));  // served from the thread's memo
  EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z7kernel1v");
  const uint32_t renamed = intern_string("_Z7renamedv", 11);
  ASSERT_NE(renamed, kNoString);
  handle_map_put(HandleMap::KernelName, 0xf1, renamed);
  launch(kernel_on(7, 0xf1));
  EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z7renamedv");
  // 0xf1 and 0xf1 + (16 << 4) share a memo entry; each launch names its own kernel.
  for (int i = 0; i < 3; ++i) {
    launch(kernel_on(7, 0xf1 + (16 << 4)));
    EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z7kernel2v");
    launch(kernel_on(7, 0xf1));
    EXPECT_STREQ(string_at(ring().back().kernel_name), "_Z7renamedv");
  }
}

}  // namespace
}  // namespace cdsa
