#include "shim/fault/report_builder.h"

#include <unistd.h>
#include <algorithm>
#include <fstream>

#include "report/autograd.h"
#include "report/hints.h"
#include "shim/common/config.h"
#include "shim/fault/process_facts.h"
#include "shim/fault/python_bridge.h"
#include "shim/record/device_info.h"
#include "shim/record/profile.h"
#include "shim/record/recorder.h"
#include "symbolizer/demangle.h"

#include "base/version.h"

namespace cdsa {
namespace {

const char* kind_name(LaunchKind k) {
  switch (k) {
    case LaunchKind::KernelEx:
      return "kernel_ex";
    case LaunchKind::Cooperative:
      return "cooperative";
    case LaunchKind::Graph:
      return "graph";
    default:
      return "kernel";
  }
}

// Line n (1-based) of `text`, stripped.
std::string nth_line(const std::string& text, int n) {
  size_t pos = 0;
  for (int i = 1; i < n && pos != std::string::npos; ++i) {
    pos = text.find('\n', pos);
    if (pos != std::string::npos) ++pos;
  }
  if (n <= 0 || pos == std::string::npos || pos >= text.size()) return {};
  std::string s = text.substr(pos, text.find('\n', pos) - pos);
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::pair<std::string, std::string>> config_text() { return config_fields(config()); }

report::Attribution attribution_of(Verdict v) {
  switch (v) {
    case Verdict::Exact:
      return report::Attribution::Exact;
    case Verdict::Ambiguous:
      return report::Attribution::Ambiguous;
    default:
      return report::Attribution::Unknown;
  }
}

// One line: why this launch is named.
std::string why_text(const FaultSnapshot& s, const AttributedLaunch& c) {
  if (c.reasons & kReasonRecentUnproven) return "recent launch (not proven)";
  std::string why;
  if (c.reasons & kReasonMarkNotPlaced) {
    why = (c.group > 1 ? "one of the last " + std::to_string(c.group) + " launches" : std::string("the last launch")) +
          " on stream " + std::to_string(c.stream_id) +
          ", after its last completion mark that landed; not proven finished: no mark was placed after " +
          (c.group > 1 ? "them" : "it") + " (it waits for the stream's next operation" +
          (c.pdl_group ? ", which may be a programmatic dependent launch" : "") + "), so nothing shows whether " +
          (c.group > 1 ? "they" : "it") + " finished";
  } else if (c.group > 1) {
    why = "one of " + std::to_string(c.group) + " launches on stream " + std::to_string(c.stream_id) +
          " sharing the first completion mark that never landed " +
          (c.pdl_group ? "(programmatic dependent launch: no mark may sit between them); "
                       : "(the marks between them could not be placed); ") +
          std::to_string(c.pending) + " launch" + (c.pending == 1 ? "" : "es") + " on it had not completed";
  } else {
    why = "first unfinished launch on stream " + std::to_string(c.stream_id) + "; " + std::to_string(c.pending) +
          " launch" + (c.pending == 1 ? "" : "es") + " on it had not completed";
  }
  if ((c.reasons & kReasonMatchesDeviceAssert) && !s.asserts.empty() && !s.asserts.front().function.empty())
    why += "; other launches could not be ruled out by their marks, but only this kernel matches the device's assert in " +
           s.asserts.front().function;
  if (c.reasons & kReasonAssertCannotRuleOut)
    why += "; its kernel is not known, so the device's assert cannot rule it out";
  return why;
}

// The one line for a failing launch whose record the ring no longer holds.
std::string lost_record_text(const AttributedLaunch& c, uint32_t ring_size) {
  return "launch #" + std::to_string(c.stream_seq) + " on stream " + std::to_string(c.stream_id) +
         " never finished, but its record is lost: the ring keeps the last " + std::to_string(ring_size) +
         " launches and this one is older; raise CDSA_RING_SIZE (now " + std::to_string(ring_size) +
         ") to keep its kernel and stack";
}

// "CUDA 13.0" from cuda.h's CUDA_VERSION (13000).
std::string cuda_version_text(int v) {
  return "CUDA " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// The note for entry points cdsa passed through unwrapped, which the program called.
std::string untracked_calls_text(const FaultSnapshot& s, bool made_ambiguous) {
  std::string names;
  int listed = 0, more = 0;
  for (const auto& c : s.passthrough_calls) {
    if (!c.changes_work) continue;
    if (listed == 8) {
      ++more;
      continue;
    }
    names += (listed++ ? ", " : "") + c.name +
             (c.version ? " (asked for at " + std::to_string(c.version) + ")" : std::string(" (by dlsym)"));
  }
  if (more) names += " and " + std::to_string(more) + " more";
  std::string what = listed ? "the program called " + names + ", which cdsa could only pass through: "
                            : "more entry points were asked for than cdsa can pass through and watch, so some were "
                              "handed back as they are: ";
  return "cdsa was built from " + cuda_version_text(s.header_version) + " headers; " + what +
         "their prototypes are newer than those headers, so the work they submitted is in no record and behind no "
         "mark" + (made_ambiguous ? ", and no launch can be named as certain" : "");
}

}  // namespace

std::string SourceLines::line(const std::string& file, int n) {
  if (n <= 0 || file.empty() || file[0] == '<') return {};
  auto it = files_.find(file);
  if (it == files_.end()) {
    std::vector<std::string> lines;
    std::ifstream in(file);
    std::string s;
    while (in && std::getline(in, s) && lines.size() < 200000) lines.push_back(s);
    it = files_.emplace(file, std::move(lines)).first;
  }
  if (static_cast<size_t>(n) > it->second.size()) return {};
  std::string s = it->second[static_cast<size_t>(n) - 1];
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

report::Launch report_launch(const LaunchRecord& r, const std::map<uint32_t, std::string>& names,
                             const LaunchClockReading& clock) {
  report::Launch l;
  l.seq = r.seq;
  l.stream_seq = r.stream_seq;
  l.stream_id = r.stream_id;
  l.graph_id = r.graph_id;
  l.time_ns = clock.ns(r.stamp);
  l.ctx_id = r.ctx_id;
  l.tid = r.tid;
  l.stack_id = r.stack_id;
  auto name = names.find(r.kernel_name);
  if (name != names.end()) l.kernel = symbolizer::demangle(name->second.c_str());  // cuFuncGetName gives the mangled name
  l.kind = kind_name(r.kind);
  for (int i = 0; i < 3; ++i) {
    l.grid[i] = r.grid[i];
    l.block[i] = r.block[i];
  }
  l.shared_mem = r.shared_mem;
  l.captured = r.flags & kFlagCaptured;
  l.per_thread_stream = r.flags & kFlagPerThreadStream;
  return l;
}

ReportBuilder::ReportBuilder(const InCdsa&, const FaultSnapshot& snapshot, Native native)
    : s_(snapshot), native_(native) {
  ring_.reserve(s_.ring.size());
  for (const auto& r : s_.ring) ring_.push_back(report_launch(r, s_.kernel_names, s_.clock));
}

void ReportBuilder::add_origin(uint32_t ctx_id, report::FaultReport* rep) {
  report::Origin& o = rep->origin;
  o.rank = process_rank();
  o.world_size = process_world_size();
  o.pid = getpid();
  o.host = host_name();
  DeviceInfo dev;
  if (context_device(ctx_id, &dev)) {
    o.gpu_ordinal = dev.ordinal;
    o.gpu_name = dev.name;
    o.gpu_pci_bus_id = dev.pci_bus_id;
  }
}

report::CallStack ReportBuilder::stack(uint32_t id) {
  auto cached = stacks_.find(id);
  if (cached != stacks_.end()) return cached->second;
  report::CallStack st;
  auto it = s_.stacks.find(id);
  if (it == s_.stacks.end()) return st;
  for (const auto& f : it->second.python) {
    report::PyFrame t;
    t.file = f.file;
    t.function = f.function;
    t.line = f.line;
    std::string display, text;
    if (registered_source(t.file, &display, &text)) {  // a notebook cell: "Cell In[2]" and its own source
      t.source = nth_line(text, t.line);
      t.file = display;
    } else {
      t.source = src_.line(t.file, t.line);
    }
    st.python.push_back(std::move(t));
  }
  if (native_ == Native::Symbolized)
    st.native = sym_.symbolize(it->second.native);
  else if (st.python.empty())
    st.native = unsymbolized(it->second.native);
  stacks_.emplace(id, st);
  return st;
}

std::vector<report::ResolvedFrame> ReportBuilder::unsymbolized(const std::vector<uintptr_t>& pcs) {
  if (modules_.empty()) modules_ = symbolizer::capture_module_map();
  std::vector<report::ResolvedFrame> out;
  for (uintptr_t pc : pcs) {
    report::ResolvedFrame f;
    f.pc = pc;
    if (const symbolizer::Module* m = symbolizer::find_module(modules_, pc - 1)) {
      f.module = m->path;
      f.module_offset = pc - m->bias;
    }
    out.push_back(std::move(f));
  }
  return out;
}

void ReportBuilder::annotate(report::FaultReport* rep) {
  report::HintContext ctx;
  ctx.launches = ring_;
  ctx.launches_complete = s_.ring.empty() || s_.ring.front().seq == 1;
  ctx.argv = process_argv();
  report::add_autograd_candidates(*rep, ctx.launches, [&](uint32_t id) -> const report::CallStack* {
    stack(id);  // resolved once, kept in stacks_
    auto it = stacks_.find(id);
    return it == stacks_.end() ? nullptr : &it->second;
  });
  report::add_hints(*rep, ctx);
}

void ReportBuilder::add_attribution(const AttributionResult& a, report::FaultReport* rep) {
  const FaultSnapshot& s = s_;
  rep->device_asserts = s.asserts;
  rep->attribution = attribution_of(a.verdict);
  rep->candidates_complete = !a.unmarked_streams_pending && s.launches_in_flight == 0 && !has_untracked_work(s) &&
                             !a.assert_matches_no_candidate &&
                             !(a.no_unfinished_evidence && a.verdict != Verdict::Exact);
  if (a.unmarked_streams_pending)
    rep->notes.push_back("some streams had launches without breadcrumbs; they cannot be ruled out");
  // The verdict rests on every candidate; a long group (an all-PDL decode step shares one mark across hundreds of
  // launches) is shown by its first ones, and the report says how many more there are.
  constexpr size_t kCandidatesShown = 32;
  size_t shown = 0;
  for (const auto& c : a.candidates) {
    if (shown++ == kCandidatesShown) {
      rep->candidates_not_shown = a.candidates.size() - kCandidatesShown;
      break;
    }
    report::Candidate out;
    out.pending = c.pending;
    if (c.ring_index >= 0) {
      out.launch = ring_[static_cast<size_t>(c.ring_index)];
      out.stack = stack(s.ring[static_cast<size_t>(c.ring_index)].stack_id);
    } else {
      // Only the stream and the launch's number on it are known: no kernel, grid or stack to show
      // (report::Launch's empty kind says so), and one line says why.
      out.launch.stream_id = c.stream_id;
      out.launch.stream_seq = c.stream_seq;
    }
    out.why = c.ring_index >= 0 ? why_text(s, c) : lost_record_text(c, config().ring_size);
    for (size_t i : c.graph_nodes) {
      report::LaunchWithStack g;
      g.launch = report_launch(s.graph_nodes[i], s.kernel_names, s.clock);
      g.stack = stack(s.graph_nodes[i].stack_id);
      if (i < s.graph_node_records.size()) {
        const GraphNodeRecord& n = s.graph_node_records[i];
        auto named = s.call_names.find(n.call);
        const std::string call = named == s.call_names.end() ? std::string() : named->second;
        g.node_origin = n.origin == NodeOrigin::Captured ? std::string("captured")
                        : std::string(n.origin == NodeOrigin::Added ? "added by " : "changed by ") + call;
        g.node_uncertain = n.uncertain;
        if (n.update_call != kNoString) {
          auto up = s.call_names.find(n.update_call);
          g.update_call = up == s.call_names.end() ? std::string("cuGraphExecUpdate") : up->second;
          g.update_stack_id = n.update_stack;
          g.update_stack = stack(n.update_stack);
        }
      }
      out.graph_nodes.push_back(std::move(g));
    }
    out.graph_node_pick = c.graph_node_pick;
    out.graph_nodes_ambiguous = c.graph_nodes_ambiguous;
    if (c.ring_index >= 0 && s.ring[static_cast<size_t>(c.ring_index)].kind == LaunchKind::Graph) {
      auto t = s.graph_tables.find(s.ring[static_cast<size_t>(c.ring_index)].graph_id);
      if (t != s.graph_tables.end()) {
        if (t->second.device_changes)
          rep->notes.push_back("the replayed graph has device-updatable kernel nodes or may be launched from the "
                               "device: cdsa cannot follow those changes, so its kernel nodes are candidates only");
        if (t->second.unpaired_change)
          rep->notes.push_back("a change of the replayed graph named a node cdsa could not pair with one it knew: "
                               "the kernel nodes listed may not be all the replay ran");
        if (t->second.unmapped_bodies)
          rep->notes.push_back("the replayed graph is a clone with conditional nodes, whose bodies' copies cdsa is "
                               "never handed: kernel nodes added to them are not known, so those listed may not be "
                               "all the replay ran");
        if (t->second.incomplete)
          rep->notes.push_back("the graph node tables were full (65,536 nodes): some of the replay's kernel nodes "
                               "were not kept");
      }
    }
    rep->candidates.push_back(std::move(out));
  }
  if (s.launches_in_flight > 0)
    rep->notes.push_back(std::to_string(s.launches_in_flight) +
                         " launch(es) on other threads were still between the driver call and their record when "
                         "cdsa stopped waiting for them; the failing launch may be one of them" +
                         (a.launches_in_flight ? ", so the verdict above is not exact" : ""));
  if (!s.breadcrumbs_active) rep->notes.push_back("breadcrumbs were off: candidates are not proven");
  if (a.marks_shared && a.launches_seen > 0)
    rep->notes.push_back(std::to_string(a.launches_own_mark) + " of " + std::to_string(a.launches_seen) +
                         " recorded launches had a completion mark of their own; the others shared one with the launch "
                         "after them (a programmatic dependent launch, which nothing may precede but its kernel) or "
                         "were their stream's last, whose mark was not yet placed");
  if (a.left_out_by_device_assert > 0)
    rep->notes.push_back(std::to_string(a.left_out_by_device_assert) +
                         " other candidate(s) were left out: their kernels are not the function the device's assert "
                         "names");
  if (rep->candidates_not_shown > 0)
    rep->notes.push_back(std::to_string(rep->candidates_not_shown) +
                         " more candidate(s) are not shown; the verdict rests on all " +
                         std::to_string(a.candidates.size()));
  if (a.assert_matches_no_candidate)
    rep->notes.push_back("the device's assert names " + s.asserts.front().function +
                         ", which no candidate's kernel is: it may be a __device__ function one of them calls, or a "
                         "launch cdsa did not record, so no launch is named as certain");
  if (a.assert_names_no_kernel)
    rep->notes.push_back("the device's assert is in " + s.asserts.front().function +
                         ", which cannot be a __global__ function (an operator, a lambda or a class member: the kernel "
                         "calls it), so it does not tell the candidates apart");
  if (a.no_unfinished_evidence && a.verdict != Verdict::Exact && s.breadcrumbs_active && !a.unmarked_streams_pending)
    rep->notes.push_back(a.verdict == Verdict::Unknown || a.candidates.empty() ||
                                 (a.candidates.front().reasons & kReasonRecentUnproven)
                             ? "the completion marks and successful synchronizing calls show every recorded launch "
                               "finished, so the fault may come from work cdsa did not record (a memory operation or "
                               "copy, or a launch it could not see)"
                             : "no candidate's completion mark was placed (each is its stream's last launch, whose "
                               "mark waits for the stream's next operation), so none is proven unfinished: the fault "
                               "may also come from work cdsa did not record (a memory operation or copy, or a launch "
                               "it could not see)");
  if (a.other_context_streams > 0)
    rep->notes.push_back(std::to_string(a.other_context_streams) +
                         " stream(s) of other CUDA contexts had unfinished launches; the sticky error belongs to the "
                         "context of the call that surfaced it, so they are not candidates");
  if (!s.recorder_overflow.empty()) rep->notes.push_back(s.recorder_overflow);
  if (has_untracked_work(s)) rep->notes.push_back(untracked_calls_text(s, a.verdict != Verdict::Exact));
}

report::TraceData ReportBuilder::trace(uint64_t start_unix_ns) {
  const FaultSnapshot& s = s_;
  report::TraceData t;
  t.cdsa.version = CDSA_VERSION;
  t.cdsa.config = config_text();
  t.cdsa.cuda_headers = s.header_version;
  t.process = process_facts(start_unix_ns);
  t.modules = sym_.modules();
  std::vector<uint32_t> ids;
  for (const auto& r : s.ring)
    if (r.stack_id != kUnknownStack) ids.push_back(r.stack_id);
  t.has_profile = s.has_profile;
  t.profile.capacity = s.profile.capacity;
  t.profile.dropped = s.profile.dropped;
  for (const ProfileRow& row : s.profile.rows) {
    auto name = s.kernel_names.find(row.kernel_name);
    t.profile.sites.push_back({row.stack_id, name == s.kernel_names.end() ? std::string() : name->second, row.count});
    if (row.stack_id != kUnknownStack) ids.push_back(row.stack_id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (uint32_t id : ids) t.stacks.push_back({id, stack(id)});
  t.launches = ring_;
  for (const auto& v : s.streams) t.streams.push_back({v.id, v.launched, v.landed, v.marks});
  return t;
}

}  // namespace cdsa
