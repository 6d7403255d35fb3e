// The stream table (recorder.h, "streams"): each stream's state, found by its id.
#include "shim/record/recorder_internal.h"

namespace cdsa {
using namespace recorder_internal;
namespace {
StreamState* g_streams = nullptr;
std::atomic<int> g_streams_used{0};
}  // namespace

namespace recorder_internal {
std::atomic<bool> g_stream_table_full{false};
bool map_stream_table() {
  g_streams = static_cast<StreamState*>(map_zeroed(kStreamCapacity * sizeof(StreamState)));
  return g_streams != nullptr;
}
uint64_t stream_table_bytes() { return kStreamCapacity * sizeof(StreamState); }
}  // namespace recorder_internal

namespace {
// The entry of `stream_id` along its probe sequence; at the first free entry, the entry claimed for it when
// `create`, else -1. -1 too when every entry is another stream's.
int probe_stream(uint64_t stream_id, bool create) {
  if (!g_streams) return -1;
  uint64_t key = stream_id + 1;
  uint32_t start = static_cast<uint32_t>(mix(0, key)) & (kStreamCapacity - 1);
  for (uint32_t i = start, probes = 0; probes < kStreamCapacity; i = (i + 1) & (kStreamCapacity - 1), ++probes) {
    uint64_t v = g_streams[i].id.load(std::memory_order_acquire);
    if (v == key) return static_cast<int>(i);
    if (v == 0) {
      if (!create) return -1;
      uint64_t expected = 0;
      if (g_streams[i].id.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
        g_streams_used.fetch_add(1, std::memory_order_relaxed);
        return static_cast<int>(i);
      }
      if (expected == key) return static_cast<int>(i);
    }
  }
  return -1;
}
}  // namespace

int stream_slot(uint64_t stream_id) noexcept {
  const int slot = probe_stream(stream_id, true);
  if (slot < 0 && g_streams) {
    g_stream_table_full.store(true, std::memory_order_relaxed);
    note_overflow("stream table full (4096 streams)");
  }
  return slot;
}

int find_stream_slot(uint64_t stream_id) noexcept { return probe_stream(stream_id, false); }

StreamState* stream_state(int slot) noexcept { return (slot < 0 || !g_streams) ? nullptr : &g_streams[slot]; }
int stream_slots_used() noexcept { return g_streams_used.load(std::memory_order_relaxed); }
uint32_t stream_capacity() noexcept { return kStreamCapacity; }

}  // namespace cdsa
