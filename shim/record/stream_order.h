// Stream order across threads: whether the numbers cdsa gives a stream's launches, and the marks it places after
// them, are in the order the stream runs them.
//
// One thread alone is in order: it records a launch after the driver took it and places its mark after the record,
// so on its streams the stream's order, the launch numbers and the marks' values agree. Two threads putting work on
// one stream at the same time can break all three: thread A's launch reaches the stream first but is recorded after
// thread B's (so B's mark, placed after B's record, may be enqueued after A's launch, which then numbers higher than
// the mark), two marks can be enqueued in the opposite order of their values (the slot then reads the lower one),
// and a copy or memset noted at one position may reach the stream after launches recorded later. Each of these needs
// two regions of the same stream to overlap in time. A region is:
//   - a launch: from before the driver call (prepare_launch) until after its record and mark (the launch protocol's
//     launch_succeeded or launch_failed, shim/record/launch.h);
//   - a copy, memset or memory operation: from before its note (note_stream_work) until after the driver call;
//   - a deferred mark's placement: from taking it off the stream until its enqueue returned (settle_breadcrumb).
// Entry and exit are read-modify-writes of one word of the stream's state (StreamState::regions: entries so far,
// and regions open now), so two regions that do not overlap are ordered by them: the later one's entry reads the
// earlier one's exit, everything in the earlier happens before everything in the later, and the driver, which
// orders a stream's work by the calls' order, sees them in that order. Proof of the rule the attribution rests on
// (StreamView::raced, shim/fault/attribution.cc): when no region of the stream overlapped another, stream order,
// launch numbers and mark values agree; a region that did overlap another raises StreamState::raced_to, before it
// exits, to one past the launches recorded then, so every launch, mark and op it touched numbers below raced_to, and
// a snapshot that reads the word while regions are open counts those as overlapping too.
//
// Contract: lock-free, allocation-free; an entry and an exit are one atomic read-modify-write each (the launch path
// pays two per launch). A thread holds one region across calls (a launch's or an op's; nested entry for the same
// stream, the CUPTI callbacks inside a wrapped launch, is no second region); a mark's placement inside it is part of it.
#pragma once

#include <atomic>
#include <cstdint>

#include "shim/record/recorder.h"

namespace cdsa {

// `v` becomes at least `seq` (a racing thread's older number never lowers it).
inline void raise_to(std::atomic<uint64_t>& v, uint64_t seq) noexcept {
  uint64_t cur = v.load(std::memory_order_relaxed);
  while (cur < seq && !v.compare_exchange_weak(cur, seq, std::memory_order_acq_rel)) {
  }
}

namespace stream_order_internal {
constexpr uint64_t kEntry = (uint64_t{1} << 32) | 1;  // one more entry, one more region open
struct ThreadRegion {
  StreamState* st;
  uint32_t entries;  // the stream's entries before this one
  bool overlap;      // another region was open when this one began
};
extern __thread ThreadRegion tl_region __attribute__((tls_model("initial-exec")));
void exit_region(StreamState* st, uint32_t entries, bool overlap) noexcept;
}  // namespace stream_order_internal

// A region on `st` begins: the stream's entries before it, and whether another region was open then. Left with
// stream_order_internal::exit_region(st, entries, overlap) (the launch path's record outside its region calls both).
struct RegionEntry {
  uint32_t entries;
  bool overlap;
};
inline RegionEntry enter_region(StreamState* st) noexcept {
  const uint64_t old = st->regions.fetch_add(stream_order_internal::kEntry, std::memory_order_acq_rel);
  return {static_cast<uint32_t>(old >> 32), static_cast<uint32_t>(old) != 0};
}

// This thread's region on `st` begins (a launch's, or an op's), unless it holds one already.
inline void begin_thread_region(StreamState* st) noexcept {
  using namespace stream_order_internal;
  if (!st || tl_region.st) return;
  const RegionEntry e = enter_region(st);
  tl_region = {st, e.entries, e.overlap};
}
// ... and ends, when it holds one.
inline void end_thread_region() noexcept {
  using namespace stream_order_internal;
  if (__builtin_expect(tl_region.st == nullptr, 1)) return;
  ThreadRegion r = tl_region;
  tl_region.st = nullptr;
  // Alone all along (no region open at its entry, none entered since): the word is what this entry left, and one
  // compare-exchange leaves. Else exit_region decides, and raises raced_to first.
  uint64_t alone = (static_cast<uint64_t>(r.entries + 1) << 32) | 1;
  if (__builtin_expect(!r.overlap, 1) &&
      r.st->regions.compare_exchange_strong(alone, alone - 1, std::memory_order_acq_rel, std::memory_order_acquire))
    return;
  exit_region(r.st, r.entries, r.overlap);
}
// The stream this thread holds a region on (nullptr: none).
inline const StreamState* thread_region_stream() noexcept { return stream_order_internal::tl_region.st; }

// A region of its own for the life of the object: a deferred mark's placement, or a record outside its launch's
// region (`overlap`: counted as overlapping, since no region covered the launch's driver call). Nothing when this
// thread holds a region on `st` already (the placement is part of it).
class StreamRegion {
 public:
  explicit StreamRegion(StreamState* st, bool overlap = false) noexcept {
    if (!st || st == stream_order_internal::tl_region.st) return;
    const RegionEntry e = enter_region(st);
    st_ = st;
    entries_ = e.entries;
    overlap_ = overlap || e.overlap;
  }
  ~StreamRegion() {
    if (st_) stream_order_internal::exit_region(st_, entries_, overlap_);
  }
  StreamRegion(const StreamRegion&) = delete;
  StreamRegion& operator=(const StreamRegion&) = delete;

 private:
  StreamState* st_ = nullptr;
  uint32_t entries_ = 0;
  bool overlap_ = false;
};

// Whether a region of another thread is open on `st` now (acquire: a region that exited before is seen as done, with
// its raise of raced_to and everything it submitted). Read it after what it vouches for (a proof's counts), or before
// what the answer is about (a snapshot's view).
inline bool other_regions_open(const StreamState* st) noexcept {
  const auto open = static_cast<uint32_t>(st->regions.load(std::memory_order_acquire));
  return open > (st == stream_order_internal::tl_region.st ? 1u : 0u);
}
// Whether this thread's own open region on `st` began while another was open (it raises raced_to when it exits).
inline bool own_region_overlapped(const StreamState* st) noexcept {
  return st == stream_order_internal::tl_region.st && stream_order_internal::tl_region.overlap;
}

}  // namespace cdsa
