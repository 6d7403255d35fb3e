#include "report/graph_hint.h"

#include <string_view>

#include "report/trace_enums.h"

namespace cdsa::report {
namespace {

bool has(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

bool is_torch(std::string_view path) {
  return has(path, "/torch/") || has(path, "libtorch") || has(path, "libc10_cuda");
}
bool is_xla(std::string_view path) {
  return has(path, "/jax/") || has(path, "/jaxlib/") || has(path, "xla_extension") || has(path, "jax_plugins") ||
         has(path, "xla_cuda") || has(path, "pjrt") || has(path, "libtensorflow");
}

}  // namespace

GraphFramework graph_framework(const CallStack& stack) {
  bool torch = false, xla = false;
  for (const auto& f : stack.python) torch |= is_torch(f.file), xla |= is_xla(f.file);
  for (const auto& f : stack.native) torch |= is_torch(f.module), xla |= is_xla(f.module);
  if (torch == xla) return GraphFramework::Unknown;  // neither, or both: say nothing rather than the wrong one
  return torch ? GraphFramework::PyTorch : GraphFramework::Xla;
}

void add_graph_replay_hint(FaultReport& r) {
  for (const auto& c : r.candidates) {
    if (c.launch.kind != trace_enum::LaunchKind::graph) continue;
    switch (graph_framework(c.stack)) {
      case GraphFramework::PyTorch:
        r.hints.push_back(
            "the fault is in a CUDA graph replay: to have each kernel launched on its own (and its line named), rerun "
            "without graphs: TORCHINDUCTOR_CUDAGRAPHS=0 for torch.compile (mode=\"reduce-overhead\"), or skip the "
            "torch.cuda.graphs capture (torch.cuda.graph / CUDAGraph.replay / make_graphed_callables) in your code");
        return;
      case GraphFramework::Xla:
        r.hints.push_back(
            "the fault is in a CUDA graph replay (XLA command buffers): to have each kernel launched on its own (and "
            "its op named), rerun with XLA_FLAGS=--xla_gpu_enable_command_buffer= (empty: no command buffers)");
        return;
      default:
        break;
    }
  }
}

}  // namespace cdsa::report
