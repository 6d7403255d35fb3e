// report/autograd.h: naming the autograd node of an engine-thread launch and listing forward candidates.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "report/autograd.h"
#include "report/trace.h"
#include "report/trace_reader.h"
#include "tests/unit/fixtures/report_fixtures.h"

namespace cdsa::report {
namespace {

using fixtures::exact_report;
using fixtures::expect_each;
using fixtures::kernel_launch;

ResolvedFrame nf(const std::string& function) { return fixtures::native_frame(function, "/x/libtorch_cuda.so"); }

TEST(Autograd, NamesTheNodeFromItsNativeFrames) {
  CallStack st;
  st.native = {nf("cuLaunchKernel"), nf("at::native::embedding_dense_backward_cuda(at::Tensor const&)"),
               nf("torch::autograd::generated::EmbeddingBackward0::apply(std::vector<at::Tensor, "
                  "std::allocator<at::Tensor> >&&)"),
               nf("torch::autograd::Node::operator()(std::vector<at::Tensor>&&)"),
               nf("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)")};
  EXPECT_EQ(autograd_node_of(st), "EmbeddingBackward0");
  CallStack forward;
  forward.native = {nf("cuLaunchKernel"), nf("at::native::embedding(at::Tensor const&, at::Tensor const&)")};
  EXPECT_EQ(autograd_node_of(forward), "");
  CallStack other;
  other.native = {nf("torch::autograd::Engine::apply"), nf("MyBackwardHelper::apply")};  // not "<Name>Backward<N>"
  EXPECT_EQ(autograd_node_of(other), "");
}

TEST(Autograd, TheForwardOperatorOfANode) {
  expect_each(forward_op_of, {{"EmbeddingBackward0", "embedding"},
                              {"NllLossBackward0", "nll_loss"},
                              {"IndexSelectBackward0", "index_select"},
                              {"NllLoss2DBackward0", "nll_loss2d"},
                              {"LogSoftmaxBackward1", "log_softmax"},
                              {"Embedding", ""}});
}

TEST(Autograd, AForwardLaunchNamesTheOperatorAsAnIdentifier) {
  Launch l;
  CallStack st;
  st.native = {nf("at::native::embedding(at::Tensor const&, at::Tensor const&)")};
  EXPECT_TRUE(launch_runs_op(l, st, "embedding"));
  st.native = {nf("at::native::embedding_dense_backward_cuda(at::Tensor const&)")};
  EXPECT_FALSE(launch_runs_op(l, st, "embedding"));  // the backward, not the forward
  st.native = {nf("my::embeddings_table_lookup()")};
  EXPECT_FALSE(launch_runs_op(l, st, "embedding"));
  st.native = {nf("at::_ops::nll_loss_forward::call(at::Tensor const&)")};
  EXPECT_TRUE(launch_runs_op(l, st, "nll_loss"));
  st.native.clear();
  l.kernel = "nll_loss_forward_reduce_cuda_kernel_2d";
  EXPECT_TRUE(launch_runs_op(l, st, "nll_loss"));
  l.kernel = "nll_loss_backward_reduce_cuda_kernel_2d";
  EXPECT_FALSE(launch_runs_op(l, st, "nll_loss"));
  EXPECT_FALSE(launch_runs_op(l, st, ""));
}

struct Sample {
  FaultReport report;
  std::vector<Launch> launches;
  std::map<uint32_t, CallStack> stacks;
};

// seq 1, 3: embedding forward launches from two Python lines; 2: another op; 4: embedding again from the
// line of seq 1; 5: the backward launch on the engine thread (failing); 6: a forward launch after it.
Sample sample() {
  Sample s;
  auto py_stack = [](int line, const char* native) {
    CallStack st;
    PyFrame p;
    p.file = "train.py";
    p.function = "forward";
    p.line = line;
    st.python = {p};
    st.native = {nf(native)};
    return st;
  };
  s.stacks[10] = py_stack(12, "at::native::embedding(at::Tensor const&, at::Tensor const&)");
  s.stacks[11] = py_stack(13, "at::native::linear(at::Tensor const&)");
  s.stacks[12] = py_stack(14, "at::native::embedding(at::Tensor const&, at::Tensor const&)");
  s.stacks[13].native = {nf("torch::autograd::generated::EmbeddingBackward0::apply(std::vector<at::Tensor>&&)")};
  uint32_t ids[] = {10, 11, 12, 10, 13, 12};
  for (uint64_t seq = 1; seq <= 6; ++seq) {
    Launch l = kernel_launch(seq, seq == 5 ? "embedding_backward_kernel" : "indexSelectSmallIndex");
    l.stack_id = ids[seq - 1];
    s.launches.push_back(l);
  }
  s.report = exact_report(700, "embedding_backward_kernel", 5);
  s.report.candidates[0].launch = s.launches[4];
  s.report.candidates[0].stack = s.stacks[13];
  return s;
}

TEST(Autograd, ListsTheMostRecentForwardLaunchesBeforeTheFailingOneAsCandidates) {
  Sample s = sample();
  add_autograd_candidates(s.report, s.launches, [&](uint32_t id) -> const CallStack* {
    auto it = s.stacks.find(id);
    return it == s.stacks.end() ? nullptr : &it->second;
  });
  const Candidate& c = s.report.candidates[0];
  EXPECT_EQ(c.autograd_node, "EmbeddingBackward0");
  ASSERT_EQ(c.forward_candidates.size(), 2u);
  EXPECT_EQ(c.forward_candidates[0].launch.seq, 4u);  // newest first, one per launch site
  EXPECT_EQ(c.forward_candidates[0].stack.python[0].line, 12);
  EXPECT_EQ(c.forward_candidates[1].launch.seq, 3u);
  EXPECT_EQ(c.forward_candidates[1].stack.python[0].line, 14);

  std::string text = format_report_text(s.report);
  EXPECT_NE(text.find("running the backward node EmbeddingBackward0"), std::string::npos) << text;
  EXPECT_NE(text.find("CANDIDATES, not certain"), std::string::npos) << text;
  EXPECT_NE(text.find("  - candidate: kernel indexSelectSmallIndex"), std::string::npos) << text;
  EXPECT_NE(text.find("      File \"train.py\", line 12, in forward"), std::string::npos) << text;

  // The trace keeps them: read back, the same text.
  TraceData t;
  t.has_fault = true;
  t.reason = "fault";
  t.report = s.report;
  base::StatusOr<TraceFile> tf = parse_trace(trace_to_json(t));
  ASSERT_TRUE(tf.ok()) << tf.status().message();
  EXPECT_EQ(format_report_text(tf->data.report), text);
  EXPECT_EQ(tf->data.report.candidates[0].forward_candidates.size(), 2u);
}

TEST(Autograd, ALaunchWithPythonFramesIsLeftAlone) {
  Sample s = sample();
  s.report.candidates[0].stack.python.push_back(PyFrame{"train.py", "backward_hook", 3, ""});
  add_autograd_candidates(s.report, s.launches, [&](uint32_t id) { return &s.stacks[id]; });
  EXPECT_EQ(s.report.candidates[0].autograd_node, "");
  EXPECT_TRUE(s.report.candidates[0].forward_candidates.empty());
}

TEST(Autograd, NoForwardLaunchRecordedSaysSo) {
  Sample s = sample();
  add_autograd_candidates(s.report, s.launches, [&](uint32_t) -> const CallStack* { return nullptr; });
  EXPECT_EQ(s.report.candidates[0].autograd_node, "EmbeddingBackward0");
  EXPECT_TRUE(s.report.candidates[0].forward_candidates.empty());
  EXPECT_NE(format_report_text(s.report).find("No recent forward launch of that operator"), std::string::npos);
}

}  // namespace
}  // namespace cdsa::report
