// The report model from records: turns a FaultSnapshot and its attribution
// into the report::FaultReport's candidates, reasons and notes (worded here, and only
// here), and into the trace file's report::TraceData (process facts, configuration,
// symbolized stacks, launches, streams).
//
// Contract: report path only: allocates, reads source files and /proc,
// symbolizes (loads libdw on first use), and asks the driver for its version
// and the device's name, so it runs under the reentrancy guard. One
// ReportBuilder per report: it caches source lines and symbolized PCs.
//
//   InCdsa guard;
//   FaultSnapshot snap = take_fault_snapshot(guard);
//   ReportBuilder build(guard);
//   build.add_attribution(snap, attribute(snap), &report);
//   report::TraceData trace = build.trace(snap, start_unix_ns);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "report/fault_report.h"
#include "report/trace.h"
#include "shim/fault/attribution.h"
#include "shim/fault/fault_snapshot.h"
#include "shim/common/reentrancy.h"
#include "shim/fault/symbolize.h"
#include "symbolizer/module_map.h"

namespace cdsa {

// Source lines, read once per file per report.
class SourceLines {
 public:
  std::string line(const std::string& file, int n);

 private:
  std::map<std::string, std::vector<std::string>> files_;
};

class ReportBuilder {
 public:
  // Unsymbolized: native frames as module+offset only, from one module map (no libdw, no DWARF: fast), and
  // left out where Python frames are there; for the text prepared before the slow symbolization
  // (shim/fault/fault_signals.h).
  enum class Native { Symbolized, Unsymbolized };
  explicit ReportBuilder(const InCdsa&, Native native = Native::Symbolized) : native_(native) {}
  // An interned stack: Python frames with their source lines, native frames symbolized.
  report::CallStack stack(uint32_t stack_id);
  // The verdict, the candidates with their stacks, why each is named, the device's messages and the notes.
  void add_attribution(const FaultSnapshot& snapshot, const AttributionResult& result, report::FaultReport* rep);
  // Who reports: the rank (read now), pid, host, and the GPU of context `ctx_id` (0: the first one noted).
  void add_origin(uint32_t ctx_id, report::FaultReport* rep);
  // What the user reads next: the autograd node and its forward candidates (report/autograd.h), then the hints
  // (report/hints.h).
  void annotate(const FaultSnapshot& snapshot, report::FaultReport* rep);
  // Everything the trace file holds but the report (the caller sets reason, has_fault and report).
  report::TraceData trace(const FaultSnapshot& snapshot, uint64_t start_unix_ns);

 private:
  std::vector<report::ResolvedFrame> unsymbolized(const std::vector<uintptr_t>& return_addresses);

  Native native_;
  SourceLines src_;
  ReportSymbolizer sym_;
  std::vector<symbolizer::Module> modules_;  // Unsymbolized: captured on first use
};

// A ring record as the report and the trace keep it (kernel name demangled, kind spelled out).
report::Launch report_launch(const LaunchRecord& r);
// Where this process's trace file goes (CDSA_TRACE_FILE expanded).
std::string trace_path_for_process(uint64_t start_unix_ns);

}  // namespace cdsa
