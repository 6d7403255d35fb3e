// The CUPTI backend (CDSA_BACKEND=cupti, or libcdsa.so loaded through
// CUDA_INJECTION64_PATH): launches reach the recorder through CUPTI driver-API
// callbacks instead of the interposition wrappers, and sticky faults are seen
// in the API-exit return value of every driver call.
//
// It sits on top of the core and plugs into the seams the core owns; shim/
// never names this directory:
// - shim/intercept/lifecycle.h `on_started`: registered from this file's constructor
//   (after entry.cc's constructor(101) has read the configuration) when
//   CDSA_BACKEND=cupti, so `cupti_backend_start` runs once cdsa has started.
// - shim/record/launch.h `set_launch_filter`: set to `cupti_backend_recorded` once the
//   subscription is live.
//
// Contract:
// - `cupti_backend_start()` runs as the start hook and from InitializeInjection.
//   It does nothing unless the CUPTI backend was asked for; otherwise, once per
//   process, it dlopens libcupti (RTLD_LOCAL; never a link dependency; search
//   order in discovery.h), subscribes and enables the driver-API domain. On any
//   failure — libcupti not found, the one subscriber slot taken (nsys, ncu,
//   compute-sanitizer, torch.profiler), or another CUPTI error — it prints ONE
//   line saying so (naming the slot's holder when CUPTI reports it) and leaves
//   the driver interposition recording: the process never loses attribution.
//   Thread-safe and idempotent; it allocates and may take milliseconds.
// - `cupti_backend_recorded(info)` is the launch filter: record_launch asks it
//   for each launch the interposition wrappers report (launch path: no lock, no
//   allocation). It says whether the CUPTI callback of this very call, on this
//   thread, already recorded it; then the wrapper's record is dropped, so each
//   launch is recorded once. When CUPTI did not report a launch the wrappers saw,
//   the wrapper records it and one line says so: attribution never depends on
//   CUPTI alone.
// - `cupti_backend_active()`: the subscription is live (one relaxed atomic load).
// - The callback follows the launch protocol (shim/record/launch.h): launch_begin
//   at API enter (after note_kernel_name with CUPTI's symbol name), and at API
//   exit launch_succeeded or launch_failed (cdsa's own driver calls, made under
//   InCdsa, are ignored); surface_driver_result reports a sticky return value of
//   any call. shim/intercept/front_end.h is the one shim header it includes.
#pragma once

namespace cdsa {

void cupti_backend_start() noexcept;
bool cupti_backend_active() noexcept;
struct LaunchInfo;
bool cupti_backend_recorded(const LaunchInfo& info) noexcept;

}  // namespace cdsa

// Called by the CUDA driver inside cuInit when CUDA_INJECTION64_PATH names
// libcdsa.so: starts cdsa and the CUPTI backend whatever CDSA_BACKEND says.
// Returns 1 (the driver ignores the value).
extern "C" int InitializeInjection(void);
