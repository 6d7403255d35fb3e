#include <fmt/format.h>

#include "report/fault_report.h"

namespace cdsa {

const char* attribution_name(Attribution a) {
  switch (a) {
    case Attribution::Exact: return "exact";
    case Attribution::Ambiguous: return "ambiguous";
    default: return "unknown";
  }
}

std::string describe_launch(const LaunchText& l) {
  std::string s;
  if (l.kind == "graph")
    s = fmt::format("graph launch (graph {})", l.graph_id);
  else
    s = fmt::format("kernel {}  grid ({},{},{}) block ({},{},{}) shared {} B", l.kernel.empty() ? "<unknown>" : l.kernel,
                    l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared_mem);
  // Ids with the top bit set were made by cdsa from the handle when the driver could not name the stream.
  std::string stream = (l.stream_id >> 63) ? fmt::format("<handle {:#x}>", l.stream_id & ~(1ull << 63))
                                           : std::to_string(l.stream_id);
  s += fmt::format("  stream {}{}  launch #{}", stream, l.per_thread_stream ? " (per-thread default)" : "", l.seq);
  if (l.stream_seq) s += fmt::format(" (#{} on its stream)", l.stream_seq);
  s += fmt::format("  thread {}", l.tid);
  if (l.captured) s += fmt::format("  [captured into graph {}]", l.graph_id);
  return s;
}

namespace {

std::string base_name(const std::string& path) {
  auto p = path.rfind('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

// "most recent call last": outermost Python frame first, then native frames, ending at the call.
void append_stack(std::string& out, const StackText& st, const char* indent) {
  for (auto it = st.python.rbegin(); it != st.python.rend(); ++it) {
    out += fmt::format("{}File \"{}\", line {}, in {}\n", indent, it->file, it->line, it->function);
    if (!it->source.empty()) out += fmt::format("{}  {}\n", indent, it->source);
  }
  if (!st.native.empty()) {
    out += fmt::format("{}Native frames (most recent call last):\n", indent);
    for (auto it = st.native.rbegin(); it != st.native.rend(); ++it) {
      std::string fn = it->function.empty() ? "??" : it->function;
      out += fmt::format("{}  {} ({}+{:#x})", indent, fn, base_name(it->module), it->module_offset);
      if (!it->file.empty()) out += fmt::format(" at {}:{}", it->file, it->line);
      out += "\n";
    }
  }
  if (st.python.empty() && st.native.empty()) out += fmt::format("{}(no stack recorded)\n", indent);
}

}  // namespace

std::string format_report_text(const FaultReport& r) {
  std::string out;
  out += "\n==================== cdsa: asynchronous CUDA fault ====================\n";
  out += fmt::format("cdsa: CUDA error {} {}: {}\n", r.code, r.error_name, r.error_string);
  out += fmt::format("cdsa: surfaced at {} (thread {}), called from (most recent call last):\n", r.surfaced_call,
                     r.surfaced_tid);
  append_stack(out, r.surfaced_stack, "    ");
  if (!r.device_messages.empty()) {
    out += fmt::format("cdsa: the device reported: {}\n", r.device_messages.front());
    if (r.device_messages.size() > 1)
      out += fmt::format("cdsa:   (and {} more assert line{})\n", r.device_messages.size() - 1,
                         r.device_messages.size() == 2 ? "" : "s");
  }
  switch (r.attribution) {
    case Attribution::Exact:
      out += "cdsa: the failing launch (the first launch on its stream whose completion never landed):\n";
      break;
    case Attribution::Ambiguous:
      out += fmt::format(
          "cdsa: AMBIGUOUS: {} launches were unfinished on different streams when the fault surfaced; "
          "the failing launch is one of these:\n",
          r.candidates.size());
      break;
    case Attribution::Unknown:
      out += "cdsa: the failing launch could not be identified";
      out += r.candidates.empty() ? ".\n" : "; the most recent launches were:\n";
      break;
  }
  int n = 0;
  for (const auto& c : r.candidates) {
    ++n;
    out += fmt::format("  {}{}\n", r.candidates.size() > 1 ? fmt::format("[{}] ", n) : std::string(),
                       describe_launch(c.launch));
    if (!c.why.empty()) out += fmt::format("    ({})\n", c.why);
    out += "  Launched from (most recent call last):\n";
    append_stack(out, c.stack, "    ");
    if (!c.graph_nodes.empty()) {
      out += fmt::format("  The graph holds {} captured kernel node{}{}:\n", c.graph_nodes.size(),
                         c.graph_nodes.size() == 1 ? "" : "s",
                         c.graph_nodes.size() == 1 ? "" : " (any of them may have failed)");
      for (const auto& g : c.graph_nodes) {
        out += fmt::format("  - {}\n", describe_launch(g.launch));
        out += "    Captured at (most recent call last):\n";
        append_stack(out, g.stack, "      ");
      }
    }
  }
  for (const auto& note : r.notes) out += fmt::format("cdsa: note: {}\n", note);
  if (!r.trace_path.empty()) out += fmt::format("cdsa: trace written to {}\n", r.trace_path);
  out += "=======================================================================\n";
  return out;
}

}  // namespace cdsa
