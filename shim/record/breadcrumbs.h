// Breadcrumbs: stream-ordered completion marks in host memory that cdsa owns.
//
// After each successful launch on a stream, cdsa enqueues on that stream a
// cuStreamWriteValue64 of the launch's per-stream number into the stream's
// slot. 64-bit stream memory operations are optional (device attribute 122,
// CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS); without them the mark is
// a cuStreamWriteValue32 of the number's low 32 bits into the slot's low word,
// widened again on reading against the number last enqueued (`widen_mark`). The write is ordered after the kernel, so
// after a fault the slot names the last launch that finished on that stream; the next one is the first unfinished
// launch. Reading a slot is a plain load: no CUDA call, so it works on a dead context.
//
// Deferred marks, for programmatic dependent launch (PDL): a launch with programmatic stream serialization may start
// while the kernel before it on its stream is finishing, only if nothing sits between the two. So a launch's mark is
// not enqueued right after it: it waits for the stream's next operation (`settle_breadcrumb`, called by the
// interposition wrappers before it). Before any operation but a PDL launch the deferred mark is enqueued, where it
// would have landed anyway (after the kernel, before the operation); before a PDL launch it is dropped: that launch's
// own mark covers both (its record has kFlagSharesMark). The mark of a group that ends with a PDL launch is enqueued
// behind an event recorded on the stream and waited on by it (the stream's own event, made on first use): cuda.h
// documents that the event captures "the contents of hStream" and that the wait makes later work "wait for all work
// captured", so that mark lands only after every launch of the group, the primaries too, which a plain memop after a
// secondary that never waits is not documented to do. Two calls more per PDL group, placed after the group, never
// inside it; a group whose wait cannot be placed says so (StreamState::pdl_unproven) and attribution keeps its
// earlier launches as candidates. A stream is then a prefix of launches each with its own mark,
// groups of launches sharing one (a PDL chain), and a tail whose mark is still deferred; attribution
// (shim/fault/attribution.h) treats a group as its candidates. Things that must not see a mark pending flush it first:
// stream capture (the mark would become a node of the user's graph), stream and context destruction, the exit
// probe, and every synchronize, query, event record, wait, copy or memop on the stream. A mark that fails to enqueue
// loses only itself: its launch joins the next mark's group.
//
// Contract: `breadcrumbs_init` maps and registers the slots (needs a current
// context; call on the launch path, it runs its body once and retries after a
// failure caused by stream capture). `enqueue_breadcrumb` is lock-free and
// allocation-free. Slots: one per StreamTable entry. Both make driver calls of
// cdsa's own, so they run under the reentrancy guard (shim/common/reentrancy.h).
#pragma once

#include <cuda.h>
#include <atomic>
#include <cstdint>

#include "shim/common/reentrancy.h"
#include "shim/record/recorder.h"

namespace cdsa {

namespace breadcrumbs_internal {
enum BreadcrumbsState : int { kUntried = 0, kActive = 1, kDisabled = 2 };
[[gnu::visibility("hidden")]] extern std::atomic<int> g_state;
bool init_slow(const InCdsa&) noexcept;
}  // namespace breadcrumbs_internal
// Inline: the launch path asks both on every launch (one load once settled).
inline bool breadcrumbs_active() noexcept {
  return breadcrumbs_internal::g_state.load(std::memory_order_acquire) == breadcrumbs_internal::kActive;
}
inline bool breadcrumbs_init(const InCdsa& guard) noexcept {
  int s = breadcrumbs_internal::g_state.load(std::memory_order_acquire);
  if (__builtin_expect(s != breadcrumbs_internal::kUntried, 1)) return s == breadcrumbs_internal::kActive;
  return breadcrumbs_internal::init_slow(guard);
}
// Enqueues the mark; returns the driver's result (CUDA_SUCCESS when disabled).
CUresult enqueue_breadcrumb(const InCdsa&, CUstream stream, int slot, uint64_t stream_seq) noexcept;
// After a launch that got stream number `stream_seq`: its mark waits for the stream's next operation.
// `programmatic`: the launch is a PDL launch, so the mark ends a group (its enqueue waits for the whole group).
// StreamState::deferred's bit for a PDL launch's mark.
inline constexpr uint64_t kDeferredPdl = 1ull << 63;
inline void defer_breadcrumb(StreamState* st, uint64_t stream_seq, bool programmatic = false) noexcept {
  if (st) st->deferred.store(stream_seq | (programmatic ? kDeferredPdl : 0), std::memory_order_release);
}
// Before a context is torn down: the streams' PDL events are dropped (never destroyed: the handle may be of the
// context going away); the next PDL group on a stream makes a new one.
void forget_pdl_events() noexcept;
// Before an operation on `stream` (as it will be passed to the driver; its state is `slot`): the stream's deferred
// mark is enqueued, or with `fold` (the operation is a PDL launch) dropped. Returns the enqueue's result
// (CUDA_SUCCESS when nothing was deferred). Lock-free, allocation-free.
CUresult settle_breadcrumb(const InCdsa&, CUstream stream, int slot, bool fold) noexcept;
// The same with the slot's state at hand (`st` is stream_state(slot)): the launch path's.
CUresult settle_breadcrumb(const InCdsa&, CUstream stream, StreamState* st, int slot, bool fold) noexcept;
// Every deferred mark this thread can place: those of created streams, and of the NULL / legacy streams (in their own
// context); a per-thread default stream only from its own thread. For the exit probe and context teardown.
void flush_all_breadcrumbs(const InCdsa&) noexcept;
// The number that landed in the slot; `launched` is the stream's last enqueued number (its breadcrumb_launched),
// which 32-bit marks are widened against.
uint64_t breadcrumb_landed(int slot, uint64_t launched) noexcept;
// Whether the marks are 32-bit (attribute 122 is 0, or the driver has no 64-bit write).
bool breadcrumbs_32bit() noexcept;

// The 64-bit number whose low 32 bits are `low`, nearest to `launched` (within 2^31 either side: a mark can land
// just before its number is published). Never below 0.
constexpr uint64_t widen_mark(uint32_t low, uint64_t launched) noexcept {
  int64_t delta = static_cast<int32_t>(low - static_cast<uint32_t>(launched));
  return delta < 0 && static_cast<uint64_t>(-delta) > launched ? 0 : launched + static_cast<uint64_t>(delta);
}

}  // namespace cdsa
