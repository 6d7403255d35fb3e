// The reentrancy guard: marks the calling thread as inside cdsa, so that the
// driver calls cdsa makes itself (a breadcrumb write, cuStreamGetId, the
// report's device query, libcupti's own calls) pass through the wrappers and
// the CUPTI callback untouched instead of being recorded or reported.
//
// Contract: an InCdsa object lives on the stack for the duration of cdsa's
// work on one call; nesting is allowed. Lock-free, allocation-free, one
// initial-exec thread-local counter (no __tls_get_addr on the launch path).
// A function that must only run under the guard takes `const InCdsa&` as its
// first parameter, so it cannot be called without one.
//
// Why a second thread-local depth exists beside this one (shim/record/assert_capture.h, in_driver_call(): the
// nesting of DriverCallScope): the two mark different spans and are both needed. InCdsa spans cdsa's own code
// and the driver calls cdsa makes; it is NOT held across the program's real driver call (`real(a...)` in
// shim/intercept/interpose.cc), because whatever runs on the thread inside that call is the program's: CUPTI's
// callbacks for the program's launches and anything the driver calls back must be seen as the program's, not
// skipped as cdsa's. DriverCallScope spans exactly the program's wrapped driver call, the real call included:
// what the driver prints then is captured (the device's assert text), and a wrapper reached from inside it (a
// second driver layer resolving libcuda through dlsym) passes through. One counter could not say both "skip:
// cdsa is calling" and "the program's call is in the driver now"; both are one initial-exec TLS word.
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
