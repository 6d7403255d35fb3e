// The report's wording and its one input (shim/fault/report_builder.h): hand-made fault snapshots, attributed, built
// into the report model. The recorder's tables are never mapped here, so whatever the report shows came from the
// snapshot (names, stacks, profile rows).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "shim/fault/attribution.h"
#include "shim/fault/fault_snapshot.h"
#include "shim/fault/report_builder.h"
#include "tests/unit/fixtures/snapshot_fixtures.h"

namespace cdsa {
namespace {

constexpr uint32_t kNllName = 40, kGemmName = 41, kStackA = 7, kStackB = 8;

using fixtures::launch_record;
using fixtures::stream_view;

SnapshotStack python_stack(const char* file, const char* function, int line) {
  SnapshotStack s;
  s.python.push_back({file, function, line});
  return s;
}

// Two streams, each with an unfinished launch: 7 runs gemm (seq 1), 9 runs nll_loss (seq 2).
FaultSnapshot two_pending() {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  s.ring = {launch_record(1, 7, 1, kGemmName, kStackA), launch_record(2, 9, 1, kNllName, kStackB)};
  s.streams = {stream_view(0, 7, 1, 0), stream_view(1, 9, 1, 0)};
  s.kernel_names = {{kNllName, "_Z23nll_loss_forward_kernelPf"}, {kGemmName, "gemm"}};
  s.stacks = {{kStackA, python_stack("train.py", "step", 10)}, {kStackB, python_stack("loss.py", "loss", 20)}};
  return s;
}

report::FaultReport build(const FaultSnapshot& s) {
  InCdsa guard;
  ReportBuilder b(guard, s);
  return b.report(attribute(s));
}

TEST(ReportWording, AnExactLaunchSaysWhyWithItsNameAndStackFromTheSnapshot) {
  FaultSnapshot s = two_pending();
  s.streams[0] = stream_view(0, 7, 1, 1);  // gemm finished: only nll_loss is pending
  report::FaultReport rep = build(s);
  EXPECT_EQ(rep.attribution, report::Attribution::Exact);
  ASSERT_EQ(rep.candidates.size(), 1u);
  const report::Candidate& c = rep.candidates[0];
  EXPECT_EQ(c.why, "first unfinished launch on stream 9; 1 launch on it had not completed");
  EXPECT_EQ(c.launch.kernel, "nll_loss_forward_kernel(float*)");  // demangled from the snapshot's name
  ASSERT_EQ(c.stack.python.size(), 1u);
  EXPECT_EQ(c.stack.python[0].file, "loss.py");
  EXPECT_EQ(c.stack.python[0].function, "loss");
  EXPECT_EQ(c.stack.python[0].line, 20);
  EXPECT_TRUE(rep.notes.empty());
}

// Issue 26 item 5: the report's GPU is the device of the context proven to hold the fault, not the first candidate's
// (a context that could not be asked keeps its launches as candidates) nor device 0's.
TEST(ReportWording, TheGpuIsTheFaultingContextsDevice) {
  FaultSnapshot s = two_pending();
  s.ring[0].ctx_id = 1;  // gemm, the older candidate, on device 0's context
  s.ring[1].ctx_id = 2;  // nll_loss on device 1's
  DeviceInfo gpu0, gpu1;
  gpu0.ordinal = 0;
  gpu1.ordinal = 1;
  snprintf(gpu1.name, sizeof gpu1.name, "GPU one");
  snprintf(gpu1.pci_bus_id, sizeof gpu1.pci_bus_id, "0000:4C:00.0");
  s.devices = {{0, gpu0}, {1, gpu0}, {2, gpu1}};
  EXPECT_EQ(build(s).origin.gpu_ordinal, 0);  // nothing proven: the first candidate's
  s.fault_ctx_id = 2;
  report::FaultReport rep = build(s);
  EXPECT_EQ(rep.attribution, report::Attribution::Ambiguous);  // both contexts' launches stay candidates
  EXPECT_EQ(rep.origin.gpu_ordinal, 1);
  EXPECT_EQ(rep.origin.gpu_name, "GPU one");
  EXPECT_EQ(rep.origin.gpu_pci_bus_id, "0000:4C:00.0");
}

TEST(ReportWording, TheDevicesAssertNamesTheOneKernelAmongPendingStreams) {
  FaultSnapshot s = two_pending();
  s.asserts = base::parse_device_asserts(
      "Loss.cu:250: nll_loss_forward_kernel: block: [0,0,0], thread: [2,0,0] Assertion `t >= 0` failed.");
  report::FaultReport rep = build(s);
  ASSERT_EQ(rep.candidates.size(), 1u);
  EXPECT_EQ(rep.candidates[0].why,
            "first unfinished launch on stream 9; 1 launch on it had not completed; other launches could not be "
            "ruled out by their marks, but only this kernel matches the device's assert in nll_loss_forward_kernel");
  ASSERT_EQ(rep.device_asserts.size(), 1u);
  EXPECT_EQ(rep.device_asserts[0].condition, "t >= 0");
}

TEST(ReportWording, EveryLimitOfTheEvidenceIsANote) {
  FaultSnapshot s = two_pending();
  s.ring.erase(s.ring.begin());  // gemm's record left the ring
  s.breadcrumbs_active = false;
  s.launches_in_flight = 2;
  s.recorder_overflow = "the stack table is full";
  report::FaultReport rep = build(s);
  std::string notes;
  for (const auto& n : rep.notes) notes += n + "\n";
  EXPECT_NE(notes.find("breadcrumbs were off: candidates are not proven"), std::string::npos) << notes;
  EXPECT_NE(notes.find("2 launch(es) on other threads were still between the driver call and their record"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("the stack table is full"), std::string::npos) << notes;
}

TEST(ReportWording, AnOverwrittenRecordIsNamedByStreamAndNumber) {
  FaultSnapshot s = two_pending();
  s.ring.erase(s.ring.begin());
  s.streams[1] = stream_view(1, 9, 1, 1);  // only stream 7's launch is pending, and its record is gone
  report::FaultReport rep = build(s);
  ASSERT_EQ(rep.candidates.size(), 1u);
  EXPECT_EQ(rep.candidates[0].launch.stream_id, 7u);
  EXPECT_EQ(rep.candidates[0].launch.stream_seq, 1u);
  EXPECT_EQ(rep.candidates[0].launch.kind, "");  // nothing more is known of it
  EXPECT_EQ(rep.candidates[0].why.rfind("launch #1 on stream 7 never finished, but its record is lost: the ring "
                                        "keeps the last ",
                                        0),
            0u)
      << rep.candidates[0].why;
  EXPECT_NE(rep.candidates[0].why.find("raise CDSA_RING_SIZE"), std::string::npos);
}

TEST(ReportWording, TheTraceHoldsTheSnapshotsLaunchesStacksAndProfile) {
  FaultSnapshot s = two_pending();
  s.has_profile = true;
  s.profile.capacity = 8;
  s.profile.rows = {{kStackA, kGemmName, 5}, {kUnknownStack, kNoString, 1}};
  InCdsa guard;
  ReportBuilder b(guard, s);
  report::TraceData t = b.trace(0);
  ASSERT_EQ(t.launches.size(), 2u);
  EXPECT_EQ(t.launches[0].kernel, "gemm");
  ASSERT_TRUE(t.has_profile);
  ASSERT_EQ(t.profile.sites.size(), 2u);
  EXPECT_EQ(t.profile.sites[0].kernel, "gemm");
  EXPECT_EQ(t.profile.sites[0].count, 5u);
  EXPECT_EQ(t.profile.sites[1].kernel, "");
  ASSERT_EQ(t.stacks.size(), 2u);  // each stack once, by id
  EXPECT_EQ(t.stacks[0].id, kStackA);
  EXPECT_EQ(t.stacks[0].stack.python.at(0).function, "step");
}

}  // namespace
}  // namespace cdsa
