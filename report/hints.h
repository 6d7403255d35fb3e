// What a fault likely means and the next step: one short line per hint, kept in the report
// model (FaultReport::hints) so the trace file keeps them and `cdsa report` prints the same.
//
//   - A device assert: the row of the table in hints.cc whose assert text (as PyTorch's
//     CUDA_KERNEL_ASSERT prints it) and kernel match names the likely cause and the check to
//     add; with no assert text captured, a 710 is matched on the failing kernel's name alone.
//     The thread the device printed is mentioned as the bad element's position only with the
//     caveat that this holds in small batches.
//   - A fault without assert text (700, 714-719): the compute-sanitizer command that re-runs
//     only the failing launch (kernel-name filter, launch skip/count of the n-th launch of that
//     kernel), so the user gets the faulting thread and address without a whole run under it.
//
// Contract: pure functions over values; no I/O, no globals; allocate.
#pragma once

#include <string>
#include <vector>

#include "report/fault_report.h"

namespace cdsa::report {

struct HintRow {
  const char* op;                  // what the user called, e.g. "cross_entropy / nll_loss"
  const char* condition;           // a substring of the assert's condition ("" : match on the kernel only)
  const char* kernel;              // a substring of the kernel name ("" : any kernel)
  const char* cause;               // the likely cause
  const char* check;               // the check to add
  bool thread_is_element = false;  // in a small batch, the device's thread index is the bad element's position
};
// The table (hints.cc), most specific rows first.
const std::vector<HintRow>& hint_table();
// The first row matching the assert condition (may be empty) and kernel name (may be empty).
const HintRow* find_hint(const std::string& condition, const std::string& kernel);

struct HintContext {
  std::vector<Launch> launches;    // the launch records kept (oldest first)
  bool launches_complete = false;  // they start at the process's first launch
  std::vector<std::string> argv;   // the process's command line
  // PyTorch is in the process (its libc10_cuda.so is loaded): only then its advice (the ATen asserts' causes and
  // checks, PYTORCH_NO_CUDA_MEMORY_CACHING for compute-sanitizer), which would mislead any other program.
  bool pytorch = false;
};

// Fills r.hints from r (code, the device's parsed assert lines, the failing launch) and the context.
void add_hints(FaultReport& r, const HintContext& ctx);

// The bare identifier of a kernel name, mangled or demangled: "void at::native::k<float>(float*)" -> "k";
// "_Z1kPf" stays as it is. compute-sanitizer's `kns=` matches a substring of the mangled name, which holds the
// identifier, so the filter built from it matches however the name was printed.
std::string kernel_identifier(const std::string& kernel);
// The compute-sanitizer command re-running only the n-th launch (1-based) of `kernel`; with `pytorch`, the caching
// allocator off (it hides out-of-bounds accesses inside its pooled blocks from memcheck).
std::string sanitizer_command(const std::string& kernel, uint64_t nth, const std::vector<std::string>& argv,
                              bool pytorch);
// Whether one of these loaded objects is PyTorch's CUDA library (libc10_cuda.so, libtorch_cuda.so).
bool is_pytorch_module(const std::string& path);
// A word quoted for a POSIX shell where needed.
std::string shell_quote(const std::string& word);

}  // namespace cdsa::report
