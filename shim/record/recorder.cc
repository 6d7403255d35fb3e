#include "shim/record/recorder.h"
#include "shim/record/launch_clock.h"

#include <dlfcn.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "base/check.h"
#include "shim/common/config.h"
#include "shim/common/log.h"
#include "shim/stacks/native_stack.h"
#include "shim/stacks/python_stack.h"

namespace cdsa {
namespace {

// ---------------------------------------------------------------- memory
void* map_zeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

inline uint64_t mix(uint64_t h, uint64_t w) {
  h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

uint64_t hash_bytes(const char* s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 0x100000001b3ull;
  return h;
}

// The first table found full says so once, as it happens (the report later says how often; see
// recorder_overflow_note).
std::atomic<bool> g_overflow_logged{false};
std::atomic<bool> g_stream_table_full{false};
void note_overflow(const char* what) {
  if (!g_overflow_logged.exchange(true))
    log_line("%s: launches are recorded with less detail while it is", what);
}

// ---------------------------------------------------------------- reclaimable tables
//
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
Table g_strings, g_stacks;
constexpr uint32_t kMaxStrings = 1u << 17;
constexpr size_t kStringArenaWords = (16u << 20) / 8;

std::atomic<uint64_t> g_epoch{2};  // starts at 2 so that "touched in epoch - 1" never underflows
// The pid of the process one of whose threads reclaims now, else 0. A forked child finds its parent's pid here if
// the fork came mid-cycle (that cycle's thread does not exist in the child): it takes the cycle over.
std::atomic<int> g_reclaiming{0};
std::atomic<bool> g_hold{false};
std::atomic<uint64_t> g_reclaims{0};

inline uint64_t touch_entry(EntryMeta& e) {
  uint64_t now = g_epoch.load(std::memory_order_relaxed);
  if (e.touch.load(std::memory_order_relaxed) < now) e.touch.store(now, std::memory_order_seq_cst);
  return e.state.load(std::memory_order_seq_cst);
}

inline uint64_t load_word(const std::atomic<uint64_t>* w) { return w->load(std::memory_order_relaxed); }

int class_for(uint64_t words) {
  int c = kMinClass;
  while (c <= kMaxClass && (1ull << c) < words) ++c;
  return c;
}

// A cell of at least `words` words: a free one of its class (or up to two classes larger), else fresh arena.
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

// Free entries and cells: fewer than half left (a reclamation takes about a millisecond per 100,000 entries:
// the other half is the room that inserts on other threads meanwhile have).
bool running_low(const Table& t) {
  uint64_t slots = t.capacity - t.slot_bump.load(std::memory_order_relaxed) + t.free_slots.size();
  uint64_t words = t.arena_words - t.arena_bump.load(std::memory_order_relaxed);
  for (int c = kMinClass; c <= kMaxClass; ++c) words += t.free_cells[c].size() << c;
  return slots * 2 < t.capacity || words * 2 < t.arena_words;
}

bool map_table(Table& t, uint32_t capacity, uint64_t arena_words, const char* full_note);
void maybe_reclaim(Table& t, uint32_t after_attempts);

// Publishes a fresh entry in slot `slot` (state free(tag) -> busy -> live(tag)); `fill` writes its contents.
// Returns the entry's id.
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
void index_insert(Table& t, std::atomic<uint32_t>* buckets, uint64_t hash, uint32_t slot) {
  uint32_t start = static_cast<uint32_t>(hash ^ (hash >> 32)) & t.bucket_mask;
  for (uint32_t i = start, probes = 0; probes <= t.bucket_mask; i = (i + 1) & t.bucket_mask, ++probes) {
    uint32_t expected = 0;
    if (buckets[i].compare_exchange_strong(expected, slot + 1, std::memory_order_acq_rel)) return;
  }
  CDSA_DCHECK(!"index full: it has more buckets than its table has slots");
}

// A stable read of one entry: its state before and after the caller's reads must match.
inline bool stable(const EntryMeta& e, uint64_t s1) {
  std::atomic_thread_fence(std::memory_order_acquire);
  return ((e.state.load(std::memory_order_relaxed) ^ s1) & ~kPinMask) == 0;  // a pin changes no content
}

// ---------------------------------------------------------------- ring
constexpr int kRingWords = 10;
struct RingSlot {
  std::atomic<uint64_t> w[kRingWords];
};
struct Ring {
  RingSlot* slots = nullptr;
  uint32_t mask = 0;
} g_ring;

// ---------------------------------------------------------------- streams
constexpr uint32_t kStreamCapacity = 4096;
StreamState* g_streams = nullptr;
std::atomic<int> g_streams_used{0};

// ---------------------------------------------------------------- handle maps
constexpr uint32_t kFuncCapacity = 1u << 15;
struct FuncEntry {
  std::atomic<uintptr_t> func;
  std::atomic<uint32_t> name;
};
FuncEntry* g_maps[2] = {nullptr, nullptr};

std::once_flag g_init_once;
std::atomic<bool> g_ready{false};

void init_tables() {
  const Config& c = config();
  // Room for every stack at a typical depth; deeper stacks use more, and a full arena makes room like a full table.
  bool tables = map_table(g_strings, kMaxStrings, kStringArenaWords, "string table full") &&
                map_table(g_stacks, c.stack_table_size, static_cast<uint64_t>(c.stack_table_size) * 64,
                          "launch stack table full (raise CDSA_STACK_TABLE)");

  g_ring.mask = c.ring_size - 1;
  g_ring.slots = static_cast<RingSlot*>(map_zeroed(static_cast<size_t>(c.ring_size) * sizeof(RingSlot)));

  g_streams = static_cast<StreamState*>(map_zeroed(kStreamCapacity * sizeof(StreamState)));
  for (auto& m : g_maps) m = static_cast<FuncEntry*>(map_zeroed(kFuncCapacity * sizeof(FuncEntry)));

  if (!tables || !g_ring.slots || !g_streams || !g_maps[0] || !g_maps[1]) {
    log_line("could not map memory for the launch recorder: recording is off");
    return;
  }
  native_stack_init();
  PyWalkerState py = python_walker_init();
  if (py == PyWalkerState::Unsupported) log_line("%s: launches keep their native frames", python_walker_description());
  // Native stacks of launches made from Python stop at the innermost interpreter frame (CDSA_NATIVE_FULL=1 keeps
  // them whole): the interpreter is the object holding its evaluation loop, libpython or the executable.
  if (py == PyWalkerState::Ready && !c.native_full) {
    const char* names[] = {"_PyEval_EvalFrameDefault", "PyEval_EvalCode", "Py_Version"};
    for (const char* name : names)
      if (set_interpreter_range_from(dlsym(RTLD_DEFAULT, name))) break;
  }
  g_ready.store(true, std::memory_order_release);
}

}  // namespace

bool recorder_init() noexcept {
  launch_clock_init();  // before the first record's stamp
  std::call_once(g_init_once, init_tables);
  return g_ready.load(std::memory_order_acquire);
}

// ================================================================ reclaimable tables
namespace {

std::atomic<uint64_t>* map_ring(FreeRing& r, uint64_t items) {
  uint64_t n = 1;
  while (n <= items) n <<= 1;
  r.mask = n - 1;
  r.v = static_cast<std::atomic<uint64_t>*>(map_zeroed(n * sizeof(uint64_t)));
  return r.v;
}

uint64_t ring_bytes(const FreeRing& r) { return (r.mask + 1) * sizeof(uint64_t); }

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

// ---- strings ----
// Stored as their bytes, a NUL and zero padding, in whole words.
inline uint64_t string_word(const char* s, size_t len, size_t w) {
  uint64_t x = 0;
  size_t at = w * 8;
  if (at < len) memcpy(&x, s + at, len - at < 8 ? len - at : 8);
  return x;
}

bool same_string(const Table& t, const EntryMeta& e, uint64_t s1, uint64_t h, const char* s, size_t len) {
  if (e.hash.load(std::memory_order_relaxed) != h) return false;
  uint64_t loc = e.loc.load(std::memory_order_relaxed);
  if (loc_class(loc) == 0 || sloc_len(loc) != len) return false;
  const std::atomic<uint64_t>* f = t.arena + loc_off(loc);
  for (size_t w = 0; w <= len / 8; ++w)
    if (load_word(f + w) != string_word(s, len, w)) return false;
  return stable(e, s1);
}

// The id of a live entry equal to the string, from `buckets`, or kNoString.
uint32_t find_string(Table& t, std::atomic<uint32_t>* buckets, uint64_t h, const char* s, size_t len) {
  uint32_t start = static_cast<uint32_t>(h ^ (h >> 32)) & t.bucket_mask;
  for (uint32_t i = start, probes = 0; probes <= t.bucket_mask; i = (i + 1) & t.bucket_mask, ++probes) {
    uint32_t v = buckets[i].load(std::memory_order_acquire);
    if (v == 0) return kNoString;
    uint32_t slot = v - 1;
    if (slot >= t.capacity) continue;
    EntryMeta& e = t.entries[slot];
    uint64_t s1 = e.state.load(std::memory_order_acquire);
    if ((s1 & (kLive | kBusy)) != kLive || !same_string(t, e, s1, h, s, len)) continue;
    if (((touch_entry(e) ^ s1) & ~kPinMask) != 0) continue;  // reclaimed meanwhile
    return t.id_of(slot, s1);
  }
  return kNoString;
}

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

// A slot and a cell of `words` words, making room first when the table runs low. False: the table is full of
// entries still referenced or recently used. A slot without a cell is published empty and unindexed (*cls == 0):
// nothing finds it, and it is reclaimed like any unused entry.
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

}  // namespace

uint32_t intern_string(const char* s, size_t len) noexcept {
  if (!g_ready.load(std::memory_order_acquire)) return kNoString;
  if (len > kMaxInternedString) len = kMaxInternedString;
  Table& t = g_strings;
  uint64_t h = hash_bytes(s, len);
  std::atomic<uint32_t>* buckets = t.buckets.load(std::memory_order_acquire);
  uint32_t found = find_string(t, buckets, h, s, len);
  if (found != kNoString) return found;
  uint32_t slot;
  uint64_t off;
  int cls;
  const uint64_t words = len / 8 + 1;
  if (!allocate(t, words, &slot, &off, &cls)) return kNoString;
  if (cls == 0) {
    publish_entry(t, slot, 0, 0, [] {});
    return kNoString;
  }
  uint32_t id = publish_entry(t, slot, h, sloc_of(off, cls, static_cast<uint32_t>(len)), [&] {
    for (uint64_t w = 0; w < words; ++w) t.arena[off + w].store(string_word(s, len, w), std::memory_order_relaxed);
  });
  // Another thread may have published the same string meanwhile: then its id is the one.
  return index_entry(t, slot, h, id, [&](EntryMeta& e, uint64_t s1) { return same_string(t, e, s1, h, s, len); });
}

const char* string_at(uint32_t id) noexcept {
  uint32_t slot;
  uint64_t s;
  if (id == kNoString || !live_entry(g_strings, id, false, &slot, &s)) return "";
  uint64_t loc = g_strings.entries[slot].loc.load(std::memory_order_relaxed);
  if (loc_class(loc) == 0) return "";
  return reinterpret_cast<const char*>(g_strings.arena + loc_off(loc));
}

bool string_copy(uint32_t id, std::string* out) {
  out->clear();
  uint32_t slot;
  uint64_t s1;
  if (id == kNoString || !live_entry(g_strings, id, false, &slot, &s1)) return false;
  const EntryMeta& e = g_strings.entries[slot];
  uint64_t loc = e.loc.load(std::memory_order_relaxed);
  if (loc_class(loc) == 0) return false;
  uint32_t len = sloc_len(loc);
  out->resize(len / 8 * 8 + 8);
  for (uint32_t w = 0; w <= len / 8; ++w) {
    uint64_t x = load_word(g_strings.arena + loc_off(loc) + w);
    memcpy(&(*out)[w * 8], &x, 8);
  }
  out->resize(len);
  if (stable(e, s1)) return true;
  out->clear();
  return false;
}

bool string_pin(uint32_t id) noexcept { return pin(g_strings, id); }
void string_unpin(uint32_t id) noexcept { unpin(g_strings, id); }

// ================================================================ stacks
namespace {

// Cell layout of one stack: n_native PCs, then n_python PyFrameKeys (2 words each, byte for byte as captured),
// then n_python resolved frames (file << 32 | function, line).
constexpr int kPyKeyWords = 2, kPyTextWords = 2;
static_assert(sizeof(PyFrameKey) == kPyKeyWords * sizeof(uint64_t), "PyFrameKey is stored as two words");

inline uint64_t key_word(const PyFrameKey* py, int i) {
  uint64_t w[kPyKeyWords];
  memcpy(w, &py[i / kPyKeyWords], sizeof w);
  return w[i % kPyKeyWords];
}

bool same_python(const std::atomic<uint64_t>* f, const PyFrameKey* py, int n_py) {
  for (int i = 0; i < n_py * kPyKeyWords; ++i)
    if (load_word(f + i) != key_word(py, i)) return false;
  return true;
}

bool same_frames(const EntryMeta& e, uint64_t s1, uint64_t h, const uintptr_t* pcs, int n_native, const PyFrameKey* py,
                 int n_py) {
  if (e.hash.load(std::memory_order_relaxed) != h) return false;
  uint64_t loc = e.loc.load(std::memory_order_relaxed);
  if (loc_class(loc) == 0 || loc_a(loc) != static_cast<uint32_t>(n_native) || loc_b(loc) != static_cast<uint32_t>(n_py))
    return false;
  const std::atomic<uint64_t>* f = g_stacks.arena + loc_off(loc);
  for (int i = 0; i < n_native; ++i)
    if (load_word(f + i) != pcs[i]) return false;
  return same_python(f + n_native, py, n_py) && stable(e, s1);
}

uint32_t find_stack(std::atomic<uint32_t>* buckets, uint64_t h, const uintptr_t* pcs, int n_native,
                    const PyFrameKey* py, int n_py, uint32_t skip) {
  Table& t = g_stacks;
  uint32_t start = static_cast<uint32_t>(h ^ (h >> 32)) & t.bucket_mask;
  for (uint32_t i = start, probes = 0; probes <= t.bucket_mask; i = (i + 1) & t.bucket_mask, ++probes) {
    uint32_t v = buckets[i].load(std::memory_order_acquire);
    if (v == 0) return kUnknownStack;
    uint32_t slot = v - 1;
    if (slot >= t.capacity || slot == skip) continue;
    EntryMeta& e = t.entries[slot];
    uint64_t s1 = e.state.load(std::memory_order_acquire);
    if ((s1 & (kLive | kBusy)) != kLive || !same_frames(e, s1, h, pcs, n_native, py, n_py)) continue;
    if (((touch_entry(e) ^ s1) & ~kPinMask) != 0) continue;
    return t.id_of(slot, s1);
  }
  return kUnknownStack;
}

uint32_t insert_stack(uint64_t h, const uintptr_t* pcs, int n_native, const PyFrameKey* py, int n_py) {
  Table& t = g_stacks;
  // The Python frames' text first (interning may make room in the string table).
  uint64_t text[256 * kPyTextWords];
  for (int i = 0; i < n_py; ++i) {
    char file[1024], func[512];
    int line = 0;
    uint32_t file_id = kNoString, func_id = kNoString;
    if (resolve_python_frame(py[i], file, sizeof file, func, sizeof func, &line)) {
      file_id = intern_string(file, strlen(file));
      func_id = intern_string(func, strlen(func));
    }
    text[i * kPyTextWords] = (static_cast<uint64_t>(file_id) << 32) | func_id;
    text[i * kPyTextWords + 1] = static_cast<uint64_t>(static_cast<uint32_t>(line));
  }
  uint64_t words = static_cast<uint64_t>(n_native) + static_cast<uint64_t>(n_py) * (kPyKeyWords + kPyTextWords);
  uint32_t slot;
  uint64_t off;
  int cls;
  if (!allocate(t, words, &slot, &off, &cls)) return kUnknownStack;
  if (cls == 0) {
    publish_entry(t, slot, 0, 0, [] {});
    return kUnknownStack;
  }
  uint32_t id = publish_entry(t, slot, h, loc_of(off, cls, static_cast<uint32_t>(n_native), static_cast<uint32_t>(n_py)), [&] {
    std::atomic<uint64_t>* f = t.arena + off;
    for (int i = 0; i < n_native; ++i) f[i].store(pcs[i], std::memory_order_relaxed);
    f += n_native;
    for (int i = 0; i < n_py * kPyKeyWords; ++i) f[i].store(key_word(py, i), std::memory_order_relaxed);
    f += n_py * kPyKeyWords;
    for (int i = 0; i < n_py * kPyTextWords; ++i) f[i].store(text[i], std::memory_order_relaxed);
  });
  // Another thread may have published the same stack meanwhile: then its id is the one.
  return index_entry(t, slot, h, id,
                     [&](EntryMeta& e, uint64_t s1) { return same_frames(e, s1, h, pcs, n_native, py, n_py); });
}

// Four independent multiply-rotate lanes: the words of a stack hash in about a cycle each.
inline uint64_t lane(uint64_t h, uint64_t w) {
  return ((h ^ w) * 0x9e3779b97f4a7c15ull) << 29 | ((h ^ w) * 0x9e3779b97f4a7c15ull) >> 35;
}
uint64_t hash_words(const uint64_t* w, size_t n, uint64_t seed) {
  uint64_t a = seed, b = seed ^ 0x243f6a8885a308d3ull, c = seed ^ 0x13198a2e03707344ull,
           d = seed ^ 0xa4093822299f31d0ull;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a = lane(a, w[i]);
    b = lane(b, w[i + 1]);
    c = lane(c, w[i + 2]);
    d = lane(d, w[i + 3]);
  }
  for (; i < n; ++i) a = lane(a, w[i]);
  return mix(mix(mix(mix(n, a), b), c), d);
}
uint64_t hash_frames(const uintptr_t* pcs, int n_native, const PyFrameKey* py, int n_py) {
  uint64_t h = hash_words(reinterpret_cast<const uint64_t*>(pcs), static_cast<size_t>(n_native), 0x452821e638d01377ull);
  return hash_words(reinterpret_cast<const uint64_t*>(py), static_cast<size_t>(n_py) * kPyKeyWords, h);
}

uint32_t lookup_or_insert(const uintptr_t* pcs, int n_native, const PyFrameKey* py, int n_py) {
  uint64_t h = hash_frames(pcs, n_native, py, n_py);
  uint32_t id = find_stack(g_stacks.buckets.load(std::memory_order_acquire), h, pcs, n_native, py, n_py, UINT32_MAX);
  return id != kUnknownStack ? id : insert_stack(h, pcs, n_native, py, n_py);
}

}  // namespace

StackMemo stack_memo(uint32_t id) noexcept {
  uint64_t epoch = g_epoch.load(std::memory_order_seq_cst);
  uint32_t slot;
  uint64_t s;
  // Touched (in `epoch` or later): a memo of the current epoch needs no other look (memo_id_now).
  if (id == kUnknownStack || !live_entry(g_stacks, id, true, &slot, &s)) return kNoStackMemo;
  return (epoch << 32) | id;  // epoch >= 2: never 0
}

namespace {
// The memo's entry, touched, if it is still the one remembered: reclaimed since, its slot has another generation,
// and a generation comes back only after tag_limit reclamations, so older memos are refused outright.
bool memo_entry(StackMemo memo, uint32_t* id, uint32_t* slot, uint64_t* s) {
  if (memo == kNoStackMemo) return false;
  uint32_t since = static_cast<uint32_t>(g_epoch.load(std::memory_order_relaxed)) - static_cast<uint32_t>(memo >> 32);
  if (since + 1 >= g_stacks.tag_limit) return false;
  *id = static_cast<uint32_t>(memo);
  return live_entry(g_stacks, *id, true, slot, s);
}

// memo_entry for the launch path (capture_and_intern_stack, after its g_ready test), inline: the same tests in the
// same order (the memo's age, the id's slot and tag, the touch before the state's seq_cst load, live and not busy
// under the same tag), without live_entry's call, its out-parameters or a second g_ready load (set once, never
// cleared). The id returned is "used now", as from memo_entry.
__attribute__((always_inline)) inline uint32_t memo_id_ready(StackMemo memo) {
  if (memo == kNoStackMemo) return kUnknownStack;
  const uint64_t now = g_epoch.load(std::memory_order_relaxed);
  if (static_cast<uint32_t>(now) - static_cast<uint32_t>(memo >> 32) + 1 >= g_stacks.tag_limit) return kUnknownStack;
  const auto id = static_cast<uint32_t>(memo);
  uint32_t slot, tag;
  if (!g_stacks.decode(id, &slot, &tag)) return kUnknownStack;
  EntryMeta& e = g_stacks.entries[slot];
  const uint64_t st = touch_entry(e);
  return (st & (kLive | kBusy)) == kLive && (st & kTagMask) == tag ? id : kUnknownStack;
}
// memo_id_ready, and the memo made new when it answers: a memo made in the current epoch names an entry this thread
// touched in it, which no reclamation can take before the epoch moves on (every reclamation moves it first, then
// keeps what was touched in the epoch before), so it is the id without another look while the epoch stays. A memo
// made anew ages from then: the entry had the same generation then, and a generation comes back only after
// tag_limit reclamations from there.
__attribute__((always_inline)) inline uint32_t memo_id_now(StackMemo* memo) {
  const StackMemo m = *memo;
  const uint64_t now = g_epoch.load(std::memory_order_relaxed);
  if (static_cast<uint32_t>(m >> 32) == static_cast<uint32_t>(now)) return static_cast<uint32_t>(m);  // (epoch >= 2)
  const uint32_t id = memo_id_ready(m);  // touches the entry (in `now` or a later epoch)
  if (id != kUnknownStack) *memo = (now << 32) | id;
  return id;
}
}  // namespace

// The Python side of a memo when the launch has no Python frames (no Python, or depth 0): a fixed token.
constexpr uint64_t kNoPythonToken = ~uint64_t{0};

uint32_t stack_memo_id(StackMemo memo) noexcept {
  uint32_t id, slot;
  uint64_t s;
  return memo_entry(memo, &id, &slot, &s) ? id : kUnknownStack;
}

bool stack_alive(uint32_t id) noexcept {
  uint32_t slot;
  uint64_t s;
  return id != kUnknownStack && live_entry(g_stacks, id, false, &slot, &s);
}
bool stack_pin(uint32_t id) noexcept { return id != kUnknownStack && pin(g_stacks, id); }
void stack_unpin(uint32_t id) noexcept {
  if (id != kUnknownStack) unpin(g_stacks, id);
}

uint32_t capture_and_intern_stack() noexcept {
  if (!g_ready.load(std::memory_order_acquire)) return kUnknownStack;
  const Config& c = config();
  if (c.native_depth <= 0 && c.python_depth <= 0) return kUnknownStack;  // no stacks: nothing to capture
  uintptr_t pcs[256];
  PyFrameKey py[256];
  PyCapture pyhow;
  pyhow.borrow = true;
  pyhow.frames = py;
  int n_py = c.python_depth > 0 ? capture_python_frames_cached(py, c.python_depth, &pyhow) : 0;
  NativeCapture how;
  how.stop_at_interpreter = n_py > 0 && !c.native_full;
  how.borrow = true;
  int n_native = capture_native_stack(pcs, c.native_depth, &how);
  if (n_native == 0 && n_py == 0) return kUnknownStack;
  // Both halves served from their verified caches: each carries the memo of the id this thread last interned it
  // with, and the token of the other half it was interned with (a token names one fill of one cache entry: the
  // same tokens, the same frames, the same id while it lives; no hash, no compare). The memo says whether it does.
  const uint64_t py_token = n_py == 0 ? kNoPythonToken : pyhow.token;
  if (how.token && py_token) {
    if (n_py > 0 && pyhow.memo->other == how.token) {
      const uint32_t id = memo_id_now(&pyhow.memo->stack);
      if (id != kUnknownStack) return id;
    }
    if (how.memo->other == py_token) {
      const uint32_t id = memo_id_now(&how.memo->stack);
      if (id != kUnknownStack) return id;
    }
  }
  uint32_t id = lookup_or_insert(how.frames, n_native, pyhow.frames, n_py);
  if (how.token && py_token && id != kUnknownStack) {
    const StackMemo m = stack_memo(id);
    *how.memo = NativeMemo{py_token, m};
    if (n_py > 0) *pyhow.memo = PyMemo{how.token, m};
  }
  return id;
}

bool stack_at(uint32_t id, Stack* out) {
  out->native.clear();
  out->python.clear();
  uint32_t slot;
  uint64_t s1;
  if (id == kUnknownStack || !live_entry(g_stacks, id, false, &slot, &s1)) return false;
  const EntryMeta& e = g_stacks.entries[slot];
  uint64_t loc = e.loc.load(std::memory_order_relaxed);
  if (loc_class(loc) == 0) return false;
  int n_native = static_cast<int>(loc_a(loc)), n_py = static_cast<int>(loc_b(loc));
  const std::atomic<uint64_t>* f = g_stacks.arena + loc_off(loc);
  for (int i = 0; i < n_native; ++i) out->native.push_back(static_cast<uintptr_t>(load_word(f + i)));
  const std::atomic<uint64_t>* text = f + n_native + n_py * kPyKeyWords;
  for (int i = 0; i < n_py; ++i, text += kPyTextWords) {
    PythonFrame pf;
    uint64_t w = load_word(text);
    pf.file = static_cast<uint32_t>(w >> 32);
    pf.function = static_cast<uint32_t>(w);
    pf.line = static_cast<int32_t>(load_word(text + 1));
    out->python.push_back(pf);
  }
  if (stable(e, s1)) return true;
  out->native.clear();
  out->python.clear();
  return false;
}

uint32_t stack_count() noexcept {
  uint64_t used = g_stacks.slot_bump.load(std::memory_order_acquire), free = g_stacks.free_slots.size();
  return static_cast<uint32_t>(used > free ? used - free : 0);
}

// ================================================================ reclamation
namespace {

inline void set_mark(Table& t, uint32_t slot, uint32_t* budget) {
  uint64_t bit = 1ull << (slot & 63);
  uint64_t& w = t.marks[slot >> 6];
  if (!(w & bit) && *budget > 0) {
    w |= bit;
    --*budget;
  }
}
inline bool marked(const Table& t, uint32_t slot) { return (t.marks[slot >> 6] >> (slot & 63)) & 1; }

void mark_id(Table& t, uint32_t id, uint32_t* budget) {
  uint32_t slot, tag;
  // By slot, whatever the generation: a dead id still in the ring then keeps its slot's new entry alive, so that
  // slot's generation cannot come round again while the record is there.
  if (t.decode(id, &slot, &tag) || (slot < t.capacity && tag == t.tag_limit - 1)) set_mark(t, slot, budget);
}

// The ring's records, newest first, mark their stack and kernel name: up to half of each table, so that a ring
// longer than the table (every launch from a new site) still leaves room for new stacks.
void mark_ring() {
  uint32_t stack_budget = g_stacks.capacity / 2, string_budget = g_strings.capacity / 2;
  uint64_t last = recorder_internal::g_launch_seq.load(std::memory_order_acquire);
  uint64_t cap = static_cast<uint64_t>(g_ring.mask) + 1;
  uint64_t first = last > cap ? last - cap + 1 : 1;
  for (uint64_t seq = last; seq >= first && seq > 0 && (stack_budget > 0 || string_budget > 0); --seq) {
    RingSlot& s = g_ring.slots[(seq - 1) & g_ring.mask];
    if (s.w[0].load(std::memory_order_acquire) != seq) continue;  // being written: its stack is used now
    uint64_t w6 = s.w[6].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.w[0].load(std::memory_order_relaxed) != seq) continue;
    uint32_t stack = static_cast<uint32_t>(w6 >> 32), name = static_cast<uint32_t>(w6);
    if (stack != kUnknownStack) mark_id(g_stacks, stack, &stack_budget);
    if (name != kNoString) mark_id(g_strings, name, &string_budget);
  }
}

// Live stacks keep the strings their Python frames name.
void mark_stack_strings() {
  uint32_t budget = g_strings.capacity;
  uint32_t used = g_stacks.slot_bump.load(std::memory_order_acquire);
  for (uint32_t slot = 0; slot < used; ++slot) {
    const EntryMeta& e = g_stacks.entries[slot];
    uint64_t s1 = e.state.load(std::memory_order_acquire);
    if ((s1 & (kLive | kBusy)) != kLive) continue;  // being written: its strings were interned just now
    uint64_t loc = e.loc.load(std::memory_order_relaxed);
    if (loc_class(loc) == 0) continue;
    const std::atomic<uint64_t>* text = g_stacks.arena + loc_off(loc) + loc_a(loc) + loc_b(loc) * kPyKeyWords;
    for (uint32_t i = 0; i < loc_b(loc); ++i, text += kPyTextWords) {
      uint64_t w = load_word(text);
      mark_id(g_strings, static_cast<uint32_t>(w >> 32), &budget);
      mark_id(g_strings, static_cast<uint32_t>(w), &budget);
    }
  }
}

// Frees every live entry not pinned, not marked and not used in this epoch or the one before.
uint64_t sweep(Table& t, uint64_t epoch) {
  uint64_t freed = 0;
  uint32_t used = t.slot_bump.load(std::memory_order_acquire);
  for (uint32_t slot = 0; slot < used; ++slot) {
    EntryMeta& e = t.entries[slot];
    uint64_t s = e.state.load(std::memory_order_acquire);
    if ((s & (kLive | kBusy)) != kLive || (s & kPinMask) != 0 || marked(t, slot)) continue;
    if (e.touch.load(std::memory_order_seq_cst) + 1 >= epoch) continue;
    uint64_t dead = ((s & kTagMask) + 1) % t.tag_limit;
    if (!e.state.compare_exchange_strong(s, dead, std::memory_order_seq_cst)) continue;  // pinned meanwhile
    if (e.touch.load(std::memory_order_seq_cst) + 1 >= epoch) {
      // Used meanwhile: whoever touched it either saw the free (and looks again) or is seen here.
      e.state.store(s, std::memory_order_seq_cst);
      continue;
    }
    uint64_t loc = e.loc.load(std::memory_order_relaxed);
    CDSA_DCHECK(loc_class(loc) == 0 || loc_off(loc) + (1ull << loc_class(loc)) <= t.arena_words);
    if (loc_class(loc) != 0) t.free_cells[loc_class(loc)].put(loc_off(loc));
    t.free_slots.put(slot);
    ++freed;
  }
  return freed;
}

// The index anew, from the live entries, in the spare bucket array; then swapped in.
void rebuild_index(Table& t) {
  std::atomic<uint32_t>* cur = t.buckets.load(std::memory_order_acquire);
  std::atomic<uint32_t>* spare = cur == t.bucket_arrays[0] ? t.bucket_arrays[1] : t.bucket_arrays[0];
  for (uint32_t i = 0; i <= t.bucket_mask; ++i) spare[i].store(0, std::memory_order_relaxed);
  uint32_t used = t.slot_bump.load(std::memory_order_acquire);
  for (uint32_t slot = 0; slot < used; ++slot) {
    const EntryMeta& e = t.entries[slot];
    uint64_t s = e.state.load(std::memory_order_acquire);
    if ((s & (kLive | kBusy)) != kLive || loc_class(e.loc.load(std::memory_order_relaxed)) == 0) continue;
    index_insert(t, spare, e.hash.load(std::memory_order_relaxed), slot);
  }
  t.buckets.store(spare, std::memory_order_release);
}

// One cycle: the epoch advances, and each table that asked for it (`trigger`) or runs low is swept and its index
// rebuilt; the other is left alone (a sweep of the string table costs about a millisecond, in which launching
// threads would use up the stack table's room). The attempts are counted afresh from the cycle's start, so the
// inserts made while it runs count towards the next one.
void reclaim_cycle(const Table& trigger) {
  uint64_t epoch = g_epoch.fetch_add(1, std::memory_order_seq_cst) + 1;
  const bool stacks = &trigger == &g_stacks || running_low(g_stacks);
  const bool strings = &trigger == &g_strings || running_low(g_strings);
  for (Table* t : {&g_stacks, &g_strings}) memset(t->marks, 0, (t->capacity / 64 + 1) * sizeof(uint64_t));
  if (stacks) g_stacks.attempts.store(0, std::memory_order_relaxed);
  if (strings) g_strings.attempts.store(0, std::memory_order_relaxed);
  mark_ring();
  if (stacks) {
    uint64_t n = sweep(g_stacks, epoch);
    g_stacks.freed.fetch_add(n, std::memory_order_relaxed);
    rebuild_index(g_stacks);
    g_stacks.last_freed.store(n, std::memory_order_release);
  }
  if (strings) {
    mark_stack_strings();
    uint64_t n = sweep(g_strings, epoch);
    g_strings.freed.fetch_add(n, std::memory_order_relaxed);
    rebuild_index(g_strings);
    g_strings.last_freed.store(n, std::memory_order_release);
  }
  g_reclaims.fetch_add(1, std::memory_order_release);
}

// Not more often than once per `after_attempts` inserts into the table: a table full of entries in use is not
// scanned at every launch, and the epochs still move on.
void maybe_reclaim(Table& t, uint32_t after_attempts) {
  if (t.attempts.load(std::memory_order_relaxed) < after_attempts) return;
  if (g_hold.load(std::memory_order_seq_cst)) return;
  const int me = getpid();
  int cur = g_reclaiming.load(std::memory_order_seq_cst);
  if (cur == me || !g_reclaiming.compare_exchange_strong(cur, me, std::memory_order_seq_cst)) return;
  if (!g_hold.load(std::memory_order_seq_cst)) reclaim_cycle(t);
  g_reclaiming.store(0, std::memory_order_release);
}


}  // namespace

void recorder_hold_reclaim() noexcept {
  g_hold.store(true, std::memory_order_seq_cst);
  // A reclamation is a bounded scan that takes no lock: wait for one in progress (bounded: a reclaiming thread
  // stopped by a debugger must not stop the report; the report's readers then check each entry as they read it).
  const int me = getpid();  // a cycle a forked child inherited from its parent is not running here
  for (int i = 0; i < 2000 && g_reclaiming.load(std::memory_order_seq_cst) == me; ++i) {
    timespec ts{0, 100000};
    nanosleep(&ts, nullptr);
  }
}

uint64_t recorder_reclaims() noexcept { return g_reclaims.load(std::memory_order_acquire); }

// ================================================================ ring
namespace recorder_internal {
std::atomic<bool> g_ring_sealed{false};
std::atomic<uint64_t> g_launch_seq{0};
}  // namespace recorder_internal

uint64_t launches_recorded() noexcept { return recorder_internal::g_launch_seq.load(std::memory_order_relaxed); }

void ring_publish(const LaunchRecord& r) noexcept {
  if (!g_ready.load(std::memory_order_acquire)) return;
  // A number from next_launch_seq: 1-based (the slot is seq - 1), below the busy bit, and already handed out.
  CDSA_DCHECK(r.seq != 0 && r.seq < (1ull << 63) &&
              r.seq <= recorder_internal::g_launch_seq.load(std::memory_order_relaxed));
  RingSlot& s = g_ring.slots[(r.seq - 1) & g_ring.mask];
  // Claim the slot. Two writers meet here only when one lags a whole ring behind the other: then the newer
  // record wins, and a writer finding another mid-write waits for it rather than interleaving fields.
  constexpr uint64_t kBusy = 1ull << 63;
  for (uint64_t cur = s.w[0].load(std::memory_order_acquire);;) {
    if (cur & kBusy) {
      cur = s.w[0].load(std::memory_order_acquire);
      continue;
    }
    if (cur > r.seq) return;
    if (s.w[0].compare_exchange_weak(cur, r.seq | kBusy, std::memory_order_acquire)) break;
  }
  std::atomic_thread_fence(std::memory_order_release);
  s.w[1].store(r.stream_seq, std::memory_order_relaxed);
  s.w[2].store(r.stream_id, std::memory_order_relaxed);
  s.w[3].store(r.graph_id, std::memory_order_relaxed);
  s.w[4].store(r.stamp, std::memory_order_relaxed);
  s.w[5].store((static_cast<uint64_t>(r.ctx_id) << 32) | r.tid, std::memory_order_relaxed);
  s.w[6].store((static_cast<uint64_t>(r.stack_id) << 32) | r.kernel_name, std::memory_order_relaxed);
  s.w[7].store((static_cast<uint64_t>(r.grid[0]) << 32) | (static_cast<uint64_t>(r.grid[1] & 0xffff) << 16) |
                   (r.grid[2] & 0xffff),
               std::memory_order_relaxed);
  s.w[8].store((static_cast<uint64_t>(r.block[0] & 0xffff) << 48) | (static_cast<uint64_t>(r.block[1] & 0xffff) << 32) |
                   (static_cast<uint64_t>(r.block[2] & 0xffff) << 16) |
                   (static_cast<uint64_t>(static_cast<uint8_t>(r.kind)) << 8) | r.flags,
               std::memory_order_relaxed);
  s.w[9].store((static_cast<uint64_t>(r.shared_mem) << 32) | r.stream_slot, std::memory_order_relaxed);
  s.w[0].store(r.seq, std::memory_order_release);
}

void ring_snapshot(std::vector<LaunchRecord>* out) {
  out->clear();
  if (!g_ready.load(std::memory_order_acquire)) return;
  uint64_t last = recorder_internal::g_launch_seq.load(std::memory_order_acquire);
  uint64_t cap = static_cast<uint64_t>(g_ring.mask) + 1;
  uint64_t first = last > cap ? last - cap + 1 : 1;
  for (uint64_t seq = first; seq <= last; ++seq) {
    RingSlot& s = g_ring.slots[(seq - 1) & g_ring.mask];
    uint64_t w[kRingWords];
    w[0] = s.w[0].load(std::memory_order_acquire);
    if (w[0] != seq) continue;  // overwritten or still being written
    for (int i = 1; i < kRingWords; ++i) w[i] = s.w[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.w[0].load(std::memory_order_relaxed) != seq) continue;
    LaunchRecord r;
    r.seq = w[0];
    r.stream_seq = w[1];
    r.stream_id = w[2];
    r.graph_id = w[3];
    r.stamp = w[4];
    r.ctx_id = static_cast<uint32_t>(w[5] >> 32);
    r.tid = static_cast<uint32_t>(w[5]);
    r.stack_id = static_cast<uint32_t>(w[6] >> 32);
    r.kernel_name = static_cast<uint32_t>(w[6]);
    r.grid[0] = static_cast<uint32_t>(w[7] >> 32);
    r.grid[1] = static_cast<uint32_t>((w[7] >> 16) & 0xffff);
    r.grid[2] = static_cast<uint32_t>(w[7] & 0xffff);
    r.block[0] = static_cast<uint32_t>((w[8] >> 48) & 0xffff);
    r.block[1] = static_cast<uint32_t>((w[8] >> 32) & 0xffff);
    r.block[2] = static_cast<uint32_t>((w[8] >> 16) & 0xffff);
    r.kind = static_cast<LaunchKind>((w[8] >> 8) & 0xff);
    r.flags = static_cast<uint8_t>(w[8] & 0xff);
    r.shared_mem = static_cast<uint32_t>(w[9] >> 32);
    r.stream_slot = static_cast<uint32_t>(w[9]);
    out->push_back(r);
  }
}

// ================================================================ streams
int stream_slot(uint64_t stream_id) noexcept {
  if (!g_streams) return -1;
  uint64_t key = stream_id + 1;
  uint32_t start = static_cast<uint32_t>(mix(0, key)) & (kStreamCapacity - 1);
  for (uint32_t i = start, probes = 0; probes < kStreamCapacity; i = (i + 1) & (kStreamCapacity - 1), ++probes) {
    uint64_t v = g_streams[i].id.load(std::memory_order_acquire);
    if (v == key) return static_cast<int>(i);
    if (v == 0) {
      uint64_t expected = 0;
      if (g_streams[i].id.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
        g_streams_used.fetch_add(1, std::memory_order_relaxed);
        return static_cast<int>(i);
      }
      if (expected == key) return static_cast<int>(i);
    }
  }
  g_stream_table_full.store(true, std::memory_order_relaxed);
  note_overflow("stream table full (4096 streams)");
  return -1;
}

int find_stream_slot(uint64_t stream_id) noexcept {
  if (!g_streams) return -1;
  uint64_t key = stream_id + 1;
  uint32_t start = static_cast<uint32_t>(mix(0, key)) & (kStreamCapacity - 1);
  for (uint32_t i = start, probes = 0; probes < kStreamCapacity; i = (i + 1) & (kStreamCapacity - 1), ++probes) {
    uint64_t v = g_streams[i].id.load(std::memory_order_acquire);
    if (v == key) return static_cast<int>(i);
    if (v == 0) return -1;
  }
  return -1;
}

StreamState* stream_state(int slot) noexcept { return (slot < 0 || !g_streams) ? nullptr : &g_streams[slot]; }
int stream_slots_used() noexcept { return g_streams_used.load(std::memory_order_relaxed); }
uint32_t stream_capacity() noexcept { return kStreamCapacity; }

// ================================================================ handle maps
std::atomic<uint64_t> g_kernel_name_puts{0};

uint32_t handle_map_get(HandleMap m, uintptr_t func) noexcept {
  FuncEntry* g_funcs = g_maps[static_cast<int>(m)];
  if (!g_funcs) return kNoString;
  uint32_t start = static_cast<uint32_t>(mix(0, func)) & (kFuncCapacity - 1);
  for (uint32_t i = start, probes = 0; probes < 64; i = (i + 1) & (kFuncCapacity - 1), ++probes) {
    uintptr_t k = g_funcs[i].func.load(std::memory_order_acquire);
    if (k == func) {
      uint32_t n = g_funcs[i].name.load(std::memory_order_acquire);  // id + 1; 0 while being stored
      return n == 0 ? kNoString : n - 1;
    }
    if (k == 0) return kNoString;
  }
  return kNoString;
}

void handle_map_put(HandleMap m, uintptr_t func, uint32_t name) noexcept {
  FuncEntry* g_funcs = g_maps[static_cast<int>(m)];
  if (!g_funcs || name == kNoString) return;
  uint32_t start = static_cast<uint32_t>(mix(0, func)) & (kFuncCapacity - 1);
  for (uint32_t i = start, probes = 0; probes < 64; i = (i + 1) & (kFuncCapacity - 1), ++probes) {
    uintptr_t expected = 0;
    if (g_funcs[i].func.compare_exchange_strong(expected, func, std::memory_order_acq_rel) || expected == func) {
      // Kernel names are pinned while the map names them (a value that is no string id is kept as it is).
      const bool names = m == HandleMap::KernelName;
      if (names && name < kNoString - 15 && !string_pin(name)) return;  // reclaimed already: not worth keeping
      uint32_t old = g_funcs[i].name.exchange(name + 1, std::memory_order_acq_rel);
      if (names) g_kernel_name_puts.fetch_add(1, std::memory_order_acq_rel);  // after the store: memos refill
      if (names && old != 0 && old - 1 < kNoString - 15) string_unpin(old - 1);
      return;
    }
  }
}

void handle_map_forget_values(HandleMap m) noexcept {
  FuncEntry* g_funcs = g_maps[static_cast<int>(m)];
  if (!g_funcs) return;
  const bool names = m == HandleMap::KernelName;
  for (uint32_t i = 0; i < kFuncCapacity; ++i) {
    if (g_funcs[i].func.load(std::memory_order_relaxed) == 0) continue;
    uint32_t old = g_funcs[i].name.exchange(0, std::memory_order_acq_rel);  // 0: a miss, as while being stored
    if (names && old != 0 && old - 1 < kNoString - 15) string_unpin(old - 1);
  }
  if (names) g_kernel_name_puts.fetch_add(1, std::memory_order_acq_rel);  // after the stores: memos refill
}

// A table that was full for a while has room again once its unused entries are reclaimed: the note says how many
// inserts it refused (the launches that lost their stack or name), not that it is full. Report path (one report per
// process: one buffer).
const char* recorder_overflow_note() noexcept {
  static char buf[768];
  size_t n = 0;
  buf[0] = '\0';
  char part[256];
  auto add = [&] {
    int w = snprintf(buf + n, sizeof buf - n, "%s%s", n > 0 ? "; " : "", part);
    if (w > 0) n += static_cast<size_t>(w) < sizeof buf - n ? static_cast<size_t>(w) : sizeof buf - n - 1;
  };
  if (uint64_t r = g_stacks.refused.load(std::memory_order_relaxed)) {
    snprintf(part, sizeof part,
             "the launch stack table (%u stacks) was full at times: %llu launch stacks could not be kept, and those "
             "launches are recorded without one (raise CDSA_STACK_TABLE)",
             g_stacks.capacity, static_cast<unsigned long long>(r));
    add();
  }
  if (uint64_t r = g_strings.refused.load(std::memory_order_relaxed)) {
    snprintf(part, sizeof part,
             "the string table (%u strings) was full at times: %llu kernel names or Python frame texts could not be "
             "kept",
             g_strings.capacity, static_cast<unsigned long long>(r));
    add();
  }
  if (g_stream_table_full.load(std::memory_order_relaxed)) {
    snprintf(part, sizeof part,
             "the stream table is full (%u streams): launches on streams beyond it are recorded without their "
             "stream's state",
             kStreamCapacity);
    add();
  }
  return buf;
}

uint64_t recorder_mapped_bytes() noexcept {
  if (!g_ready.load(std::memory_order_acquire)) return 0;
  uint64_t ring = (static_cast<uint64_t>(g_ring.mask) + 1) * sizeof(RingSlot);
  uint64_t rest = kStreamCapacity * sizeof(StreamState) + 2 * kFuncCapacity * sizeof(FuncEntry);
  return table_bytes(g_strings) + table_bytes(g_stacks) + ring + rest;
}

}  // namespace cdsa
