// Warm-up: what cdsa does once, on the first CUDA call the process makes
// (never in the constructor): bind the real driver, map the recorder's
// tables, set up graph-capture bookkeeping and fault handling, then run the
// start hook a front end registered.
//
// Contract: `ensure_started` is called by every wrapped driver call and by
// InitializeInjection; the first call does the work (std::call_once), later
// calls are one acquire load: `started()` (shim/common/started.h, which the launch path reads too).
// `on_started` registers the one hook run right after a successful start;
// register it before the first CUDA call (from a constructor): the CUPTI
// backend sets it this way, so the core never names cupti_tracer/.
//
//   // cupti_tracer/backend.cc
//   __attribute__((constructor(102))) void register_backend() { cdsa::on_started(cupti_backend_start); }
#pragma once

#include "shim/common/started.h"

namespace cdsa {

// `hint` is any real driver function pointer. Returns false when cdsa is disabled or could not start.
bool ensure_started(const void* hint) noexcept;

using StartHook = void (*)() noexcept;
void on_started(StartHook hook) noexcept;

}  // namespace cdsa
