// cdsa flame FILE [--python-only]: folded stacks of the launch-site profile.
#include <fmt/format.h>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/path.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/trace_common.h"

namespace cdsa::cli {
namespace {

std::string folded_label(std::string s) {
  for (char& c : s)
    if (c == ';' || c == '\n' || c == '\r') c = ':';
  return s;
}

}  // namespace

int cmd_flame(int argc, char** argv) {
  std::string path;
  bool python_only = false;
  CommandLine cl{"flame",
                 "usage: cdsa flame FILE [--python-only]\n"
                 "Folded stacks of the launch-site profile, one line per (stack, kernel) with its launch count,\n"
                 "root first: native frames (outermost first), then Python frames, then the kernel. Feed it to\n"
                 "flamegraph.pl or speedscope.\n",
                 {{"--python-only", false, store(python_only, true)}},
                 keep_last(path)};
  report::TraceFile tf;
  if (int rc = parse_and_load(cl, argc, argv, path, Needs::Profile, &tf); rc != kGoOn) return rc;
  auto stacks = stacks_by_id(tf.data);
  std::map<std::string, uint64_t> folded;
  for (const auto& s : tf.data.profile.sites) {
    std::vector<std::string> frames;
    auto it = stacks.find(s.stack_id);
    if (it == stacks.end()) {
      frames.push_back("[stack not recorded]");
    } else {
      const report::CallStack& st = *it->second;
      if (!python_only)
        for (auto f = st.native.rbegin(); f != st.native.rend(); ++f)
          frames.push_back(f->function.empty() ? fmt::format("{}+{:#x}", base::basename_of(f->module), f->module_offset)
                                               : f->function);
      for (auto f = st.python.rbegin(); f != st.python.rend(); ++f)
        frames.push_back(fmt::format("{} ({}:{})", f->function, base::basename_of(f->file), f->line));
    }
    frames.push_back(s.kernel.empty() ? "<unknown kernel>" : s.kernel);
    std::string line;
    for (size_t i = 0; i < frames.size(); ++i) line += (i ? ";" : "") + folded_label(frames[i]);
    folded[line] += s.count;
  }
  std::string out;
  for (const auto& [line, count] : folded) out += fmt::format("{} {}\n", line, count);
  if (tf.data.profile.dropped)
    fprintf(stderr, "cdsa flame: %s: %llu launches were not counted (the profile table was full)\n", path.c_str(),
            static_cast<unsigned long long>(tf.data.profile.dropped));
  return print_stdout(out) ? 0 : 1;
}

}  // namespace cdsa::cli
