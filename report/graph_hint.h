// The hint for a fault in a CUDA graph replay: how to run the same code without graphs, when the framework that
// replays them is known from the replay's stack, so that each kernel is launched on its own and cdsa (or
// CUDA_LAUNCH_BLOCKING=1) names its line.
//
// Contract: a pure function over the report; no I/O; allocates.
#pragma once

#include <string>

#include "report/fault_report.h"

namespace cdsa::report {

enum class GraphFramework { Unknown, PyTorch, Xla };

// The framework whose frames are in `stack` (Python files under torch/ or jax/, libtorch, jaxlib, XLA's PJRT plugin).
GraphFramework graph_framework(const CallStack& stack);
// Adds to r.hints, for a candidate that is a graph replay of a known framework, how to rerun without graphs.
void add_graph_replay_hint(FaultReport& r);

}  // namespace cdsa::report
