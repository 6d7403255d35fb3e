#include "shim/fault/attribution.h"

#include <algorithm>
#include <map>
#include <utility>
#include <cstdint>
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

// (stream id, stream number) -> ring index of the launch's record; captured launches left out.
class RecordIndex {
 public:
  explicit RecordIndex(const FaultSnapshot& s) {
    for (size_t i = 0; i < s.ring.size(); ++i)
      if (!(s.ring[i].flags & kFlagCaptured)) map_[{s.ring[i].stream_id, s.ring[i].stream_seq}] = static_cast<int>(i);
  }
  int find(uint64_t stream_id, uint64_t stream_seq) const {
    auto it = map_.find({stream_id, stream_seq});
    return it == map_.end() ? -1 : it->second;
  }

 private:
  std::map<std::pair<uint64_t, uint64_t>, int> map_;
};

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
    followed = !t->second.device_changes && !t->second.unpaired_change && !t->second.unmapped_bodies &&
               !t->second.incomplete;
  c->graph_nodes_ambiguous = !followed || (c->graph_nodes.size() > 1 && c->graph_node_pick < 0);
}

// The launches of one stream that its marks cannot tell apart from the first unfinished one.
void stream_candidates(const FaultSnapshot& s, const RecordIndex& idx, const StreamView& st,
                       std::vector<AttributedLaunch>* picks) {
  const uint64_t n = st.launched;
  const uint64_t m = std::min(st.marked, n);  // the last launch whose mark was enqueued
  const uint64_t landed = std::min(st.landed, n);
  auto make = [&](uint64_t seq, uint32_t reasons) {
    AttributedLaunch c;
    c.stream_id = st.id;
    c.stream_seq = seq;
    c.pending = n - landed;
    c.ring_index = idx.find(st.id, seq);
    c.reasons = reasons | (c.ring_index < 0 ? kReasonRecordOverwritten : 0u);
    return c;
  };
  auto flags_of = [&](uint64_t seq) -> int {  // -1: no record
    int i = idx.find(st.id, seq);
    return i < 0 ? -1 : s.ring[static_cast<size_t>(i)].flags;
  };
  // A landed mark that a PDL launch's record shares: the launches before it in its group are not proven finished,
  // unless the mark was enqueued behind an event wait on the whole group.
  const bool group_proven = kLandedPdlMarkProvesPrimary || landed > st.pdl_unproven;
  if (!group_proven) {
    for (uint64_t j = landed; j >= 2; --j) {
      int f = flags_of(j);
      if (f < 0 || (f & (kFlagSharesMark | kFlagProgrammatic)) != (kFlagSharesMark | kFlagProgrammatic)) break;
      AttributedLaunch c = make(j - 1, kReasonPdlUnproven);
      c.pending = 0;
      picks->push_back(std::move(c));
    }
  }
  if (landed >= n) return;
  // The group of the first mark that never landed: from landed + 1 to the first launch with a mark of its own
  // (its successor's record does not share), or the whole tail after the last enqueued mark.
  const uint64_t first = landed + 1;
  uint64_t last = first;
  if (first > m) {
    last = n;
  } else {
    while (last < m) {
      int f = flags_of(last + 1);
      if (f >= 0 && !(f & kFlagSharesMark)) break;  // a missing record: it may share, so it stays in
      ++last;
    }
  }
  constexpr uint64_t kMaxGroup = 64;  // a longer chain is listed by its first launches (the note says how many)
  const uint64_t group = last - first + 1;
  for (uint64_t seq = first; seq <= last && seq < first + kMaxGroup; ++seq) {
    AttributedLaunch c = make(seq, seq == first ? kReasonFirstUnfinished : 0u);
    if (group > 1) c.reasons |= kReasonSharedMark;
    c.group = group;
    picks->push_back(std::move(c));
  }
}

// How many launches in the ring had a completion mark of their own.
void count_own_marks(const FaultSnapshot& s, const RecordIndex& idx, AttributionResult* out) {
  std::map<uint64_t, uint64_t> marked;  // marked stream id -> its last enqueued mark
  for (const auto& st : s.streams)
    if (st.marks) marked[st.id] = std::min(st.marked, st.launched);
  for (const auto& r : s.ring) {
    auto it = marked.find(r.stream_id);
    if (it == marked.end() || (r.flags & kFlagCaptured)) continue;
    ++out->launches_seen;
    if (r.flags & kFlagSharesMark) out->marks_shared = true;
    int next = idx.find(r.stream_id, r.stream_seq + 1);
    bool own = next >= 0 ? !(s.ring[static_cast<size_t>(next)].flags & kFlagSharesMark) : r.stream_seq <= it->second;
    if (own) ++out->launches_own_mark;
  }
}

}  // namespace

bool has_untracked_work(const FaultSnapshot& s) {
  if (s.passthrough_pool_exhausted) return true;
  for (const auto& c : s.passthrough_calls)
    if (c.changes_work) return true;
  return false;
}

AttributionResult attribute(const FaultSnapshot& s) {
  AttributionResult out;
  std::vector<AttributedLaunch>& picks = out.candidates;
  const RecordIndex idx(s);
  for (const auto& st : s.streams) {
    const bool finished = st.marks && st.landed >= st.launched && st.marked >= st.launched;
    // The sticky error is one context's: another context's unfinished work did not cause it.
    if (s.fault_ctx && st.ctx && st.ctx != s.fault_ctx) {
      if (!finished) ++out.other_context_streams;
      continue;
    }
    if (!st.marks) {
      out.unmarked_streams_pending = true;
      continue;
    }
    stream_candidates(s, idx, st, &picks);
  }
  count_own_marks(s, idx, &out);
  // Oldest launch first; records that left the ring last. A launch kept only because a landed mark after a PDL launch
  // does not prove it finished comes after every other candidate: the others are the first unfinished of a stream
  // by the marks, it is one only if CUDA's stream order does not hold after a PDL launch (kLandedPdlMarkProvesPrimary).
  auto seq = [&s](const AttributedLaunch& c) {
    return c.ring_index < 0 ? UINT64_MAX : s.ring[static_cast<size_t>(c.ring_index)].seq;
  };
  auto unproven = [](const AttributedLaunch& c) { return (c.reasons & kReasonPdlUnproven) != 0; };
  std::stable_sort(picks.begin(), picks.end(), [&](const AttributedLaunch& a, const AttributedLaunch& b) {
    if (unproven(a) != unproven(b)) return unproven(b);
    return seq(a) < seq(b);
  });

  // Several streams pending: the device's assert text names the function that failed.
  if (picks.size() > 1 && !s.asserts.empty()) {
    auto mid = std::stable_partition(picks.begin(), picks.end(),
                                     [&s](const AttributedLaunch& c) { return matches_device_assert(s, c); });
    if (mid - picks.begin() == 1) {
      picks.erase(mid, picks.end());
      picks.front().reasons |= kReasonMatchesDeviceAssert;
      out.named_by_device_assert = true;
    } else if (mid != picks.begin() && mid != picks.end()) {
      // Several match (one kernel twice in a PDL group): the others cannot be what the device names.
      out.left_out_by_device_assert = static_cast<uint32_t>(picks.end() - mid);
      picks.erase(mid, picks.end());
    }
  }

  for (const auto& c : picks)
    if (unproven(c)) ++out.pdl_unproven;
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
  // Work submitted through an entry point cdsa could only pass through is in no record and behind no mark: the one
  // candidate the records leave may not be the only launch that could have failed.
  if (out.verdict == Verdict::Exact && has_untracked_work(s)) {
    out.verdict = Verdict::Ambiguous;
    out.untracked_calls = true;
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
