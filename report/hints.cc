#include "report/hints.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "base/identifier.h"
#include "base/path.h"
#include "report/graph_hint.h"
#include "report/trace_enums.h"

namespace cdsa::report {
namespace {

// The assert conditions are the CUDA_KERNEL_ASSERT texts of aten/src/ATen/native/cuda/*.cu as the
// device prints them (the macro stringifies its argument after expansion, so Loss.cu's
// CHECK_INDEX_IN_CLASS(t, n_classes) prints `t >= 0 && t < n_classes`).
constexpr const char* kNllOp = "cross_entropy / nll_loss";
constexpr const char* kNllCause =
    "a label is outside [0, num_classes): num_classes itself (1-indexed data?), a negative label that is not "
    "ignore_index (default -100), or 255 from a mask";
constexpr const char* kNllCheck = "assert (((y >= 0) & (y < num_classes)) | (y == ignore_index)).all() before the loss";
constexpr const char* kNll2dOp = "cross_entropy / nll_loss on a 2-D target";
constexpr const char* kNll2dCause = "a mask pixel is outside [0, num_classes), usually 255 (void)";
constexpr const char* kNll2dCheck = "pass ignore_index=255 to the loss, or compare mask.unique() with num_classes";
constexpr const char* kEmbOp = "embedding / index_select";
constexpr const char* kEmbCause =
    "an id is >= num_embeddings (a tokenizer grown without model.resize_token_embeddings(len(tokenizer))?)";
constexpr const char* kEmbCheck = "assert 0 <= ids.min() and ids.max() < emb.num_embeddings before the lookup";
constexpr const char* kMultOp = "torch.multinomial";
constexpr const char* kMultCause = "a probability row has inf, NaN or a negative value, or sums to 0";
constexpr const char* kMultCheck = "assert torch.isfinite(p).all() and (p >= 0).all() and (p.sum(-1) > 0).all()";

const std::vector<HintRow> kTable = {
    {kNll2dOp, "cur_target >= 0 && cur_target < n_classes", "nll_loss2d", kNll2dCause, kNll2dCheck},
    {kNll2dOp, "", "nll_loss2d", kNll2dCause, kNll2dCheck},
    {kNllOp, "t >= 0 && t < n_classes", "", kNllCause, kNllCheck, true},
    {kNllOp, "cur_target >= 0 && cur_target < n_classes", "", kNllCause, kNllCheck, true},
    {kNllOp, "", "nll_loss", kNllCause, kNllCheck, true},
    {kEmbOp, "srcIndex < srcSelectDimSize", "", kEmbCause, kEmbCheck},
    {kEmbOp, "", "indexSelect", kEmbCause, kEmbCheck},
    {"index_add_ / index_copy_", "dstIndex < dstAddDimSize", "", "an index is >= the size of the dim written to",
     "assert 0 <= index.min() and index.max() < self.size(dim)"},
    {"gather / scatter / scatter_add_", "idx_dim >= 0 && idx_dim < index_size", "",
     "an index is outside [0, t.size(dim)) of the tensor indexed",
     "assert 0 <= index.min() and index.max() < t.size(dim)"},
    {"tensor indexing (t[idx], index_put_)", "index < sizes[i]", "",
     "an index is outside [-size, size) of the dim it indexes",
     "assert -t.size(d) <= idx.min() and idx.max() < t.size(d)"},
    {"binary_cross_entropy", "input_val >= zero && input_val <= one", "",
     "an input is outside [0, 1]: logits given to BCELoss, or NaN",
     "use BCEWithLogitsLoss on logits (or sigmoid first)"},
    {"binary_cross_entropy", "target_val >= zero && target_val <= one", "",
     "a target is outside [0, 1] (class ids where 0/1 labels belong?)", "assert ((y >= 0) & (y <= 1)).all()"},
    {kMultOp, "", "Multinomial", kMultCause, kMultCheck},
    {kMultOp, "", "renormRows", kMultCause, kMultCheck},
    {"ctc_loss", "", "ctc_loss", "a target label is out of range or blank, or a target is longer than its input",
     "assert (targets != blank).all() and targets.max() < C and (target_lengths <= input_lengths).all()"},
};

bool has(const std::string& s, const char* part) { return *part && s.find(part) != std::string::npos; }


bool is_fault_without_text(int code) {
  // 700 illegal address, 714 hardware stack error, 715 illegal instruction, 716 misaligned address,
  // 717 invalid address space, 718 invalid PC, 719 launch failure.
  return code == 700 || (code >= 714 && code <= 719);
}

}  // namespace

const std::vector<HintRow>& hint_table() { return kTable; }

const HintRow* find_hint(const std::string& condition, const std::string& kernel) {
  for (const auto& row : kTable) {
    bool ok;
    if (!condition.empty())
      ok = (!*row.condition || has(condition, row.condition)) && (!*row.kernel || has(kernel, row.kernel)) &&
           (*row.condition || *row.kernel);
    else
      ok = has(kernel, row.kernel);
    if (ok) return &row;
  }
  return nullptr;
}

std::string shell_quote(const std::string& w) {
  if (w.empty()) return "''";
  bool plain = true;
  for (char ch : w)
    if (!(isalnum(static_cast<unsigned char>(ch)) || strchr("@%+=:,./_-", ch))) plain = false;
  if (plain) return w;
  std::string q = "'";
  for (char ch : w) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string kernel_identifier(const std::string& kernel) {
  if (kernel.compare(0, 2, "_Z") == 0) return kernel;
  const std::string_view id = base::function_identifier(kernel);
  return id.empty() ? kernel : std::string(id);
}

bool is_pytorch_module(const std::string& path) {
  const std::string name = base::basename_of(path);
  return name.compare(0, 14, "libc10_cuda.so") == 0 || name.compare(0, 16, "libtorch_cuda.so") == 0;
}

std::string sanitizer_command(const std::string& kernel, uint64_t nth, const std::vector<std::string>& argv,
                              bool pytorch) {
  std::string cmd;
  // PyTorch's caching allocator hides out-of-bounds accesses inside its pooled blocks from memcheck.
  if (pytorch) cmd += "PYTORCH_NO_CUDA_MEMORY_CACHING=1 ";
  cmd += "compute-sanitizer --tool memcheck --kernel-name " + shell_quote("kns=" + kernel);
  if (nth > 1) cmd += fmt::format(" --launch-skip {}", nth - 1);
  cmd += " --launch-count 1 --";
  for (const auto& a : argv) cmd += " " + shell_quote(a);
  return cmd;
}

void add_hints(FaultReport& r, const HintContext& ctx) {
  add_graph_replay_hint(r);  // a replay of a known framework: how to rerun without graphs (report/graph_hint.h)
  const Launch* failing =
      r.attribution == Attribution::Exact && r.candidates.size() == 1 ? &r.candidates.front().launch : nullptr;
  if (failing && failing->kind.empty()) failing = nullptr;  // the record was overwritten
  const base::DeviceAssert* first = r.device_asserts.empty() ? nullptr : &r.device_asserts.front();
  bool text = first && !first->condition.empty();  // a line the device printed for an assert()
  if (r.code == 710) {
    // The table is ATen's asserts: PyTorch's advice, for a PyTorch program only (a kernel of the same name in another
    // program is no cross_entropy).
    if (!ctx.pytorch) return;
    std::string kernel = failing ? failing->kernel : (text ? first->function : std::string());
    const HintRow* row = find_hint(text ? first->condition : std::string(), kernel);
    if (row) {
      r.hints.push_back(fmt::format("{}: {}; check: {}", row->op, row->cause, row->check));
    }
    if (row && row->thread_is_element && text && first->has_position && first->block[0] == 0 && first->block[1] == 0 &&
        first->block[2] == 0 && first->thread[1] == 0 && first->thread[2] == 0)
      r.hints.push_back(fmt::format(
          "the device named block [0,0,0], thread [{},0,0]: in a small batch that is usually the bad element's "
          "position (index {}); this holds only in small batches.",
          first->thread[0], first->thread[0]));
    return;
  }
  if (!is_fault_without_text(r.code) || !failing || failing->kind == trace_enum::LaunchKind::graph || failing->kernel.empty()) return;
  // compute-sanitizer's --kernel-name kns= matches a substring of the (mangled) name and counts, for
  // --launch-skip, only launches that match: count what it will count, up to the failing launch.
  // The report's kernel names are demangled: filter on the bare identifier, which the mangled name contains.
  const std::string ident = kernel_identifier(failing->kernel);
  uint64_t nth = 0;
  for (const auto& l : ctx.launches)
    if (!l.captured && l.kind != trace_enum::LaunchKind::graph && l.seq <= failing->seq && l.kernel.find(ident) != std::string::npos) ++nth;
  if (nth == 0) nth = 1;
  r.hints.push_back(fmt::format(
      "no assert text; for the faulting thread and address, re-run only this launch under compute-sanitizer: {}",
      sanitizer_command(ident, nth, ctx.argv, ctx.pytorch)));
  if (!ctx.launches_complete)
    r.hints.push_back(fmt::format(
        "the launch count {} only covers the {} launches cdsa kept (CDSA_RING_SIZE): if that kernel ran earlier, "
        "raise --launch-skip or CDSA_RING_SIZE.",
        nth, ctx.launches.size()));
}

}  // namespace cdsa::report
