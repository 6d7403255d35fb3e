// The recorder's parts (shim/record/recorder.h) as its files share them: the flag every table tests (g_ready), the
// memory they are mapped in, the hash the streams and handle maps probe with, the overflow notice, the launch ring's
// slots (written by launch_ring.cc, read again by the reclamation's marking in reclaim.cc), and each table's setup.
// Internal to shim/record/: the recorder's own files include it, nothing else.
// Contract: as recorder.h's (lock-free, no allocation after warm-up); the map_* functions run once, in recorder_init.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/record/recorder.h"

// Hidden, as the definitions are (cdsa_preload_flags): an extern declaration would otherwise reach its data through
// the GOT.
#pragma GCC visibility push(hidden)
namespace cdsa::recorder_internal {

// Set once by recorder_init, when every table is mapped and the walkers are warm; never cleared.
extern std::atomic<bool> g_ready;

// Zeroed memory, MAP_NORESERVE (resident only as it fills); nullptr when it cannot be mapped.
void* map_zeroed(size_t bytes);

inline uint64_t mix(uint64_t h, uint64_t w) {
  h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// The first table found full says so once, as it happens (the report later says how often; see
// recorder_overflow_note).
void note_overflow(const char* what);

// ---- the launch ring (launch_ring.cc) ----
constexpr int kRingWords = 10;
struct RingSlot {
  std::atomic<uint64_t> w[kRingWords];
};
struct Ring {
  RingSlot* slots = nullptr;
  uint32_t mask = 0;
};
extern Ring g_ring;

// ---- the stream table (stream_table.cc) ----
constexpr uint32_t kStreamCapacity = 4096;
extern std::atomic<bool> g_stream_table_full;  // a stream found no entry (recorder_overflow_note says so)

// ---- each table's memory, mapped once by recorder_init (false: it could not be), and its size ----
bool map_launch_ring(uint32_t records);
uint64_t launch_ring_bytes();
bool map_stream_table();
uint64_t stream_table_bytes();
bool map_handle_maps();
uint64_t handle_map_bytes();

// The walkers' warm-up (stack_capture.cc): the native unwinder, the CPython walker and the interpreter's range.
void stack_capture_init();

}  // namespace cdsa::recorder_internal
#pragma GCC visibility pop
