#include "report/hints.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

namespace cdsa {
namespace {

// The assert conditions are the CUDA_KERNEL_ASSERT texts of aten/src/ATen/native/cuda/*.cu as the
// device prints them (the macro stringifies its argument after expansion, so Loss.cu's
// CHECK_INDEX_IN_CLASS(t, n_classes) prints `t >= 0 && t < n_classes`).
const std::vector<HintRow> kTable = {
    {"cross_entropy / nll_loss on a 2-D target (segmentation)", "cur_target >= 0 && cur_target < n_classes",
     "nll_loss2d",
     "a target pixel is outside [0, num_classes): typically 255 (void/boundary) in a segmentation mask, or a mask "
     "whose values are not class ids",
     "pass ignore_index=255 (the mask's void value) to the loss, and compare mask.unique() with num_classes"},
    {"cross_entropy / nll_loss on a 2-D target (segmentation)", "", "nll_loss2d",
     "a target pixel is outside [0, num_classes): typically 255 (void/boundary) in a segmentation mask",
     "pass ignore_index=255 (the mask's void value) to the loss, and compare mask.unique() with num_classes"},
    {"cross_entropy / nll_loss", "t >= 0 && t < n_classes", "",
     "a class label is outside [0, num_classes): a label equal to num_classes (a 1-indexed dataset), a negative "
     "label that is not ignore_index (default -100), or 255 from a segmentation mask",
     "assert (((labels >= 0) & (labels < num_classes)) | (labels == ignore_index)).all() before the loss; "
     "labels - 1 for 1-indexed data, ignore_index=255 for masks",
     true},
    {"cross_entropy / nll_loss", "cur_target >= 0 && cur_target < n_classes", "",
     "a class label is outside [0, num_classes): a label equal to num_classes (a 1-indexed dataset), a negative "
     "label that is not ignore_index (default -100), or 255 from a segmentation mask",
     "assert (((labels >= 0) & (labels < num_classes)) | (labels == ignore_index)).all() before the loss; "
     "labels - 1 for 1-indexed data, ignore_index=255 for masks",
     true},
    {"cross_entropy / nll_loss", "", "nll_loss",
     "a class label is outside [0, num_classes): a label equal to num_classes (a 1-indexed dataset), a negative "
     "label that is not ignore_index (default -100), or 255 from a segmentation mask",
     "assert (((labels >= 0) & (labels < num_classes)) | (labels == ignore_index)).all() before the loss; "
     "labels - 1 for 1-indexed data, ignore_index=255 for masks",
     true},
    {"embedding / index_select", "srcIndex < srcSelectDimSize", "",
     "an index is >= the table's size: a token id >= num_embeddings, e.g. a tokenizer grown (added tokens) "
     "without model.resize_token_embeddings(len(tokenizer)), or an id past the vocabulary",
     "assert 0 <= ids.min() and ids.max() < emb.num_embeddings before the lookup"},
    {"embedding / index_select", "", "indexSelect",
     "an index is >= the table's size: a token id >= num_embeddings, e.g. a tokenizer grown (added tokens) "
     "without model.resize_token_embeddings(len(tokenizer)), or an id past the vocabulary",
     "assert 0 <= ids.min() and ids.max() < emb.num_embeddings before the lookup"},
    {"index_add_ / index_copy_", "dstIndex < dstAddDimSize", "", "an index is >= the size of the dimension written to",
     "assert 0 <= index.min() and index.max() < self.size(dim)"},
    {"gather / scatter / scatter_add_", "idx_dim >= 0 && idx_dim < index_size", "",
     "an index is outside [0, size) along dim of the tensor indexed (the input of gather, self of scatter)",
     "assert 0 <= index.min() and index.max() < t.size(dim) before the call"},
    {"tensor indexing (t[idx], index_put_, t[idx] = v)", "index < sizes[i]", "",
     "an index is outside [-size, size) of the dimension it indexes",
     "assert -t.size(d) <= idx.min() and idx.max() < t.size(d) before indexing"},
    {"binary_cross_entropy", "input_val >= zero && input_val <= one", "",
     "an input is outside [0, 1]: raw logits passed to BCELoss instead of probabilities, or a NaN from an "
     "earlier step",
     "use BCEWithLogitsLoss on logits (or sigmoid first); assert ((p >= 0) & (p <= 1)).all()"},
    {"binary_cross_entropy", "target_val >= zero && target_val <= one", "",
     "a target is outside [0, 1]: class ids or 255 where 0/1 labels were expected",
     "assert ((y >= 0) & (y <= 1)).all(); for class ids use cross_entropy"},
    {"torch.multinomial", "", "Multinomial",
     "a probability row holds inf, NaN or a negative value, or sums to 0 (softmax of inf/NaN logits, a "
     "temperature of 0, an all-masked row)",
     "assert torch.isfinite(probs).all() and (probs >= 0).all() and (probs.sum(-1) > 0).all() before sampling"},
    {"torch.multinomial", "", "renormRows",
     "a probability row holds inf, NaN or a negative value, or sums to 0 (softmax of inf/NaN logits, a "
     "temperature of 0, an all-masked row)",
     "assert torch.isfinite(probs).all() and (probs >= 0).all() and (probs.sum(-1) > 0).all() before sampling"},
    {"ctc_loss", "", "ctc_loss",
     "a target label is outside [0, num_classes) or is the blank label, or a target is longer than its input",
     "assert 0 <= targets.min() and targets.max() < C with no blank (0 by default) in the targets, and "
     "(target_lengths <= input_lengths).all()"},
};

bool has(const std::string& s, const char* part) { return *part && s.find(part) != std::string::npos; }

bool parse_dim3(const std::string& s, size_t at, unsigned out[3]) {
  // "[2,0,0]"
  if (at >= s.size() || s[at] != '[') return false;
  const char* p = s.c_str() + at + 1;
  for (int i = 0; i < 3; ++i) {
    char* end = nullptr;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p || v > 0xffffffffu) return false;
    out[i] = static_cast<unsigned>(v);
    p = end;
    if (*p != (i < 2 ? ',' : ']')) return false;
    ++p;
  }
  return true;
}

bool is_fault_without_text(int code) {
  // 700 illegal address, 714 hardware stack error, 715 illegal instruction, 716 misaligned address,
  // 717 invalid address space, 718 invalid PC, 719 launch failure.
  return code == 700 || (code >= 714 && code <= 719);
}

}  // namespace

bool parse_assert_line(const std::string& line, AssertLine* out) {
  *out = AssertLine{};
  size_t a = line.find("Assertion `");
  if (a == std::string::npos) return false;
  size_t c0 = a + strlen("Assertion `");
  size_t c1 = line.find("` failed", c0);
  if (c1 == std::string::npos) return false;
  out->condition = line.substr(c0, c1 - c0);
  // "FILE:LINE: FUNCTION: block: [..], thread: [..] Assertion"
  size_t b = line.find(": block: ");
  if (b != std::string::npos && b < a) {
    size_t f = line.rfind(": ", b - 1);
    out->function = f == std::string::npos ? line.substr(0, b) : line.substr(f + 2, b - f - 2);
    size_t t = line.find(", thread: ", b);
    out->has_position = t != std::string::npos && parse_dim3(line, b + strlen(": block: "), out->block) &&
                        parse_dim3(line, t + strlen(", thread: "), out->thread);
  }
  return true;
}

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

std::string sanitizer_command(const std::string& kernel, uint64_t nth, const std::vector<std::string>& argv) {
  std::string cmd;
  // PyTorch's caching allocator hides out-of-bounds accesses inside its pooled blocks from memcheck.
  if (!argv.empty()) {
    std::string exe = argv[0].substr(argv[0].rfind('/') == std::string::npos ? 0 : argv[0].rfind('/') + 1);
    if (exe.compare(0, 6, "python") == 0) cmd += "PYTORCH_NO_CUDA_MEMORY_CACHING=1 ";
  }
  cmd += "compute-sanitizer --tool memcheck --kernel-name " + shell_quote("kns=" + kernel);
  if (nth > 1) cmd += fmt::format(" --launch-skip {}", nth - 1);
  cmd += " --launch-count 1 --";
  for (const auto& a : argv) cmd += " " + shell_quote(a);
  return cmd;
}

void add_hints(FaultReport& r, const HintContext& ctx) {
  const LaunchText* failing =
      r.attribution == Attribution::Exact && r.candidates.size() == 1 ? &r.candidates.front().launch : nullptr;
  if (failing && failing->kind.empty()) failing = nullptr;  // the record was overwritten
  AssertLine first;
  bool text = !r.device_messages.empty() && parse_assert_line(r.device_messages.front(), &first);
  if (r.code == 710) {
    std::string kernel = failing ? failing->kernel : (text ? first.function : std::string());
    const HintRow* row = find_hint(text ? first.condition : std::string(), kernel);
    if (row) {
      r.hints.push_back(fmt::format("{}: {}.", row->op, row->cause));
      r.hints.push_back(fmt::format("check to add: {}.", row->check));
    }
    if (row && row->thread_is_element && text && first.has_position && first.block[0] == 0 && first.block[1] == 0 &&
        first.block[2] == 0 && first.thread[1] == 0 && first.thread[2] == 0)
      r.hints.push_back(fmt::format(
          "the device named block [0,0,0], thread [{},0,0]: in a small batch that is usually the bad element's "
          "position (index {}); this holds only in small batches.",
          first.thread[0], first.thread[0]));
    return;
  }
  if (!is_fault_without_text(r.code) || !failing || failing->kind == "graph" || failing->kernel.empty()) return;
  // compute-sanitizer's --kernel-name kns= matches a substring of the (mangled) name and counts, for
  // --launch-skip, only launches that match: count what it will count, up to the failing launch.
  uint64_t nth = 0;
  for (const auto& l : ctx.launches)
    if (!l.captured && l.kind != "graph" && l.seq <= failing->seq &&
        l.kernel.find(failing->kernel) != std::string::npos)
      ++nth;
  if (nth == 0) nth = 1;
  r.hints.push_back(fmt::format(
      "no assert text for this fault; re-run only the failing launch under compute-sanitizer for the faulting "
      "thread and address: {}",
      sanitizer_command(failing->kernel, nth, ctx.argv)));
  if (!ctx.launches_complete)
    r.hints.push_back(fmt::format(
        "the launch count {} only covers the {} launches cdsa kept (CDSA_RING_SIZE): if that kernel ran earlier, "
        "raise --launch-skip or CDSA_RING_SIZE.",
        nth, ctx.launches.size()));
}

}  // namespace cdsa
