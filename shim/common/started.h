// Whether cdsa has started: the one state both the launch path (record/) and the warm-up that starts every stage
// (intercept/lifecycle.*) need, so it sits below both.
//
// Contract: `started()` is one acquire load, safe on any thread at any time (the launch path asks it first).
// `mark_started()` is called once, by the warm-up, after every stage is ready; nothing clears it.
#pragma once

#include <atomic>

namespace cdsa {

namespace started_internal {
// Defined here (an inline variable), so the launch stage links without the warm-up (tests/unit/launch).
[[gnu::visibility("hidden")]] inline std::atomic<bool> g_started{false};
}  // namespace started_internal

inline bool started() noexcept { return started_internal::g_started.load(std::memory_order_acquire); }
inline void mark_started() noexcept { started_internal::g_started.store(true, std::memory_order_release); }

}  // namespace cdsa
