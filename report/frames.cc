#include "report/frames.h"

namespace cdsa::report {

ResolvedFrame resolved_frame(uint64_t pc, const symbolizer::NativeFrame& f) {
  ResolvedFrame t;
  t.pc = pc;
  t.module = f.module;
  t.module_offset = f.module_offset;
  t.function = f.function;
  // Where code was inlined, name the innermost function's line: that is what ran.
  const bool inlined = !f.inlined.empty();
  t.file = inlined ? f.inlined.front().file : f.file;
  t.line = inlined ? f.inlined.front().line : f.line;
  return t;
}

ModuleRecord module_record(const symbolizer::Module& m) {
  ModuleRecord t;
  t.path = m.path;
  t.build_id = m.build_id;
  t.bias = m.bias;
  for (const auto& s : m.segments) t.ranges.emplace_back(s.start, s.end);
  return t;
}

symbolizer::Module module_from_record(const ModuleRecord& t) {
  symbolizer::Module m;
  m.path = t.path;
  m.bias = t.bias;
  m.build_id = t.build_id;
  for (const auto& [start, end] : t.ranges) m.segments.push_back({start, end, 0, 0});
  return m;
}

}  // namespace cdsa::report
