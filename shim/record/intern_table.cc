// The interning tables' machinery (intern_table_internal.h): slots and cells, their free rings, the index, pins,
// and making room when a table is full.
#include "shim/record/intern_table_internal.h"

#include <sched.h>
#include <unistd.h>
#include <ctime>

namespace cdsa::recorder_internal {

Table g_strings, g_stacks;
std::atomic<uint64_t> g_epoch{2};
std::atomic<int> g_reclaiming{0};
std::atomic<bool> g_hold{false};
std::atomic<uint64_t> g_reclaims{0};

namespace {
int class_for(uint64_t words) {
  int c = kMinClass;
  while (c <= kMaxClass && (1ull << c) < words) ++c;
  return c;
}
}  // namespace

bool alloc_cell(Table& t, uint64_t words, uint64_t* off, int* cls) {
  int c = class_for(words);
  if (c > kMaxClass) return false;
  for (int k = c; k <= kMaxClass && k <= c + 2; ++k)
    if (t.free_cells[k].take(off)) {
      *cls = k;
      return true;
    }
  uint64_t size = 1ull << c;
  for (uint64_t b = t.arena_bump.load(std::memory_order_relaxed);;) {
    if (b + size > t.arena_words) return false;
    if (t.arena_bump.compare_exchange_weak(b, b + size, std::memory_order_relaxed)) {
      *off = b;
      *cls = c;
      return true;
    }
  }
}

bool alloc_slot(Table& t, uint32_t* slot) {
  uint64_t s;
  if (t.free_slots.take(&s)) {
    *slot = static_cast<uint32_t>(s);
    return true;
  }
  for (uint32_t b = t.slot_bump.load(std::memory_order_relaxed);;) {
    if (b >= t.capacity) return false;
    if (t.slot_bump.compare_exchange_weak(b, b + 1, std::memory_order_relaxed)) {
      *slot = b;
      return true;
    }
  }
}

bool running_low(const Table& t) {
  uint64_t slots = t.capacity - t.slot_bump.load(std::memory_order_relaxed) + t.free_slots.size();
  uint64_t words = t.arena_words - t.arena_bump.load(std::memory_order_relaxed);
  for (int c = kMinClass; c <= kMaxClass; ++c) words += t.free_cells[c].size() << c;
  return slots * 2 < t.capacity || words * 2 < t.arena_words;
}

void index_insert(Table& t, std::atomic<uint32_t>* buckets, uint64_t hash, uint32_t slot) {
  uint32_t start = static_cast<uint32_t>(hash ^ (hash >> 32)) & t.bucket_mask;
  for (uint32_t i = start, probes = 0; probes <= t.bucket_mask; i = (i + 1) & t.bucket_mask, ++probes) {
    uint32_t expected = 0;
    if (buckets[i].compare_exchange_strong(expected, slot + 1, std::memory_order_acq_rel)) return;
  }
  CDSA_DCHECK(!"index full: it has more buckets than its table has slots");
}

namespace {
std::atomic<uint64_t>* map_ring(FreeRing& r, uint64_t items) {
  uint64_t n = 1;
  while (n <= items) n <<= 1;
  r.mask = n - 1;
  r.v = static_cast<std::atomic<uint64_t>*>(map_zeroed(n * sizeof(uint64_t)));
  return r.v;
}

uint64_t ring_bytes(const FreeRing& r) { return (r.mask + 1) * sizeof(uint64_t); }
}  // namespace

bool map_table(Table& t, uint32_t capacity, uint64_t arena_words, const char* full_note) {
  t.full_note = full_note;
  t.capacity = capacity;
  t.idx_bits = 4;
  while ((1u << t.idx_bits) < capacity) ++t.idx_bits;
  // The all-ones tag is never used: no id is kUnknownStack / kNoString or a caller's sentinel just below them.
  t.tag_limit = (1u << (32 - t.idx_bits)) - 1;
  uint32_t buckets = 1;
  while (buckets < 2 * capacity) buckets <<= 1;
  t.bucket_mask = buckets - 1;
  t.entries = static_cast<EntryMeta*>(map_zeroed(capacity * sizeof(EntryMeta)));
  for (auto& b : t.bucket_arrays) b = static_cast<std::atomic<uint32_t>*>(map_zeroed(buckets * sizeof(uint32_t)));
  t.buckets.store(t.bucket_arrays[0], std::memory_order_release);
  t.arena_words = arena_words;
  t.arena = static_cast<std::atomic<uint64_t>*>(map_zeroed(arena_words * sizeof(uint64_t)));
  t.marks = static_cast<uint64_t*>(map_zeroed((capacity / 64 + 1) * sizeof(uint64_t)));
  bool ok = t.entries && t.bucket_arrays[0] && t.bucket_arrays[1] && t.arena && t.marks && map_ring(t.free_slots, capacity);
  // A cell of class c is made only when no free one of c exists, so no more than `capacity` of them ever exist.
  for (int c = kMinClass; c <= kMaxClass; ++c) {
    uint64_t most = arena_words >> c;
    ok = ok && map_ring(t.free_cells[c], most < capacity ? most : capacity);
  }
  return ok;
}

uint64_t table_bytes(const Table& t) {
  uint64_t b = static_cast<uint64_t>(t.capacity) * sizeof(EntryMeta) + 2ull * (t.bucket_mask + 1) * sizeof(uint32_t) +
               t.arena_words * sizeof(uint64_t) + (t.capacity / 64 + 1) * sizeof(uint64_t) + ring_bytes(t.free_slots);
  for (int c = kMinClass; c <= kMaxClass; ++c) b += ring_bytes(t.free_cells[c]);
  return b;
}

bool live_entry(Table& t, uint32_t id, bool touch, uint32_t* slot_out, uint64_t* state_out) {
  uint32_t slot, tag;
  if (!g_ready.load(std::memory_order_acquire) || !t.decode(id, &slot, &tag)) return false;
  EntryMeta& e = t.entries[slot];
  uint64_t s = touch ? touch_entry(e) : e.state.load(std::memory_order_acquire);
  if ((s & (kLive | kBusy)) != kLive || (s & kTagMask) != tag) return false;
  *slot_out = slot;
  *state_out = s;
  return true;
}

bool pin(Table& t, uint32_t id) {
  uint32_t slot, tag;
  if (!g_ready.load(std::memory_order_acquire) || !t.decode(id, &slot, &tag)) return false;
  EntryMeta& e = t.entries[slot];
  for (uint64_t s = e.state.load(std::memory_order_acquire);;) {
    if ((s & (kLive | kBusy)) != kLive || (s & kTagMask) != tag || (s & kPinMask) == kPinMask) return false;
    if (e.state.compare_exchange_weak(s, s + kPinOne, std::memory_order_acq_rel)) return true;
  }
}

void unpin(Table& t, uint32_t id) {
  uint32_t slot, tag;
  if (!g_ready.load(std::memory_order_acquire) || !t.decode(id, &slot, &tag)) return;
  EntryMeta& e = t.entries[slot];
  uint64_t s = e.state.load(std::memory_order_relaxed);
  // One earlier successful pin: a pinned entry is never swept, so it is still live under its tag with a pin.
  CDSA_DCHECK((s & kTagMask) == tag && (s & kPinMask) != 0);
  if ((s & kTagMask) == tag && (s & kPinMask) != 0) e.state.fetch_sub(kPinOne, std::memory_order_acq_rel);
}

namespace {

void note_table_full(Table& t) {
  t.refused.fetch_add(1, std::memory_order_relaxed);
  note_overflow(t.full_note);
}

// The table is full: reclaim it (or let the thread reclaiming it now finish) and `take` again, as long as
// reclamation frees entries of this table, at most kReclaimWaitNs. A reclaiming thread may be descheduled mid-cycle
// (several launching threads on one core, or a slow build): without this the others use up the room its last cycle
// made and record their launches without a stack until it runs again. So they give it the processor, and when
// its cycle freed what they then took, run the next one themselves. Only a full table comes here: the launch
// path otherwise never waits. False: the table is full of entries in use (the last cycle freed fewer than
// `soon`), or reclamation is held (the report), or the time is up.
constexpr int64_t kReclaimWaitNs = 20 * 1000 * 1000;
template <typename Take>
bool make_room(Table& t, uint32_t soon, Take take) {
  maybe_reclaim(t, soon);
  if (take()) return true;
  const int me = getpid();
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 1;; ++i) {
    if (g_hold.load(std::memory_order_acquire)) return false;
    if (i % 16 == 0) {
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if ((now.tv_sec - t0.tv_sec) * 1000000000ll + (now.tv_nsec - t0.tv_nsec) > kReclaimWaitNs) return false;
    }
    if (g_reclaiming.load(std::memory_order_acquire) == me) {
      sched_yield();
      continue;
    }
    if (take()) return true;
    if (t.last_freed.load(std::memory_order_acquire) < soon) return false;  // (almost) all in use
    maybe_reclaim(t, 0);
    if (take()) return true;
  }
}

}  // namespace

bool allocate(Table& t, uint64_t words, uint32_t* slot, uint64_t* off, int* cls) {
  t.attempts.fetch_add(1, std::memory_order_relaxed);
  if (running_low(t)) maybe_reclaim(t, t.capacity / 8);
  // Full: reclaim sooner (each reclamation also ages what the last one had to keep as recently used).
  const uint32_t soon = t.capacity / 64 + 1;
  if (!alloc_slot(t, slot) && !make_room(t, soon, [&] { return alloc_slot(t, slot); })) {
    note_table_full(t);
    return false;
  }
  *off = 0;
  *cls = 0;
  if (!alloc_cell(t, words, off, cls) && !make_room(t, soon, [&] { return alloc_cell(t, words, off, cls); })) {
    *cls = 0;
    note_table_full(t);
  }
  return true;
}

}  // namespace cdsa::recorder_internal
