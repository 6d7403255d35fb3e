// Launches by PyTorch's autograd engine: its device threads run backward nodes with no Python
// frames. The node is named from the native frames (the generated
// `torch::autograd::generated::EmbeddingBackward0::apply` -> "EmbeddingBackward0"); the line
// that made the op is looked for among the most recent forward launches of the same operator
// that have Python frames, and listed as candidates, never as certain.
//
// Forward operator of a node: the name without its "Backward<N>" suffix, snake_cased
// (EmbeddingBackward0 -> embedding, NllLossBackward0 -> nll_loss, IndexSelectBackward0 ->
// index_select). A launch is a forward launch of it when one of its native frames' names, or
// its kernel's name, has an identifier equal to the operator or starting with "<op>_"
// (at::native::embedding, at::_ops::nll_loss_forward::call, nll_loss_forward_reduce_cuda_kernel_2d),
// it has Python frames, and it was made before the failing launch.
//
// Contract: pure functions over values; no I/O, no globals; allocate.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "report/fault_report.h"

namespace cdsa::report {

// The autograd node the stack runs ("" when none): the innermost frame naming
// `<Name>Backward<N>::apply` (in torch::autograd::generated or any namespace).
std::string autograd_node_of(const CallStack& st);
// "EmbeddingBackward0" -> "embedding"; "" when the name does not end in Backward<N>.
std::string forward_op_of(const std::string& node);
// The launch's native frames or kernel name mention `op` as an identifier (see above).
bool launch_runs_op(const Launch& l, const CallStack& st, const std::string& op);

// For each candidate without Python frames whose stack runs an autograd node: sets
// autograd_node and lists up to `max` forward candidates, newest first. `launches` are the
// records kept (oldest first); `stack_of` gives a launch's stack by stack id (nullptr: unknown). At most
// 4096 distinct launch stacks are examined, newest first.
void add_autograd_candidates(FaultReport& r, const std::vector<Launch>& launches,
                             const std::function<const CallStack*(uint32_t)>& stack_of, size_t max = 3);

}  // namespace cdsa::report
