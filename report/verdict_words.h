// The words of the verdict: why each candidate is named, and the notes that say what limits the evidence. Pure
// functions of plain facts, which the report builder (shim/fault/report_builder.cc) reads off the attribution and
// the snapshot: every sentence of a report is written in report/, and tested there (tests/unit/report_text).
//
// Contract: pure and deterministic; allocate; thread-safe. Each line holds no newline.
//
//   CandidateFacts c;
//   c.stream_id = 9;
//   c.pending = 1;
//   why_text(c);  // "first unfinished launch on stream 9; 1 launch on it had not completed"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cdsa::report {

// One candidate, as the attribution judged it.
struct CandidateFacts {
  uint64_t stream_id = 0;
  uint64_t stream_seq = 0;  // its number on the stream (what names it when its record is lost)
  uint64_t pending = 0;     // launches on its stream whose completion mark never landed
  uint64_t group = 1;       // launches sharing the mark it was judged by (itself included)
  bool recent_unproven = false;  // nothing pending the marks can see: a recent launch, not proven
  bool mark_not_placed = false;  // after its stream's last mark that landed, with no mark placed after it
  // after its stream's last proof, on a stream several threads put work on at the same time
  bool stream_raced = false;
  bool pdl_group = false;        // the launches of its group include a programmatic dependent (PDL) launch
  bool assert_cannot_rule_out = false;  // its kernel is not known, so the device's assert cannot rule it out
  // Only its kernel matches the device's assert, which names this function (empty: no such pick).
  std::string matched_assert_function;
  bool record_lost = false;  // the ring no longer holds its record
  uint32_t ring_size = 0;    // CDSA_RING_SIZE, for a lost record
};

// One line: why this launch is named.
std::string why_text(const CandidateFacts& c);

// A graph a candidate replayed, as its node table was kept.
struct ReplayedGraphFacts {
  bool device_changes = false;   // device-updatable kernel nodes, or a graph launched from the device
  bool unpaired_change = false;  // a change named a node cdsa could not pair with one it knew
  bool unmapped_bodies = false;  // a clone with conditional nodes, whose bodies' copies cdsa is never handed
  bool incomplete = false;       // the node tables were full
  bool unfollowed = false;       // a capture cdsa could not follow (several at once, a failed recapture)
};

// An entry point cdsa could only pass through, which the program called.
struct PassthroughFacts {
  std::string name;
  int version = 0;  // the version it was asked for at (0: found by dlsym)
  bool changes_work = false;
};

// What limits the evidence behind the verdict.
struct EvidenceFacts {
  bool unmarked_streams_pending = false;          // a stream had launches without breadcrumbs
  std::vector<ReplayedGraphFacts> replayed_graphs;  // each graph-launch candidate's graph, in the candidates' order
  uint32_t launches_in_flight = 0;                // launches between the driver call and their record
  bool in_flight_kept_inexact = false;            // ... which kept the verdict from being exact
  bool breadcrumbs_active = true;
  bool marks_shared = false;  // some launch's mark was folded into the next one's (PDL) or lost
  uint64_t launches_seen = 0, launches_own_mark = 0;
  uint32_t left_out_by_device_assert = 0;  // candidates whose kernels are not the function the assert names
  size_t candidates = 0;
  // The function the device's assert names, where no candidate's kernel is it (empty: not so).
  std::string assert_matches_no_candidate;
  // The function the device's assert names, where it cannot be a __global__ function (empty: not so).
  std::string assert_names_no_kernel;
  // No candidate is proven unfinished (and the breadcrumbs were on, every stream marked): every recorded launch is
  // shown finished, or every candidate is its stream's last, whose mark was never placed.
  // No candidate is proven unfinished: every recorded launch finished (AllFinished), each candidate is its stream's
  // last launch with no mark placed after it (MarksNotPlaced), or some are on a stream several threads put work on
  // at the same time (Raced).
  enum class Unproven { No, AllFinished, MarksNotPlaced, Raced };
  Unproven unproven = Unproven::No;
  // Streams with a copy, memset or memory operation that may be what faulted (where no mark shows it ran).
  uint32_t stream_work_unproven = 0;
  bool stream_work_unseen = false;     // such work goes unseen (CUPTI alone), and the fault is no device-side assert
  bool cig_work = false;               // launches recorded into a graphics command list (CIG capture) may have run
  uint32_t other_context_streams = 0;  // streams of other contexts with unfinished launches
  std::string recorder_overflow;       // what filled up in the recorder's tables (a sentence), or empty
  // Work submitted through entry points cdsa could only pass through: the headers' CUDA version (cuda.h's
  // CUDA_VERSION), the calls, and whether they kept the verdict from being exact.
  bool untracked_work = false;
  int header_version = 0;
  std::vector<PassthroughFacts> passthrough_calls;
  bool untracked_kept_inexact = false;
};

// The notes, in the order the report prints them.
std::vector<std::string> evidence_notes(const EvidenceFacts& e);

// How a graph's kernel node came to be, as the report names it: "captured", "added by CALL", "changed by CALL".
enum class NodeOriginWord { Captured, Added, Changed };
std::string node_origin_text(NodeOriginWord origin, const std::string& call);

}  // namespace cdsa::report
