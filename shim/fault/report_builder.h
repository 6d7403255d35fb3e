// The report model from records: turns a FaultSnapshot and its attribution into the report::FaultReport (the
// fault's facts, the candidates, why each is named and the notes, in the words of report/verdict_words.h), and into
// the trace file's report::TraceData (process facts, configuration, symbolized stacks, launches, streams). The snapshot is its only input about launches: it reads no live
// recorder table (names, stacks and profile rows are copied into the snapshot), and converts the ring to the
// report model once.
//
// Contract: report path only: allocates, reads source files and /proc,
// symbolizes (loads libdw on first use), and asks the driver for its version
// and the device's name, so it runs under the reentrancy guard. One
// ReportBuilder per report: it caches source lines and symbolized PCs, and holds a reference to the snapshot,
// which must outlive it.
//
//   InCdsa guard;
//   FaultSnapshot snap = take_fault_snapshot(guard, facts, surfaced_stack, in_flight);
//   ReportBuilder build(guard, snap);
//   report::FaultReport report = build.report(attribute(snap));
//   report::TraceData trace = build.trace(start_unix_ns);
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
  ReportBuilder(const InCdsa&, const FaultSnapshot& snapshot, Native native = Native::Symbolized);
  // A stack of the snapshot: Python frames with their source lines, native frames symbolized (empty for an id
  // the snapshot does not hold).
  report::CallStack stack(uint32_t stack_id);
  // The report: the fault's facts and where it surfaced, the verdict, the candidates with their stacks, why each
  // is named and the notes, who reports (the rank, read now, pid, host, and the GPU of the first candidate's
  // context), then what the user reads next: the autograd node and its forward candidates (report/autograd.h) and
  // the hints (report/hints.h).
  report::FaultReport report(const AttributionResult& attribution);
  // Everything the trace file holds but the report (the caller sets reason, has_fault and report).
  report::TraceData trace(uint64_t start_unix_ns);

 private:
  void add_attribution(const AttributionResult& result, report::FaultReport* rep);
  void add_origin(uint32_t ctx_id, report::FaultReport* rep);
  void annotate(report::FaultReport* rep);
  std::vector<report::ResolvedFrame> unsymbolized(const std::vector<uintptr_t>& return_addresses);

  const FaultSnapshot& s_;
  Native native_;
  std::vector<report::Launch> ring_;  // s_.ring in the report model, converted once
  std::map<uint32_t, report::CallStack> stacks_;  // resolved stacks, by id
  SourceLines src_;
  ReportSymbolizer sym_;
  std::vector<symbolizer::Module> modules_;  // Unsymbolized: captured on first use
};

// A record as the report and the trace keep it (kernel name demangled, kind spelled out); `names` gives the
// kernel names (FaultSnapshot::kernel_names).
report::Launch report_launch(const LaunchRecord& r, const std::map<uint32_t, std::string>& names,
                             const LaunchClockReading& clock);

}  // namespace cdsa
