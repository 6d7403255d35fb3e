#include "report/verdict_words.h"

namespace cdsa::report {
namespace {

std::string launches_text(uint64_t n) { return std::to_string(n) + " launch" + (n == 1 ? "" : "es"); }

// "CUDA 13.0" from cuda.h's CUDA_VERSION (13000).
std::string cuda_version_text(int v) {
  return "CUDA " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// The note for entry points cdsa passed through unwrapped, which the program called.
std::string untracked_calls_text(const EvidenceFacts& e) {
  std::string names;
  int listed = 0, more = 0;
  for (const auto& c : e.passthrough_calls) {
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
  return "cdsa was built from " + cuda_version_text(e.header_version) + " headers; " + what +
         "their prototypes are newer than those headers, so the work they submitted is in no record and behind no "
         "mark" + (e.untracked_kept_inexact ? ", and no launch can be named as certain" : "");
}

}  // namespace

std::string why_text(const CandidateFacts& c) {
  if (c.record_lost)
    return "launch #" + std::to_string(c.stream_seq) + " on stream " + std::to_string(c.stream_id) +
           " never finished, but its record is lost: the ring keeps the last " + std::to_string(c.ring_size) +
           " launches and this one is older; raise CDSA_RING_SIZE (now " + std::to_string(c.ring_size) +
           ") to keep its kernel and stack";
  if (c.recent_unproven) return "recent launch (not proven)";
  const std::string stream = std::to_string(c.stream_id);
  std::string why;
  const bool many = c.group > 1;
  if (c.stream_raced) {
    why = (many ? "one of the " + std::to_string(c.group) + " launches" : std::string("the launch")) + " on stream " +
          stream + " after the last one proven finished; not proven finished: several threads put work on this " +
          "stream at the same time, so the order of " + (many ? "these launches" : "this launch") +
          " on it, and which completion marks " + (many ? "they precede" : "it precedes") + ", are not known";
  } else if (c.mark_not_placed) {
    why = (many ? "one of the last " + std::to_string(c.group) + " launches" : std::string("the last launch")) +
          " on stream " + stream + ", after its last completion mark that landed; not proven finished: no mark was "
          "placed after " + (many ? "them" : "it") + " (it waits for the stream's next operation" +
          (c.pdl_group ? ", which may be a programmatic dependent launch" : "") + "), so nothing shows whether " +
          (many ? "they" : "it") + " finished";
  } else if (c.group > 1) {
    why = "one of " + std::to_string(c.group) + " launches on stream " + stream +
          " sharing the first completion mark that never landed " +
          (c.pdl_group ? "(programmatic dependent launch: no mark may sit between them); "
                       : "(the marks between them could not be placed); ") +
          launches_text(c.pending) + " on it had not completed";
  } else {
    why = "first unfinished launch on stream " + stream + "; " + launches_text(c.pending) + " on it had not completed";
  }
  if (!c.matched_assert_function.empty())
    why += "; other launches could not be ruled out by their marks, but only this kernel matches the device's assert in " +
           c.matched_assert_function;
  if (c.assert_cannot_rule_out) why += "; its kernel is not known, so the device's assert cannot rule it out";
  return why;
}

std::vector<std::string> evidence_notes(const EvidenceFacts& e) {
  std::vector<std::string> notes;
  if (e.unmarked_streams_pending)
    notes.push_back("some streams had launches without breadcrumbs; they cannot be ruled out");
  for (const ReplayedGraphFacts& g : e.replayed_graphs) {
    if (g.device_changes)
      notes.push_back("the replayed graph has device-updatable kernel nodes or may be launched from the device: cdsa "
                      "cannot follow those changes, so its kernel nodes are candidates only");
    if (g.unpaired_change)
      notes.push_back("a change of the replayed graph named a node cdsa could not pair with one it knew: the kernel "
                      "nodes listed may not be all the replay ran");
    if (g.unmapped_bodies)
      notes.push_back("the replayed graph is a clone with conditional nodes, whose bodies' copies cdsa is never "
                      "handed: kernel nodes added to them are not known, so those listed may not be all the replay "
                      "ran");
    if (g.incomplete)
      notes.push_back("the graph node tables were full (65,536 nodes): some of the replay's kernel nodes were not "
                      "kept");
    if (g.unfollowed)
      notes.push_back("a capture into the replayed graph could not be followed (a launch joined one of several "
                      "captures running at once, or a recapture failed or did not match the graph's nodes): the "
                      "kernel nodes listed may not be what the replay ran");
  }
  // A count and what it says (each note only where its count is not zero).
  const auto counted = [&](uint64_t n, const char* what) {
    if (n > 0) notes.push_back(std::to_string(n) + what);
  };
  if (e.launches_in_flight > 0)
    notes.push_back(std::to_string(e.launches_in_flight) +
                    " launch(es) on other threads were still between the driver call and their record when cdsa "
                    "stopped waiting for them; the failing launch may be one of them" +
                    (e.in_flight_kept_inexact ? ", so the verdict above is not exact" : ""));
  if (!e.breadcrumbs_active) notes.push_back("breadcrumbs were off: candidates are not proven");
  if (e.marks_shared && e.launches_seen > 0)
    notes.push_back(std::to_string(e.launches_own_mark) + " of " + std::to_string(e.launches_seen) +
                    " recorded launches had a completion mark of their own; the others shared one with the launch "
                    "after them (a programmatic dependent launch, which nothing may precede but its kernel) or were "
                    "their stream's last, whose mark was not yet placed");
  counted(e.left_out_by_device_assert,
          " other candidate(s) were left out: their kernels are not the function the device's assert names, or their "
          "grid has no block it names");
  if (!e.assert_matches_no_candidate.empty())
    notes.push_back("the device's assert names " + e.assert_matches_no_candidate +
                    ", which no candidate's kernel is: it may be a __device__ function one of them calls, or a launch "
                    "cdsa did not record, so no launch is named as certain");
  if (!e.assert_names_no_kernel.empty())
    notes.push_back("the device's assert is in " + e.assert_names_no_kernel +
                    ", which cannot be a __global__ function (an operator, a lambda or a class member: the kernel "
                    "calls it), so it does not tell the candidates apart");
  if (e.unproven == EvidenceFacts::Unproven::AllFinished)
    notes.push_back("the completion marks and successful synchronizing calls show every recorded launch finished, so "
                    "the fault may come from work cdsa did not record (a memory operation or copy, or a launch it "
                    "could not see)");
  else if (e.unproven == EvidenceFacts::Unproven::MarksNotPlaced)
    notes.push_back("no candidate's completion mark was placed (each is its stream's last launch, whose mark waits "
                    "for the stream's next operation), so none is proven unfinished: the fault may also come from "
                    "work cdsa did not record (a memory operation or copy, or a launch it could not see)");
  else if (e.unproven == EvidenceFacts::Unproven::Raced)
    notes.push_back("no candidate is proven unfinished: several threads put work on the same stream at the same time, "
                    "so its completion marks do not show which of its launches was unfinished; the fault may also "
                    "come from work cdsa did not record (a memory operation or copy, or a launch it could not see)");
  counted(e.stream_work_unproven,
          " stream(s) had a copy, memset or memory operation where the completion marks cannot show it ran without "
          "fault (after the last launch proven finished, before any mark that never landed): the fault may be its, "
          "so no launch is named as certain");
  if (e.stream_work_unseen)
    notes.push_back(
        "cdsa sees this process through CUPTI alone (loaded by the driver, not preloaded), and it made a driver "
        "call cdsa's entry-point table cannot describe (a newer driver's, or one without its parameters) that may "
        "put work on a stream: the fault may be that work's, so no launch is named as certain");
  if (e.cig_work)
    notes.push_back(
        "the program recorded launches into a graphics API's command list (CIG capture, cuStreamBeginCaptureToCig): "
        "they run when that API submits the list, outside CUDA's streams and cdsa's completion marks, and the "
        "fault may be one's, so no launch is named as certain");
  counted(e.other_context_streams,
          " stream(s) of other CUDA contexts had unfinished launches; those contexts answered the driver without the "
          "sticky error after the fault, so it is not theirs and they are not candidates");
  if (!e.recorder_overflow.empty()) notes.push_back(e.recorder_overflow);
  if (e.untracked_work) notes.push_back(untracked_calls_text(e));
  return notes;
}

std::string node_origin_text(NodeOriginWord origin, const std::string& call) {
  if (origin == NodeOriginWord::Captured) return "captured";
  return (origin == NodeOriginWord::Added ? "added by " : "changed by ") + call;
}

}  // namespace cdsa::report
