// The strings of the trace format's fixed sets, spelled once: report/trace_fields.def's TRACE_ENUM rows, as named
// constants and as lists in the table's order. A launch's kind, the attribution and the trace's reason are written,
// read, checked and shown with these (the JSON Schema is made from the same rows by tools/trace_schema.py).
//
// Contract: constants only; thread-safe.
//
//   if (launch.kind == trace_enum::LaunchKind::graph) ...
//   for (std::string_view k : trace_enum_values("LaunchKind")) ...  // kernel, kernel_ex, cooperative, graph
#pragma once

#include <string_view>
#include <vector>

namespace cdsa::report {

namespace trace_enum {
#define TRACE_ENUM(kind, value, doc) \
  namespace kind {                   \
  inline constexpr std::string_view value = #value;  \
  }
#include "report/trace_fields.def"
}  // namespace trace_enum

// The values of a kind (LaunchKind, Attribution, Reason), in the table's order; empty for another name.
inline std::vector<std::string_view> trace_enum_values(std::string_view kind) {
  std::vector<std::string_view> out;
#define TRACE_ENUM(k, value, doc) \
  if (kind == #k) out.push_back(trace_enum::k::value);
#include "report/trace_fields.def"
  return out;
}

}  // namespace cdsa::report
