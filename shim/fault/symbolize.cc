#include "shim/fault/symbolize.h"

#include "report/frames.h"
#include "symbolizer/module_map.h"
#include "symbolizer/native_symbolizer.h"

namespace cdsa {

std::vector<report::ResolvedFrame> ReportSymbolizer::symbolize(const std::vector<uintptr_t>& pcs) {
  // Resolve the PCs not seen yet in one call. symbolize_live treats every frame
  // but the first as a return address, so a placeholder goes first.
  std::vector<uintptr_t> todo{0};
  for (uintptr_t pc : pcs)
    if (!cache_.count(pc)) todo.push_back(pc);
  if (todo.size() > 1) {
    auto frames = symbolizer::symbolize_live(todo.data(), todo.size(), /*pcs_are_return_addresses=*/true);
    for (size_t i = 1; i < frames.size() && i < todo.size(); ++i)
      cache_[todo[i]] = report::resolved_frame(todo[i], frames[i]);
  }
  std::vector<report::ResolvedFrame> out;
  out.reserve(pcs.size());
  for (uintptr_t pc : pcs) out.push_back(cache_[pc]);
  return out;
}

std::vector<report::ModuleRecord> ReportSymbolizer::modules() {
  std::vector<report::ModuleRecord> out;
  for (const auto& m : symbolizer::capture_module_map()) out.push_back(report::module_record(m));
  return out;
}

}  // namespace cdsa
