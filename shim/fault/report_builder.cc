#include "shim/fault/report_builder.h"

#include <unistd.h>
#include <algorithm>
#include <fstream>

#include "report/autograd.h"
#include "report/hints.h"
#include "report/trace_enums.h"
#include "report/verdict_words.h"
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

std::string_view kind_name(LaunchKind k) {
  switch (k) {
    case LaunchKind::KernelEx:
      return report::trace_enum::LaunchKind::kernel_ex;
    case LaunchKind::Cooperative:
      return report::trace_enum::LaunchKind::cooperative;
    case LaunchKind::Graph:
      return report::trace_enum::LaunchKind::graph;
    default:
      return report::trace_enum::LaunchKind::kernel;
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

// The shim's enums and the report's words for them, value for value.
template <class To, class From>
constexpr To same_value(From v) {
  return static_cast<To>(static_cast<int>(v));
}
static_assert(same_value<report::NodeOriginWord>(NodeOrigin::Added) == report::NodeOriginWord::Added &&
              same_value<report::NodeOriginWord>(NodeOrigin::Changed) == report::NodeOriginWord::Changed &&
              same_value<report::NodeOriginWord>(NodeOrigin::Captured) == report::NodeOriginWord::Captured);
static_assert(same_value<report::Attribution>(Verdict::Exact) == report::Attribution::Exact &&
              same_value<report::Attribution>(Verdict::Ambiguous) == report::Attribution::Ambiguous &&
              same_value<report::Attribution>(Verdict::Unknown) == report::Attribution::Unknown);

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
  l.kind = std::string(kind_name(r.kind));
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

report::FaultReport ReportBuilder::report(const AttributionResult& attribution) {
  report::FaultReport rep = s_.fault;  // the head: the fault's facts
  rep.surfaced_stack_id = s_.surfaced_stack;
  rep.surfaced_stack = stack(s_.surfaced_stack);
  add_attribution(attribution, &rep);
  // The GPU of the context proven to hold the fault, else of the first candidate's.
  add_origin(s_.fault_ctx_id          ? s_.fault_ctx_id
             : rep.candidates.empty() ? 0
                                      : rep.candidates.front().launch.ctx_id,
             &rep);
  annotate(&rep);
  return rep;
}

void ReportBuilder::add_origin(uint32_t ctx_id, report::FaultReport* rep) {
  report::Origin& o = rep->origin;
  o.rank = process_rank();
  o.world_size = process_world_size();
  o.pid = getpid();
  o.host = host_name();
  // The device of context `ctx_id` as the snapshot copied it (with 0, or a context it holds none for: the first
  // device noted).
  auto dev = s_.devices.find(ctx_id);
  if (dev == s_.devices.end()) dev = s_.devices.find(0);
  if (dev != s_.devices.end()) {
    o.gpu_ordinal = dev->second.ordinal;
    o.gpu_name = dev->second.name;
    o.gpu_pci_bus_id = dev->second.pci_bus_id;
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
  if (modules_.empty()) modules_ = symbolizer::capture_module_map();
  for (const auto& m : modules_) ctx.pytorch = ctx.pytorch || report::is_pytorch_module(m.path);
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
  rep->attribution = same_value<report::Attribution>(a.verdict);
  rep->candidates_complete = !a.unmarked_streams_pending && s.launches_in_flight == 0 && !has_untracked_work(s) &&
                             !a.assert_matches_no_candidate && a.stream_work_unproven == 0 && !a.stream_work_unseen &&
                             !a.cig_work &&
                             !(a.no_unfinished_evidence && a.verdict != Verdict::Exact);
  report::EvidenceFacts evidence;
  evidence.unmarked_streams_pending = a.unmarked_streams_pending;
  // Every candidate the verdict rests on is kept (the trace and cdsa.last_report() hold them all); the text folds
  // a long list (report/format_text.cc).
  for (const auto& c : a.candidates) {
    report::Candidate out;
    out.pending = c.pending;
    report::CandidateFacts why;
    why.stream_id = c.stream_id;
    why.stream_seq = c.stream_seq;
    why.pending = c.pending;
    why.group = c.group;
    why.recent_unproven = c.reasons & kReasonRecentUnproven;
    why.mark_not_placed = c.reasons & kReasonMarkNotPlaced;
    why.stream_raced = c.reasons & kReasonStreamRaced;
    why.pdl_group = c.pdl_group;
    why.assert_cannot_rule_out = c.reasons & kReasonAssertCannotRuleOut;
    if ((c.reasons & kReasonMatchesDeviceAssert) && !s.asserts.empty())
      why.matched_assert_function = s.asserts.front().function;
    if (c.ring_index >= 0) {
      out.launch = ring_[static_cast<size_t>(c.ring_index)];
      out.stack = stack(s.ring[static_cast<size_t>(c.ring_index)].stack_id);
    } else {
      // Only the stream and the launch's number on it are known: no kernel, grid or stack to show
      // (report::Launch's empty kind says so), and one line says why.
      out.launch.stream_id = c.stream_id;
      out.launch.stream_seq = c.stream_seq;
      why.record_lost = true;
      why.ring_size = config().ring_size;
    }
    out.why = report::why_text(why);
    for (size_t i : c.graph_nodes) {
      report::LaunchWithStack g;
      g.launch = report_launch(s.graph_nodes[i], s.kernel_names, s.clock);
      g.stack = stack(s.graph_nodes[i].stack_id);
      if (i < s.graph_node_records.size()) {
        const GraphNodeRecord& n = s.graph_node_records[i];
        auto named = s.call_names.find(n.call);
        const std::string call = named == s.call_names.end() ? std::string() : named->second;
        g.node_origin = report::node_origin_text(same_value<report::NodeOriginWord>(n.origin), call);
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
      if (t != s.graph_tables.end())
        evidence.replayed_graphs.push_back({t->second.device_changes, t->second.unpaired_change,
                                            t->second.unmapped_bodies, t->second.incomplete,
                                            t->second.unfollowed});
    }
    rep->candidates.push_back(std::move(out));
  }
  evidence.launches_in_flight = s.launches_in_flight;
  evidence.in_flight_kept_inexact = a.launches_in_flight;
  evidence.breadcrumbs_active = s.breadcrumbs_active;
  evidence.marks_shared = a.marks_shared;
  evidence.launches_seen = a.launches_seen;
  evidence.launches_own_mark = a.launches_own_mark;
  evidence.left_out_by_device_assert = a.left_out_by_device_assert;
  evidence.candidates = a.candidates.size();
  if (a.assert_matches_no_candidate) evidence.assert_matches_no_candidate = s.asserts.front().function;
  if (a.assert_names_no_kernel) evidence.assert_names_no_kernel = s.asserts.front().function;
  if (a.no_unfinished_evidence && a.verdict != Verdict::Exact && s.breadcrumbs_active && !a.unmarked_streams_pending)
    evidence.unproven = a.verdict == Verdict::Unknown || a.candidates.empty() ||
                                (a.candidates.front().reasons & kReasonRecentUnproven)
                            ? report::EvidenceFacts::Unproven::AllFinished
                        : std::any_of(a.candidates.begin(), a.candidates.end(),
                                      [](const AttributedLaunch& c) { return (c.reasons & kReasonStreamRaced) != 0; })
                            ? report::EvidenceFacts::Unproven::Raced
                            : report::EvidenceFacts::Unproven::MarksNotPlaced;
  evidence.stream_work_unproven = a.stream_work_unproven;
  evidence.stream_work_unseen = a.stream_work_unseen;
  evidence.cig_work = a.cig_work;
  evidence.other_context_streams = a.other_context_streams;
  evidence.recorder_overflow = s.recorder_overflow;
  evidence.untracked_work = has_untracked_work(s);
  evidence.header_version = s.header_version;
  for (const auto& c : s.passthrough_calls) evidence.passthrough_calls.push_back({c.name, c.version, c.changes_work});
  evidence.untracked_kept_inexact = a.verdict != Verdict::Exact;
  rep->notes = report::evidence_notes(evidence);
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
