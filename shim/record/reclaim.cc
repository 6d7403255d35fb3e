// Reclamation of the interning tables (recorder.h, "holding ids"; the machinery's comment in
// intern_table_internal.h): what the ring's records, the pins and recent use keep, and everything else freed.
#include <unistd.h>
#include <cstring>
#include <ctime>

#include "shim/record/stack_table_internal.h"

namespace cdsa {
using namespace recorder_internal;
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

}  // namespace

namespace recorder_internal {
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
}  // namespace recorder_internal

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

}  // namespace cdsa
