#include "report/note_text.h"

#include <fmt/format.h>

#include "base/path.h"
#include "report/trace_enums.h"

namespace cdsa::report {
namespace {

bool is_cell(const std::string& file) { return file.rfind("Cell In[", 0) == 0; }

bool is_library_file(const std::string& f) {
  if (f.empty() || f[0] == '<') return true;  // <frozen runpy>, <string>
  if (f.find("/site-packages/") != std::string::npos || f.find("/dist-packages/") != std::string::npos) return true;
  // The standard library: .../lib/python3.X/<module>.py (site-packages excluded above).
  size_t p = f.find("/lib/python3.");
  return p != std::string::npos && f.find('/', p + 13) != std::string::npos;
}

std::string one_line(std::string s, size_t max) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

std::string python_site(const PyFrame& f) {
  std::string where = is_cell(f.file) ? fmt::format("{}, line {}", f.file, f.line)
                                      : fmt::format("{}:{}", base::basename_of(f.file), f.line);
  if (!f.source.empty()) where += ": " + one_line(f.source, 160);
  return where;
}

// The outermost notebook cell of a stack ("Cell In[3]"), or "".
std::string outer_cell(const CallStack& st) {
  for (auto it = st.python.rbegin(); it != st.python.rend(); ++it)
    if (is_cell(it->file)) return it->file;
  return {};
}

std::string trace_part(const FaultReport& r) {
  return r.trace_path.empty() ? std::string() : fmt::format("; trace {}", r.trace_path);
}

std::string what_launched(const Candidate& c) {
  std::string kernel = c.launch.kind == trace_enum::LaunchKind::graph ? fmt::format("a graph launch (graph {})", c.launch.graph_id)
                                                : "kernel " + one_line(c.launch.kernel.empty() ? "<unknown>"
                                                                                               : c.launch.kernel,
                                                                       120);
  std::string site = launch_site_text(c.stack);
  return site.empty() ? kernel : kernel + " launched at " + site;
}

std::string what_launched(const FaultReport& r) {
  return r.candidates.empty() ? std::string() : what_launched(r.candidates.front());
}

// An AMBIGUOUS verdict in one line, with no word of likelihood: candidates come oldest first, an order and not
// evidence. Two candidates named, then how many more; "or from work cdsa did not see" where the list may not hold
// the failing launch (candidates_complete false). One candidate alone is named as not proven.
std::string ambiguous_text(const FaultReport& r) {
  const size_t total = r.candidates.size();
  const char* unseen = r.candidates_complete ? "" : ", or from work cdsa did not see";
  if (total == 1) return fmt::format("{}, not proven{}", what_launched(r.candidates.front()), unseen);
  std::string named = what_launched(r.candidates[0]);
  if (r.candidates.size() > 1) named += "; " + what_launched(r.candidates[1]);
  if (total > 2) named += fmt::format("; and {} more", total - 2);
  return fmt::format("one of {} launches cdsa could not tell apart{}: {}", total, unseen, named);
}

}  // namespace

std::string launch_site_text(const CallStack& st) {
  for (const auto& f : st.python)
    if (is_cell(f.file) || !is_library_file(f.file)) return python_site(f);
  if (!st.python.empty()) return python_site(st.python.front());
  for (const auto& f : st.native) {
    if (f.function.empty() || base::basename_of(f.module).rfind("libcdsa", 0) == 0) continue;
    std::string s = one_line(f.function, 120);
    if (!f.file.empty()) s += fmt::format(" at {}:{}", base::basename_of(f.file), f.line);
    return s;
  }
  return {};
}

std::string traceback_note(const FaultReport& r) {
  std::string launched = what_launched(r);
  std::string rank = r.origin.rank >= 0 ? fmt::format(" on rank {}", r.origin.rank) : std::string();
  switch (r.attribution) {
    case Attribution::Exact:
      if (!launched.empty())
        return fmt::format("cdsa: the CUDA fault{} came from {} (cdsa's report above{})", rank, launched,
                           trace_part(r));
      break;
    case Attribution::Ambiguous:
      if (!launched.empty())
        return fmt::format("cdsa: the CUDA fault{} came from {} (cdsa's report above{})", rank, ambiguous_text(r),
                           trace_part(r));
      break;
    case Attribution::Unknown:
      break;
  }
  return fmt::format("cdsa: cdsa could not name the launch behind this CUDA fault{} (cdsa's report above{})", rank,
                     trace_part(r));
}

std::string prior_fault_note(const FaultReport& r) {
  std::string launched = what_launched(r);
  std::string rank = r.origin.rank >= 0 ? fmt::format(" on rank {}", r.origin.rank) : std::string();
  std::string what;
  if (launched.empty() || r.attribution == Attribution::Unknown)
    what = "; cdsa could not name its launch";
  else if (r.attribution == Attribution::Ambiguous)
    what = ": " + ambiguous_text(r);
  else
    what = ": " + launched;
  return fmt::format("cdsa: a CUDA fault{} was reported before this error{} (cdsa's report above{})", rank, what,
                     trace_part(r));
}

std::string restart_pointer(const FaultReport& r) {
  std::string cell = outer_cell(r.surfaced_stack);
  std::string where = cell.empty() ? "an earlier cell's output" : cell + "'s output";
  std::string launched = what_launched(r);
  return fmt::format("cdsa: the CUDA context died earlier ({}{}; cdsa's report is in {}): restart the kernel to use "
                     "CUDA again",
                     launched.empty() ? "a CUDA fault" : "a fault in " + launched, trace_part(r), where);
}

}  // namespace cdsa::report
