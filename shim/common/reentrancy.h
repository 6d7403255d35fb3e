// The reentrancy guard: marks the calling thread as inside cdsa, so that the
// driver calls cdsa makes itself (a breadcrumb write, cuStreamGetId, the
// report's device query, libcupti's own calls) pass through the wrappers and
// the CUPTI callback untouched instead of being recorded or reported.
//
// Contract: an InCdsa object lives on the stack for the duration of cdsa's
// work on one call; nesting is allowed. Lock-free, allocation-free, one
// initial-exec thread-local counter (no __tls_get_addr on the launch path).
// A function that must only run under the guard takes `const InCdsa&` as its
// first parameter, so it cannot be called without one:
//
//   void record_launch(const LaunchInfo& info) noexcept {
//     if (InCdsa::active()) return;  // a call cdsa made itself
//     InCdsa guard;
//     const StreamCacheEntry* sc = resolve_stream(guard, stream, ctx);
//   }
#pragma once

namespace cdsa {

namespace reentrancy_internal {
[[gnu::tls_model("initial-exec")]] inline thread_local int tl_depth = 0;
}  // namespace reentrancy_internal

struct InCdsa {
  InCdsa() noexcept { ++reentrancy_internal::tl_depth; }
  ~InCdsa() { --reentrancy_internal::tl_depth; }
  InCdsa(const InCdsa&) = delete;
  InCdsa& operator=(const InCdsa&) = delete;
  static bool active() noexcept { return reentrancy_internal::tl_depth > 0; }
};

}  // namespace cdsa
