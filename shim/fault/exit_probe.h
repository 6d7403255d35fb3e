// The exit probe's poll (shim/fault/exit_probe.cc): at exit, the streams whose marks have not all landed
// are queried until they finish, a query answers a sticky fault, or the time runs out. A pure function of what it
// is handed, so that tests/unit/exit_probe drives it with made-up streams, answers and a clock.
// Not thread-safe by itself (the caller's callbacks decide); allocates only what `views` returns; no lock.
#pragma once

#include <cuda.h>

#include "shim/common/driver.h"
#include "shim/fault/fault_snapshot.h"

namespace cdsa {

enum class ExitProbeVerdict {
  Finished,     // no stream has a mark missing: nothing to report
  TimedOut,     // a mark is still missing after the wait, and no query said why: nothing to report
  StickyFault,  // a query answered a sticky fault (`result`): report it
  TornDown,     // after the wait, a mark is missing and a stream with marks answered that its context is gone
                // (`result`): the breadcrumbs show a launch that never finished, report it
};

struct ExitProbeResult {
  ExitProbeVerdict verdict = ExitProbeVerdict::Finished;
  CUresult result = CUDA_SUCCESS;
};

// views() -> the streams as their breadcrumbs see them now (stream_views()); query(view) -> what cuStreamQuery
// answers for it (in its context); elapsed_ms() -> time since the probe began; pause() between polls.
//
// A stream whose every enqueued mark landed and whose tail is flushed (marked >= launched) is done and not queried,
// unless a copy or memory operation on it came after its last proven launch (StreamView::work_after_proof): no mark
// shows that work ran, so the stream is queried; with `query_every_stream` (work no record covers: a call CUPTI alone
// cannot describe, a launch through a pass-through entry point) so is every stream with launches. Such a stream keeps the
// probe waiting while it answers CUDA_ERROR_NOT_READY.
// Any other is queried each poll; only one with marks and a missing one (landed < marked) keeps the probe waiting,
// or one with marks whose launches are not all proven finished (a mark never placed) while it answers
// CUDA_ERROR_NOT_READY, or a foreign one (StreamView::foreign: another thread's per-thread stream) that is not done(): its query answers
// for its context alone (the sticky error is the context's, so it still shows a fault once there is one), never
// whether the stream finished, so it is waited for until the fault or the timeout. A stream without marks is queried
// but not waited for. A torn-down answer (driver.h's is_torn_down) counts only from a stream with marks, and only
// in the last poll.
// A whole_context view (work no record covers, in a context no stream view may name: a launch through a pass-through
// entry point on a stream with no recorded launch) is queried each poll and waited for while it answers
// CUDA_SUCCESS or CUDA_ERROR_NOT_READY, to the timeout: nothing can show that such work finished, only its fault.
template <class Views, class Query, class ElapsedMs, class Pause>
ExitProbeResult poll_streams_at_exit(Views&& views, Query&& query, ElapsedMs&& elapsed_ms, Pause&& pause,
                                     long timeout_ms, bool query_every_stream = false) {
  for (;;) {
    bool pending = false;
    CUresult torn_down = CUDA_SUCCESS;  // what this poll heard from a stream with marks
    for (const StreamView& s : views()) {
      if (s.whole_context) {
        CUresult r = query(s);
        if (is_sticky_fault(r)) return {ExitProbeVerdict::StickyFault, r};
        pending = pending || r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY;
        continue;
      }
      if (s.marks && s.landed >= s.marked && s.marked >= s.launched && !s.work_after_proof() && !query_every_stream)
        continue;
      pending = pending || (s.marks && s.landed < s.marked) || (s.foreign && !s.done());
      CUresult r = query(s);
      if (is_sticky_fault(r)) return {ExitProbeVerdict::StickyFault, r};
      // Work no mark covers, still running: waited for like a missing mark (it may be what faults). That includes
      // launches whose mark was never placed (a PDL group's mark left out when its event wait failed, a tail this
      // thread could not flush): a mark never placed proves nothing, and cannot land to end the wait, but the
      // stream's own answer can (oracle seed 345421: the asserting PDL launch still queued behind a 20 ms sleep
      // when the placed marks had all landed; the probe ended before it ran, and the fault went unreported).
      if (r == CUDA_ERROR_NOT_READY && (query_every_stream || s.work_after_proof() || (s.marks && !s.done())))
        pending = true;
      if (s.marks && is_torn_down(r)) torn_down = r;
    }
    if (!pending) return {ExitProbeVerdict::Finished, CUDA_SUCCESS};
    if (elapsed_ms() >= timeout_ms) {
      // A torn-down context runs nothing more: a mark still missing now belongs to a launch that never finished
      // (a context is torn down only after its work has drained, unless that work faulted).
      if (torn_down != CUDA_SUCCESS) return {ExitProbeVerdict::TornDown, torn_down};
      return {ExitProbeVerdict::TimedOut, CUDA_SUCCESS};
    }
    pause();
  }
}

}  // namespace cdsa
