// report/frames.h: the inlined-frame rule and the module conversion shared by the live
// report and `cdsa report`.
#include <gtest/gtest.h>

#include "report/frames.h"

namespace cdsa::report {
namespace {

symbolizer::NativeFrame frame(std::vector<symbolizer::InlinedFrame> inlined) {
  symbolizer::NativeFrame f;
  f.pc = 0x401234;
  f.module = "/usr/lib/libtorch_cuda.so";
  f.module_offset = 0x1234;
  f.function = "nll_loss_forward";
  f.file = "Loss.cu";
  f.line = 120;  // the call site of the outermost inlined call
  f.inlined = std::move(inlined);
  return f;
}

TEST(Frames, InlinedCodeShowsTheInnermostFunctionsLine) {
  ResolvedFrame t = resolved_frame(0x401235, frame({{"check_target", "Loss.cuh", 250}, {"outer", "Loss.cu", 118}}));
  EXPECT_EQ(t.pc, 0x401235u);
  EXPECT_EQ(t.function, "nll_loss_forward");  // the out-of-line function
  EXPECT_EQ(t.file, "Loss.cuh");
  EXPECT_EQ(t.line, 250);
  EXPECT_EQ(t.module, "/usr/lib/libtorch_cuda.so");
  EXPECT_EQ(t.module_offset, 0x1234u);
}

TEST(Frames, WithoutInliningThePcsOwnLine) {
  ResolvedFrame t = resolved_frame(0x401235, frame({}));
  EXPECT_EQ(t.file, "Loss.cu");
  EXPECT_EQ(t.line, 120);
}

TEST(Frames, ModuleRoundTripKeepsWhatTheTraceRecords) {
  symbolizer::Module m;
  m.path = "/usr/lib/libfoo.so";
  m.bias = 0x7f0000000000;
  m.build_id = "abcdef";
  m.segments = {{0x7f0000000000, 0x7f0000001000, 0, 5}, {0x7f0000002000, 0x7f0000003000, 0x2000, 6}};
  ModuleRecord t = module_record(m);
  EXPECT_EQ(t.path, m.path);
  EXPECT_EQ(t.bias, m.bias);
  EXPECT_EQ(t.build_id, "abcdef");
  ASSERT_EQ(t.ranges.size(), 2u);
  EXPECT_EQ(t.ranges[1], std::make_pair(uint64_t{0x7f0000002000}, uint64_t{0x7f0000003000}));
  symbolizer::Module back = module_from_record(t);
  EXPECT_EQ(back.path, m.path);
  EXPECT_EQ(back.bias, m.bias);
  EXPECT_EQ(back.build_id, m.build_id);
  ASSERT_EQ(back.segments.size(), 2u);
  EXPECT_EQ(back.segments[0].start, m.segments[0].start);
  EXPECT_EQ(back.segments[1].end, m.segments[1].end);
}

}  // namespace
}  // namespace cdsa::report
