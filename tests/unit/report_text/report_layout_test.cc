// The report's whole text, line by line, for each verdict (report/format_text.cc): the banner, the error, where it
// surfaced, the device's assert lines, the verdict's heading and its launches (numbered when there are several, one
// line for a lost record), hints, notes, the trace path and the closing rule. These are the lines
// tests/support/cdsa_report.py (every e2e, wheel and GPU-suite test) reads reports by.
#include <gtest/gtest.h>

#include <string>

#include "base/device_assert.h"
#include "report/fault_report.h"
#include "tests/unit/fixtures/report_fixtures.h"

namespace cdsa::report {
namespace {

const char* kBanner = "\n==================== cdsa: asynchronous CUDA fault ====================\n";
const char* kRule = "=======================================================================\n";  // 71

Candidate python_launch(const char* kernel, uint64_t stream, uint64_t seq, const char* file, int line,
                        const char* source) {
  Candidate c;
  c.launch.kind = "kernel";
  c.launch.kernel = kernel;
  c.launch.grid[0] = 2;
  c.launch.block[0] = 32;
  c.launch.stream_id = stream;
  c.launch.seq = seq;
  c.launch.stream_seq = 1;
  c.launch.tid = 11;
  c.stack.python = {PyFrame{file, "step", line, source}};
  return c;
}

FaultReport base_report() {
  FaultReport r = fixtures::assert_report("cuMemcpyDtoH_v2", 11);
  r.surfaced_stack.python = {PyFrame{"train.py", "<module>", 30, "loss.item()"}};
  return r;
}

const char* kHead =
    "cdsa: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered\n"
    "cdsa: surfaced at cuMemcpyDtoH_v2 (thread 11), called from (most recent call last):\n"
    "    File \"train.py\", line 30, in <module>\n"
    "      loss.item()\n";

TEST(ReportLayout, AnExactReportLineByLine) {
  FaultReport r = base_report();
  r.device_asserts = base::parse_device_asserts(
      "Loss.cu:250: nll: block: [0,0,0], thread: [3,0,0] Assertion `t >= 0` failed.\n"
      "Loss.cu:250: nll: block: [0,0,0], thread: [4,0,0] Assertion `t >= 0` failed.\n"
      "Loss.cu:250: nll: block: [0,0,0], thread: [5,0,0] Assertion `t >= 0` failed.\n");
  r.attribution = Attribution::Exact;
  r.candidates = {python_launch("nll", 7, 3, "loss.py", 20, "out = nll(x)")};
  r.candidates[0].why = "first unfinished launch on stream 7";
  r.hints = {"cross_entropy / nll_loss: a label is out of range"};
  r.notes = {"the ring overwrote 5 launches"};
  r.trace_path = "cdsa-h-1.json";
  EXPECT_EQ(format_report_text(r),
            std::string(kBanner) + kHead +
                "cdsa: the device reported: Loss.cu:250: nll: block: [0,0,0], thread: [3,0,0] Assertion `t >= 0` "
                "failed.\n"
                "cdsa:   (and 2 more assert lines)\n"
                "cdsa: the failing launch (the first launch on its stream whose completion never landed):\n"
                "  kernel nll  grid (2,0,0) block (32,0,0) shared 0 B  stream 7  launch #3 (#1 on its stream)  "
                "thread 11\n"
                "    (first unfinished launch on stream 7)\n"
                "  Launched from (most recent call last):\n"
                "    File \"loss.py\", line 20, in step\n"
                "      out = nll(x)\n"
                "cdsa: hint: cross_entropy / nll_loss: a label is out of range\n"
                "cdsa: note: the ring overwrote 5 launches\n"
                "cdsa: trace file cdsa-h-1.json\n" +
                kRule);
}

TEST(ReportLayout, AnAmbiguousReportNumbersItsCandidatesAndALostRecordIsOneLine) {
  FaultReport r = base_report();
  r.attribution = Attribution::Ambiguous;
  r.candidates = {python_launch("gemm", 7, 1, "train.py", 10, ""), python_launch("nll", 9, 2, "loss.py", 20, "")};
  Candidate lost;
  lost.launch.stream_id = 12;
  lost.launch.stream_seq = 4;
  lost.why = "launch #4 on stream 12 never finished, but its record is lost";
  r.candidates.push_back(lost);
  EXPECT_EQ(format_report_text(r),
            std::string(kBanner) + kHead +
                "cdsa: AMBIGUOUS: 3 launches were unfinished when the fault surfaced (on different streams, or "
                "sharing one completion mark); the failing launch is one of these:\n"
                "  [1] kernel gemm  grid (2,0,0) block (32,0,0) shared 0 B  stream 7  launch #1 (#1 on its stream)  "
                "thread 11\n"
                "  Launched from (most recent call last):\n"
                "    File \"train.py\", line 10, in step\n"
                "  [2] kernel nll  grid (2,0,0) block (32,0,0) shared 0 B  stream 9  launch #2 (#1 on its stream)  "
                "thread 11\n"
                "  Launched from (most recent call last):\n"
                "    File \"loss.py\", line 20, in step\n"
                "  [3] launch #4 on stream 12 never finished, but its record is lost\n" +
                kRule);
}

// Issue 26 item 1: a long candidate list (an all-PDL step sharing one mark) is folded in the text after its first
// 32, except the candidates whose kernel is the function the device's assert names; every one stays in the report.
TEST(ReportLayout, ALongListShowsItsFirst32AndEveryOneTheAssertNames) {
  FaultReport r = fixtures::assert_report("cuStreamSynchronize");
  r.attribution = Attribution::Ambiguous;
  for (uint64_t i = 1; i <= 40; ++i) {
    Candidate c;
    c.launch = fixtures::kernel_launch(i, i == 38 ? "void nll_loss_forward_kernel<float>(float*)" : "fill_f32");
    r.candidates.push_back(c);
  }
  base::DeviceAssert a;
  a.function = "void nll_loss_forward_kernel<float>(float*)";
  r.device_asserts.push_back(a);
  const std::string text = format_report_text(r);
  EXPECT_NE(text.find("the failing launch is one of these (33 shown):"), std::string::npos) << text;
  EXPECT_NE(text.find("  [32] "), std::string::npos);
  EXPECT_EQ(text.find("  [33] "), std::string::npos);
  EXPECT_NE(text.find("  [38] "), std::string::npos);
  EXPECT_NE(text.find("(shown past the first 32: its kernel is the function the device's assert names)"),
            std::string::npos);
  EXPECT_NE(text.find("  ... and 7 more candidates, not shown (the verdict rests on all 40; the trace holds them)\n"),
            std::string::npos);
  EXPECT_EQ(r.candidates.size(), 40u);
  r.device_asserts.clear();  // no assert: the first 32 alone
  EXPECT_EQ(format_report_text(r).find("  [38] "), std::string::npos);
  EXPECT_NE(format_report_text(r).find("  ... and 8 more candidates, not shown"), std::string::npos);
}

TEST(ReportLayout, AnUnknownVerdictListsTheRecentLaunchesOrSaysItHasNone) {
  FaultReport r = base_report();
  r.attribution = Attribution::Unknown;
  EXPECT_EQ(format_report_text(r),
            std::string(kBanner) + kHead + "cdsa: the failing launch could not be identified.\n" + kRule);
  r.candidates = {python_launch("gemm", 7, 1, "train.py", 10, "")};
  std::string text = format_report_text(r);
  EXPECT_NE(text.find("cdsa: the failing launch could not be identified; the most recent launches were:\n"
                      "  kernel gemm  grid"),
            std::string::npos)
      << text;
}

TEST(ReportLayout, AStacklessCallAndOneAssertLine) {
  FaultReport r = base_report();
  r.surfaced_call = "exit probe (cuStreamQuery at process exit)";
  r.surfaced_stack = {};
  r.device_asserts = base::parse_device_asserts("k.cu:1: k: block: [0,0,0], thread: [0,0,0] Assertion `x` failed.");
  std::string text = format_report_text(r);
  EXPECT_NE(text.find("cdsa: surfaced at exit probe (cuStreamQuery at process exit) (thread 11), called from (most "
                      "recent call last):\n    (no stack recorded)\n"
                      "cdsa: the device reported: k.cu:1: k: block: [0,0,0], thread: [0,0,0] Assertion `x` failed.\n"
                      "cdsa: the failing launch could not be identified.\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("more assert line"), std::string::npos) << text;
}

TEST(ReportLayout, TheBannerAndTheRuleAreWhatTheTestsReadReportsBy) {
  // tests/support/cdsa_report.py: BANNER, and RULE = "=" * 71, the line that closes a whole report.
  std::string text = format_report_text(base_report());
  EXPECT_EQ(text.rfind("\n==================== cdsa: asynchronous CUDA fault ====================\n", 0), 0u);
  std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);
  EXPECT_EQ(last, std::string(71, '=') + "\n");
}

}  // namespace
}  // namespace cdsa::report
