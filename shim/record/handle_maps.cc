// The handle maps (recorder.h): small lock-free maps from a driver handle to a 32-bit value.
#include "shim/record/recorder_internal.h"

namespace cdsa {
using namespace recorder_internal;
namespace {
constexpr uint32_t kFuncCapacity = 1u << 15;
struct FuncEntry {
  std::atomic<uintptr_t> func;
  std::atomic<uint32_t> name;
};
FuncEntry* g_maps[2] = {nullptr, nullptr};
}  // namespace

namespace recorder_internal {
bool map_handle_maps() {
  for (auto& m : g_maps) m = static_cast<FuncEntry*>(map_zeroed(kFuncCapacity * sizeof(FuncEntry)));
  return g_maps[0] && g_maps[1];
}
uint64_t handle_map_bytes() { return 2 * kFuncCapacity * sizeof(FuncEntry); }
}  // namespace recorder_internal

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
}  // namespace cdsa
