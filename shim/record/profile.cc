#include "shim/record/profile.h"

#include <algorithm>
#include <atomic>

#include "shim/common/config.h"
#include "shim/record/recorder.h"

namespace cdsa {
namespace {

// Open addressing with linear probing. A slot's key goes 0 -> (pair + 1) once,
// by CAS, and never changes again, so a reader that sees a key may trust it.
struct Slot {
  std::atomic<uint64_t> key{0};
  std::atomic<uint64_t> count{0};
};

constexpr uint32_t kMaxProbes = 64;
Slot g_slots[kProfileCapacity];
std::atomic<uint64_t> g_unknown_pair{0};  // both stack and kernel unknown (key would wrap to 0)
std::atomic<uint64_t> g_dropped{0};

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

}  // namespace

void profile_count_on(uint32_t stack_id, uint32_t kernel_name) noexcept {
  uint64_t pair = (static_cast<uint64_t>(stack_id) << 32) | kernel_name;
  if (pair == UINT64_MAX) {
    g_unknown_pair.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint64_t key = pair + 1;
  uint32_t i = static_cast<uint32_t>(mix(key)) & (kProfileCapacity - 1);
  for (uint32_t probe = 0; probe < kMaxProbes; ++probe, i = (i + 1) & (kProfileCapacity - 1)) {
    Slot& s = g_slots[i];
    uint64_t k = s.key.load(std::memory_order_acquire);
    if (k == 0) {
      uint64_t expected = 0;
      if (s.key.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
        // The slot names this pair for the rest of the run: it pins the pair's stack and name (recorder.h,
        // "Holding ids"; a pin refused means the id is dead already, and the snapshot finds it so).
        stack_pin(stack_id);
        string_pin(kernel_name);
        k = key;
      }
      else
        k = expected;  // another thread claimed it first: maybe for this very pair
    }
    if (k == key) {
      s.count.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  g_dropped.fetch_add(1, std::memory_order_relaxed);
}

bool profile_snapshot(ProfileRows* out) {
  if (!config().profile) return false;
  static_assert((kProfileCapacity & (kProfileCapacity - 1)) == 0, "capacity must be a power of two");
  out->capacity = kProfileCapacity;
  out->dropped = g_dropped.load(std::memory_order_relaxed);
  out->rows.clear();
  for (const Slot& s : g_slots) {
    uint64_t k = s.key.load(std::memory_order_acquire);
    uint64_t n = s.count.load(std::memory_order_relaxed);
    if (k == 0 || n == 0) continue;
    uint64_t pair = k - 1;
    out->rows.push_back({static_cast<uint32_t>(pair >> 32), static_cast<uint32_t>(pair), n});
  }
  if (uint64_t n = g_unknown_pair.load(std::memory_order_relaxed)) out->rows.push_back({kUnknownStack, kNoString, n});
  std::sort(out->rows.begin(), out->rows.end(),
            [](const ProfileRow& a, const ProfileRow& b) { return a.count > b.count; });
  return true;
}

}  // namespace cdsa
