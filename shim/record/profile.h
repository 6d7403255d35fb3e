// Launch-site profile (CDSA_PROFILE=1): how many launches each (stack, kernel)
// pair made over the whole run, for `cdsa flame` and `cdsa top`.
//
// Contract:
//  - profile_count() is the launch hot path: lock-free, allocation-free,
//    async-signal-safe, callable from any thread. It is a no-op unless
//    CDSA_PROFILE is on. The table is a fixed array (kProfileCapacity pairs,
//    static storage, never grows): when it is full, launches of new pairs are
//    counted in `dropped` instead, never lost silently. A pair's slot pins its
//    stack and kernel name in the recorder (they are never reclaimed while the
//    profile names them: at most kProfileCapacity stacks).
//  - profile_snapshot() is for the report/exit path: it allocates, and may run
//    while other threads still count (each count is read atomically; the
//    snapshot is not one instant across all pairs).
#pragma once

#include <cstdint>
#include <vector>

#include "shim/common/config.h"

namespace cdsa {

constexpr uint32_t kProfileCapacity = 8192;

// Counts one launch made from interned stack `stack_id` of the kernel whose
// interned name is `kernel_name` (either may be the "unknown" id).
void profile_count_on(uint32_t stack_id, uint32_t kernel_name) noexcept;
// Inline: with CDSA_PROFILE off (the default) a launch pays one load and a test.
inline void profile_count(uint32_t stack_id, uint32_t kernel_name) noexcept {
  if (config().profile) profile_count_on(stack_id, kernel_name);
}

// One counted (stack, kernel) pair, as interned ids: the fault path resolves them
// (the launch stage hands plain rows to the report, it does not build it).
struct ProfileRow {
  uint32_t stack_id = 0;
  uint32_t kernel_name = 0;
  uint64_t count = 0;
};
struct ProfileRows {
  uint32_t capacity = 0;  // pairs the table holds
  uint64_t dropped = 0;   // launches not counted because the table was full
  std::vector<ProfileRow> rows;  // most launches first
};

// Fills `out` with every pair counted so far, most launches first. False when
// the profile is off.
bool profile_snapshot(ProfileRows* out);

}  // namespace cdsa
