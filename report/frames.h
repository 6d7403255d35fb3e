// How a symbolized native frame and a loaded module become report text: one rule for the
// live report (shim/fault/symbolize.cc) and `cdsa report`'s offline pass (cli/report_command.cc).
//
// Contract: pure functions over values; no I/O, no globals; allocate.
//
// Example: a PC in Loss.cu's nll_loss_forward where `check_target` (at Loss.cu:250) was
// inlined: resolved_frame(pc, f) -> {function "nll_loss_forward", file "Loss.cu", line 250}
// (the innermost inlined function's line: what ran), not the call site of the inlining.
#pragma once

#include <cstdint>

#include "report/fault_report.h"
#include "report/trace.h"
#include "symbolizer/module_map.h"
#include "symbolizer/native_symbolizer.h"

namespace cdsa::report {

// The frame as the report shows it: the out-of-line function's name; where code was
// inlined at the PC, the innermost inlined function's file and line, else the PC's own.
ResolvedFrame resolved_frame(uint64_t pc, const symbolizer::NativeFrame& f);

// A module of the process for the trace file, and back (offline symbolization reads
// the trace's modules; segment offsets and flags are not recorded).
ModuleRecord module_record(const symbolizer::Module& m);
symbolizer::Module module_from_record(const ModuleRecord& t);

}  // namespace cdsa::report
