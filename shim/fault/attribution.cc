#include "shim/fault/attribution.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "base/demangle.h"
#include "base/identifier.h"

namespace cdsa {

bool kernel_matches_assert_function(std::string_view kernel, std::string_view function) {
  const std::string_view id = base::function_identifier(function);
  if (id.empty()) return false;
  // A mangled name is compared demangled: "_ZN2at6native12_GLOBAL__N_112index_kernelIfLi4EEEvPT_l" names
  // index_kernel, "_Z13kernel_helperPi" does not name "kernel".
  const std::string name = base::demangle(std::string(kernel).c_str());
  return base::function_identifier(name) == id;
}

namespace {

constexpr size_t kRecentShown = 3;

int find_record(const FaultSnapshot& s, uint64_t stream_id, uint64_t stream_seq) {
  for (size_t i = 0; i < s.ring.size(); ++i) {
    const LaunchRecord& r = s.ring[i];
    if (r.stream_id == stream_id && r.stream_seq == stream_seq && !(r.flags & kFlagCaptured))
      return static_cast<int>(i);
  }
  return -1;
}

bool matches_device_assert(const FaultSnapshot& s, const AttributedLaunch& c) {
  if (c.ring_index < 0) return false;
  auto it = s.kernel_names.find(s.ring[static_cast<size_t>(c.ring_index)].kernel_name);
  if (it == s.kernel_names.end()) return false;
  for (const auto& a : s.asserts)
    if (kernel_matches_assert_function(it->second, a.function)) return true;
  return false;
}

void add_graph_nodes(const FaultSnapshot& s, AttributedLaunch* c) {
  if (c->ring_index < 0) return;
  const LaunchRecord& r = s.ring[static_cast<size_t>(c->ring_index)];
  if (r.kind != LaunchKind::Graph) return;
  c->reasons |= kReasonGraphReplay;
  if (r.graph_id == 0) return;
  for (size_t i = 0; i < s.graph_nodes.size(); ++i)
    if (s.graph_nodes[i].graph_id == r.graph_id) c->graph_nodes.push_back(i);
  // The breadcrumbs mark the replay, not its nodes: of several, the device's assert text names the one (by kernel
  // name, as between streams); else they are all candidates.
  if (c->graph_nodes.size() > 1 && !s.asserts.empty()) {
    std::vector<int> match;
    for (size_t k = 0; k < c->graph_nodes.size(); ++k) {
      auto it = s.kernel_names.find(s.graph_nodes[c->graph_nodes[k]].kernel_name);
      if (it == s.kernel_names.end()) continue;
      for (const auto& a : s.asserts)
        if (kernel_matches_assert_function(it->second, a.function)) {
          match.push_back(static_cast<int>(k));
          break;
        }
    }
    if (match.size() == 1) {
      c->graph_node_pick = match.front();
      c->reasons |= kReasonNodeMatchesDeviceAssert;
    }
  }
  bool followed = true;
  if (auto t = s.graph_tables.find(r.graph_id); t != s.graph_tables.end())
    followed = !t->second.device_changes && !t->second.unpaired_change && !t->second.incomplete;
  c->graph_nodes_ambiguous = !followed || (c->graph_nodes.size() > 1 && c->graph_node_pick < 0);
}

}  // namespace

AttributionResult attribute(const FaultSnapshot& s) {
  AttributionResult out;
  std::vector<AttributedLaunch>& picks = out.candidates;
  for (const auto& st : s.streams) {
    if (!st.marks) {
      out.unmarked_streams_pending = true;
      continue;
    }
    if (st.landed >= st.launched) continue;
    AttributedLaunch c;
    c.stream_id = st.id;
    c.stream_seq = st.landed + 1;
    c.pending = st.launched - st.landed;
    c.ring_index = find_record(s, c.stream_id, c.stream_seq);
    c.reasons = kReasonFirstUnfinished | (c.ring_index < 0 ? kReasonRecordOverwritten : 0u);
    picks.push_back(std::move(c));
  }
  // Oldest launch first; records that left the ring last.
  auto seq = [&s](const AttributedLaunch& c) {
    return c.ring_index < 0 ? UINT64_MAX : s.ring[static_cast<size_t>(c.ring_index)].seq;
  };
  std::stable_sort(picks.begin(), picks.end(),
                   [&seq](const AttributedLaunch& a, const AttributedLaunch& b) { return seq(a) < seq(b); });

  // Several streams pending: the device's assert text names the function that failed.
  if (picks.size() > 1 && !s.asserts.empty()) {
    auto mid = std::stable_partition(picks.begin(), picks.end(),
                                     [&s](const AttributedLaunch& c) { return matches_device_assert(s, c); });
    if (mid - picks.begin() == 1) {
      picks.erase(mid, picks.end());
      picks.front().reasons |= kReasonMatchesDeviceAssert;
      out.named_by_device_assert = true;
    }
  }

  if (picks.size() == 1 && !out.unmarked_streams_pending)
    out.verdict = Verdict::Exact;
  else if (!picks.empty())
    out.verdict = Verdict::Ambiguous;
  else
    out.verdict = Verdict::Unknown;
  // A launch submitted but not yet recorded may be the failing one: the ring cannot prove otherwise.
  if (out.verdict == Verdict::Exact && s.launches_in_flight > 0) {
    out.verdict = Verdict::Ambiguous;
    out.launches_in_flight = true;
  }
  for (auto& c : picks) add_graph_nodes(s, &c);
  // The replay is known but not which of its kernel nodes failed: not exact either.
  if (out.verdict == Verdict::Exact && picks.front().graph_nodes_ambiguous) {
    out.verdict = Verdict::Ambiguous;
    out.graph_nodes_ambiguous = true;
  }

  if (picks.empty()) {
    // Nothing pending that breadcrumbs can see: the most recent launches, as hints.
    for (size_t k = 0; k < s.ring.size() && k < kRecentShown; ++k) {
      size_t i = s.ring.size() - 1 - k;
      AttributedLaunch c;
      c.ring_index = static_cast<int>(i);
      c.stream_id = s.ring[i].stream_id;
      c.stream_seq = s.ring[i].stream_seq;
      c.reasons = kReasonRecentUnproven;
      picks.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace cdsa
