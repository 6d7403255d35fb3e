// Live symbolization for the report: raw return addresses -> report::ResolvedFrame,
// and the module map for the trace file. A thin adapter over symbolizer/.
//
// Contract: report path only (allocates, may read files, loads libdw on first
// use). One object per report: it caches every PC it resolved.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "report/fault_report.h"
#include "report/trace.h"

namespace cdsa {

class ReportSymbolizer {
 public:
  // Return addresses, innermost first (as recorded): looked up at pc - 1.
  std::vector<report::ResolvedFrame> symbolize(const std::vector<uintptr_t>& return_addresses);
  std::vector<report::ModuleRecord> modules();

 private:
  std::unordered_map<uintptr_t, report::ResolvedFrame> cache_;
};

}  // namespace cdsa
