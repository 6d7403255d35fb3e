// The post-mortem commands: everything here reads trace files (report/trace_reader.h).
//
//   cdsa report FILE [--json]          the report the live process printed, from the file alone
//   cdsa export --chrome FILE [-o OUT] Chrome/Perfetto trace-event JSON of the recorded launches
//   cdsa merge DIR|FILES...            multi-rank: who faulted first, each rank's failing launch
//   cdsa flame FILE [--python-only]    folded stacks of the launch-site profile
//   cdsa top FILE [-n N]               the busiest launch sites of the profile
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/progress.h"
#include "report/trace.h"
#include "report/trace_reader.h"
#include "symbolizer/native_symbolizer.h"

namespace cdsa::cli {
namespace {

// Loads FILE or prints "cdsa CMD: FILE: what is wrong".
bool load(const char* cmd, const std::string& path, TraceFile* tf) {
  std::string error;
  if (read_trace_file(path, tf, &error)) return true;
  fprintf(stderr, "cdsa %s: %s: %s\n", cmd, path.c_str(), error.c_str());
  return false;
}

bool write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool print_stdout(const std::string& s) {
  fflush(stdout);
  return write_all(1, s);
}

std::string base_name(const std::string& path) {
  auto p = path.rfind('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

// ---- offline re-symbolization ----

// Every native frame the report shows.
void for_each_native(FaultReport& r, const std::function<void(NativeFrameText&)>& fn) {
  for (auto& f : r.surfaced_stack.native) fn(f);
  for (auto& c : r.candidates) {
    for (auto& f : c.stack.native) fn(f);
    for (auto& g : c.graph_nodes)
      for (auto& f : g.stack.native) fn(f);
  }
}

// Re-symbolizes the report's native frames from the files now on disk, checked against the recorded
// build-ids. The names recorded at the fault were resolved in the live process against the right
// binaries, so they stay; the offline pass fills in what the live pass could not find (e.g. no libdw
// in the process). A module that changed or vanished since the run is named in a note.
void resymbolize(FaultReport& r, const std::vector<ModuleText>& modules) {
  std::vector<symbolizer::Module> map;
  for (const auto& m : modules) {
    symbolizer::Module mod;
    mod.path = m.path;
    mod.bias = m.bias;
    mod.build_id = m.build_id;
    for (const auto& [a, b] : m.ranges) mod.segments.push_back({a, b, 0, 0});
    map.push_back(std::move(mod));
  }
  symbolizer::OfflineSymbolizer sym(std::move(map));
  std::set<std::string> module_paths;
  for_each_native(r, [&](NativeFrameText& f) { module_paths.insert(f.module); });
  std::set<std::string> done_modules;
  Progress progress("symbolizing modules", module_paths.size());
  std::map<std::string, std::string> problems;  // module path -> what is wrong with it now
  for_each_native(r, [&](NativeFrameText& f) {
    // Shown before the work: the first frame of a big library is the slow one (libdw reads its DWARF).
    if (done_modules.insert(f.module).second) progress.step(done_modules.size());
    symbolizer::NativeFrame o = sym.symbolize_pc(f.pc, /*is_return_address=*/true);
    if (!o.error.empty()) {
      // (Objects that are not files, such as linux-vdso.so.1, cannot be re-read: nothing to say about them.)
      if (!o.module.empty() && o.module[0] == '/') problems.emplace(o.module, o.error);
      return;
    }
    // The same rule as the live report: where code was inlined, the innermost function's line.
    std::string file = o.inlined.empty() ? o.file : o.inlined.front().file;
    int line = o.inlined.empty() ? o.line : o.inlined.front().line;
    if (f.function.empty()) f.function = o.function;
    if (f.file.empty() && !file.empty()) {
      f.file = file;
      f.line = line;
    }
    if (f.module.empty()) {
      f.module = o.module;
      f.module_offset = o.module_offset;
    }
  });
  progress.finish();
  for (const auto& [path, what] : problems)
    r.notes.push_back(
        fmt::format("{}: {}; its frames show the names recorded at the time of the fault", base_name(path), what));
}

// ---- report ----

int cmd_report(int argc, char** argv) {
  bool as_json = false, resym = true;
  std::string path;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json")
      as_json = true;
    else if (a == "--no-resymbolize")
      resym = false;
    else if (a == "--help" || a == "-h") {
      printf(
          "usage: cdsa report FILE [--json] [--no-resymbolize]\n"
          "Prints the report the live process printed, from the trace file alone. Native frames are\n"
          "checked against the recorded build-ids and re-symbolized offline where the run lacked names.\n"
          "--json prints the report object instead (null when the run had no fault).\n");
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "cdsa report: unknown option %s\n", a.c_str());
      return 2;
    } else if (path.empty())
      path = a;
    else {
      fprintf(stderr, "cdsa report: one trace file at a time (got %s and %s)\n", path.c_str(), a.c_str());
      return 2;
    }
  }
  if (path.empty()) {
    fprintf(stderr, "usage: cdsa report FILE [--json]\n");
    return 2;
  }
  TraceFile tf;
  if (!load("report", path, &tf)) return 1;
  TraceData& t = tf.data;
  if (!t.has_fault) {
    if (as_json) return print_stdout("null\n") ? 0 : 1;
    std::string out = fmt::format("cdsa: {}: no fault in this run (trace written at {}); {} launch record{} kept", path,
                                  t.reason, t.launches.size(), t.launches.size() == 1 ? "" : "s");
    if (t.has_profile)
      out += fmt::format(", launch-site profile of {} sites (cdsa top / cdsa flame)", t.profile.sites.size());
    out += "\n";
    return print_stdout(out) ? 0 : 1;
  }
  FaultReport& r = t.report;
  if (resym) resymbolize(r, t.modules);
  r.trace_path = path;
  std::string out = as_json ? report_to_json(r) + "\n" : format_report_text(r);
  return print_stdout(out) ? 0 : 1;
}

// ---- export --chrome ----

std::string frame_line(const PyFrameText& f) { return fmt::format("{}:{} in {}", f.file, f.line, f.function); }
std::string frame_line(const NativeFrameText& f) {
  std::string s =
      fmt::format("{} ({}+{:#x})", f.function.empty() ? "??" : f.function, base_name(f.module), f.module_offset);
  if (!f.file.empty()) s += fmt::format(" at {}:{}", f.file, f.line);
  return s;
}

// Most recent call last, as the report prints: Python frames, then native frames.
std::string stack_lines_json(const StackText* st) {
  std::string out = "[";
  bool first = true;
  auto add = [&](const std::string& s) {
    out += (first ? "" : ",") + json_escape(s);
    first = false;
  };
  if (st) {
    for (auto it = st->python.rbegin(); it != st->python.rend(); ++it) add(frame_line(*it));
    for (auto it = st->native.rbegin(); it != st->native.rend(); ++it) add(frame_line(*it));
  }
  return out + "]";
}

// Appends one trace file's processes, tracks and launches. `t0`: the time that becomes 0.
void chrome_events(const TraceData& t, int pid, uint64_t t0, std::string& out) {
  std::map<uint32_t, const StackText*> stacks;
  for (const auto& [id, st] : t.stacks) stacks[id] = &st;
  std::map<uint64_t, int> track;  // stream id -> track number
  for (const auto& l : t.launches) track.emplace(l.stream_id, 0);
  int n = 0;
  for (auto& [id, k] : track) k = ++n;
  std::set<uint64_t> failing;
  std::string fault_name;
  if (t.has_fault) {
    fault_name = fmt::format("CUDA error {} {}", t.report.code, t.report.error_name);
    for (const auto& c : t.report.candidates) failing.insert(c.launch.seq);
  }
  std::string label = t.process.rank >= 0
                          ? fmt::format("rank {} (pid {} on {})", t.process.rank, t.process.pid, t.process.host)
                          : fmt::format("pid {} on {}", t.process.pid, t.process.host);
  out += fmt::format("{}{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":{}}}}}",
                     out.back() == '\n' ? "" : ",\n", pid, json_escape("cdsa: " + label));
  if (t.process.rank >= 0)
    out += fmt::format(
        ",\n{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}}}", pid,
        t.process.rank);
  for (const auto& [id, k] : track) {
    std::string name =
        (id >> 63) ? fmt::format("stream <handle {:#x}>", id & ~(1ull << 63)) : fmt::format("stream {}", id);
    out += fmt::format(",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":{}}}}}",
                       pid, k, json_escape(name));
  }
  for (const auto& l : t.launches) {
    auto it = stacks.find(l.stack_id);
    const StackText* st = it == stacks.end() ? nullptr : it->second;
    bool failed = failing.count(l.seq) > 0;
    std::string name =
        l.kind == "graph" ? fmt::format("graph {}", l.graph_id) : (l.kernel.empty() ? "<unknown>" : l.kernel);
    double ts = static_cast<double>(l.time_ns - std::min(t0, l.time_ns)) / 1000.0;
    out += fmt::format(
        ",\n{{\"ph\":\"X\",\"cat\":\"{}\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":1,\"args\":{{"
        "\"seq\":{},\"stream_seq\":{},\"stream_id\":{},\"kernel\":{},\"kind\":{},\"grid\":\"{},{},{}\","
        "\"block\":\"{},{},{}\",\"shared_mem\":{},\"thread\":{},\"captured\":{},\"stack_id\":{},\"stack\":{}{}}}}}",
        failed ? "failing-launch" : (l.captured ? "captured" : "launch"), json_escape(failed ? "FAULT: " + name : name),
        pid, track[l.stream_id], ts, l.seq, l.stream_seq, l.stream_id, json_escape(l.kernel), json_escape(l.kind),
        l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared_mem, l.tid,
        l.captured ? "true" : "false", l.stack_id == 0xffffffffu ? std::string("null") : std::to_string(l.stack_id),
        stack_lines_json(st), failed ? ",\"fault\":" + json_escape(fault_name) : std::string());
    if (failed)
      out += fmt::format(
          ",\n{{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"fault\",\"name\":{},\"pid\":{},\"tid\":{},"
          "\"ts\":{:.3f},\"args\":{{\"seq\":{},\"surfaced_at\":{}}}}}",
          json_escape(fault_name), pid, track[l.stream_id], ts, l.seq, json_escape(t.report.surfaced_call));
  }
}

int cmd_export(int argc, char** argv) {
  bool chrome = false;
  std::vector<std::string> paths;
  std::string out_path;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--chrome") {
      chrome = true;
    } else if (a == "-o" || a == "--output") {
      if (i + 1 >= argc) {
        fprintf(stderr, "cdsa export: %s needs a file name\n", a.c_str());
        return 2;
      }
      out_path = argv[++i];
    } else if (a == "--help" || a == "-h") {
      printf(
          "usage: cdsa export --chrome FILE... [-o OUT]\n"
          "Writes the recorded launches as Chrome trace-event JSON (loads in ui.perfetto.dev and\n"
          "chrome://tracing): one track per stream, one event per launch with its kernel, launch number\n"
          "and stack, the failing launch marked. Times are when the host launched (cdsa does not see\n"
          "how long kernels ran). Several files (the ranks of one job) become one timeline, a process\n"
          "each; their clocks are aligned when they ran on one host. Writes to stdout unless -o is given.\n");
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "cdsa export: unknown option %s\n", a.c_str());
      return 2;
    } else {
      paths.push_back(a);
    }
  }
  if (!chrome || paths.empty()) {
    fprintf(stderr, "usage: cdsa export --chrome FILE... [-o OUT]\n");
    return 2;
  }
  std::vector<TraceFile> files(paths.size());
  {
    Progress progress("reading trace files", paths.size());
    for (size_t i = 0; i < paths.size(); ++i) {
      progress.step(i + 1);
      std::string error;
      if (!read_trace_file(paths[i], &files[i], &error)) {
        progress.finish();
        fprintf(stderr, "cdsa export: %s: %s\n", paths[i].c_str(), error.c_str());
        return 1;
      }
    }
  }
  // Launch times are CLOCK_MONOTONIC: comparable between processes of one host only.
  bool one_host = true;
  uint64_t t0_all = UINT64_MAX;
  for (const auto& f : files) {
    one_host = one_host && f.data.process.host == files.front().data.process.host;
    for (const auto& l : f.data.launches) t0_all = std::min(t0_all, l.time_ns);
  }
  std::string out = "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"format\":\"cdsa-chrome\",\"sources\":[";
  for (size_t i = 0; i < paths.size(); ++i) out += (i ? "," : "") + json_escape(paths[i]);
  out += fmt::format("],\"clocks\":\"{}\"}},\"traceEvents\":[\n",
                     one_host ? "aligned (one host)" : "each process starts at 0 (several hosts)");
  std::set<int> pids;
  for (const auto& f : files) {
    int pid = f.data.process.pid;
    while (!pids.insert(pid).second) pid += 1 << 22;  // same pid on two hosts: keep the processes apart
    uint64_t t0 = t0_all;
    if (!one_host) {
      t0 = UINT64_MAX;
      for (const auto& l : f.data.launches) t0 = std::min(t0, l.time_ns);
    }
    chrome_events(f.data, pid, t0, out);
  }
  out += "\n]}\n";
  if (out_path.empty()) return print_stdout(out) ? 0 : 1;
  int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || !write_all(fd, out)) {
    fprintf(stderr, "cdsa export: cannot write %s: %s\n", out_path.c_str(), strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  close(fd);
  return 0;
}

// ---- merge ----

std::string utc(uint64_t unix_ns) {
  time_t s = static_cast<time_t>(unix_ns / 1000000000ull);
  struct tm tm;
  gmtime_r(&s, &tm);
  char buf[64];
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03d} UTC", buf, static_cast<int>(unix_ns / 1000000ull % 1000));
}

std::string who(const TraceData& t) {
  return t.process.rank >= 0 ? fmt::format("rank {}", t.process.rank) : fmt::format("pid {}", t.process.pid);
}

// The innermost Python frame (the user's line), else the innermost named native frame.
std::string site_of(const StackText& st) {
  if (!st.python.empty()) {
    const auto& f = st.python.front();
    return fmt::format("{}:{} in {}", f.file, f.line, f.function);
  }
  for (const auto& f : st.native)
    if (!f.function.empty()) return frame_line(f);
  return st.native.empty() ? "(no stack recorded)" : frame_line(st.native.front());
}

// The launch's Python frames (most recent call last, the innermost kMax), else its innermost named native frame.
std::string launched_from(const StackText& st, const char* indent) {
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
std::string unfinished_at_exit(const TraceData& t) {
  std::string out;
  for (const auto& s : t.streams) {
    if (!s.breadcrumbs || s.landed >= s.launched) continue;
    uint64_t n = s.launched - s.landed;
    out += fmt::format("{}{} launch{} unfinished on stream {}", out.empty() ? "" : ", ", n, n == 1 ? "" : "es", s.id);
  }
  return out;
}

int cmd_merge(int argc, char** argv) {
  std::vector<std::string> files;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      printf(
          "usage: cdsa merge DIR|FILES...\n"
          "For a multi-process job: which rank faulted first (by the time each saw its fault), the\n"
          "failing launch of each faulting rank, the ranks that only saw the aftermath, and the clean ones.\n"
          "A DIR contributes every *.json file directly in it.\n");
      return 0;
    }
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
  }
  if (files.empty()) {
    fprintf(stderr, "usage: cdsa merge DIR|FILES...\n");
    return 2;
  }
  struct Entry {
    std::string path;
    TraceFile tf;
  };
  std::vector<Entry> ok;
  int bad = 0;
  {
    Progress progress("reading trace files", files.size());
    for (size_t i = 0; i < files.size(); ++i) {
      Entry e{files[i], {}};
      std::string error;
      if (read_trace_file(files[i], &e.tf, &error))
        ok.push_back(std::move(e));
      else {
        progress.finish();
        fprintf(stderr, "cdsa merge: %s: %s (skipped)\n", files[i].c_str(), error.c_str());
        ++bad;
      }
      progress.step(i + 1);
    }
  }
  std::vector<const Entry*> faulted, aftermath, clean;
  for (const auto& e : ok) {
    const TraceData& t = e.tf.data;
    if (!t.has_fault && unfinished_at_exit(t).empty())
      clean.push_back(&e);
    else if (!t.has_fault)
      aftermath.push_back(&e);  // no error of its own, but work that never finished (e.g. a collective's peer died)
    else if (t.report.attribution == Attribution::Unknown)
      aftermath.push_back(&e);
    else
      faulted.push_back(&e);
  }
  auto by_time = [](const Entry* a, const Entry* b) {
    uint64_t ta = a->tf.data.report.fault_time_unix_ns, tb = b->tf.data.report.fault_time_unix_ns;
    if ((ta == 0) != (tb == 0)) return tb == 0;  // unknown times last
    if (ta != tb) return ta < tb;
    return a->tf.data.process.rank < b->tf.data.process.rank;
  };
  std::sort(faulted.begin(), faulted.end(), by_time);
  std::sort(aftermath.begin(), aftermath.end(), by_time);
  std::sort(clean.begin(), clean.end(),
            [](const Entry* a, const Entry* b) { return a->tf.data.process.rank < b->tf.data.process.rank; });

  std::string out = fmt::format("cdsa merge: {} trace file{}: {} faulted, {} saw only the aftermath, {} clean{}\n",
                                ok.size(), ok.size() == 1 ? "" : "s", faulted.size(), aftermath.size(), clean.size(),
                                bad ? fmt::format(", {} unreadable", bad) : std::string());
  const Entry* first = !faulted.empty() ? faulted.front() : (!aftermath.empty() ? aftermath.front() : nullptr);
  uint64_t t_first = first ? first->tf.data.report.fault_time_unix_ns : 0;
  if (first) {
    const TraceData& t = first->tf.data;
    out += fmt::format("\nFirst fault: {} (pid {} on {}) at {}: CUDA error {} {}\n", who(t), t.process.pid,
                       t.process.host, t.report.fault_time_unix_ns ? utc(t.report.fault_time_unix_ns) : "unknown time",
                       t.report.code, t.report.error_name);
    if (!t.report.candidates.empty()) {
      const auto& c = t.report.candidates.front();
      out += fmt::format("  {} launch: {}\n", t.report.attribution == Attribution::Exact ? "failing" : "likely failing",
                         describe_launch(c.launch));
      out += launched_from(c.stack, "  ");
    }
    out += fmt::format("  the whole report: cdsa report {}\n", first->path);
  }
  auto delta = [&](const TraceData& t) {
    uint64_t ft = t.report.fault_time_unix_ns;
    if (!ft || !t_first) return std::string("time unknown");
    return fmt::format("+{:.3f} s", static_cast<double>(ft - std::min(ft, t_first)) / 1e9);
  };
  if (!faulted.empty()) {
    out += "\nRanks that faulted, in order of fault time:\n";
    for (const Entry* e : faulted) {
      const TraceData& t = e->tf.data;
      out += fmt::format("  {:<10} {:>12}  CUDA error {} {}  {}\n", who(t), delta(t), t.report.code,
                         t.report.error_name, e->path);
      for (const auto& c : t.report.candidates) {
        out += fmt::format("      {}{}\n",
                           t.report.attribution == Attribution::Exact ? "" : "candidate: ", describe_launch(c.launch));
        out += launched_from(c.stack, "      ");
      }
    }
  }
  if (!aftermath.empty()) {
    out += "\nRanks that only saw the aftermath (no failing launch of their own):\n";
    for (const Entry* e : aftermath) {
      const TraceData& t = e->tf.data;
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
    for (const Entry* e : clean)
      out += fmt::format("  {:<10} {} launches recorded  {}\n", who(e->tf.data), e->tf.data.launches.size(), e->path);
  }
  if (!print_stdout(out)) return 1;
  return bad ? 1 : 0;
}

// ---- profile: flame and top ----

std::string folded_label(std::string s) {
  for (char& c : s)
    if (c == ';' || c == '\n' || c == '\r') c = ':';
  return s;
}

bool load_profile(const char* cmd, const std::string& path, TraceFile* tf) {
  if (!load(cmd, path, tf)) return false;
  if (!tf->data.has_profile) {
    fprintf(stderr,
            "cdsa %s: %s: no launch-site profile in this trace (run with CDSA_PROFILE=1 or cdsa run --profile)\n", cmd,
            path.c_str());
    return false;
  }
  return true;
}

int cmd_flame(int argc, char** argv) {
  std::string path;
  bool python_only = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--python-only")
      python_only = true;
    else if (a == "--help" || a == "-h") {
      printf(
          "usage: cdsa flame FILE [--python-only]\n"
          "Folded stacks of the launch-site profile, one line per (stack, kernel) with its launch count,\n"
          "root first: native frames (outermost first), then Python frames, then the kernel. Feed it to\n"
          "flamegraph.pl or speedscope.\n");
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "cdsa flame: unknown option %s\n", a.c_str());
      return 2;
    } else
      path = a;
  }
  if (path.empty()) {
    fprintf(stderr, "usage: cdsa flame FILE [--python-only]\n");
    return 2;
  }
  TraceFile tf;
  if (!load_profile("flame", path, &tf)) return 1;
  std::map<uint32_t, const StackText*> stacks;
  for (const auto& [id, st] : tf.data.stacks) stacks[id] = &st;
  std::map<std::string, uint64_t> folded;
  for (const auto& s : tf.data.profile.sites) {
    std::vector<std::string> frames;
    auto it = stacks.find(s.stack_id);
    if (it == stacks.end()) {
      frames.push_back("[stack not recorded]");
    } else {
      const StackText& st = *it->second;
      if (!python_only)
        for (auto f = st.native.rbegin(); f != st.native.rend(); ++f)
          frames.push_back(f->function.empty() ? fmt::format("{}+{:#x}", base_name(f->module), f->module_offset)
                                               : f->function);
      for (auto f = st.python.rbegin(); f != st.python.rend(); ++f)
        frames.push_back(fmt::format("{} ({}:{})", f->function, base_name(f->file), f->line));
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

int cmd_top(int argc, char** argv) {
  std::string path;
  long limit = 20;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-n") {
      char* end = nullptr;
      if (i + 1 >= argc || (errno = 0, limit = strtol(argv[i + 1], &end, 10), errno != 0 || *end || limit < 1)) {
        fprintf(stderr, "cdsa top: -n needs a positive number\n");
        return 2;
      }
      ++i;
    } else if (a == "--help" || a == "-h") {
      printf(
          "usage: cdsa top FILE [-n N]\n"
          "The N (default 20) busiest launch sites of the launch-site profile: launches, share, kernel,\n"
          "and where they were launched (Python frames innermost first, else the native frame).\n");
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "cdsa top: unknown option %s\n", a.c_str());
      return 2;
    } else
      path = a;
  }
  if (path.empty()) {
    fprintf(stderr, "usage: cdsa top FILE [-n N]\n");
    return 2;
  }
  TraceFile tf;
  if (!load_profile("top", path, &tf)) return 1;
  std::map<uint32_t, const StackText*> stacks;
  for (const auto& [id, st] : tf.data.stacks) stacks[id] = &st;
  auto sites = tf.data.profile.sites;
  std::stable_sort(sites.begin(), sites.end(),
                   [](const ProfileSiteText& a, const ProfileSiteText& b) { return a.count > b.count; });
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
    const StackText& st = *it->second;
    size_t k = 0;
    for (const auto& f : st.python) {
      if (k++ == 3) break;
      out += fmt::format("{:>22}{} {}:{} in {}\n", "", k == 1 ? "at  " : "<-  ", f.file, f.line, f.function);
    }
    if (st.python.empty()) out += fmt::format("{:>22}at  {}\n", "", site_of(st));
  }
  return print_stdout(out) ? 0 : 1;
}

}  // namespace

int trace_command(const std::string& name, int argc, char** argv) {
  if (name == "report") return cmd_report(argc, argv);
  if (name == "export") return cmd_export(argc, argv);
  if (name == "merge") return cmd_merge(argc, argv);
  if (name == "flame") return cmd_flame(argc, argv);
  if (name == "top") return cmd_top(argc, argv);
  return -1;
}

}  // namespace cdsa::cli
