// The breadcrumb state machine (shim/record/breadcrumbs.h) over a registered slot array and a driver table this file
// defines (record and common stages only): a launch's mark deferred, then enqueued by the stream's next operation
// (it lands), folded by a PDL launch (the next mark covers both), lost by a failed write (joins the next mark's
// group), placed at once in its own launch's call (a sticky answer then counts as placed), not placed by a late
// settle that meets the dead context, and flushed at exit by flush_all_breadcrumbs: created streams, the NULL stream
// in its own context, a per-thread default stream only from its own thread. A mark whose group holds a PDL launch goes
// behind an event recorded on the stream and waited on, or is not placed at all; the streams' events are destroyed
// before a teardown, and a successful sync is proof (note_stream_synced).
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shim/common/config.h"
#include "shim/common/driver.h"
#include "shim/common/reentrancy.h"
#include "shim/record/breadcrumbs.h"
#include "shim/record/recorder.h"

namespace cdsa {
namespace {

struct Write {
  uintptr_t stream;
  uint64_t value;
  uintptr_t ctx;  // the current context when it was enqueued
};

// The event calls, in order, with the write's place among them ('C'reate, 'R'ecord, 'W'ait, 'D'estroy, 'M'ark).
struct Op {
  char what;
  uintptr_t stream, event;
};

struct FakeDriver {
  std::mutex mu;
  std::vector<Write> writes;
  std::vector<Op> ops;
  CUresult record_result = CUDA_SUCCESS;  // what cuEventRecord answers
  void (*on_record)() = nullptr;          // runs inside cuEventRecord (another thread's teardown, say)
  uintptr_t next_event = 0xe0;
  CUresult write_result = CUDA_SUCCESS;  // what cuStreamWriteValue64 answers (the mark lands only on success)
  uintptr_t current = 0xc1;              // the calling thread's context (one for the whole test)
};
FakeDriver g_fake;

}  // namespace

const Driver& driver() noexcept {
  static const Driver d = [] {
    Driver t;
    // Host memory is device memory here: a mark lands as it is written.
    t.MemHostRegister = [](void*, size_t, unsigned) { return CUDA_SUCCESS; };
    t.MemHostGetDevicePointer = [](CUdeviceptr* d, void* p, unsigned) {
      *d = reinterpret_cast<CUdeviceptr>(p);
      return CUDA_SUCCESS;
    };
    t.CtxGetDevice = [](CUdevice* d) {
      *d = 0;
      return CUDA_SUCCESS;
    };
    t.DeviceGetAttribute = [](int* v, CUdevice_attribute, CUdevice) {
      *v = 1;  // 64-bit stream memory operations
      return CUDA_SUCCESS;
    };
    t.CtxGetCurrent = [](CUcontext* c) {
      std::lock_guard<std::mutex> lock(g_fake.mu);
      *c = reinterpret_cast<CUcontext>(g_fake.current);
      return CUDA_SUCCESS;
    };
    t.CtxSetCurrent = [](CUcontext c) {
      std::lock_guard<std::mutex> lock(g_fake.mu);
      g_fake.current = reinterpret_cast<uintptr_t>(c);
      return CUDA_SUCCESS;
    };
    t.StreamWriteValue64 = [](CUstream s, CUdeviceptr at, cuuint64_t v, unsigned) {
      std::lock_guard<std::mutex> lock(g_fake.mu);
      g_fake.writes.push_back({reinterpret_cast<uintptr_t>(s), v, g_fake.current});
      g_fake.ops.push_back({'M', reinterpret_cast<uintptr_t>(s), 0});
      if (g_fake.write_result == CUDA_SUCCESS) *reinterpret_cast<uint64_t*>(at) = v;
      return g_fake.write_result;
    };
    t.EventCreate = [](CUevent* e, unsigned) {
      std::lock_guard<std::mutex> lock(g_fake.mu);
      *e = reinterpret_cast<CUevent>(++g_fake.next_event);
      g_fake.ops.push_back({'C', 0, reinterpret_cast<uintptr_t>(*e)});
      return CUDA_SUCCESS;
    };
    t.EventRecord = [](CUevent e, CUstream s) {
      std::lock_guard<std::mutex> lock(g_fake.mu);
      g_fake.ops.push_back({'R', reinterpret_cast<uintptr_t>(s), reinterpret_cast<uintptr_t>(e)});
      if (g_fake.on_record) {
        g_fake.mu.unlock();
        g_fake.on_record();
        g_fake.mu.lock();
      }
      return g_fake.record_result;
    };
    t.StreamWaitEvent = [](CUstream s, CUevent e, unsigned) {
      std::lock_guard<std::mutex> lock(g_fake.mu);
      g_fake.ops.push_back({'W', reinterpret_cast<uintptr_t>(s), reinterpret_cast<uintptr_t>(e)});
      return CUDA_SUCCESS;
    };
    t.EventDestroy = [](CUevent e) {
      std::lock_guard<std::mutex> lock(g_fake.mu);
      g_fake.ops.push_back({'D', 0, reinterpret_cast<uintptr_t>(e)});
      return CUDA_SUCCESS;
    };
    return t;
  }();
  return d;
}

namespace {

CUstream handle(uintptr_t v) { return reinterpret_cast<CUstream>(v); }

class BreadcrumbStates : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    load_config();
    ASSERT_TRUE(recorder_init());
    InCdsa guard;
    ASSERT_TRUE(breadcrumbs_init(guard));
    ASSERT_FALSE(breadcrumbs_32bit());
  }
  void SetUp() override {
    std::lock_guard<std::mutex> lock(g_fake.mu);
    g_fake.writes.clear();
    g_fake.ops.clear();
    g_fake.write_result = CUDA_SUCCESS;
    g_fake.record_result = CUDA_SUCCESS;
    g_fake.on_record = nullptr;
    g_fake.current = 0xc1;
  }
  // A stream of its own for each test (the table keeps its entries): slot and state, its handle and context as
  // the launch path's stream cache writes them.
  int new_stream(uintptr_t h, uintptr_t ctx = 0xc1, uint32_t tid = 0) {
    int slot = stream_slot(next_id_++);
    StreamState* st = stream_state(slot);
    st->last_handle.store(h);
    st->last_ctx.store(ctx);
    st->last_tid.store(tid ? tid : static_cast<uint32_t>(syscall(SYS_gettid)));
    return slot;
  }
  // A launch recorded on the stream: its number, its mark deferred.
  static uint64_t launch(int slot, bool programmatic = false) {
    StreamState* st = stream_state(slot);
    uint64_t seq = st->launched.fetch_add(1) + 1;
    defer_breadcrumb(st, seq, programmatic);
    return seq;
  }
  // A PDL pair: the primary, its mark folded by the secondary, the secondary's mark deferred (the group's).
  static uint64_t pair(const InCdsa& guard, CUstream h, int slot) {
    launch(slot);
    settle_breadcrumb(guard, h, slot, /*fold=*/true);
    return launch(slot, /*programmatic=*/true);
  }
  static std::string ops() {  // e.g. "CRWM": what the driver was asked, in order
    std::lock_guard<std::mutex> lock(g_fake.mu);
    std::string out;
    for (const Op& o : g_fake.ops) out += o.what;
    return out;
  }
  static Op op(size_t i) {
    std::lock_guard<std::mutex> lock(g_fake.mu);
    return g_fake.ops.at(i);
  }
  static uint64_t marked(int slot) { return stream_state(slot)->breadcrumb_launched.load(); }
  static uint64_t landed(int slot) { return breadcrumb_landed(slot, marked(slot)); }
  static std::vector<Write> writes() {
    std::lock_guard<std::mutex> lock(g_fake.mu);
    return g_fake.writes;
  }
  static inline uint64_t next_id_ = 7000;
};

TEST_F(BreadcrumbStates, ADeferredMarkIsWrittenByTheNextOperationAndLands) {
  InCdsa guard;
  int s = new_stream(0x51);
  uint64_t seq = launch(s);
  EXPECT_TRUE(writes().empty());  // deferred: nothing between this launch and the stream's next operation
  EXPECT_EQ(landed(s), 0u);
  EXPECT_EQ(settle_breadcrumb(guard, handle(0x51), s, /*fold=*/false), CUDA_SUCCESS);
  ASSERT_EQ(writes().size(), 1u);
  EXPECT_EQ(writes()[0].stream, 0x51u);
  EXPECT_EQ(writes()[0].value, seq);
  EXPECT_EQ(marked(s), seq);
  EXPECT_EQ(landed(s), seq);
  EXPECT_EQ(stream_state(s)->deferred.load(), 0u);
  EXPECT_EQ(settle_breadcrumb(guard, handle(0x51), s, false), CUDA_SUCCESS);  // nothing deferred: no write
  EXPECT_EQ(writes().size(), 1u);
}

TEST_F(BreadcrumbStates, APdlLaunchFoldsTheMarkAndItsOwnCoversBoth) {
  InCdsa guard;
  int s = new_stream(0x52);
  uint64_t primary = launch(s);
  settle_breadcrumb(guard, handle(0x52), s, /*fold=*/true);  // the next launch is a PDL secondary
  EXPECT_TRUE(writes().empty());
  EXPECT_EQ(marked(s), 0u);
  uint64_t secondary = launch(s);
  settle_breadcrumb(guard, handle(0x52), s, false);
  ASSERT_EQ(writes().size(), 1u);
  EXPECT_EQ(writes()[0].value, secondary);
  EXPECT_EQ(landed(s), secondary);  // one mark for the pair: both finished
  EXPECT_GT(landed(s), primary);
}

TEST_F(BreadcrumbStates, AFailedWriteLosesOnlyItsOwnMark) {
  InCdsa guard;
  int s = new_stream(0x53);
  uint64_t first = launch(s);
  settle_breadcrumb(guard, handle(0x53), s, false);
  g_fake.write_result = CUDA_ERROR_INVALID_VALUE;
  uint64_t lost = launch(s);
  EXPECT_EQ(settle_breadcrumb(guard, handle(0x53), s, false), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(marked(s), first);  // not enqueued: the stream's marks end at the first launch
  EXPECT_EQ(stream_state(s)->deferred.load(), 0u);
  g_fake.write_result = CUDA_SUCCESS;
  uint64_t next = launch(s);
  settle_breadcrumb(guard, handle(0x53), s, false);
  EXPECT_EQ(marked(s), next);  // the lost launch joined the next mark's group
  EXPECT_EQ(landed(s), next);
  EXPECT_LT(lost, next);
}

// A mark placed in its own launch's call that meets the dead context counts as placed: the context died the instant
// after the launch was submitted, so the launch stays the stream's unfinished one.
TEST_F(BreadcrumbStates, AStickyWriteInTheLaunchsOwnCallCountsAsPlaced) {
  InCdsa guard;
  int s = new_stream(0x54);
  uint64_t done = stream_state(s)->launched.fetch_add(1) + 1;
  EXPECT_EQ(place_breadcrumb_now(guard, handle(0x54), stream_state(s), s, done), CUDA_SUCCESS);
  g_fake.write_result = CUDA_ERROR_ASSERT;
  uint64_t faulted = stream_state(s)->launched.fetch_add(1) + 1;
  EXPECT_EQ(place_breadcrumb_now(guard, handle(0x54), stream_state(s), s, faulted), CUDA_ERROR_ASSERT);
  EXPECT_EQ(marked(s), faulted);  // its mark can never land: landed < marked names it
  EXPECT_EQ(landed(s), done);
}

// Issue 26 item 3: a deferred mark settled later, when the context is already dead, was never placed: the launch may
// have finished long before (it used to count as placed, and the long-finished launch as the unfinished one).
TEST_F(BreadcrumbStates, ALateSettleThatMeetsTheDeadContextPlacesNothing) {
  InCdsa guard;
  int s = new_stream(0x5d);
  uint64_t done = launch(s);
  settle_breadcrumb(guard, handle(0x5d), s, false);
  launch(s);
  g_fake.write_result = CUDA_ERROR_ASSERT;
  EXPECT_EQ(settle_breadcrumb(guard, handle(0x5d), s, false), CUDA_ERROR_ASSERT);
  EXPECT_EQ(marked(s), done) << "the tail stays a tail: its mark was never placed";
  EXPECT_EQ(stream_state(s)->deferred.load(), 0u);
}

// A mark placed now drops one still deferred on the stream (an older launch's): it covers it, and no older number
// is written after a newer one.
TEST_F(BreadcrumbStates, AMarkPlacedNowCoversOneStillDeferred) {
  InCdsa guard;
  int s = new_stream(0x5e);
  launch(s);  // deferred (a cuLaunchKernelEx launch, say), never settled
  uint64_t now = stream_state(s)->launched.fetch_add(1) + 1;
  place_breadcrumb_now(guard, handle(0x5e), stream_state(s), s, now);
  EXPECT_EQ(stream_state(s)->deferred.load(), 0u);
  ASSERT_EQ(writes().size(), 1u);
  EXPECT_EQ(writes()[0].value, now);
  EXPECT_EQ(landed(s), now);
}

TEST_F(BreadcrumbStates, ASuccessfulSyncIsProofUpToWhatItSaw) {
  int s = new_stream(0x5f);
  launch(s);
  uint64_t seen = launch(s);
  note_stream_synced(stream_state(s), seen);
  launch(s);  // after the call began: not proven
  EXPECT_EQ(stream_state(s)->synced.load(), seen);
  note_stream_synced(stream_state(s), seen - 1);  // an older proof never lowers it
  EXPECT_EQ(stream_state(s)->synced.load(), seen);
}

TEST_F(BreadcrumbStates, FlushPlacesEveryDeferredMarkThisThreadCan) {
  InCdsa guard;
  const auto me = static_cast<uint32_t>(syscall(SYS_gettid));
  int created = new_stream(0x55);
  int null_other_ctx = new_stream(0, /*ctx=*/0xc2);  // the NULL stream of another context
  int own_per_thread = new_stream(reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD), 0xc1, me);
  int others_per_thread = new_stream(reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD), 0xc1, me + 1);
  int settled = new_stream(0x56);
  for (int s : {created, null_other_ctx, own_per_thread, others_per_thread, settled}) launch(s);
  settle_breadcrumb(guard, handle(0x56), settled, false);
  size_t before = writes().size();

  flush_all_breadcrumbs(guard);

  std::vector<Write> w = writes();
  w.erase(w.begin(), w.begin() + static_cast<long>(before));
  auto wrote = [&](uintptr_t h, uintptr_t ctx) {
    for (const Write& x : w)
      if (x.stream == h && x.ctx == ctx) return true;
    return false;
  };
  EXPECT_TRUE(wrote(0x55, 0xc1));
  EXPECT_TRUE(wrote(0, 0xc2)) << "the NULL stream's mark goes out in its own context";
  EXPECT_EQ(g_fake.current, 0xc1u) << "and the thread's context is put back";
  EXPECT_TRUE(wrote(reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD), 0xc1));
  EXPECT_EQ(w.size(), 3u) << "not another thread's per-thread stream, not a settled one";
  for (int s : {created, null_other_ctx, own_per_thread}) {
    EXPECT_EQ(stream_state(s)->deferred.load(), 0u);
    EXPECT_EQ(landed(s), 1u);
  }
  EXPECT_EQ(stream_state(others_per_thread)->deferred.load(), 1u);  // still deferred: its own thread places it
  EXPECT_EQ(marked(others_per_thread), 0u);
}

TEST_F(BreadcrumbStates, ConcurrentSettlesWriteTheMarkOnce) {
  InCdsa guard;
  int s = new_stream(0x57);
  for (int round = 0; round < 200; ++round) {
    uint64_t seq = launch(s);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        InCdsa g;
        settle_breadcrumb(g, handle(0x57), s, false);
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(marked(s), seq);
  }
  EXPECT_EQ(writes().size(), 200u);  // the exchange hands the deferred number to one of them
}

TEST_F(BreadcrumbStates, APlainMarkMakesNoEventCall) {
  InCdsa guard;
  int s = new_stream(0x58);
  launch(s);
  settle_breadcrumb(guard, handle(0x58), s, false);
  EXPECT_EQ(ops(), "M");
}

TEST_F(BreadcrumbStates, APdlGroupsMarkWaitsForTheWholeGroup) {
  InCdsa guard;
  int s = new_stream(0x59);
  uint64_t secondary = pair(guard, handle(0x59), s);
  EXPECT_EQ(stream_state(s)->deferred.load(), secondary);
  EXPECT_TRUE(ops().empty()) << "nothing between the primary and its secondary";
  settle_breadcrumb(guard, handle(0x59), s, false);  // the stream's next, plain operation
  // The event records the stream's contents, the stream waits for it, then the mark: it lands after the primary too.
  ASSERT_EQ(ops(), "CRWM");
  const uintptr_t ev = op(0).event;
  EXPECT_EQ(op(1).stream, 0x59u);
  EXPECT_EQ(op(1).event, ev);
  EXPECT_EQ(op(2).stream, 0x59u) << "the wait is on the user's stream, before the mark";
  EXPECT_EQ(op(2).event, ev);
  EXPECT_EQ(landed(s), secondary);
  // The next group reuses the stream's event.
  uint64_t next = pair(guard, handle(0x59), s);
  settle_breadcrumb(guard, handle(0x59), s, false);
  EXPECT_EQ(ops(), "CRWMRWM");
  EXPECT_EQ(op(4).event, ev);
  EXPECT_EQ(landed(s), next);
}

// Issue 26 item 7: a mark whose PDL group's wait cannot be placed is not placed at all, and the next mark, even a
// plain launch's, goes behind the wait: every landed mark proves every launch before it. (It used to go out plain,
// and any later landed mark counted as proof of that group's primaries.)
TEST_F(BreadcrumbStates, AGroupWhoseWaitCannotBePlacedGetsNoMarkAndTheNextMarkWaits) {
  InCdsa guard;
  int s = new_stream(0x5a);
  g_fake.record_result = CUDA_ERROR_INVALID_HANDLE;  // an event of another context than the stream's
  pair(guard, handle(0x5a), s);
  settle_breadcrumb(guard, handle(0x5a), s, false);
  EXPECT_EQ(ops(), "CRD") << "no mark; the refused event is destroyed";
  EXPECT_EQ(marked(s), 0u);
  EXPECT_EQ(stream_state(s)->pdl_event.load(), 0u);
  // The stream's next launch is a plain one: its mark covers the pair too, so it waits for the whole group.
  g_fake.record_result = CUDA_SUCCESS;
  uint64_t plain = launch(s);
  settle_breadcrumb(guard, handle(0x5a), s, false);
  EXPECT_EQ(ops(), "CRDCRWM");
  EXPECT_EQ(landed(s), plain);
  // Proven: the next plain launch's mark goes out plain again.
  launch(s);
  settle_breadcrumb(guard, handle(0x5a), s, false);
  EXPECT_EQ(ops(), "CRDCRWMM");
}

// Issue 26 item 9: a teardown destroys the streams' PDL events (they used to be dropped: one leaked per PDL stream
// at every primary-context release); the next group makes a new one.
TEST_F(BreadcrumbStates, ATeardownDestroysTheStreamsEvents) {
  InCdsa guard;
  int s = new_stream(0x5b);
  pair(guard, handle(0x5b), s);
  settle_breadcrumb(guard, handle(0x5b), s, false);
  ASSERT_EQ(ops(), "CRWM");
  destroy_pdl_events();
  EXPECT_EQ(ops(), "CRWMD");
  EXPECT_EQ(op(4).event, op(0).event);
  EXPECT_EQ(stream_state(s)->pdl_event.load(), 0u);
  pair(guard, handle(0x5b), s);
  settle_breadcrumb(guard, handle(0x5b), s, false);
  EXPECT_EQ(ops(), "CRWMDCRWM") << "a new event, the old one never passed to the driver again";
  EXPECT_NE(op(5).event, op(0).event);
  destroy_stream_pdl_event(s);  // cuStreamDestroy's
  EXPECT_EQ(ops(), "CRWMDCRWMD");
}

// A teardown while another thread holds the event (between its record and its wait): that thread destroys it when
// it is done, never gives it back.
TEST_F(BreadcrumbStates, AnEventHeldDuringATeardownIsDestroyedByItsHolder) {
  InCdsa guard;
  int s = new_stream(0x60);
  static int slot;
  slot = s;
  g_fake.on_record = [] { destroy_stream_pdl_event(slot); };
  pair(guard, handle(0x60), s);
  settle_breadcrumb(guard, handle(0x60), s, false);
  EXPECT_EQ(ops(), "CRWDM");
  EXPECT_EQ(op(3).event, op(0).event);
  EXPECT_EQ(stream_state(s)->pdl_event.load(), 0u);
}

TEST_F(BreadcrumbStates, AFoldedPdlMarkMakesNoEventCall) {
  InCdsa guard;
  int s = new_stream(0x5c);
  pair(guard, handle(0x5c), s);
  settle_breadcrumb(guard, handle(0x5c), s, /*fold=*/true);  // a PDL chain: a third kernel follows the secondary
  EXPECT_TRUE(ops().empty());
  uint64_t third = launch(s, true);
  settle_breadcrumb(guard, handle(0x5c), s, false);
  EXPECT_EQ(ops(), "CRWM");
  EXPECT_EQ(landed(s), third);
}

}  // namespace
}  // namespace cdsa
