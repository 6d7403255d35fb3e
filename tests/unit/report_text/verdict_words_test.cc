// The words of the verdict (report/verdict_words.h): why each candidate is named, the notes on the evidence, and the
// head and closing rule of the report text (report/fault_report.h), from plain facts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "report/fault_report.h"
#include "report/verdict_words.h"
#include "tests/unit/fixtures/report_fixtures.h"

namespace cdsa::report {
namespace {

CandidateFacts on_stream(uint64_t stream, uint64_t pending) {
  CandidateFacts c;
  c.stream_id = stream;
  c.pending = pending;
  return c;
}

TEST(VerdictWords, TheFirstUnfinishedLaunchCountsWhatWasPending) {
  EXPECT_EQ(why_text(on_stream(9, 1)), "first unfinished launch on stream 9; 1 launch on it had not completed");
  EXPECT_EQ(why_text(on_stream(9, 3)), "first unfinished launch on stream 9; 3 launches on it had not completed");
}

TEST(VerdictWords, ASharedMarkAPdlLaunchAndARecentOneSayWhatTheyAre) {
  CandidateFacts c = on_stream(4, 2);
  c.group = 3;
  EXPECT_EQ(why_text(c).rfind("one of 3 launches on stream 4 sharing the first completion mark that never landed", 0), 0u);
  EXPECT_NE(why_text(c).find("(the marks between them could not be placed); 2 launches on it had not completed"),
            std::string::npos);
  c.pdl_group = true;
  EXPECT_NE(why_text(c).find("(programmatic dependent launch: no mark may sit between them); "), std::string::npos);
  c.mark_not_placed = true;
  EXPECT_EQ(why_text(c),
            "one of the last 3 launches on stream 4, after its last completion mark that landed; not proven finished: "
            "no mark was placed after them (it waits for the stream's next operation, which may be a programmatic "
            "dependent launch), so nothing shows whether they finished");
  c.group = 1;
  c.pdl_group = false;
  EXPECT_EQ(why_text(c),
            "the last launch on stream 4, after its last completion mark that landed; not proven finished: no mark "
            "was placed after it (it waits for the stream's next operation), so nothing shows whether it finished");
  c.recent_unproven = true;
  EXPECT_EQ(why_text(c), "recent launch (not proven)");
}

TEST(VerdictWords, ARacedStreamsLaunchSaysItsOrderIsNotKnown) {
  CandidateFacts c = on_stream(4, 3);
  c.group = 3;
  c.stream_raced = true;
  c.mark_not_placed = true;  // the race decides the words
  EXPECT_EQ(why_text(c),
            "one of the 3 launches on stream 4 after the last one proven finished; not proven finished: several "
            "threads put work on this stream at the same time, so the order of these launches on it, and which "
            "completion marks they precede, are not known");
  c.group = 1;
  EXPECT_EQ(why_text(c),
            "the launch on stream 4 after the last one proven finished; not proven finished: several threads put work "
            "on this stream at the same time, so the order of this launch on it, and which completion marks it "
            "precedes, are not known");
  EvidenceFacts e;
  e.unproven = EvidenceFacts::Unproven::Raced;
  std::vector<std::string> n = evidence_notes(e);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].rfind("no candidate is proven unfinished: several threads put work on the same stream at the same "
                       "time", 0), 0u);
}

TEST(VerdictWords, TheDevicesAssertAndALostRecordAreNamed) {
  CandidateFacts c = on_stream(9, 1);
  c.matched_assert_function = "nll_loss_forward_kernel";
  EXPECT_EQ(why_text(c),
            "first unfinished launch on stream 9; 1 launch on it had not completed; other launches could not be ruled "
            "out by their marks, but only this kernel matches the device's assert in nll_loss_forward_kernel");
  CandidateFacts unknown = on_stream(9, 1);
  unknown.assert_cannot_rule_out = true;
  EXPECT_EQ(why_text(unknown),
            "first unfinished launch on stream 9; 1 launch on it had not completed; its kernel is not known, so the "
            "device's assert cannot rule it out");
  CandidateFacts lost = on_stream(7, 1);
  lost.stream_seq = 12;
  lost.record_lost = true;
  lost.ring_size = 1024;
  EXPECT_EQ(why_text(lost),
            "launch #12 on stream 7 never finished, but its record is lost: the ring keeps the last 1024 launches "
            "and this one is older; raise CDSA_RING_SIZE (now 1024) to keep its kernel and stack");
}

TEST(VerdictWords, NoLimitNoNote) { EXPECT_TRUE(evidence_notes(EvidenceFacts{}).empty()); }

TEST(VerdictWords, EachLimitIsOneNoteInTheReportsOrder) {
  EvidenceFacts e;
  e.unmarked_streams_pending = true;
  e.replayed_graphs.push_back({});
  e.replayed_graphs.back().incomplete = true;
  e.launches_in_flight = 2;
  e.in_flight_kept_inexact = true;
  e.breadcrumbs_active = false;
  e.left_out_by_device_assert = 1;
  e.candidates = 40;
  e.assert_matches_no_candidate = "helper";
  e.assert_names_no_kernel = "operator()";
  e.unproven = EvidenceFacts::Unproven::MarksNotPlaced;
  e.stream_work_unproven = 2;
  e.stream_work_unseen = true;
  e.other_context_streams = 3;
  e.recorder_overflow = "the stack table is full";
  std::vector<std::string> n = evidence_notes(e);
  ASSERT_EQ(n.size(), 12u);
  EXPECT_EQ(n[0], "some streams had launches without breadcrumbs; they cannot be ruled out");
  EXPECT_EQ(n[1].rfind("the graph node tables were full (65,536 nodes)", 0), 0u);
  EXPECT_EQ(n[2].rfind("2 launch(es) on other threads", 0), 0u);
  EXPECT_NE(n[2].find(", so the verdict above is not exact"), std::string::npos);
  EXPECT_EQ(n[3], "breadcrumbs were off: candidates are not proven");
  EXPECT_EQ(n[4].rfind("1 other candidate(s) were left out", 0), 0u);
  EXPECT_EQ(n[5].rfind("the device's assert names helper, which no candidate's kernel is", 0), 0u);
  EXPECT_EQ(n[6].rfind("the device's assert is in operator(), which cannot be a __global__ function", 0), 0u);
  EXPECT_EQ(n[7].rfind("no candidate's completion mark was placed", 0), 0u);
  EXPECT_EQ(n[8].rfind("2 stream(s) had a copy, memset or memory operation where the completion marks cannot show it "
                       "ran",
                       0),
            0u);
  EXPECT_NE(n[8].find("so no launch is named as certain"), std::string::npos);
  EXPECT_EQ(n[9].rfind("cdsa sees this process through CUPTI alone", 0), 0u);
  EXPECT_EQ(n[10].rfind("3 stream(s) of other CUDA contexts", 0), 0u);
  EXPECT_EQ(n[11], "the stack table is full");
  e.unproven = EvidenceFacts::Unproven::AllFinished;
  EXPECT_EQ(evidence_notes(e)[7].rfind("the completion marks and successful synchronizing calls show every recorded "
                                       "launch finished",
                                       0),
            0u);
}

TEST(VerdictWords, PassedThroughCallsAreListedUpToEight) {
  EvidenceFacts e;
  e.untracked_work = true;
  e.header_version = 13000;
  e.untracked_kept_inexact = true;
  for (int i = 0; i < 10; ++i) e.passthrough_calls.push_back({"cuNew" + std::to_string(i), i ? 13010 : 0, true});
  e.passthrough_calls.push_back({"cuQuiet", 13010, false});
  std::vector<std::string> n = evidence_notes(e);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].rfind("cdsa was built from CUDA 13.0 headers; the program called cuNew0 (by dlsym), cuNew1 (asked for "
                       "at 13010)",
                       0),
            0u)
      << n[0];
  EXPECT_NE(n[0].find("cuNew7 (asked for at 13010) and 2 more, which cdsa could only pass through"), std::string::npos);
  EXPECT_EQ(n[0].find("cuQuiet"), std::string::npos);
  EXPECT_NE(n[0].find(", and no launch can be named as certain"), std::string::npos);
}

TEST(VerdictWords, ANodesOriginIsNamed) {
  EXPECT_EQ(node_origin_text(NodeOriginWord::Captured, "ignored"), "captured");
  EXPECT_EQ(node_origin_text(NodeOriginWord::Added, "cuGraphAddKernelNode_v2"), "added by cuGraphAddKernelNode_v2");
  EXPECT_EQ(node_origin_text(NodeOriginWord::Changed, "cuGraphExecKernelNodeSetParams_v2"),
            "changed by cuGraphExecKernelNodeSetParams_v2");
}

TEST(ReportText, TheHeadIsTheReportsFirstLinesAndTheRuleItsLast) {
  FaultReport r = fixtures::assert_report("cuCtxSynchronize", 42);
  const std::string head = format_report_head(r);
  EXPECT_EQ(head,
            "\n==================== cdsa: asynchronous CUDA fault ====================\n"
            "cdsa: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered\n"
            "cdsa: surfaced at cuCtxSynchronize (thread 42)\n");
  const std::string whole = format_report_text(r);
  TextOptions no_rule;
  no_rule.closing_rule = false;
  const std::string open = format_report_text(r, no_rule);
  EXPECT_EQ(whole, open + kReportClosingRule);
  EXPECT_EQ(whole.rfind(head.substr(0, head.size() - 1), 0), 0u);  // the head, then the stack on that line
  r.origin.rank = 3;
  r.origin.pid = 7;
  EXPECT_NE(format_report_head(r).find("cdsa[rank 3]: surfaced at cuCtxSynchronize (thread 42)\n"), std::string::npos);
}

}  // namespace
}  // namespace cdsa::report
