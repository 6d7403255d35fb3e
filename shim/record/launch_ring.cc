// The launch ring (recorder.h, "launches"): the last N launch records, a seqlock per record.
#include <vector>

#include "base/check.h"
#include "shim/record/recorder_internal.h"

namespace cdsa {
using namespace recorder_internal;

namespace recorder_internal {
Ring g_ring;
std::atomic<bool> g_ring_sealed{false};
std::atomic<uint64_t> g_launch_seq{0};

bool map_launch_ring(uint32_t records) {
  g_ring.mask = records - 1;
  g_ring.slots = static_cast<RingSlot*>(map_zeroed(static_cast<size_t>(records) * sizeof(RingSlot)));
  return g_ring.slots != nullptr;
}
uint64_t launch_ring_bytes() { return (static_cast<uint64_t>(g_ring.mask) + 1) * sizeof(RingSlot); }
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

}  // namespace cdsa
