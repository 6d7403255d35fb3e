// cdsa export --chrome FILE... [-o OUT]: Chrome/Perfetto trace-event JSON of the recorded launches.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/trace_common.h"
#include "report/trace_enums.h"

namespace cdsa::cli {
namespace {

// Most recent call last, as the report prints: Python frames, then native frames.
std::string stack_lines_json(const report::CallStack* st) {
  std::string out = "[";
  bool first = true;
  auto add = [&](const std::string& s) {
    out += (first ? "" : ",") + report::json_escape(s);
    first = false;
  };
  if (st) {
    for (auto it = st->python.rbegin(); it != st->python.rend(); ++it) add(frame_line(*it));
    for (auto it = st->native.rbegin(); it != st->native.rend(); ++it) add(frame_line(*it));
  }
  return out + "]";
}

// Appends one trace file's processes, tracks and launches. `t0`: the time that becomes 0.
void chrome_events(const report::TraceData& t, int pid, uint64_t t0, std::string& out) {
  auto stacks = stacks_by_id(t);
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
                     out.back() == '\n' ? "" : ",\n", pid, report::json_escape("cdsa: " + label));
  if (t.process.rank >= 0)
    out += fmt::format(
        ",\n{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}}}", pid,
        t.process.rank);
  for (const auto& [id, k] : track) {
    std::string name =
        (id >> 63) ? fmt::format("stream <handle {:#x}>", id & ~(1ull << 63)) : fmt::format("stream {}", id);
    out += fmt::format(",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":{}}}}}",
                       pid, k, report::json_escape(name));
  }
  for (const auto& l : t.launches) {
    auto it = stacks.find(l.stack_id);
    const report::CallStack* st = it == stacks.end() ? nullptr : it->second;
    bool failed = failing.count(l.seq) > 0;
    std::string name =
        l.kind == report::trace_enum::LaunchKind::graph ? fmt::format("graph {}", l.graph_id) : (l.kernel.empty() ? "<unknown>" : l.kernel);
    double ts = static_cast<double>(l.time_ns - std::min(t0, l.time_ns)) / 1000.0;
    out += fmt::format(
        ",\n{{\"ph\":\"X\",\"cat\":\"{}\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":1,\"args\":{{"
        "\"seq\":{},\"stream_seq\":{},\"stream_id\":{},\"kernel\":{},\"kind\":{},\"grid\":\"{},{},{}\","
        "\"block\":\"{},{},{}\",\"shared_mem\":{},\"thread\":{},\"captured\":{},\"stack_id\":{},\"stack\":{}{}}}}}",
        failed ? "failing-launch" : (l.captured ? "captured" : "launch"),
        report::json_escape(failed ? "FAULT: " + name : name), pid, track[l.stream_id], ts, l.seq, l.stream_seq,
        l.stream_id, report::json_escape(l.kernel), report::json_escape(l.kind), l.grid[0], l.grid[1], l.grid[2],
        l.block[0], l.block[1], l.block[2], l.shared_mem, l.tid, l.captured ? "true" : "false",
        l.stack_id == 0xffffffffu ? std::string("null") : std::to_string(l.stack_id), stack_lines_json(st),
        failed ? ",\"fault\":" + report::json_escape(fault_name) : std::string());
    if (failed)
      out += fmt::format(
          ",\n{{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"fault\",\"name\":{},\"pid\":{},\"tid\":{},"
          "\"ts\":{:.3f},\"args\":{{\"seq\":{},\"surfaced_at\":{}}}}}",
          report::json_escape(fault_name), pid, track[l.stream_id], ts, l.seq,
          report::json_escape(t.report.surfaced_call));
  }
}

}  // namespace

int cmd_export(int argc, char** argv) {
  bool chrome = false;
  std::vector<std::string> paths;
  std::string out_path;
  CommandLine cl{"export",
                 "usage: cdsa export --chrome FILE... [-o OUT]\n"
                 "Writes the recorded launches as Chrome trace-event JSON (loads in ui.perfetto.dev and\n"
                 "chrome://tracing): one track per stream, one event per launch with its kernel, launch number\n"
                 "and stack, the failing launch marked. Times are when the host launched (cdsa does not see\n"
                 "how long kernels ran). Several files (the ranks of one job) become one timeline, a process\n"
                 "each; their clocks are aligned when they ran on one host. Writes to stdout unless -o is given.\n",
                 {{"--chrome", false, store(chrome, true)},
                  {"-o|--output", true,
                   [&](const char* v) {
                     out_path = v;
                     return true;
                   },
                   "a file name"}},
                 [&](const char* a) {
                   paths.push_back(a);
                   return kGoOn;
                 }};
  if (int rc = parse_command_line(cl, argc, argv); rc != kGoOn) return rc;
  if (!chrome || paths.empty()) return usage_error(cl);
  std::vector<report::TraceFile> files(paths.size());
  {
    Progress progress("reading trace files", paths.size());
    for (size_t i = 0; i < paths.size(); ++i) {
      progress.step(i + 1);
      base::StatusOr<report::TraceFile> read = report::read_trace_file(paths[i]);
      if (!read.ok()) {
        progress.finish();
        fail("export", read.status().prefixed(paths[i]));
        return 1;
      }
      files[i] = std::move(*read);
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
  for (size_t i = 0; i < paths.size(); ++i) out += (i ? "," : "") + report::json_escape(paths[i]);
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

}  // namespace cdsa::cli
