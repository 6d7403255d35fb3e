// What the fault path (fault.cc) and the exit probe (exit_probe.cc) share: the once-only gate, when and where this
// process started, and the trace file's write.
// Internal to shim/fault/: the fault path's own files include it, nothing else.
// Contract: the fault path's (allocates); write_trace blocks SIGXFSZ on the calling thread for its write.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "report/trace.h"

#pragma GCC visibility push(hidden)
namespace cdsa::fault_internal {

extern std::atomic<bool> g_reported;  // the once-only gate: a report has begun
extern int g_pid;                     // the process that started cdsa (a forked child has another)
extern uint64_t g_start_unix_ns;      // when it started

// Writes `t` as this process's trace file (the path: CDSA_TRACE_FILE); *written: the path, or empty when none was
// written (the reason said once, on stderr).
void write_trace(report::TraceData& t, std::string* written);

// At exit (atexit, from fault_handling_init): a fault that no call surfaced, then the CDSA_TRACE=always file.
void exit_probe();

}  // namespace cdsa::fault_internal
#pragma GCC visibility pop
