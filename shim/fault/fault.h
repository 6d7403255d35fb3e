// Surfacing and reporting a sticky kernel fault, once per process.
//
// Contract: `on_sticky_fault` may be called from any thread, any number of
// times; the first call captures the surfacing stack, takes a snapshot of the
// breadcrumbs and the launch ring (fault_snapshot.h), attributes the fault
// (attribution.h), builds the report (report_builder.h), prints it on stderr
// and writes the trace file; later calls return at once. It allocates and may take
// milliseconds (symbolization): it runs only when the process is already
// failing. `fault_handling_init` registers the exit probe (atexit), which
// finds a fault that no call surfaced, and writes the CDSA_TRACE=always file.
#pragma once

#include <cuda.h>
#include <cstdint>

namespace cdsa {

void fault_handling_init() noexcept;
void on_sticky_fault(CUresult code, const char* surfaced_call) noexcept;
// Before a context's teardown (cuCtxDestroy, a primary context's release or reset): a fault no call surfaced would go
// with the context unreported, so the streams whose work is not proven finished are queried, and waited for up to
// CDSA_EXIT_PROBE_MS, as the exit probe does (shim/fault/exit_probe.cc; the teardown waits for that work anyway), and
// a sticky answer is reported with `call`. The calling thread's current context is left as it was.
void probe_before_teardown(const char* call) noexcept;
// The context the call about to surface a fault on this thread ran on, when it named a stream of it (0: unknown, the
// thread's current context is used). The sticky error is that context's: only its launches are candidates.
void set_fault_context_hint(uintptr_t ctx) noexcept;

}  // namespace cdsa
