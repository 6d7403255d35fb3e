// The exit probe's poll (shim/fault/exit_probe.h) over made-up streams: which streams it queries, which it waits
// for, what ends the wait, and which answers it reports. The clock is a counter (one millisecond per reading), so
// nothing here depends on time.
#include "shim/fault/exit_probe.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "tests/unit/fixtures/snapshot_fixtures.h"

namespace cdsa {
namespace {

StreamView stream(int slot, uint64_t launched, uint64_t marked, uint64_t landed, bool marks = true) {
  StreamView v = fixtures::stream_view(slot, static_cast<uint64_t>(slot) + 1, launched, landed, marks);
  v.marked = marked;
  return v;
}

// One probe over `streams`: `answer(slot, poll)` is what cuStreamQuery says for that stream in that poll (0-based);
// `land(poll, streams)` may change the streams before each poll (a mark landing).
struct Probe {
  std::vector<StreamView> streams;
  std::function<CUresult(int slot, int poll)> answer = [](int, int) { return CUDA_SUCCESS; };
  std::function<void(int poll, std::vector<StreamView>&)> land = [](int, std::vector<StreamView>&) {};
  long timeout_ms = 2000;
  bool every = false;  // query_every_stream

  int polls = 0;
  long now_ms = 0;
  int pauses = 0;
  std::vector<int> queried;  // slots, in query order

  ExitProbeResult run() {
    return poll_streams_at_exit(
        [this] {
          land(polls, streams);
          ++polls;
          return streams;
        },
        [this](const StreamView& s) {
          queried.push_back(s.slot);
          return answer(s.slot, polls - 1);
        },
        [this] { return now_ms++; }, [this] { ++pauses; }, timeout_ms, every);
  }
};

TEST(ExitProbe, NoStreamsIsFinishedAtOnce) {
  Probe p;
  ExitProbeResult r = p.run();
  EXPECT_EQ(r.verdict, ExitProbeVerdict::Finished);
  EXPECT_EQ(p.polls, 1);
  EXPECT_TRUE(p.queried.empty());
}

TEST(ExitProbe, AStreamWhoseMarksAllLandedIsNotQueried) {
  Probe p;
  p.streams = {stream(0, 5, 5, 5), stream(1, 3, 3, 3)};
  EXPECT_EQ(p.run().verdict, ExitProbeVerdict::Finished);
  EXPECT_TRUE(p.queried.empty());
  EXPECT_EQ(p.pauses, 0);
}

// Issue 26 item 3: a memory operation after a stream's last landed mark (or on a stream with no launch at all) may
// have faulted with nothing to wait for: the stream is queried, and its sticky answer reported.
TEST(ExitProbe, AStreamWithWorkAfterItsLastProofIsQueried) {
  Probe p;
  p.streams = {stream(0, 5, 5, 5), stream(1, 0, 0, 0)};
  p.streams[0].op_at[0] = 4 + 1;  // before launch 5, which finished: it ran
  EXPECT_EQ(p.run().verdict, ExitProbeVerdict::Finished);
  EXPECT_TRUE(p.queried.empty());
  p.streams[1].op_at[0] = 0 + 1;  // a stream with a memop alone
  p.answer = [](int slot, int) { return slot == 1 ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS; };
  ExitProbeResult r = p.run();
  EXPECT_EQ(r.verdict, ExitProbeVerdict::StickyFault);
  EXPECT_EQ(r.result, CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(p.queried, std::vector<int>{1});
  // Such work unseen (CUPTI alone): every stream is queried, a finished one too.
  p.streams[1].op_at[0] = 0;
  p.queried.clear();
  p.every = true;
  p.answer = [](int slot, int) { return slot == 0 ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS; };
  EXPECT_EQ(p.run().verdict, ExitProbeVerdict::StickyFault);
  EXPECT_EQ(p.queried, std::vector<int>{0});
}

TEST(ExitProbe, WaitsForAMissingMarkUntilItLands) {
  Probe p;
  p.streams = {stream(0, 5, 5, 2), stream(1, 4, 4, 4)};
  p.land = [](int poll, std::vector<StreamView>& s) {
    if (poll == 3) s[0].landed = 5;
  };
  ExitProbeResult r = p.run();
  EXPECT_EQ(r.verdict, ExitProbeVerdict::Finished);
  EXPECT_EQ(p.polls, 4);
  EXPECT_EQ(p.pauses, 3);
  EXPECT_EQ(p.queried, (std::vector<int>{0, 0, 0}));  // stream 1 is done and never queried; poll 3 skips stream 0
}

TEST(ExitProbe, AStickyAnswerEndsTheProbeAndIsReported) {
  Probe p;
  p.streams = {stream(0, 5, 5, 2), stream(1, 5, 5, 1), stream(2, 5, 5, 0)};
  p.answer = [](int slot, int poll) { return slot == 1 && poll == 2 ? CUDA_ERROR_ASSERT : CUDA_SUCCESS; };
  ExitProbeResult r = p.run();
  EXPECT_EQ(r.verdict, ExitProbeVerdict::StickyFault);
  EXPECT_EQ(r.result, CUDA_ERROR_ASSERT);
  EXPECT_EQ(p.polls, 3);
  EXPECT_EQ(p.queried, (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 1}));  // stream 2 is not asked after the fault
}

TEST(ExitProbe, EveryStickyFaultCountsNotOnlyTheAssert) {
  for (CUresult sticky : {CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_CONTAINED}) {
    Probe p;
    p.streams = {stream(0, 1, 1, 0)};
    p.answer = [sticky](int, int) { return sticky; };
    ExitProbeResult r = p.run();
    EXPECT_EQ(r.verdict, ExitProbeVerdict::StickyFault) << sticky;
    EXPECT_EQ(r.result, sticky);
  }
}

TEST(ExitProbe, AMarkThatNeverLandsTimesOutWithoutAReport) {
  Probe p;
  p.streams = {stream(0, 5, 5, 2)};
  p.timeout_ms = 50;
  ExitProbeResult r = p.run();
  EXPECT_EQ(r.verdict, ExitProbeVerdict::TimedOut);
  EXPECT_EQ(r.result, CUDA_SUCCESS);
  EXPECT_EQ(p.polls, 51);  // readings 0..50: the one that reads 50 ends it
  EXPECT_EQ(p.pauses, 50);
}

TEST(ExitProbe, ATornDownContextWithAMissingMarkIsReportedAfterTheWait) {
  for (CUresult gone : {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_CONTEXT_IS_DESTROYED}) {
    Probe p;
    p.streams = {stream(0, 5, 5, 2)};
    p.timeout_ms = 10;
    p.answer = [gone](int, int) { return gone; };
    ExitProbeResult r = p.run();
    EXPECT_EQ(r.verdict, ExitProbeVerdict::TornDown) << gone;
    EXPECT_EQ(r.result, gone);
    EXPECT_EQ(p.polls, 11) << "not before the wait is over";
  }
}

TEST(ExitProbe, OnlyTheLastPollsTornDownAnswerCounts) {
  Probe p;
  p.streams = {stream(0, 5, 5, 2)};
  p.timeout_ms = 3;
  p.answer = [](int, int poll) { return poll < 3 ? CUDA_ERROR_DEINITIALIZED : CUDA_SUCCESS; };
  EXPECT_EQ(p.run().verdict, ExitProbeVerdict::TimedOut);
}

TEST(ExitProbe, AStreamWithoutMarksIsQueriedOnceAndNotWaitedFor) {
  Probe p;  // breadcrumbs off: `landed` means nothing
  p.streams = {stream(0, 5, 5, 0, /*marks=*/false)};
  EXPECT_EQ(p.run().verdict, ExitProbeVerdict::Finished);
  EXPECT_EQ(p.queried, (std::vector<int>{0}));

  Probe torn;  // its torn-down answer says nothing: no breadcrumb says a launch never finished
  torn.streams = {stream(0, 5, 0, 0, false), stream(1, 5, 5, 4)};
  torn.timeout_ms = 2;
  torn.answer = [](int slot, int) { return slot == 0 ? CUDA_ERROR_DEINITIALIZED : CUDA_SUCCESS; };
  EXPECT_EQ(torn.run().verdict, ExitProbeVerdict::TimedOut);

  Probe fault;  // but a sticky answer is a fault whatever the stream
  fault.streams = {stream(0, 5, 0, 0, false)};
  fault.answer = [](int, int) { return CUDA_ERROR_ILLEGAL_ADDRESS; };
  EXPECT_EQ(fault.run().verdict, ExitProbeVerdict::StickyFault);
}

TEST(ExitProbe, AnUnflushedTailIsQueriedButNotWaitedFor) {
  // A tail this thread could not mark (its context would not be made current): nothing will land for it.
  Probe p;
  p.streams = {stream(0, 7, 5, 5)};
  EXPECT_EQ(p.run().verdict, ExitProbeVerdict::Finished);
  EXPECT_EQ(p.queried, (std::vector<int>{0}));
  EXPECT_EQ(p.pauses, 0);

  Probe fault;
  fault.streams = {stream(0, 7, 5, 5)};
  fault.answer = [](int, int) { return CUDA_ERROR_ASSERT; };
  EXPECT_EQ(fault.run().verdict, ExitProbeVerdict::StickyFault);
}

// Launches whose mark was never placed, still running: a mark never placed proves nothing and never lands, so the
// stream's own answer decides. Oracle seed 345421 (3 lost reports in 100,000 programs): a PDL group's mark left out
// when its event wait failed, the asserting launch queued behind a 20 ms sleep; the placed marks had all landed, so
// the probe ended at once and the fault that came a moment later was never reported.
TEST(ExitProbe, UnprovenLaunchesStillRunningAreWaitedForUntilTheyFinishOrFault) {
  Probe p;
  p.streams = {stream(0, 4, 2, 2)};
  p.answer = [](int, int poll) { return poll < 3 ? CUDA_ERROR_NOT_READY : CUDA_ERROR_ASSERT; };
  ExitProbeResult r = p.run();
  EXPECT_EQ(r.verdict, ExitProbeVerdict::StickyFault);
  EXPECT_EQ(r.result, CUDA_ERROR_ASSERT);
  EXPECT_EQ(p.polls, 4);

  Probe finishes;  // they finish without a fault: the wait ends there
  finishes.streams = {stream(0, 4, 2, 2)};
  finishes.answer = [](int, int poll) { return poll < 2 ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS; };
  EXPECT_EQ(finishes.run().verdict, ExitProbeVerdict::Finished);
  EXPECT_EQ(finishes.pauses, 2);

  Probe busy;  // never finishing: to the timeout, no report
  busy.streams = {stream(0, 4, 2, 2)};
  busy.timeout_ms = 4;
  busy.answer = [](int, int) { return CUDA_ERROR_NOT_READY; };
  EXPECT_EQ(busy.run().verdict, ExitProbeVerdict::TimedOut);
  EXPECT_EQ(busy.pauses, 4);

  Probe synced;  // a sync proved them: not waited for, whatever the stream answers
  StreamView v = stream(0, 4, 2, 2);
  v.synced = 4;
  synced.streams = {v};
  synced.answer = [](int, int) { return CUDA_ERROR_NOT_READY; };
  EXPECT_EQ(synced.run().verdict, ExitProbeVerdict::Finished);
  EXPECT_EQ(synced.pauses, 0);

  Probe off;  // breadcrumbs off: no mark says anything, a busy stream is still queried once and not waited for
  off.streams = {stream(0, 4, 0, 0, /*marks=*/false)};
  off.answer = [](int, int) { return CUDA_ERROR_NOT_READY; };
  EXPECT_EQ(off.run().verdict, ExitProbeVerdict::Finished);
  EXPECT_EQ(off.pauses, 0);
}

// Another thread's per-thread stream: a query of CU_STREAM_PER_THREAD here is this thread's own stream, so its
// answer says nothing of the other's work; the context's sticky error shows in it once that work faults (oracle seed
// 204876: the other thread's copy into freed memory faulted after the probe's one query had answered success).
TEST(ExitProbe, AForeignStreamNotProvenFinishedIsWaitedForUntilItsContextFaults) {
  Probe p;
  StreamView v = stream(0, 7, 5, 5);
  v.foreign = true;
  p.streams = {v};
  p.answer = [](int, int poll) { return poll < 3 ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS; };
  ExitProbeResult r = p.run();
  EXPECT_EQ(r.verdict, ExitProbeVerdict::StickyFault);
  EXPECT_EQ(r.result, CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(p.polls, 4);

  Probe quiet;  // nothing faults: waited for to the timeout, no report
  quiet.streams = {v};
  quiet.timeout_ms = 5;
  EXPECT_EQ(quiet.run().verdict, ExitProbeVerdict::TimedOut);
  EXPECT_EQ(quiet.pauses, 5);

  Probe op;  // every launch's mark landed, but an op came after them
  StreamView w = stream(0, 5, 5, 5);
  w.foreign = true;
  w.op_at[0] = 6;
  w.ops = 1;
  op.streams = {w};
  op.timeout_ms = 3;
  EXPECT_EQ(op.run().verdict, ExitProbeVerdict::TimedOut);
  EXPECT_EQ(op.pauses, 3);

  Probe synced;  // a sync proved all of it: not waited for
  StreamView x = stream(0, 7, 5, 5);
  x.foreign = true;
  x.synced = 7;
  synced.streams = {x};
  EXPECT_EQ(synced.run().verdict, ExitProbeVerdict::Finished);
  EXPECT_EQ(synced.pauses, 0);
}

TEST(ExitProbe, ATimeoutOfZeroStillPollsOnce) {
  Probe p;
  p.streams = {stream(0, 5, 5, 2)};
  p.timeout_ms = 0;
  p.answer = [](int, int) { return CUDA_ERROR_ASSERT; };
  EXPECT_EQ(p.run().verdict, ExitProbeVerdict::StickyFault);

  Probe quiet;
  quiet.streams = {stream(0, 5, 5, 2)};
  quiet.timeout_ms = 0;
  EXPECT_EQ(quiet.run().verdict, ExitProbeVerdict::TimedOut);
  EXPECT_EQ(quiet.polls, 1);
  EXPECT_EQ(quiet.pauses, 0);
}

}  // namespace
}  // namespace cdsa
