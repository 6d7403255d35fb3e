// The graph-replay hint (report/graph_hint.h): named for a known framework only, never a guess.
#include <gtest/gtest.h>

#include "report/graph_hint.h"

namespace cdsa::report {
namespace {

FaultReport replay_with(std::vector<std::string> python_files, std::vector<std::string> modules) {
  FaultReport r;
  Candidate c;
  c.launch.kind = "graph";
  for (auto& f : python_files) c.stack.python.push_back({f, "replay", 10, ""});
  for (auto& m : modules) {
    ResolvedFrame f;
    f.module = m;
    c.stack.native.push_back(f);
  }
  r.candidates.push_back(c);
  return r;
}

TEST(GraphHint, PyTorchReplayNamesTorchInductorAndTheGraphsModule) {
  FaultReport r = replay_with({"/venv/lib/python3.12/site-packages/torch/cuda/graphs.py", "train.py"}, {});
  add_graph_replay_hint(r);
  ASSERT_EQ(r.hints.size(), 1u);
  EXPECT_NE(r.hints[0].find("TORCHINDUCTOR_CUDAGRAPHS=0"), std::string::npos);
  EXPECT_NE(r.hints[0].find("torch.cuda.graph"), std::string::npos);
}

TEST(GraphHint, XlaReplayNamesTheCommandBufferFlag) {
  FaultReport r = replay_with({"/venv/lib/python3.12/site-packages/jax/_src/interpreters/pxla.py"},
                              {"/venv/lib/python3.12/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so"});
  add_graph_replay_hint(r);
  ASSERT_EQ(r.hints.size(), 1u);
  EXPECT_NE(r.hints[0].find("--xla_gpu_enable_command_buffer="), std::string::npos);
}

TEST(GraphHint, UnknownOrMixedFrameworksAndPlainLaunchesGetNone) {
  for (FaultReport r : {replay_with({"train.py"}, {"/usr/lib/libfoo.so"}),
                        replay_with({"/x/torch/cuda/graphs.py", "/x/jax/_src/api.py"}, {})}) {
    add_graph_replay_hint(r);
    EXPECT_TRUE(r.hints.empty());
  }
  FaultReport plain = replay_with({"/x/torch/nn/functional.py"}, {});
  plain.candidates[0].launch.kind = "kernel";
  add_graph_replay_hint(plain);
  EXPECT_TRUE(plain.hints.empty());
}

}  // namespace
}  // namespace cdsa::report
