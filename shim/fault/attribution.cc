#include "shim/fault/attribution.h"

#include <algorithm>
#include <map>
#include <utility>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/check.h"
#include "base/demangle.h"
#include "base/identifier.h"
#include "shim/common/driver.h"

namespace cdsa {

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

// The device's assert lines whose function can be a __global__ one: only those can tell candidates apart.
std::vector<const DeviceAssert*> kernel_asserts(const FaultSnapshot& s) {
  std::vector<const DeviceAssert*> out;
  for (const auto& a : s.asserts)
    if (base::may_be_kernel(a.function)) out.push_back(&a);
  return out;
}

// Whether one of the device's assert lines can be a launch's: its function is the launch's kernel, and the block it
// names lies in the launch's grid (`grid`, null: not known). Proof of the second: a block index is below gridDim in
// every dimension, so a grid without that block cannot have printed the line. The thread index is not checked: the
// block shape of a legacy cuLaunchGrid (under CUPTI) is not recorded.
bool name_matches(const FaultSnapshot& s, uint32_t kernel_name, const std::vector<const DeviceAssert*>& asserts,
                  const uint32_t* grid = nullptr) {
  auto it = s.kernel_names.find(kernel_name);
  if (it == s.kernel_names.end()) return false;
  for (const DeviceAssert* a : asserts) {
    if (!base::kernel_matches_assert_function(it->second, a->function)) continue;
    bool inside = true;
    for (int d = 0; grid && a->has_position && d < 3; ++d)
      if (grid[d] != 0 && a->block[d] >= grid[d]) inside = false;  // 0: a shape not recorded
    if (inside) return true;
  }
  return false;
}

// Whether a replay's node table is known whole: every kernel node it ran is among s.graph_nodes.
bool table_followed(const FaultSnapshot& s, uint64_t graph_id) {
  if (graph_id == 0) return false;
  auto t = s.graph_tables.find(graph_id);
  return t == s.graph_tables.end() || (!t->second.device_changes && !t->second.unpaired_change &&
                                       !t->second.unmapped_bodies && !t->second.incomplete &&
                                       !t->second.unfollowed);
}

// What the assert text says of a candidate: its kernel is the function (Match), is known and is not (No), or is
// not known (Unknown: a lost record, a name the driver would not give, a replay whose nodes are not all known).
enum class AssertSays { Match, No, Unknown };

AssertSays assert_says(const FaultSnapshot& s, const AttributedLaunch& c, const std::vector<const DeviceAssert*>& as) {
  if (c.ring_index < 0) return AssertSays::Unknown;
  const LaunchRecord& r = s.ring[static_cast<size_t>(c.ring_index)];
  if (r.kind == LaunchKind::Graph) {
    // A replay has no kernel name of its own: it matches when one of its kernel nodes does. A node's grid counts
    // only while the table is followed (a device-side update may have changed it).
    const bool followed = table_followed(s, r.graph_id);
    for (const auto& n : s.graph_nodes)
      if (n.graph_id == r.graph_id && r.graph_id != 0 && name_matches(s, n.kernel_name, as, followed ? n.grid : nullptr))
        return AssertSays::Match;
    return followed ? AssertSays::No : AssertSays::Unknown;
  }
  if (!s.kernel_names.count(r.kernel_name)) return AssertSays::Unknown;
  return name_matches(s, r.kernel_name, as, r.grid) ? AssertSays::Match : AssertSays::No;
}

void add_graph_nodes(const FaultSnapshot& s, const std::vector<const DeviceAssert*>& asserts, AttributedLaunch* c) {
  if (c->ring_index < 0) return;
  const LaunchRecord& r = s.ring[static_cast<size_t>(c->ring_index)];
  if (r.kind != LaunchKind::Graph) return;
  c->reasons |= kReasonGraphReplay;
  if (r.graph_id == 0) return;
  for (size_t i = 0; i < s.graph_nodes.size(); ++i)
    if (s.graph_nodes[i].graph_id == r.graph_id) c->graph_nodes.push_back(i);
  // The breadcrumbs mark the replay, not its nodes: of several, the device's assert text names the one (by kernel
  // name, as between streams); else they are all candidates.
  if (c->graph_nodes.size() > 1 && !asserts.empty()) {
    std::vector<int> match;
    const bool followed = table_followed(s, r.graph_id);
    for (size_t k = 0; k < c->graph_nodes.size(); ++k) {
      const LaunchRecord& n = s.graph_nodes[c->graph_nodes[k]];
      if (name_matches(s, n.kernel_name, asserts, followed ? n.grid : nullptr)) match.push_back(static_cast<int>(k));
    }
    if (match.size() == 1) {
      c->graph_node_pick = match.front();
      c->reasons |= kReasonNodeMatchesDeviceAssert;
    }
  }
  c->graph_nodes_ambiguous = !table_followed(s, r.graph_id) || (c->graph_nodes.size() > 1 && c->graph_node_pick < 0);
}

// The launches of one stream that its marks and syncs cannot tell apart from the first unfinished one: every
// member of one group, never a truncated list (the verdict rests on all of them; the report may fold the display).
void stream_candidates(const FaultSnapshot& s, const RecordIndex& idx, const StreamView& st,
                       std::vector<AttributedLaunch>* picks) {
  const uint64_t n = st.launched;
  const uint64_t m = std::min(st.marked, n);  // the last launch whose mark was placed
  if (st.marked != StreamView::kAllMarked) {
    CDSA_DCHECK(st.marked <= n);
    CDSA_DCHECK(st.landed <= st.marked);
  }
  CDSA_DCHECK(st.synced <= n);
  // Every launch at or before `proven` finished: the last landed mark proves it (a mark whose group holds a PDL
  // launch is placed only behind the wait on the whole group, so no landed mark leaves a primary unproven), and so
  // does a successful synchronizing call after them (StreamView::synced).
  const uint64_t proven = st.proven();
  if (proven >= n) return;
  // The group of the first placed mark that never landed: from proven + 1 to the first launch with a mark of its
  // own (its successor's record does not share); or, past the last placed mark, the whole tail, whose mark was never
  // placed: nothing shows whether those launches finished, nor that they did not.
  // Several threads put work on the stream at the same time (StreamView::raced): `proven` still holds, but not which
  // launches a mark follows, nor which mark the slot shows last, so no mark tells the first unfinished launch. Every
  // launch after `proven` is a candidate, none proven unfinished (kReasonStreamRaced): the device's assert text can
  // still name one, by the launches that are proven finished.
  const bool raced = st.raced();
  const uint64_t first = proven + 1;
  const bool placed = first <= m;
  uint64_t last = first;
  if (raced || !placed) {
    last = n;
  } else {
    while (last < m) {
      int i = idx.find(st.id, last + 1);
      if (i >= 0 && !(s.ring[static_cast<size_t>(i)].flags & kFlagSharesMark)) break;  // a missing record stays in
      ++last;
    }
  }
  CDSA_DCHECK(proven < first && first <= last && last <= n);
  CDSA_DCHECK(raced || !placed || last <= m);
  const uint64_t group = last - first + 1;
  bool pdl = false;
  for (uint64_t seq = first; seq <= last; ++seq) {
    int i = idx.find(st.id, seq);
    if (i >= 0 && (s.ring[static_cast<size_t>(i)].flags & kFlagProgrammatic)) pdl = true;
  }
  for (uint64_t seq = first; seq <= last; ++seq) {
    AttributedLaunch c;
    c.stream_id = st.id;
    c.stream_seq = seq;
    c.pending = n - proven;
    c.ring_index = idx.find(st.id, seq);
    c.reasons = c.ring_index < 0 ? kReasonRecordOverwritten : 0u;
    if (raced)
      c.reasons |= kReasonStreamRaced;
    else if (!placed)
      c.reasons |= kReasonMarkNotPlaced;
    else if (seq == first)
      c.reasons |= kReasonFirstUnfinished;
    if (group > 1 && !raced) c.reasons |= kReasonSharedMark;
    c.group = group;
    c.pdl_group = pdl;
    picks->push_back(std::move(c));
  }
}

// Whether a copy, memset or memory operation on stream `st` may be what faulted. Such work at position p sits after
// launch p and its mark (a deferred mark goes out before any other operation on the stream) and before launch p + 1.
// Let proven be the last launch proven finished: work at p < proven ran before it, so it did not fault. Work at
// p > proven comes after the placed mark of launch proven + 1 (when that launch's mark was placed), which never landed:
// the stream stopped at or before that mark, so work after it never ran. What is left: work at p == proven, and
// work at p > proven when no mark after proven was placed.
bool stream_work_may_have_faulted(const StreamView& st) {
  const uint64_t n = st.launched;
  const uint64_t m = std::min(st.marked, n);
  const uint64_t proven = st.proven();
  const bool mark_after_proven = m > proven;
  // Out of the stream's order (StreamView::raced), an op's position says nothing: every op not proven by a sync may.
  const bool raced = st.raced();
  const auto may = [&](uint64_t p) { return raced || p == proven || (p > proven && !mark_after_proven); };
  // And work a successful synchronizing call proved finished (StreamView::op_synced) did not fault either.
  for (uint32_t k = 0; k < StreamView::kOpsKept; ++k)
    if (st.op_at[k] && may(st.op_at[k] - 1) && !st.op_synced(k)) return true;
  // The older work's positions are each at most ops_forgotten - 1.
  return st.ops_forgotten && (raced || st.ops_forgotten - 1 >= proven) && !st.forgotten_synced();
}

// How many launches in the ring had a completion mark of their own.
void count_own_marks(const FaultSnapshot& s, const RecordIndex& idx, AttributionResult* out) {
  std::map<uint64_t, uint64_t> marked;  // marked stream id -> its last placed mark
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

ContextJudgement judge_contexts(const std::vector<StreamView>& streams, uintptr_t surfaced_ctx,
                                const std::function<ContextAnswer(const StreamView&)>& ask) {
  ContextJudgement out;
  std::vector<uintptr_t> contexts;
  for (const auto& v : streams)
    if (v.ctx && std::find(contexts.begin(), contexts.end(), v.ctx) == contexts.end()) contexts.push_back(v.ctx);
  if (surfaced_ctx && std::find(contexts.begin(), contexts.end(), surfaced_ctx) == contexts.end())
    contexts.push_back(surfaced_ctx);
  for (uintptr_t ctx : contexts) {
    // The surfacing call named this context and answered the sticky error: no question left.
    ContextAnswer said = ctx == surfaced_ctx ? ContextAnswer::Faulted : ContextAnswer::Unknown;
    for (size_t i = 0; i < streams.size() && said == ContextAnswer::Unknown; ++i)
      if (streams[i].ctx == ctx) said = ask(streams[i]);
    if (said == ContextAnswer::Faulted) out.faulted.push_back(ctx);
    if (said == ContextAnswer::Healthy) out.healthy.push_back(ctx);
  }
  // One answer per context: none is both proven to hold the error and proven free of it.
  for (uintptr_t ctx : out.faulted)
    CDSA_DCHECK(std::find(out.healthy.begin(), out.healthy.end(), ctx) == out.healthy.end());
  return out;
}

bool has_untracked_work(const FaultSnapshot& s) {
  if (s.passthrough_pool_exhausted) return true;
  for (const auto& c : s.passthrough_calls)
    if (c.changes_work) return true;
  return false;
}

// Whether the fault is a kernel's device-side assert, which a copy, memset or memory operation cannot be: the sticky
// error says 710, or the driver was torn down before anyone asked (is_torn_down: no code of the fault's own) and the
// device printed an assert line. Proof of the second: only a kernel prints one, and a failed assert makes its
// context's sticky error 710; work submitted after the first sticky fault never ran, so no other fault came first.
bool kernel_fault(const FaultSnapshot& s) {
  return s.fault.code == CUDA_ERROR_ASSERT || (is_torn_down(static_cast<CUresult>(s.fault.code)) && !s.asserts.empty());
}

AttributionResult attribute(const FaultSnapshot& s) {
  AttributionResult out;
  std::vector<AttributedLaunch>& picks = out.candidates;
  const RecordIndex idx(s);
  for (const auto& st : s.streams) {
    const bool finished = st.marks && (std::max(st.landed, st.synced) >= st.launched) && st.marked >= st.launched;
    // Proof: its context answered a call after the fault without the sticky error (judge_contexts), so the fault
    // is not that context's, and its unfinished work did not cause it.
    if (st.ctx && std::find(s.healthy_ctx.begin(), s.healthy_ctx.end(), st.ctx) != s.healthy_ctx.end()) {
      CDSA_DCHECK(st.ctx != s.fault_ctx);
      if (!finished) ++out.other_context_streams;
      continue;
    }
    if (!st.marks) {
      out.unmarked_streams_pending = true;
      continue;
    }
    // A device-side assert is a kernel's (a copy or memory operation prints none): only other faults may be theirs.
    if (!kernel_fault(s) && stream_work_may_have_faulted(st)) ++out.stream_work_unproven;
    stream_candidates(s, idx, st, &picks);
  }
  count_own_marks(s, idx, &out);
  // Oldest launch first; records that left the ring last; a stream's tail whose mark was never placed after every
  // launch whose placed mark missed (the order of what the marks show, not a likelihood).
  auto seq = [&s](const AttributedLaunch& c) {
    return c.ring_index < 0 ? UINT64_MAX : s.ring[static_cast<size_t>(c.ring_index)].seq;
  };
  // Candidates that nothing shows unfinished: a tail with no mark placed after it, and a raced stream's launches.
  auto not_placed = [](const AttributedLaunch& c) {
    return (c.reasons & (kReasonMarkNotPlaced | kReasonStreamRaced)) != 0;
  };
  std::stable_sort(picks.begin(), picks.end(), [&](const AttributedLaunch& a, const AttributedLaunch& b) {
    if (not_placed(a) != not_placed(b)) return not_placed(b);
    return seq(a) < seq(b);
  });

  // The device's assert text names the function that failed, when that function can be a kernel at all.
  const std::vector<const DeviceAssert*> asserts = kernel_asserts(s);
  out.assert_names_no_kernel = !s.asserts.empty() && asserts.empty();
  bool named = false;  // the one candidate left is the function the assert names (positive evidence)
  if (!picks.empty() && !asserts.empty()) {
    std::vector<AssertSays> says;
    for (const auto& c : picks) says.push_back(assert_says(s, c, asserts));
    size_t kept = 0, matched = 0;
    for (AssertSays a : says) {
      kept += a != AssertSays::No;
      matched += a == AssertSays::Match;
    }
    for (size_t i = 0; i < picks.size(); ++i)
      if (kept > 0 && says[i] == AssertSays::Unknown) picks[i].reasons |= kReasonAssertCannotRuleOut;
    if (kept == 0) {
      // Every candidate's kernel is known and none is the function: the assert sits in a __device__ function one
      // of them calls, or in a launch cdsa did not record. All stay listed; none can be named.
      out.assert_matches_no_candidate = true;
    } else if (kept < picks.size()) {
      std::vector<AttributedLaunch> left;
      for (size_t i = 0; i < picks.size(); ++i) {
        if (says[i] == AssertSays::No) continue;
        left.push_back(std::move(picks[i]));
      }
      const auto dropped = static_cast<uint32_t>(picks.size() - left.size());
      picks = std::move(left);
      // "Only this kernel matches" speaks of every launch that could have failed: not where work went through an
      // entry point cdsa could only pass through (an unrecorded launch of the same kernel may be the one).
      if (picks.size() == 1 && matched == 1 && !has_untracked_work(s)) {
        picks.front().reasons |= kReasonMatchesDeviceAssert;  // "only this kernel matches the device's assert"
        out.named_by_device_assert = true;
      } else {
        out.left_out_by_device_assert = dropped;  // several left (one kernel twice in a PDL group, say)
      }
    }
    // The one candidate left is the function the assert names: evidence of its own, whatever its mark says.
    named = picks.size() == 1 && matched == 1 && !out.assert_matches_no_candidate && !has_untracked_work(s);
  }

  bool evidence = false;  // a candidate whose own placed mark never landed: it was unfinished when the context died
  for (const auto& c : picks)
    if (!not_placed(c)) evidence = true;
  out.no_unfinished_evidence = !evidence;
  // A tail alone is never named by elimination ("the only launch not proven finished"): a program can reach the
  // driver around cdsa's wrappers (libc's own dlsym on libcuda, tests/e2e/programs/mark_cases.cc unseen), so the
  // records are never known to be the whole of the work, and a mark never placed proves nothing (issue 26 item 3).
  if (picks.size() == 1 && !out.unmarked_streams_pending && !out.assert_matches_no_candidate && (evidence || named))
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
  for (auto& c : picks) add_graph_nodes(s, asserts, &c);
  // Work no record covers (CUPTI alone: a call the table cannot describe): any fault but an assert may be its.
  out.stream_work_unseen = s.stream_work_unseen && !kernel_fault(s);
  if (out.verdict == Verdict::Exact && out.stream_work_unseen) out.verdict = Verdict::Ambiguous;
  // Proof of no verdict: a CIG capture's launches run whenever the graphics API submits its command list, in no
  // stream cdsa marks, so any of them may be what faulted, a 710 included (they are kernels).
  out.cig_work = s.cig_work;
  if (out.verdict == Verdict::Exact && out.cig_work) out.verdict = Verdict::Ambiguous;
  // A stream outside the stream table has work in no view: the one candidate may not be the only one.
  if (out.verdict == Verdict::Exact && s.stream_table_full) out.verdict = Verdict::Ambiguous;
  // A copy, memset or memory operation may be what faulted (stream_work_may_have_faulted): no launch is certain.
  if (out.verdict == Verdict::Exact && out.stream_work_unproven > 0) out.verdict = Verdict::Ambiguous;
  CDSA_DCHECK(out.verdict != Verdict::Exact ||
              (out.stream_work_unproven == 0 && !out.stream_work_unseen && !out.cig_work));
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
