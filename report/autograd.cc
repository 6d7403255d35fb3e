#include "report/autograd.h"

#include <cctype>
#include <set>

namespace cdsa::report {
namespace {

constexpr size_t kMaxStacksExamined = 4096;

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The identifiers in a (demangled) name: "at::_ops::nll_loss_forward::call(at::Tensor const&)" ->
// at, _ops, nll_loss_forward, call, at, Tensor, const.
std::vector<std::string> identifiers(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && !ident_char(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && ident_char(s[j])) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

bool names_op(const std::string& name, const std::string& op) {
  for (const auto& id : identifiers(name))
    if (id == op || (id.size() > op.size() && id.compare(0, op.size(), op) == 0 && id[op.size()] == '_')) {
      // Not the backward of the op (embedding_dense_backward, nll_loss_backward_reduce_cuda_kernel_2d).
      if (id.find("backward") != std::string::npos) continue;
      return true;
    }
  return false;
}

// "EmbeddingBackward0" when `id` is one (letters, then "Backward", then digits only).
bool is_node_name(const std::string& id) {
  size_t b = id.rfind("Backward");
  if (b == std::string::npos || b == 0 || !std::isupper(static_cast<unsigned char>(id[0]))) return false;
  for (size_t i = b + 8; i < id.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(id[i]))) return false;
  return true;
}

}  // namespace

std::string autograd_node_of(const CallStack& st) {
  for (const auto& f : st.native) {  // innermost first
    std::vector<std::string> ids = identifiers(f.function.substr(0, f.function.find('(')));
    for (size_t i = 0; i + 1 < ids.size(); ++i)
      if (ids[i + 1] == "apply" && is_node_name(ids[i])) return ids[i];
  }
  return {};
}

std::string forward_op_of(const std::string& node) {
  if (!is_node_name(node)) return {};
  std::string camel = node.substr(0, node.rfind("Backward"));
  std::string op;
  for (size_t i = 0; i < camel.size(); ++i) {
    char c = camel[i];
    if (std::isupper(static_cast<unsigned char>(c))) {
      if (i > 0 && std::islower(static_cast<unsigned char>(camel[i - 1]))) op += '_';
      op += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      op += c;
    }
  }
  return op;
}

bool launch_runs_op(const Launch& l, const CallStack& st, const std::string& op) {
  if (op.empty()) return false;
  if (names_op(l.kernel, op)) return true;
  for (const auto& f : st.native)
    if (names_op(f.function, op)) return true;
  return false;
}

void add_autograd_candidates(FaultReport& r, const std::vector<Launch>& launches,
                             const std::function<const CallStack*(uint32_t)>& stack_of, size_t max) {
  for (auto& c : r.candidates) {
    if (!c.stack.python.empty()) continue;
    std::string node = autograd_node_of(c.stack);
    if (node.empty()) continue;
    c.autograd_node = node;
    std::string op = forward_op_of(node);
    std::set<uint32_t> seen_stacks;  // one candidate per launch site
    for (auto it = launches.rbegin(); it != launches.rend() && c.forward_candidates.size() < max; ++it) {
      if (it->seq >= c.launch.seq || it->stack_id == 0xffffffffu || it->captured) continue;
      if (!seen_stacks.insert(it->stack_id).second) continue;
      if (seen_stacks.size() > kMaxStacksExamined) break;  // each one is symbolized: bound the work at the fault
      const CallStack* st = stack_of(it->stack_id);
      if (!st || st->python.empty() || !launch_runs_op(*it, *st, op)) continue;
      LaunchWithStack forward;
      forward.launch = *it;
      forward.stack = *st;
      c.forward_candidates.push_back(std::move(forward));
    }
  }
}

}  // namespace cdsa::report
