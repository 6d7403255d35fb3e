// The machinery both interning tables (strings: string_table.cc, stacks: stack_table.cc) are made of, and the
// reclamation (reclaim.cc) frees from: entries, arenas, free rings, the index, the epoch.
// Internal to shim/record/: inline here what the launch path and the tables' lookups run (touching an entry, its
// seqlock test, the index's publish), so that no split between the files costs a call.
// Contract: lock-free and allocation-free (recorder.h, "Holding ids"); one reclamation at a time (g_reclaiming).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/check.h"
#include "shim/record/recorder_internal.h"

// Hidden, as the definitions are (cdsa_preload_flags): an extern declaration would otherwise reach its data through
// the GOT.
#pragma GCC visibility push(hidden)
namespace cdsa::recorder_internal {

// Both interning tables (strings, stacks) are one shape: a fixed array of entries, an arena of 64-bit words the
// entries' contents live in, and an open-addressing index of bucket words (slot + 1). An entry's `state` word is
// its seqlock and its identity: generation (low 32 bits), pin count, and the live/busy flags. A reader copies an
// entry's fields and contents with relaxed atomic loads between two loads of `state` and trusts them only if
// `state` did not change, so an entry reclaimed and reused under a reader is seen as changed, never mixed.
//
// Reclamation (one thread at a time, `g_reclaiming`; of the table that ran low, and of the other only if it runs
// low too): the epoch advances; every entry that is live, unpinned,
// unmarked (the ring, and for strings the live stacks) and not touched in this epoch or the one before is freed:
// CAS live(g) -> free(g+1), then `touch` is read again: a user that touched it meanwhile (store touch, then load
// state: Dekker with seq_cst on both sides) either saw the free (and looks up again) or is seen here, and the
// entry is put back. Freed slots and cells go to free rings only after that, so nothing reused can be put back.
// Then the index is rebuilt into the spare bucket array from the live entries and swapped in: no tombstones, no
// stale buckets. An insert racing with the rebuild may land in the array being retired: its stack is then
// interned again on its next miss (a duplicate entry, reclaimed like any other once unused).
//
// Free rings: a single producer (the reclaimer) appends at `tail` (release); any thread takes at `head` by CAS,
// reading the value before the CAS (a ring holds more positions than it can ever have free items, so the value
// at `head` is not overwritten before head moves).
constexpr uint64_t kLive = 1ull << 63, kBusy = 1ull << 62, kPinOne = 1ull << 32, kPinMask = 0xffffffull << 32;
constexpr uint64_t kTagMask = 0xffffffffull;

struct EntryMeta {
  std::atomic<uint64_t> state;  // tag | pins << 32 | kLive | kBusy
  std::atomic<uint64_t> touch;  // the epoch it was last used in
  std::atomic<uint64_t> hash;
  std::atomic<uint64_t> loc;    // arena offset (words) << 24 | size class << 18 | two counts (9 bits each)
};
static_assert(sizeof(EntryMeta) == 32, "entries are half a cache line");

struct FreeRing {
  std::atomic<uint64_t>* v = nullptr;
  uint64_t mask = 0;
  std::atomic<uint64_t> head{0}, tail{0};
  bool take(uint64_t* out) {
    for (uint64_t h = head.load(std::memory_order_acquire);;) {
      if (h == tail.load(std::memory_order_acquire)) return false;
      uint64_t x = v[h & mask].load(std::memory_order_relaxed);
      if (head.compare_exchange_weak(h, h + 1, std::memory_order_acq_rel)) {
        *out = x;
        return true;
      }
    }
  }
  void put(uint64_t x) {  // reclaimer only
    uint64_t t = tail.load(std::memory_order_relaxed);
    // Sized for every slot (or cell) of its table: a put past a full ring means something was freed twice.
    CDSA_DCHECK(t - head.load(std::memory_order_relaxed) <= mask);
    v[t & mask].store(x, std::memory_order_relaxed);
    tail.store(t + 1, std::memory_order_release);
  }
  uint64_t size() const {
    uint64_t t = tail.load(std::memory_order_acquire), h = head.load(std::memory_order_acquire);
    return t > h ? t - h : 0;
  }
};

constexpr int kMinClass = 1, kMaxClass = 14;  // cells of 2 .. 16384 words

struct Table {
  const char* full_note = "";
  uint32_t capacity = 0, idx_bits = 0, tag_limit = 0;  // tags run 0 .. tag_limit - 1
  EntryMeta* entries = nullptr;
  std::atomic<uint32_t>* bucket_arrays[2] = {nullptr, nullptr};
  std::atomic<std::atomic<uint32_t>*> buckets{nullptr};
  uint32_t bucket_mask = 0;
  std::atomic<uint64_t>* arena = nullptr;  // words
  uint64_t arena_words = 0;
  std::atomic<uint64_t> arena_bump{0};
  std::atomic<uint32_t> slot_bump{0};
  FreeRing free_slots;
  FreeRing free_cells[kMaxClass + 1];
  std::atomic<uint64_t> attempts{0};  // inserts tried since the last reclamation
  uint64_t* marks = nullptr;          // reclaimer's bitmap, one bit per slot
  std::atomic<uint64_t> freed{0};
  std::atomic<uint64_t> refused{0};     // inserts given up: the table was full of entries in use
  std::atomic<uint64_t> last_freed{~0ull};  // what the last cycle that swept this table freed

  uint32_t id_of(uint32_t slot, uint64_t state) const { return static_cast<uint32_t>(state & kTagMask) << idx_bits | slot; }
  bool decode(uint32_t id, uint32_t* slot, uint32_t* tag) const {
    *slot = id & ((1u << idx_bits) - 1);
    *tag = id >> idx_bits;
    return *slot < capacity && *tag < tag_limit;
  }
};
extern Table g_strings, g_stacks;
constexpr uint32_t kMaxStrings = 1u << 17;
constexpr size_t kStringArenaWords = (16u << 20) / 8;

extern std::atomic<uint64_t> g_epoch;  // starts at 2 so that "touched in epoch - 1" never underflows
// The pid of the process one of whose threads reclaims now, else 0. A forked child finds its parent's pid here if
// the fork came mid-cycle (that cycle's thread does not exist in the child): it takes the cycle over.
extern std::atomic<int> g_reclaiming;
extern std::atomic<bool> g_hold;
extern std::atomic<uint64_t> g_reclaims;

inline uint64_t touch_entry(EntryMeta& e) {
  uint64_t now = g_epoch.load(std::memory_order_relaxed);
  if (e.touch.load(std::memory_order_relaxed) < now) e.touch.store(now, std::memory_order_seq_cst);
  return e.state.load(std::memory_order_seq_cst);
}

inline uint64_t load_word(const std::atomic<uint64_t>* w) { return w->load(std::memory_order_relaxed); }

// A cell of at least `words` words: a free one of its class (or up to two classes larger), else fresh arena.
bool alloc_cell(Table& t, uint64_t words, uint64_t* off, int* cls);
bool alloc_slot(Table& t, uint32_t* slot);
// Free entries and cells: fewer than half left (a reclamation takes about a millisecond per 100,000 entries:
// the other half is the room that inserts on other threads meanwhile have).
bool running_low(const Table& t);
bool map_table(Table& t, uint32_t capacity, uint64_t arena_words, const char* full_note);
uint64_t table_bytes(const Table& t);
// Not more often than once per `after_attempts` inserts into the table (reclaim.cc).
void maybe_reclaim(Table& t, uint32_t after_attempts);

// Puts published entry `slot` (id `id`, hash `hash`) into t's index and returns `id`, unless another thread
// published an equal live entry meanwhile (`same(entry, state)`): then that one's id (ours stays unindexed, and is
// reclaimed unused). An index rebuilt meanwhile gets the entry too.
template <class Same>
uint32_t index_entry(Table& t, uint32_t slot, uint64_t hash, uint32_t id, Same same) {
  for (;;) {
    std::atomic<uint32_t>* buckets = t.buckets.load(std::memory_order_acquire);
    uint32_t start = static_cast<uint32_t>(hash ^ (hash >> 32)) & t.bucket_mask;
    for (uint32_t i = start, probes = 0; probes <= t.bucket_mask; i = (i + 1) & t.bucket_mask, ++probes) {
      uint32_t expected = 0;
      if (buckets[i].compare_exchange_strong(expected, slot + 1, std::memory_order_acq_rel)) break;
      uint32_t other = expected - 1;
      if (other >= t.capacity || other == slot) continue;
      EntryMeta& e = t.entries[other];
      uint64_t s1 = e.state.load(std::memory_order_acquire);
      if ((s1 & (kLive | kBusy)) == kLive && same(e, s1) && ((touch_entry(e) ^ s1) & ~kPinMask) == 0)
        return t.id_of(other, s1);
    }
    if (t.buckets.load(std::memory_order_acquire) == buckets) return id;
  }
}

// Publishes a fresh entry in slot `slot` (state free(tag) -> busy -> live(tag)); `fill` writes its contents.
// Returns the entry's id.
template <class Fill>
uint32_t publish_entry(Table& t, uint32_t slot, uint64_t hash, uint64_t loc, Fill fill) {
  EntryMeta& e = t.entries[slot];
  uint64_t tag = e.state.load(std::memory_order_relaxed) & kTagMask;
  // The slot came from alloc_slot: free (neither live nor being written) and unpinned, or two owners share it.
  CDSA_DCHECK((e.state.load(std::memory_order_relaxed) & (kLive | kBusy | kPinMask)) == 0);
  e.state.store(tag | kBusy, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.hash.store(hash, std::memory_order_relaxed);
  e.loc.store(loc, std::memory_order_relaxed);
  e.touch.store(g_epoch.load(std::memory_order_relaxed), std::memory_order_relaxed);
  fill();
  e.state.store(tag | kLive, std::memory_order_release);
  return t.id_of(slot, tag);
}

// Inserts slot's id into the index (any empty bucket on its probe sequence).
void index_insert(Table& t, std::atomic<uint32_t>* buckets, uint64_t hash, uint32_t slot);

// A stable read of one entry: its state before and after the caller's reads must match.
inline bool stable(const EntryMeta& e, uint64_t s1) {
  std::atomic_thread_fence(std::memory_order_acquire);
  return ((e.state.load(std::memory_order_relaxed) ^ s1) & ~kPinMask) == 0;  // a pin changes no content
}

inline uint64_t loc_of(uint64_t off, int cls, uint32_t a, uint32_t b) {
  return off << 24 | static_cast<uint64_t>(cls) << 18 | static_cast<uint64_t>(a & 0x1ff) << 9 | (b & 0x1ff);
}
inline uint64_t loc_off(uint64_t loc) { return loc >> 24; }
inline int loc_class(uint64_t loc) { return static_cast<int>((loc >> 18) & 0x3f); }
inline uint32_t loc_a(uint64_t loc) { return static_cast<uint32_t>((loc >> 9) & 0x1ff); }
inline uint32_t loc_b(uint64_t loc) { return static_cast<uint32_t>(loc & 0x1ff); }
// Strings keep their length in the 18 low bits.
inline uint64_t sloc_of(uint64_t off, int cls, uint32_t len) { return off << 24 | static_cast<uint64_t>(cls) << 18 | len; }
inline uint32_t sloc_len(uint64_t loc) { return static_cast<uint32_t>(loc & 0x3ffff); }

// The live entry `id` names: its slot and state (seq_cst, after touching it), or false.
bool live_entry(Table& t, uint32_t id, bool touch, uint32_t* slot_out, uint64_t* state_out);
// The live entry `id` names and its cell's location (e.loc), for a reader that copies its contents and then checks
// stable(*e, *state): false for the none id (all ones), a dead id, or an entry published without a cell.
static_assert(kUnknownStack == kNoString, "both tables' none id");
inline bool live_cell(Table& t, uint32_t id, const EntryMeta** e, uint64_t* state, uint64_t* loc) {
  uint32_t slot;
  if (id == kNoString || !live_entry(t, id, false, &slot, state)) return false;
  *e = &t.entries[slot];
  *loc = (*e)->loc.load(std::memory_order_relaxed);
  return loc_class(*loc) != 0;
}
bool pin(Table& t, uint32_t id);
void unpin(Table& t, uint32_t id);

// A slot and a cell of `words` words, making room first when the table runs low. False: the table is full of
// entries still referenced or recently used. A slot without a cell is published empty and unindexed (*cls == 0):
// nothing finds it, and it is reclaimed like any unused entry.
bool allocate(Table& t, uint64_t words, uint32_t* slot, uint64_t* off, int* cls);

}  // namespace cdsa::recorder_internal
#pragma GCC visibility pop
