// report/hints.h: the table of what a device assert means, keyed on the real assert texts, and the
// compute-sanitizer command for faults without text.
#include <gtest/gtest.h>

#include <string>

#include "report/hints.h"
#include "report/trace.h"
#include "tests/unit/fixtures/report_fixtures.h"

namespace cdsa::report {
namespace {

using fixtures::exact_report;
using fixtures::expect_each;
using fixtures::kernel_launch;

// As the device printed them (PyTorch 2.x; the seed's lines and others seen in the wild).
const char* kNll =
    "../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: "
    "[2,0,0] Assertion `t >= 0 && t < n_classes` failed.";
const char* kEmbedding =
    "../aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [0,0,0], thread: [64,0,0] "
    "Assertion `srcIndex < srcSelectDimSize` failed.";
const char* kGather =
    "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:115: operator(): block: [0,0,0], thread: [1,0,0] "
    "Assertion `idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\"` failed.";
const char* kIndex =
    "../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [25778,0,0], thread: [37,0,0] Assertion "
    "`-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.";

base::DeviceAssert parsed(const char* line) {
  base::DeviceAssert a;
  EXPECT_TRUE(base::parse_device_assert(line, &a)) << line;
  return a;
}

const char* op_for(const char* line, const std::string& kernel) {
  const HintRow* row = find_hint(parsed(line).condition, kernel);
  return row ? row->op : "(none)";
}

TEST(Hints, ParsesTheDevicesAssertLine) {
  base::DeviceAssert a = parsed(kNll);
  EXPECT_EQ(a.function, "nll_loss_forward_reduce_cuda_kernel_2d");
  EXPECT_EQ(a.condition, "t >= 0 && t < n_classes");
  ASSERT_TRUE(a.has_position);
  EXPECT_EQ(a.thread[0], 2u);
  EXPECT_EQ(a.block[0], 0u);
  base::DeviceAssert g = parsed(kIndex);
  EXPECT_EQ(g.function, "operator()");
  EXPECT_EQ(g.block[0], 25778u);
  EXPECT_EQ(g.condition, "-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"");
  base::DeviceAssert none;
  EXPECT_FALSE(base::parse_device_assert("loss call returned", &none));
  EXPECT_FALSE(base::parse_device_assert("Assertion `unterminated", &none));
}

TEST(Hints, EachRealAssertTextNamesItsOperation) {
  EXPECT_STREQ(op_for(kNll, "nll_loss_forward_reduce_cuda_kernel_2d"), "cross_entropy / nll_loss");
  EXPECT_STREQ(op_for(kEmbedding, "indexSelectSmallIndex"), "embedding / index_select");
  EXPECT_STREQ(op_for(kGather, ""), "gather / scatter / scatter_add_");
  EXPECT_STREQ(op_for(kIndex, ""), "tensor indexing (t[idx], index_put_)");
  EXPECT_STREQ(op_for("x.cu:1: operator(): block: [0,0,0], thread: [0,0,0] Assertion `index >= -sizes[i] && index < "
                      "sizes[i] && \"index out of bounds\"` failed.",
                      ""),
               "tensor indexing (t[idx], index_put_)");
  EXPECT_STREQ(op_for("Loss.cu:90: operator(): block: [0,0,0], thread: [0,0,0] Assertion `input_val >= zero && "
                      "input_val <= one` failed.",
                      ""),
               "binary_cross_entropy");
  // The same condition in the 1-D no-reduce kernel and in nll_loss2d: the kernel decides.
  const char* cur =
      "x.cu:1: k: block: [0,0,0], thread: [3,0,0] Assertion `cur_target >= 0 && cur_target < n_classes` "
      "failed.";
  EXPECT_STREQ(op_for(cur, "nll_loss_forward_no_reduce_cuda_kernel"), "cross_entropy / nll_loss");
  EXPECT_STREQ(op_for(cur, "_ZN2at6native25nll_loss2d_forward_kernelIfEEvPT_"),
               "cross_entropy / nll_loss on a 2-D target");
  EXPECT_STREQ(
      op_for("x.cu:1: k: block: [0,0,0], thread: [0,0,0] Assertion `val >= zero` failed.", "sampleMultinomialOnce"),
      "torch.multinomial");
  EXPECT_STREQ(op_for("x.cu:1: k: block: [0,0,0], thread: [0,0,0] Assertion `foo < bar` failed.", "my_kernel"),
               "(none)");
}

TEST(Hints, WithoutAssertTextAnAssertIsMatchedOnTheKernelAlone) {
  EXPECT_STREQ(find_hint("", "nll_loss_forward_reduce_cuda_kernel_2d")->op, "cross_entropy / nll_loss");
  EXPECT_STREQ(
      find_hint("", "_ZN2at6native12_GLOBAL__N_121indexSelectSmallIndexIfljLi2ELi2ELin2EEEvNS_4cuda6detail")->op,
      "embedding / index_select");
  EXPECT_STREQ(find_hint("", "ctc_loss_log_alpha_gpu_kernel")->op, "ctc_loss");
  EXPECT_EQ(find_hint("", "illegal_address"), nullptr);
  EXPECT_EQ(find_hint("", ""), nullptr);
}

TEST(Hints, EveryRowIsCompleteAndReachableByItsOwnKeys) {
  for (const auto& row : hint_table()) {
    EXPECT_TRUE(*row.op && *row.cause && *row.check) << row.op;
    EXPECT_TRUE(*row.condition || *row.kernel) << row.op;
    const HintRow* found = find_hint(row.condition, row.kernel);
    ASSERT_NE(found, nullptr) << row.op;
    EXPECT_STREQ(found->op, row.op);
  }
}

HintContext in_pytorch() {
  HintContext ctx;
  ctx.pytorch = true;
  return ctx;
}

TEST(Hints, AnAssertGetsItsCauseAndCheckAndTheThreadOnlyWithTheSmallBatchCaveat) {
  FaultReport r = exact_report(710, "nll_loss_forward_reduce_cuda_kernel_2d", 1);
  r.device_asserts = {parsed(kNll)};
  add_hints(r, in_pytorch());
  ASSERT_EQ(r.hints.size(), 2u);
  // One line: the operation, the likely cause, the check to add.
  EXPECT_EQ(r.hints[0].rfind("cross_entropy / nll_loss: a label is outside [0, num_classes)", 0), 0u) << r.hints[0];
  EXPECT_NE(r.hints[0].find("1-indexed"), std::string::npos);
  EXPECT_NE(r.hints[0].find("ignore_index"), std::string::npos);
  EXPECT_NE(r.hints[0].find("; check: assert"), std::string::npos);
  EXPECT_NE(r.hints[1].find("thread [2,0,0]"), std::string::npos);
  EXPECT_NE(r.hints[1].find("(index 2)"), std::string::npos);
  EXPECT_NE(r.hints[1].find("only in small batches"), std::string::npos);

  // The embedding kernel's thread is not a batch position: no such line.
  FaultReport e = exact_report(710, "indexSelectSmallIndex", 1);
  e.device_asserts = {parsed(kEmbedding)};
  add_hints(e, in_pytorch());
  ASSERT_EQ(e.hints.size(), 1u);
  EXPECT_NE(e.hints[0].find("resize_token_embeddings"), std::string::npos);
  EXPECT_NE(e.hints[0].find("; check: assert 0 <= ids.min() and ids.max() < emb.num_embeddings"), std::string::npos);
}

// Issue 26: PyTorch's advice only where PyTorch is in the process. A kernel named like ATen's in another program
// (the sim's, a user's own nll kernel) gets no cross_entropy hint, and its sanitizer command no allocator variable.
TEST(Hints, PyTorchsAdviceOnlyForAProcessThatLoadedPyTorch) {
  FaultReport r = exact_report(710, "nll_loss_forward_reduce_cuda_kernel_2d", 1);
  r.device_asserts = {parsed(kNll)};
  add_hints(r, {});
  EXPECT_TRUE(r.hints.empty()) << r.hints.front();
  HintContext ctx;
  ctx.argv = {"/usr/bin/python3", "train.py"};
  ctx.launches = {kernel_launch(1, "illegal_address")};
  ctx.launches_complete = true;
  FaultReport f = exact_report(700, "illegal_address", 1);
  add_hints(f, ctx);
  ASSERT_EQ(f.hints.size(), 1u);
  EXPECT_EQ(f.hints[0].find("PYTORCH_NO_CUDA_MEMORY_CACHING"), std::string::npos) << f.hints[0];
  EXPECT_TRUE(is_pytorch_module("/opt/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so"));
  EXPECT_TRUE(is_pytorch_module("/x/libtorch_cuda.so"));
  EXPECT_FALSE(is_pytorch_module("/usr/lib/libc10.so"));
  EXPECT_FALSE(is_pytorch_module("/x/libcuda.so.1"));
}

TEST(Hints, AFaultWithoutTextGetsTheSanitizerCommandForTheNthLaunchOfItsKernel) {
  HintContext ctx;
  ctx.launches = {kernel_launch(1, "fill_f32"),        kernel_launch(2, "illegal_address"),
                  kernel_launch(3, "fill_f32"),        kernel_launch(4, "illegal_address"),
                  kernel_launch(5, "illegal_address"), kernel_launch(6, "illegal_address")};
  ctx.launches[2].captured = true;
  ctx.launches_complete = true;
  ctx.argv = {"/usr/bin/python3", "train.py", "--data", "my file.txt"};
  ctx.pytorch = true;
  FaultReport r = exact_report(700, "illegal_address", 5);
  add_hints(r, ctx);
  ASSERT_EQ(r.hints.size(), 1u) << r.hints.back();
  EXPECT_NE(r.hints[0].find("PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --kernel-name "
                            "kns=illegal_address --launch-skip 2 --launch-count 1 -- /usr/bin/python3 train.py "
                            "--data 'my file.txt'"),
            std::string::npos)
      << r.hints[0];

  // Records lost to the ring: the count may be low, and the hint says so.
  ctx.launches_complete = false;
  FaultReport first = exact_report(716, "illegal_address", 2);
  add_hints(first, ctx);
  ASSERT_EQ(first.hints.size(), 2u);
  EXPECT_NE(first.hints[0].find("--kernel-name kns=illegal_address --launch-count 1 --"), std::string::npos)
      << first.hints[0];
  EXPECT_NE(first.hints[1].find("CDSA_RING_SIZE"), std::string::npos);

  // Not proven which launch failed: no command that would check the wrong one.
  FaultReport amb = exact_report(700, "illegal_address", 5);
  amb.attribution = Attribution::Ambiguous;
  amb.candidates.push_back(amb.candidates.front());
  add_hints(amb, ctx);
  EXPECT_TRUE(amb.hints.empty());
  // A C++ program: no PyTorch allocator variable.
  EXPECT_EQ(sanitizer_command("k", 1, {"./prog"}, false),
            "compute-sanitizer --tool memcheck --kernel-name kns=k "
            "--launch-count 1 -- ./prog");
}

// The report prints demangled names; compute-sanitizer's kns= matches a substring of the mangled one
// (_Z14illegal_kernelPi): the filter is the bare identifier, which both contain.
TEST(Hints, TheSanitizerFilterIsTheKernelsIdentifier) {
  expect_each(
      kernel_identifier,
      {{"illegal_kernel(int*)", "illegal_kernel"},
       {"void at::native::(anonymous namespace)::nll_loss_kernel<float, long>(float*, long const*)", "nll_loss_kernel"},
       {"at::native::vectorized_elementwise_kernel", "vectorized_elementwise_kernel"},
       {"_Z14illegal_kernelPi", "_Z14illegal_kernelPi"},
       {"illegal_address", "illegal_address"}});

  HintContext ctx;
  ctx.launches = {kernel_launch(1, "illegal_kernel(int*)"), kernel_launch(2, "fill(float*)"),
                  kernel_launch(3, "illegal_kernel(int*)")};
  ctx.launches_complete = true;
  ctx.argv = {"./prog"};
  FaultReport r = exact_report(700, "illegal_kernel(int*)", 3);
  add_hints(r, ctx);
  ASSERT_EQ(r.hints.size(), 1u);
  EXPECT_NE(r.hints[0].find("--kernel-name kns=illegal_kernel --launch-skip 1 --launch-count 1 -- ./prog"),
            std::string::npos)
      << r.hints[0];
}

TEST(Hints, ShellQuoting) {
  EXPECT_EQ(shell_quote("train.py"), "train.py");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("kns=void k<int>(int*)"), "'kns=void k<int>(int*)'");
}

TEST(Hints, TheReportPrintsThemAndTheTraceKeepsThem) {
  FaultReport r = exact_report(710, "nll_loss_forward_reduce_cuda_kernel_2d", 1);
  r.device_asserts = {parsed(kNll)};
  add_hints(r, in_pytorch());
  std::string text = format_report_text(r);
  EXPECT_NE(text.find("cdsa: hint: cross_entropy / nll_loss: "), std::string::npos) << text;
  EXPECT_NE(report_to_json(r).find("\"hints\":[\"cross_entropy / nll_loss: "), std::string::npos);
}

}  // namespace
}  // namespace cdsa::report
