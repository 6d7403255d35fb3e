// cdsa merge DIR|FILES...: multi-rank: who faulted first, each rank's failing launch.
#include <dirent.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/trace_common.h"

namespace cdsa::cli {
namespace {

std::string utc(uint64_t unix_ns) {
  time_t s = static_cast<time_t>(unix_ns / 1000000000ull);
  struct tm tm;
  gmtime_r(&s, &tm);
  char buf[64];
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03d} UTC", buf, static_cast<int>(unix_ns / 1000000ull % 1000));
}

std::string who(const report::TraceData& t) {
  return t.process.rank >= 0 ? fmt::format("rank {}", t.process.rank) : fmt::format("pid {}", t.process.pid);
}

// The launch's Python frames (most recent call last, the innermost kMax), else its innermost named native frame.
std::string launched_from(const report::CallStack& st, const char* indent) {
  constexpr size_t kMax = 4;
  if (st.python.empty()) return fmt::format("{}launched at {}\n", indent, site_of(st));
  std::string out = fmt::format("{}launched from (most recent call last):\n", indent);
  size_t n = std::min(st.python.size(), kMax);
  for (size_t i = n; i-- > 0;) {
    const auto& f = st.python[i];
    out += fmt::format("{}  {}:{} in {}\n", indent, f.file, f.line, f.function);
  }
  return out;
}

// For a trace written at exit: "N launches unfinished on stream S[, ...]" when completion marks show work that
// never finished (a kernel waiting for a peer that died), else "".
std::string unfinished_at_exit(const report::TraceData& t) {
  std::string out;
  for (const auto& s : t.streams) {
    if (!s.breadcrumbs || s.landed >= s.launched) continue;
    uint64_t n = s.launched - s.landed;
    out += fmt::format("{}{} launch{} unfinished on stream {}", out.empty() ? "" : ", ", n, n == 1 ? "" : "es", s.id);
  }
  return out;
}

// Adds a FILE, or every *.json file directly in a DIR. Returns kGoOn, or 1 when DIR cannot be read.
int add_path(const std::string& a, std::vector<std::string>& files) {
  struct stat st;
  if (stat(a.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    DIR* d = opendir(a.c_str());
    if (!d) {
      fprintf(stderr, "cdsa merge: %s: %s\n", a.c_str(), strerror(errno));
      return 1;
    }
    std::vector<std::string> found;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) found.push_back(a + "/" + name);
    }
    closedir(d);
    std::sort(found.begin(), found.end());
    if (found.empty()) fprintf(stderr, "cdsa merge: %s: no *.json files in this directory\n", a.c_str());
    files.insert(files.end(), found.begin(), found.end());
  } else {
    files.push_back(a);
  }
  return kGoOn;
}

}  // namespace

int cmd_merge(int argc, char** argv) {
  std::vector<std::string> files;
  CommandLine cl{"merge",
                 "usage: cdsa merge DIR|FILES...\n"
                 "For a multi-process job: which rank faulted first (by the time each saw its fault), the\n"
                 "failing launch of each faulting rank, the ranks that only saw the aftermath, and the clean ones.\n"
                 "A DIR contributes every *.json file directly in it.\n",
                 {},
                 [&](const char* a) { return add_path(a, files); },
                 /*command_follows=*/false,
                 /*all_positional=*/true};
  if (int rc = parse_command_line(cl, argc, argv); rc != kGoOn) return rc;
  if (files.empty()) return usage_error(cl);
  struct RankTrace {  // one trace file read, with the path it came from
    std::string path;
    report::TraceFile tf;
  };
  std::vector<RankTrace> ok;
  int bad = 0;
  {
    Progress progress("reading trace files", files.size());
    for (size_t i = 0; i < files.size(); ++i) {
      base::StatusOr<report::TraceFile> read = report::read_trace_file(files[i]);
      if (read.ok())
        ok.push_back(RankTrace{files[i], std::move(*read)});
      else {
        progress.finish();
        fprintf(stderr, "cdsa merge: %s: %s (skipped)\n", files[i].c_str(), read.status().message().c_str());
        ++bad;
      }
      progress.step(i + 1);
    }
  }
  std::vector<const RankTrace*> faulted, aftermath, clean;
  for (const auto& e : ok) {
    const report::TraceData& t = e.tf.data;
    if (!t.has_fault && unfinished_at_exit(t).empty())
      clean.push_back(&e);
    else if (!t.has_fault)
      aftermath.push_back(&e);  // no error of its own, but work that never finished (e.g. a collective's peer died)
    else if (t.report.attribution == report::Attribution::Unknown)
      aftermath.push_back(&e);
    else
      faulted.push_back(&e);
  }
  auto by_time = [](const RankTrace* a, const RankTrace* b) {
    uint64_t ta = a->tf.data.report.fault_time_unix_ns, tb = b->tf.data.report.fault_time_unix_ns;
    if ((ta == 0) != (tb == 0)) return tb == 0;  // unknown times last
    if (ta != tb) return ta < tb;
    return a->tf.data.process.rank < b->tf.data.process.rank;
  };
  std::sort(faulted.begin(), faulted.end(), by_time);
  std::sort(aftermath.begin(), aftermath.end(), by_time);
  std::sort(clean.begin(), clean.end(),
            [](const RankTrace* a, const RankTrace* b) { return a->tf.data.process.rank < b->tf.data.process.rank; });

  std::string out = fmt::format("cdsa merge: {} trace file{}: {} faulted, {} saw only the aftermath, {} clean{}\n",
                                ok.size(), ok.size() == 1 ? "" : "s", faulted.size(), aftermath.size(), clean.size(),
                                bad ? fmt::format(", {} unreadable", bad) : std::string());
  const RankTrace* first = !faulted.empty() ? faulted.front() : (!aftermath.empty() ? aftermath.front() : nullptr);
  uint64_t t_first = first ? first->tf.data.report.fault_time_unix_ns : 0;
  if (first) {
    const report::TraceData& t = first->tf.data;
    out += fmt::format("\nFirst fault: {} (pid {} on {}) at {}: CUDA error {} {}\n", who(t), t.process.pid,
                       t.process.host, t.report.fault_time_unix_ns ? utc(t.report.fault_time_unix_ns) : "unknown time",
                       t.report.code, t.report.error_name);
    if (!t.report.candidates.empty()) {
      const auto& c = t.report.candidates.front();
      out += fmt::format("  {} launch: {}\n",
                         t.report.attribution == report::Attribution::Exact ? "failing" : "likely failing",
                         report::describe_launch(c.launch));
      out += launched_from(c.stack, "  ");
    }
    out += fmt::format("  the whole report: cdsa report {}\n", first->path);
  }
  auto delta = [&](const report::TraceData& t) {
    uint64_t ft = t.report.fault_time_unix_ns;
    if (!ft || !t_first) return std::string("time unknown");
    return fmt::format("+{:.3f} s", static_cast<double>(ft - std::min(ft, t_first)) / 1e9);
  };
  if (!faulted.empty()) {
    out += "\nRanks that faulted, in order of fault time:\n";
    for (const RankTrace* e : faulted) {
      const report::TraceData& t = e->tf.data;
      out += fmt::format("  {:<10} {:>12}  CUDA error {} {}  {}\n", who(t), delta(t), t.report.code,
                         t.report.error_name, e->path);
      for (const auto& c : t.report.candidates) {
        out += fmt::format("      {}{}\n", t.report.attribution == report::Attribution::Exact ? "" : "candidate: ",
                           report::describe_launch(c.launch));
        out += launched_from(c.stack, "      ");
      }
    }
  }
  if (!aftermath.empty()) {
    out += "\nRanks that only saw the aftermath (no failing launch of their own):\n";
    for (const RankTrace* e : aftermath) {
      const report::TraceData& t = e->tf.data;
      if (t.has_fault)
        out += fmt::format("  {:<10} {:>12}  CUDA error {} {} surfaced at {}  {}\n", who(t), delta(t), t.report.code,
                           t.report.error_name, t.report.surfaced_call, e->path);
      else
        out += fmt::format("  {:<10} {:>12}  no error, but exited with {}  {}\n", who(t), "at exit",
                           unfinished_at_exit(t), e->path);
    }
  }
  if (!clean.empty()) {
    out += "\nClean ranks (no fault; trace written at exit):\n";
    for (const RankTrace* e : clean)
      out += fmt::format("  {:<10} {} launches recorded  {}\n", who(e->tf.data), e->tf.data.launches.size(), e->path);
  }
  if (!print_stdout(out)) return 1;
  return bad ? 1 : 0;
}

}  // namespace cdsa::cli
