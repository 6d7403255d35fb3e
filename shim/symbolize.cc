#include "shim/symbolize.h"

#include "symbolizer/module_map.h"
#include "symbolizer/native_symbolizer.h"

namespace cdsa {

std::vector<NativeFrameText> NativeSymbolizer::symbolize(const std::vector<uintptr_t>& pcs) {
  // Resolve the PCs not seen yet in one call. symbolize_live treats every frame
  // but the first as a return address, so a placeholder goes first.
  std::vector<uintptr_t> todo{0};
  for (uintptr_t pc : pcs)
    if (!cache_.count(pc)) todo.push_back(pc);
  if (todo.size() > 1) {
    auto frames = symbolizer::symbolize_live(todo.data(), todo.size(), /*pcs_are_return_addresses=*/true);
    for (size_t i = 1; i < frames.size() && i < todo.size(); ++i) {
      const auto& f = frames[i];
      NativeFrameText t;
      t.pc = todo[i];
      t.module = f.module;
      t.module_offset = f.module_offset;
      t.function = f.function;
      // Where code was inlined, name the innermost function and its line: that is what ran.
      if (!f.inlined.empty()) {
        t.file = f.inlined.front().file;
        t.line = f.inlined.front().line;
      } else {
        t.file = f.file;
        t.line = f.line;
      }
      cache_[todo[i]] = std::move(t);
    }
  }
  std::vector<NativeFrameText> out;
  out.reserve(pcs.size());
  for (uintptr_t pc : pcs) out.push_back(cache_[pc]);
  return out;
}

std::vector<ModuleText> NativeSymbolizer::modules() {
  std::vector<ModuleText> out;
  for (const auto& m : symbolizer::capture_module_map()) {
    ModuleText t;
    t.path = m.path;
    t.build_id = m.build_id;
    t.bias = m.bias;
    for (const auto& s : m.segments) t.ranges.emplace_back(s.start, s.end);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace cdsa
