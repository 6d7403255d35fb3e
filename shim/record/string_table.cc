// The string table (recorder.h, "strings"): kernel names and Python frames' file and function names, interned.
#include <cstring>
#include <string>

#include "shim/record/intern_table_internal.h"

namespace cdsa {
using namespace recorder_internal;
namespace {

uint64_t hash_bytes(const char* s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 0x100000001b3ull;
  return h;
}

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
  const EntryMeta* e;
  uint64_t s, loc;
  if (!live_cell(g_strings, id, &e, &s, &loc)) return "";
  return reinterpret_cast<const char*>(g_strings.arena + loc_off(loc));
}

bool string_copy(uint32_t id, std::string* out) {
  out->clear();
  const EntryMeta* entry;
  uint64_t s1, loc;
  if (!live_cell(g_strings, id, &entry, &s1, &loc)) return false;
  const EntryMeta& e = *entry;
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

}  // namespace cdsa
