// The stack table (recorder.h, "stacks"): every distinct launch stack, its native return addresses and its Python
// frames (the keys as captured and their text), interned once; memos and pins of its ids.
#include <cstring>

#include "shim/record/stack_table_internal.h"

namespace cdsa {
using namespace recorder_internal;
namespace {

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

uint32_t insert_stack(uint64_t h, const uintptr_t* pcs, int n_native, const PyFrameKey* py, int n_py,
                      PyFrameText resolve) {
  Table& t = g_stacks;
  // The Python frames' text first (interning may make room in the string table).
  uint64_t text[256 * kPyTextWords];
  for (int i = 0; i < n_py; ++i) {
    char file[1024], func[512];
    int line = 0;
    uint32_t file_id = kNoString, func_id = kNoString;
    if (resolve(py[i], file, sizeof file, func, sizeof func, &line)) {
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

}  // namespace

namespace recorder_internal {
uint32_t intern_stack(const uintptr_t* pcs, int n_native, const PyFrameKey* py, int n_py, PyFrameText text) {
  uint64_t h = hash_frames(pcs, n_native, py, n_py);
  uint32_t id = find_stack(g_stacks.buckets.load(std::memory_order_acquire), h, pcs, n_native, py, n_py, UINT32_MAX);
  return id != kUnknownStack ? id : insert_stack(h, pcs, n_native, py, n_py, text);
}
}  // namespace recorder_internal

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
}  // namespace

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

bool stack_at(uint32_t id, Stack* out) {
  out->native.clear();
  out->python.clear();
  const EntryMeta* entry;
  uint64_t s1, loc;
  if (!live_cell(g_stacks, id, &entry, &s1, &loc)) return false;
  const EntryMeta& e = *entry;
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

}  // namespace cdsa
