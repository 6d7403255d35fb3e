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
// Which marks are placed when (docs/attribution.md holds the proofs):
// - A launch on a stream that has never carried a PDL launch gets its mark at once, in its own launch call, unless
//   it is itself a PDL launch (a cuLaunchKernelEx launch without the attribute too: it may be a PDL primary, but a
//   mark deferred for that would leave it a tail that nothing proves, issue 26). A finished launch then stops being
//   a candidate as soon as its mark lands, however long the stream stays idle after it.
// - Programmatic dependent launch (PDL): a launch with programmatic stream serialization may start while the kernel
//   before it on its stream is finishing, only if nothing sits between the two. So for a PDL launch, and on a stream
//   that has carried one (StreamState::pdl_last), a launch's mark is not enqueued right after it: it waits for the
//   stream's next operation (`settle_breadcrumb`, called by the interposition wrappers before it, and by the CUPTI
//   backend before the stream's next launch). Before any operation but a PDL launch the deferred mark
//   is enqueued, where it would have landed anyway (after the kernel, before the operation); before a PDL launch it is
//   dropped: that launch's own mark covers both (its record has kFlagSharesMark). So the first PDL pair on each stream
//   loses its overlap once (its primary's mark, placed at once, sits between them); never a later one.
// - A mark whose group holds a PDL launch (pdl_last > breadcrumb_launched) goes behind an event recorded on the
//   stream and waited on by it (the stream's own event, made on first use): cuda.h documents that the event captures
//   "the contents of hStream" and that the wait makes later work "wait for all work captured", so that mark lands
//   only after every launch before it, the primaries too, which a plain memop after a secondary that never waits is
//   not documented to do (kLandedPdlMarkProvesPrimary). Where the wait cannot be placed, the mark is not placed
//   either: its launches join the next mark's group, which then needs the wait in turn. So every landed mark proves
//   that every launch at or before it on its stream finished, with no per-group history to keep.
// - "Placed" means enqueued: StreamState::breadcrumb_launched is raised only when the enqueue returned CUDA_SUCCESS,
//   or met the dead context (a sticky error) in its own launch's call (the launch was submitted an instant before
//   the context died, the same instant a placed mark's memop would have needed to land). A deferred mark whose late
//   placement meets the dead context is not placed: the launch may have finished long before, and a mark never
//   placed proves nothing, either way.
// A stream is then a prefix of launches with marks of their own, groups of launches sharing one (a PDL chain, or
// marks that could not be placed), and a tail with no mark placed after it; attribution (shim/fault/attribution.h)
// treats a group as its candidates, and a tail as not proven finished. Things that must not see a mark pending flush
// it first: stream capture (the mark would become a node of the user's graph), stream and context destruction, the
// exit probe, and every synchronize, query, event record, wait, copy or memop on the stream. A mark that fails to
// enqueue loses only itself: its launch joins the next mark's group. Invariants (CDSA_DCHECK in sanitizer builds):
// breadcrumb_launched <= launched, the settled number <= launched, a placed mark never lowers breadcrumb_launched.
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

#include "base/check.h"
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

// Whether a placed mark after a PDL secondary, enqueued with a plain memop, proves that its primary finished. Not
// documented, so no:
// - cuda.h (13.0), CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: the grid may "overlap with the previous
//   kernel in the stream"; the dependent "can choose to wait" with cudaGridDependencySynchronize(). Nothing says
//   what the operation after the dependent waits for.
// - CUDA Programming Guide 13, section 4.5 (Programmatic Dependent Launch and Synchronization): the secondary may
//   launch before the primary "has finished executing"; again nothing on later operations.
// - cuStreamWriteValue32/64 (cuda.h): no ordering statement at all beyond being a stream operation.
// So a mark whose group holds a PDL launch is placed only behind an event wait (above; GPU case 25b2 checks it on
// hardware, "placement waited"). Case 25b2's plain-memop answer, "memop_waits_for_primary yes" on every driver the
// suite ran on (never the sim), is what flipping this needs; then such a mark goes out plain.
inline constexpr bool kLandedPdlMarkProvesPrimary = false;

// After a launch that got stream number `stream_seq`: its mark waits for the stream's next operation.
// `programmatic`: the launch is a PDL launch (the stream carries PDL from now on, and the mark that covers it waits
// for the whole group).
inline void defer_breadcrumb(StreamState* st, uint64_t stream_seq, bool programmatic = false) noexcept {
  if (!st) return;
  CDSA_DCHECK(stream_seq != 0 && stream_seq <= st->launched.load(std::memory_order_acquire));
  if (programmatic) {
    uint64_t cur = st->pdl_last.load(std::memory_order_relaxed);
    while (cur < stream_seq && !st->pdl_last.compare_exchange_weak(cur, stream_seq, std::memory_order_acq_rel)) {
    }
  }
  st->deferred.store(stream_seq, std::memory_order_release);
}
// Whether launch `stream_seq`'s mark waits for the stream's next operation (else it is placed at once, in the
// launch's own call): for a PDL launch, and on a stream that has carried one. Nowhere else: a mark never placed
// proves nothing, so a deferred one costs the launch its exactness until the stream's next operation.
inline bool breadcrumb_deferred(const StreamState* st, bool programmatic) noexcept {
  return programmatic || (st && st->pdl_last.load(std::memory_order_acquire) != 0);
}
// Places launch `stream_seq`'s mark right after it, in its own launch call (a stream that carries no PDL launch);
// a mark still deferred on the stream (an older launch's) is covered by this one and dropped.
CUresult place_breadcrumb_now(const InCdsa&, CUstream stream, StreamState* st, int slot, uint64_t stream_seq) noexcept;
// Before a context (or every context) is torn down: the streams' PDL events are destroyed, each while its context
// is still alive (every one was made after the last teardown, so none belongs to a context already gone); the next
// PDL group on a stream makes a new one. A thread that holds one just then destroys it when it is done with it.
void destroy_pdl_events() noexcept;
// Before `slot`'s stream is destroyed: its PDL event too.
void destroy_stream_pdl_event(int slot) noexcept;
// Before an operation on `stream` (as it will be passed to the driver; its state is `slot`): the stream's deferred
// mark is enqueued, or with `fold` (the operation is a PDL launch) dropped. Returns the enqueue's result
// (CUDA_SUCCESS when nothing was deferred). Lock-free, allocation-free.
CUresult settle_breadcrumb(const InCdsa&, CUstream stream, int slot, bool fold) noexcept;
// The same with the slot's state at hand (`st` is stream_state(slot)): the launch path's.
CUresult settle_breadcrumb(const InCdsa&, CUstream stream, StreamState* st, int slot, bool fold) noexcept;
// After a synchronizing call returned CUDA_SUCCESS: every launch on the stream up to `stream_seq` (the number it had
// before the call began) finished (StreamState::synced), and its first `ops` copies, memsets and memory operations
// (StreamState::ops_synced).
void note_stream_synced(StreamState* st, uint64_t stream_seq, uint64_t ops = 0) noexcept;
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
