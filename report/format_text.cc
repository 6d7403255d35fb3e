#include <fmt/format.h>

#include "base/identifier.h"
#include "base/path.h"
#include "report/fault_report.h"
#include "report/hybrid_stack.h"
#include "report/trace_enums.h"

namespace cdsa::report {

const char* attribution_name(Attribution a) {
  switch (a) {
    case Attribution::Exact: return trace_enum::Attribution::exact.data();
    case Attribution::Ambiguous: return trace_enum::Attribution::ambiguous.data();
    default: return trace_enum::Attribution::unknown.data();
  }
}

std::string describe_launch(const Launch& l) {
  std::string s;
  if (l.kind == trace_enum::LaunchKind::graph)
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

std::string describe_origin(const Origin& o) {
  std::string s;
  if (o.rank >= 0)
    s = o.world_size > 0 ? fmt::format("rank {} of {}, ", o.rank, o.world_size) : fmt::format("rank {}, ", o.rank);
  s += fmt::format("pid {}", o.pid);
  if (!o.host.empty()) s += " on " + o.host;
  if (o.gpu_ordinal >= 0) {
    s += fmt::format(", GPU {}", o.gpu_ordinal);
    if (!o.gpu_name.empty()) s += " " + o.gpu_name;
    if (!o.gpu_pci_bus_id.empty()) s += " (PCI " + o.gpu_pci_bus_id + ")";
  }
  return s;
}

namespace {

using base::basename_of;

// Every line that starts "cdsa: " gets the rank: "cdsa[rank 3]: ".
std::string with_rank_prefix(const std::string& text, int rank) {
  if (rank < 0) return text;
  const std::string from = "cdsa: ", to = fmt::format("cdsa[rank {}]: ", rank);
  std::string out;
  out.reserve(text.size() + 64);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string::npos ? text.size() : end + 1;
    if (text.compare(pos, from.size(), from) == 0) {
      out += to;
      out.append(text, pos + from.size(), end - pos - from.size());
    } else {
      out.append(text, pos, end - pos);
    }
    pos = end;
  }
  return out;
}

void append_native(std::string& out, const ResolvedFrame& f, const char* indent) {
  std::string fn = f.function.empty() ? "??" : f.function;
  out += fmt::format("{}{} ({}+{:#x})", indent, fn, basename_of(f.module), f.module_offset);
  if (!f.file.empty()) out += fmt::format(" at {}:{}", f.file, f.line);
  out += "\n";
}

void append_python(std::string& out, const PyFrame& f, const char* indent) {
  if (f.file.rfind("Cell In[", 0) == 0)  // a notebook cell, named as IPython names it
    out += f.function == "<module>" ? fmt::format("{}{}, line {}\n", indent, f.file, f.line)
                                    : fmt::format("{}{}, line {}, in {}\n", indent, f.file, f.line, f.function);
  else
    out += fmt::format("{}File \"{}\", line {}, in {}\n", indent, f.file, f.line, f.function);
  if (!f.source.empty()) out += fmt::format("{}  {}\n", indent, f.source);
}

// "most recent call last": one interleaved list where Python and native frames pair
// (report/hybrid_stack.h has the rules), else the Python frames, then the native frames.
void append_stack(std::string& out, const CallStack& st, const char* indent, const TextOptions& opt) {
  HybridStack h = build_hybrid_stack(st, opt.native_all);
  std::string sub = std::string(indent) + "  ";
  if (h.folded_kernel)
    out += fmt::format("{}({} frame{} of the Jupyter kernel before the cell folded: ipykernel, IPython, asyncio...; "
                       "--native-all shows {})\n",
                       indent, h.folded_kernel, h.folded_kernel == 1 ? "" : "s", h.folded_kernel == 1 ? "it" : "them");
  if (h.merged) {
    for (const auto& e : h.entries) {
      if (e.python)
        append_python(out, *e.python, indent);
      else
        append_native(out, *e.native, indent);
    }
  } else {
    for (size_t i = 0; i < h.python_count; ++i) append_python(out, *h.entries[i].python, indent);
    if (h.entries.size() > h.python_count) {
      if (h.python_count)
        out += fmt::format("{}Native frames (most recent call last; not paired with the Python frames):\n", indent);
      else
        out += fmt::format("{}Native frames (most recent call last):\n", indent);
      for (size_t i = h.python_count; i < h.entries.size(); ++i) append_native(out, *h.entries[i].native, sub.c_str());
    }
  }
  if (h.folded)
    out += fmt::format("{}({} interpreter and call-machinery frame{} folded; --native-all shows {})\n", indent,
                       h.folded, h.folded == 1 ? "" : "s", h.folded == 1 ? "it" : "them");
  if (st.python.empty() && st.native.empty()) out += fmt::format("{}(no stack recorded)\n", indent);
}

// A kernel node: its kernel and dims, which graph table it is in and how it was made.
std::string describe_node(const LaunchWithStack& g) {
  if (g.launch.captured || g.node_origin.empty()) return describe_launch(g.launch);
  const Launch& l = g.launch;
  return fmt::format("kernel {}  grid ({},{},{}) block ({},{},{}) shared {} B  [node of graph {}]",
                     l.kernel.empty() ? "<unknown>" : l.kernel, l.grid[0], l.grid[1], l.grid[2], l.block[0],
                     l.block[1], l.block[2], l.shared_mem, l.graph_id);
}

void append_node(std::string& out, const LaunchWithStack& g, const TextOptions& opt, const char* mark) {
  out += fmt::format("  - {}{}\n", describe_node(g), mark);
  if (g.node_uncertain)
    out += "    (a change cdsa could not pair for sure: the replay ran this node or another one listed)\n";
  if (g.node_origin.empty() || g.node_origin == "captured") {
    out += "    Captured at (most recent call last):\n";
  } else {
    std::string what = g.node_origin;
    what[0] = static_cast<char>(what[0] - 'a' + 'A');
    out += fmt::format("    {} at (most recent call last):\n", what);
  }
  append_stack(out, g.stack, "      ", opt);
  if (!g.update_call.empty()) {
    out += fmt::format("    Taken into the exec by {} at (most recent call last):\n", g.update_call);
    append_stack(out, g.update_stack, "      ", opt);
  }
}

// The kernel nodes a graph replay ran: the one the device's assert names first, else all of them, ambiguous.
void append_graph_nodes(std::string& out, const Candidate& c, const TextOptions& opt) {
  size_t n = c.graph_nodes.size();
  bool captured = true;
  for (const auto& g : c.graph_nodes) captured &= g.node_origin.empty() || g.node_origin == "captured";
  const char* kind = captured ? "captured kernel node" : "kernel node";
  bool pick = c.graph_node_pick >= 0 && static_cast<size_t>(c.graph_node_pick) < n;
  if (pick) {
    out += fmt::format("  The graph holds {} {}s; the device's assert names this one:\n", n, kind);
    append_node(out, c.graph_nodes[static_cast<size_t>(c.graph_node_pick)], opt, "");
    out += "  Its other kernel nodes (not named by the assert):\n";
    for (size_t i = 0; i < n; ++i)
      if (static_cast<int>(i) != c.graph_node_pick) out += fmt::format("  - {}\n", describe_node(c.graph_nodes[i]));
    return;
  }
  if (n == 1 && !c.graph_nodes_ambiguous)
    out += fmt::format("  The graph holds 1 {}:\n", kind);
  else
    out += fmt::format("  AMBIGUOUS: the graph holds {} {}{}; which one failed is not known, it is one of {}:\n", n,
                       kind, n == 1 ? "" : "s", n == 1 ? "this (or one cdsa could not follow)" : "these");
  for (const auto& g : c.graph_nodes) append_node(out, g, opt, "");
}

// The banner, who reports, the error, and where it surfaced (`then` ends that line).
void append_head(std::string& out, const FaultReport& r, const char* then) {
  out += "\n==================== cdsa: asynchronous CUDA fault ====================\n";
  if (r.origin.pid || r.origin.rank >= 0) out += fmt::format("cdsa: {}\n", describe_origin(r.origin));
  out += fmt::format("cdsa: CUDA error {} {}: {}\n", r.code, r.error_name, r.error_string);
  out += fmt::format("cdsa: surfaced at {} (thread {}){}\n", r.surfaced_call, r.surfaced_tid, then);
}

}  // namespace

std::string format_report_head(const FaultReport& r) {
  std::string out;
  append_head(out, r, "");
  return with_rank_prefix(out, r.origin.rank);
}

std::string format_report_text(const FaultReport& r, const TextOptions& opt) {
  std::string out;
  append_head(out, r, ", called from (most recent call last):");
  append_stack(out, r.surfaced_stack, "    ", opt);
  if (!r.device_asserts.empty()) {
    out += fmt::format("cdsa: the device reported: {}\n", r.device_asserts.front().message);
    if (r.device_asserts.size() > 1)
      out += fmt::format("cdsa:   (and {} more assert line{})\n", r.device_asserts.size() - 1,
                         r.device_asserts.size() == 2 ? "" : "s");
  }
  // A long list (an all-PDL decode step shares one mark across hundreds of launches) is shown by its first
  // kCandidatesShown, and by every later one whose kernel is the function the device's assert names (a fact that
  // favours it); a line after them says how many are not shown. The trace holds them all.
  constexpr size_t kCandidatesShown = 32;
  const std::string assert_function = r.device_asserts.empty() ? std::string() : r.device_asserts.front().function;
  const auto named_by_assert = [&](const Candidate& c) {
    return !assert_function.empty() && !c.launch.kernel.empty() &&
           base::kernel_matches_assert_function(c.launch.kernel, assert_function);
  };
  std::vector<size_t> shown;
  for (size_t i = 0; i < r.candidates.size(); ++i)
    if (i < kCandidatesShown || named_by_assert(r.candidates[i])) shown.push_back(i);
  switch (r.attribution) {
    case Attribution::Exact:
      out += "cdsa: the failing launch (the first launch on its stream whose completion never landed):\n";
      break;
    case Attribution::Ambiguous: {
      const size_t total = r.candidates.size();
      if (!r.candidates_complete)
        out += fmt::format(
            "cdsa: AMBIGUOUS: {} unfinished when the fault surfaced; the failing launch may be {}, or work cdsa did "
            "not record (see the notes):\n",
            total == 1 ? "1 launch was" : fmt::format("{} launches were", total),
            total == 1 ? "this one" : "one of these");
      else if (total == 1)
        out += "cdsa: AMBIGUOUS: 1 launch was unfinished when the fault surfaced; it is the failing one, but what "
               "failed inside it is not known:\n";
      else
        out += fmt::format(
            "cdsa: AMBIGUOUS: {} launches were unfinished when the fault surfaced (on different streams, or sharing "
            "one completion mark); the failing launch is one of these{}:\n",
            total, shown.size() < total ? fmt::format(" ({} shown)", shown.size()) : "");
      break;
    }
    case Attribution::Unknown:
      out += "cdsa: the failing launch could not be identified";
      out += r.candidates.empty() ? ".\n" : "; the most recent launches were:\n";
      break;
  }
  for (size_t i : shown) {
    const Candidate& c = r.candidates[i];
    std::string number = r.candidates.size() > 1 ? fmt::format("[{}] ", i + 1) : std::string();
    if (c.launch.kind.empty()) {  // the record is lost: only `why` is known (one line, no placeholders)
      out += fmt::format("  {}{}\n", number, c.why);
      continue;
    }
    out += fmt::format("  {}{}\n", number, describe_launch(c.launch));
    if (!c.why.empty()) out += fmt::format("    ({})\n", c.why);
    if (i >= kCandidatesShown)
      out += fmt::format("    (shown past the first {}: its kernel is the function the device's assert names)\n",
                         kCandidatesShown);
    out += "  Launched from (most recent call last):\n";
    append_stack(out, c.stack, "    ", opt);
    if (!c.autograd_node.empty()) {
      out += fmt::format("  Launched by PyTorch's autograd engine, running the backward node {}.\n", c.autograd_node);
      if (c.forward_candidates.empty())
        out += "  No recent forward launch of that operator was recorded with Python frames.\n";
      else
        out += fmt::format(
            "  CANDIDATES, not certain: the most recent forward launch{} of that operator (the line that made the op "
            "may be {}):\n",
            c.forward_candidates.size() == 1 ? "" : "es",
            c.forward_candidates.size() == 1 ? "this one" : "one of these");
      for (const auto& f : c.forward_candidates) {
        out += fmt::format("  - candidate: {}\n", describe_launch(f.launch));
        append_stack(out, f.stack, "      ", opt);
      }
    }
    if (!c.graph_nodes.empty()) append_graph_nodes(out, c, opt);
  }
  if (shown.size() < r.candidates.size()) {
    const size_t hidden = r.candidates.size() - shown.size();
    out += fmt::format("  ... and {} more candidate{}, not shown (the verdict rests on all {}; the trace holds them)\n",
                       hidden, hidden == 1 ? "" : "s", r.candidates.size());
  }
  for (const auto& hint : r.hints) out += fmt::format("cdsa: hint: {}\n", hint);
  for (const auto& note : r.notes) out += fmt::format("cdsa: note: {}\n", note);
  // Printed before the file is written (a stalled file system cannot hold the report back): a line after the report
  // says so if the write fails.
  if (!r.trace_path.empty()) out += fmt::format("cdsa: trace file {}\n", r.trace_path);
  if (opt.closing_rule) out += kReportClosingRule;
  return with_rank_prefix(out, r.origin.rank);
}

}  // namespace cdsa::report
