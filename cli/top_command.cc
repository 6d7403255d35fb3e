// cdsa top FILE [-n N]: the busiest launch sites of the launch-site profile.
#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/trace_common.h"

namespace cdsa::cli {

int cmd_top(int argc, char** argv) {
  std::string path;
  long limit = 20;
  CommandLine cl{"top",
                 "usage: cdsa top FILE [-n N]\n"
                 "The N (default 20) busiest launch sites of the launch-site profile: launches, share, kernel,\n"
                 "and where they were launched (Python frames innermost first, else the native frame).\n",
                 {{"-n", true,
                   [&](const char* v) {
                     char* end = nullptr;
                     errno = 0;
                     limit = strtol(v, &end, 10);
                     return errno == 0 && !*end && limit >= 1;
                   },
                   "a positive number"}},
                 keep_last(path)};
  report::TraceFile tf;
  if (int rc = parse_and_load(cl, argc, argv, path, Needs::Profile, &tf); rc != kGoOn) return rc;
  auto stacks = stacks_by_id(tf.data);
  auto sites = tf.data.profile.sites;
  std::stable_sort(sites.begin(), sites.end(),
                   [](const report::ProfileSite& a, const report::ProfileSite& b) { return a.count > b.count; });
  uint64_t total = 0;
  for (const auto& s : sites) total += s.count;
  std::string out =
      fmt::format("{} launches from {} launch sites{}\n", total, sites.size(),
                  tf.data.profile.dropped ? fmt::format(" ({} more not counted: table full)", tf.data.profile.dropped)
                                          : std::string());
  out += fmt::format("{:>12} {:>6}  {}\n", "launches", "share", "kernel / launched from");
  long shown = 0;
  for (const auto& s : sites) {
    if (shown++ >= limit) break;
    out += fmt::format("{:>12} {:>5.1f}%  {}\n", s.count, total ? 100.0 * static_cast<double>(s.count) / total : 0.0,
                       s.kernel.empty() ? "<unknown kernel>" : s.kernel);
    auto it = stacks.find(s.stack_id);
    if (it == stacks.end()) {
      out += fmt::format("{:>22}(stack not recorded)\n", "");
      continue;
    }
    const report::CallStack& st = *it->second;
    size_t k = 0;
    for (const auto& f : st.python) {
      if (k++ == 3) break;
      out += fmt::format("{:>22}{} {}:{} in {}\n", "", k == 1 ? "at  " : "<-  ", f.file, f.line, f.function);
    }
    if (st.python.empty()) out += fmt::format("{:>22}at  {}\n", "", site_of(st));
  }
  return print_stdout(out) ? 0 : 1;
}

}  // namespace cdsa::cli
