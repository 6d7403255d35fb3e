// cdsa merge [--session ID] DIR|FILES...: multi-rank: whose own evidence shows the first fault, each rank's
// failing launch; also the launcher summary libcdsa.so prints at a launcher's exit (--launcher-summary).
#include <dirent.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "base/device_assert.h"
#include "base/path.h"
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
    if (!f.source.empty()) out += fmt::format("{}    {}\n", indent, f.source);
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


// Each trace's own evidence of the first fault, strongest first (the order of the merged verdict, never clocks of
// different hosts): its device printed an assert for a launch it names; it names a failing launch of its own; that
// launch is a collective (a peer's failure can stop one); it saw the error but had no failing launch of its own;
// it saw no error but exited with work unfinished.
enum class Evidence { DeviceAssert, OwnLaunch, Collective, NoOwnLaunch, UnfinishedAtExit, Clean };

bool collective_kernel(const std::string& k) {
  for (const char* n : {"nccl", "rccl", "nvshmem", "NCCL"})
    if (k.find(n) != std::string::npos) return true;
  return false;
}

Evidence evidence_of(const report::TraceData& t) {
  if (!t.has_fault) return unfinished_at_exit(t).empty() ? Evidence::Clean : Evidence::UnfinishedAtExit;
  if (t.report.attribution == report::Attribution::Unknown || t.report.candidates.empty())
    return Evidence::NoOwnLaunch;
  if (collective_kernel(t.report.candidates.front().launch.kernel)) return Evidence::Collective;
  for (const auto& a : t.report.device_asserts)
    if (base::holds_device_assert(a.message)) return Evidence::DeviceAssert;  // not any line the device printed
  return Evidence::OwnLaunch;
}

struct RankTrace {  // one trace file read, with the path it came from
  std::string path;
  report::TraceFile tf;
  Evidence evidence = Evidence::Clean;
};

// Orders by evidence (exact before ambiguous), then, when every trace is from one host, by the time each saw its
// fault (one clock), else by rank: the clocks of different hosts are never compared.
void order_by_cause(std::vector<const RankTrace*>& v) {
  bool one_host = true;
  for (const RankTrace* e : v) one_host = one_host && e->tf.data.process.host == v.front()->tf.data.process.host;
  auto key = [](const RankTrace* e) {
    const auto& t = e->tf.data;
    return std::make_pair(static_cast<int>(e->evidence), t.report.attribution == report::Attribution::Exact ? 0 : 1);
  };
  std::stable_sort(v.begin(), v.end(), [&](const RankTrace* a, const RankTrace* b) {
    if (key(a) != key(b)) return key(a) < key(b);
    const auto &ta = a->tf.data, &tb = b->tf.data;
    if (one_host) {
      uint64_t fa = ta.report.fault_time_unix_ns, fb = tb.report.fault_time_unix_ns;
      if ((fa == 0) != (fb == 0)) return fb == 0;  // unknown times last
      if (fa != fb) return fa < fb;
    }
    if (ta.process.rank != tb.process.rank) return ta.process.rank < tb.process.rank;
    return ta.process.pid < tb.process.pid;
  });
}

// "1-3, 5": the ranks of 0..world-1 that no trace names.
std::string ranks_missing(const std::vector<RankTrace>& ok, int* missing) {
  int world = -1;
  std::vector<bool> seen;
  for (const auto& e : ok) world = std::max(world, e.tf.data.process.world_size);
  *missing = 0;
  if (world <= 0 || world > (1 << 20)) return "";
  seen.assign(static_cast<size_t>(world), false);
  for (const auto& e : ok)
    if (e.tf.data.process.rank >= 0 && e.tf.data.process.rank < world) seen[e.tf.data.process.rank] = true;
  std::string out;
  for (int r = 0; r < world; ++r) {
    if (seen[r]) continue;
    int end = r;
    while (end + 1 < world && !seen[end + 1]) ++end;
    *missing += end - r + 1;
    out += (out.empty() ? "" : ", ") + (end == r ? std::to_string(r) : fmt::format("{}-{}", r, end));
    r = end;
  }
  return out;
}

// A session id is "host:pid:ms" (CDSA_SESSION, set by its root process): the root's host and pid.
bool session_root(const std::string& id, std::string* host, int* pid) {
  size_t a = id.find(':'), b = id.rfind(':');
  if (a == std::string::npos || b == a) return false;
  *host = id.substr(0, a);
  *pid = atoi(id.substr(a + 1, b - a - 1).c_str());
  return *pid > 0;
}

}  // namespace

int cmd_merge(int argc, char** argv) {
  std::vector<std::string> files;
  std::string session;
  bool launcher_summary = false;
  CommandLine cl{"merge",
                 "usage: cdsa merge [--session ID] DIR|FILES...\n"
                 "For a multi-process job: which rank's own evidence shows the first fault, the failing launch of\n"
                 "each faulting rank, the ranks that only saw the aftermath, the clean ones and the ranks that wrote\n"
                 "no trace. Ordered by evidence (a device assert, then a failing launch of the rank's own, then a\n"
                 "collective's), then by fault time when every trace is from one host, else by rank: the clocks of\n"
                 "different hosts are not compared. A DIR contributes every *.json file directly in it.\n"
                 "  --session ID         only the traces of the launcher run ID (their process.session; the\n"
                 "                       launcher summary prints it)\n"
                 "  --launcher-summary   as libcdsa.so runs it at a launcher's exit: nothing unless a process\n"
                 "                       other than the session's root wrote a trace with a fault\n",
                 {{"--session", true,
                   [&](const char* v) {
                     session = v;
                     return *v != '\0';
                   },
                   "a session id (host:pid:ms)"},
                  {"--launcher-summary", false, store(launcher_summary, true)}},
                 [&](const char* a) { return add_path(a, files); }};
  if (int rc = parse_command_line(cl, argc, argv); rc != kGoOn) return rc;
  if (files.empty()) return usage_error(cl);
  if (launcher_summary && session.empty()) {
    fprintf(stderr, "cdsa merge: --launcher-summary needs --session ID\n");
    return 2;
  }
  std::vector<RankTrace> ok;
  int bad = 0;
  {
    Progress progress("reading trace files", files.size());
    for (size_t i = 0; i < files.size(); ++i) {
      base::StatusOr<report::TraceFile> read = report::read_trace_file(files[i]);
      if (read.ok()) {
        if (session.empty() || read->data.process.session == session) ok.push_back(RankTrace{files[i], std::move(*read)});
      } else {
        progress.finish();
        fprintf(stderr, "cdsa merge: %s: %s (skipped)\n", files[i].c_str(), read.status().message().c_str());
        ++bad;
      }
      progress.step(i + 1);
    }
  }
  std::string root_host;
  int root_pid = 0;
  if (launcher_summary) {
    // Printed at the launcher's exit only when one of its descendants faulted (the root's own fault had its report).
    if (!session_root(session, &root_host, &root_pid)) {
      fprintf(stderr, "cdsa merge: --session %s: expected host:pid:ms\n", session.c_str());
      return 2;
    }
    bool descendant_fault = false;
    for (const auto& e : ok) {
      const auto& p = e.tf.data.process;
      descendant_fault = descendant_fault || (e.tf.data.has_fault && !(p.pid == root_pid && p.host == root_host));
    }
    if (!descendant_fault) return 0;
  }
  std::vector<const RankTrace*> faulted, aftermath, clean;
  for (auto& e : ok) {
    e.evidence = evidence_of(e.tf.data);
    if (e.evidence == Evidence::Clean)
      clean.push_back(&e);
    else if (e.evidence >= Evidence::NoOwnLaunch)
      aftermath.push_back(&e);  // no failing launch of its own (e.g. a collective's peer died, work never finished)
    else
      faulted.push_back(&e);
  }
  order_by_cause(faulted);
  order_by_cause(aftermath);
  std::sort(clean.begin(), clean.end(),
            [](const RankTrace* a, const RankTrace* b) { return a->tf.data.process.rank < b->tf.data.process.rank; });

  // The launcher summary is framed as the report is (a banner line, a closing rule): it ends a long log.
  std::string out = launcher_summary ? "\n" + std::string(20, '=') + " cdsa: launcher summary " + std::string(27, '=') + "\n"
                                     : std::string();
  out += fmt::format("{}{} trace file{}: {} faulted, {} saw only the aftermath, {} clean{}\n",
                                launcher_summary ? "cdsa: this run's " : "cdsa merge: ", ok.size(),
                                ok.size() == 1 ? "" : "s", faulted.size(), aftermath.size(), clean.size(),
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
    for (const auto& a : t.report.device_asserts)
      if (first->evidence == Evidence::DeviceAssert && base::holds_device_assert(a.message)) {
        out += fmt::format("  the device's assert: {}\n", a.message);
        break;
      }
    out += fmt::format("  the whole report: cdsa report {}\n", first->path);
  }
  // Seconds after the first fault, on the first fault's host only (one clock).
  auto delta = [&](const report::TraceData& t) {
    uint64_t ft = t.report.fault_time_unix_ns;
    if (first && t.process.host != first->tf.data.process.host) return std::string("other host");
    if (!ft || !t_first) return std::string("time unknown");
    // Listed by evidence, a rank may have seen its error before the first fault's did (its collective failed first).
    return ft >= t_first ? fmt::format("+{:.3f} s", static_cast<double>(ft - t_first) / 1e9)
                         : fmt::format("-{:.3f} s", static_cast<double>(t_first - ft) / 1e9);
  };
  if (!faulted.empty()) {
    out += "\nRanks that faulted, by each one's own evidence (a device assert, a failing launch of its own, a\n"
           "collective's), then by fault time on one host, else by rank:\n";
    for (const RankTrace* e : faulted) {
      const report::TraceData& t = e->tf.data;
      out += fmt::format("  {:<10} {:>12}  CUDA error {} {}  {}\n", who(t), delta(t), t.report.code,
                         t.report.error_name, e->path);
      if (e->evidence == Evidence::Collective)
        out += "      (its failing launch is a collective: a peer's failure can stop one, so this rank may have "
               "failed because of another)\n";
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
  int missing = 0;
  std::string absent = ranks_missing(ok, &missing);
  bool always = false;  // CDSA_TRACE=always: a rank that exited wrote a trace, so one without was killed
  for (const auto& e : ok)
    for (const auto& [k, v] : e.tf.data.cdsa.config) always = always || (k == "trace" && v == "always");
  if (missing > 0 && always)
    out += fmt::format("\nRank{} {} wrote no trace: killed, or ended without running exit handlers (under "
                       "CDSA_TRACE=always a rank that exits writes one)\n",
                       missing == 1 ? "" : "s", absent);
  else if (missing > 0)
    out += fmt::format(
        "\nRank{} {} wrote no trace: exited without a fault of {} own, or killed before writing one (CDSA_TRACE=always "
        "writes one at every exit)\n",
        missing == 1 ? "" : "s", absent, missing == 1 ? "its" : "their");
  if (launcher_summary) {
    std::string dir = first ? base::dirname_of(first->path) : ".";
    out += fmt::format("\nAgain, or later: cdsa merge --session {} {}\n{}\n", session, dir, std::string(71, '='));
    write_all(2, out);
    return 0;
  }
  if (!print_stdout(out)) return 1;
  return bad ? 1 : 0;
}

}  // namespace cdsa::cli
