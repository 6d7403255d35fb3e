#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "base/io.h"
#include "report/trace.h"

namespace cdsa::report {

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

namespace {

std::string hex(uint64_t v) { return fmt::format("\"{:#x}\"", v); }

std::string stack_json(const CallStack& st) {
  std::string out = "{\"python\":[";
  for (size_t i = 0; i < st.python.size(); ++i) {
    const auto& f = st.python[i];
    out += fmt::format("{}{{\"file\":{},\"function\":{},\"line\":{},\"source\":{}}}", i ? "," : "",
                       json_escape(f.file), json_escape(f.function), f.line, json_escape(f.source));
  }
  out += "],\"native\":[";
  for (size_t i = 0; i < st.native.size(); ++i) {
    const auto& f = st.native[i];
    out += fmt::format("{}{{\"pc\":{},\"module\":{},\"module_offset\":{},\"function\":{},\"file\":{},\"line\":{}}}",
                       i ? "," : "", hex(f.pc), json_escape(f.module), hex(f.module_offset), json_escape(f.function),
                       json_escape(f.file), f.line);
  }
  out += "]}";
  return out;
}

std::string launch_json(const Launch& l) {
  return fmt::format(
      "{{\"seq\":{},\"stream_seq\":{},\"stream_id\":{},\"graph_id\":{},\"time_ns\":{},\"ctx_id\":{},\"tid\":{},"
      "\"stack_id\":{},\"kernel\":{},\"kind\":{},\"grid\":[{},{},{}],\"block\":[{},{},{}],\"shared_mem\":{},"
      "\"captured\":{},\"per_thread_stream\":{}}}",
      l.seq, l.stream_seq, l.stream_id, l.graph_id, l.time_ns, l.ctx_id, l.tid,
      l.stack_id == 0xffffffffu ? std::string("null") : std::to_string(l.stack_id), json_escape(l.kernel),
      json_escape(l.kind), l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared_mem,
      l.captured ? "true" : "false", l.per_thread_stream ? "true" : "false");
}

}  // namespace

std::string report_to_json(const FaultReport& r) {
  const Origin& o = r.origin;
  std::string out = fmt::format(
      "{{\"origin\":{{\"rank\":{},\"world_size\":{},\"pid\":{},\"host\":{},\"gpu_ordinal\":{},\"gpu_name\":{},"
      "\"gpu_pci_bus_id\":{}}},",
      o.rank, o.world_size, o.pid, json_escape(o.host), o.gpu_ordinal, json_escape(o.gpu_name),
      json_escape(o.gpu_pci_bus_id));
  out += fmt::format(
      "\"code\":{},\"error_name\":{},\"error_string\":{},\"surfaced_call\":{},\"surfaced_tid\":{},"
      "\"surfaced_stack\":{},\"attribution\":{},\"launches_recorded\":{},\"fault_time_unix_ns\":{},\"candidates\":[",
      r.code, json_escape(r.error_name), json_escape(r.error_string), json_escape(r.surfaced_call), r.surfaced_tid,
      stack_json(r.surfaced_stack), json_escape(attribution_name(r.attribution)), r.launches_recorded,
      r.fault_time_unix_ns);
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const auto& c = r.candidates[i];
    out += fmt::format("{}{{\"launch\":{},\"stack\":{},\"pending\":{},\"why\":{},\"graph_nodes\":[", i ? "," : "",
                       launch_json(c.launch), stack_json(c.stack), c.pending, json_escape(c.why));
    for (size_t j = 0; j < c.graph_nodes.size(); ++j)
      out += fmt::format("{}{{\"launch\":{},\"stack\":{},\"origin\":{},\"uncertain\":{}}}", j ? "," : "",
                         launch_json(c.graph_nodes[j].launch), stack_json(c.graph_nodes[j].stack),
                         json_escape(c.graph_nodes[j].node_origin), c.graph_nodes[j].node_uncertain ? "true" : "false");
    out += fmt::format("],\"graph_node_pick\":{},\"graph_nodes_ambiguous\":{}", c.graph_node_pick,
                       c.graph_nodes_ambiguous ? "true" : "false");
    out += fmt::format(",\"autograd_node\":{},\"forward_candidates\":[", json_escape(c.autograd_node));
    for (size_t j = 0; j < c.forward_candidates.size(); ++j)
      out += fmt::format("{}{{\"launch\":{},\"stack\":{}}}", j ? "," : "",
                         launch_json(c.forward_candidates[j].launch), stack_json(c.forward_candidates[j].stack));
    out += "]}";
  }
  out += "],\"device_messages\":[";
  for (size_t i = 0; i < r.device_asserts.size(); ++i)
    out += (i ? "," : "") + json_escape(r.device_asserts[i].message);
  out += "],\"hints\":[";
  for (size_t i = 0; i < r.hints.size(); ++i) out += (i ? "," : "") + json_escape(r.hints[i]);
  out += "],\"notes\":[";
  for (size_t i = 0; i < r.notes.size(); ++i) out += (i ? "," : "") + json_escape(r.notes[i]);
  out += fmt::format("],\"trace_path\":{}}}", json_escape(r.trace_path));
  return out;
}

std::string trace_to_json(const TraceData& t) {
  std::string out = fmt::format("{{\"format\":\"cdsa-trace\",\"version\":{},\"reason\":{},\n", kTraceVersion,
                                json_escape(t.reason));
  out += fmt::format("\"cdsa\":{{\"version\":{},\"config\":{{", json_escape(t.cdsa_version));
  for (size_t i = 0; i < t.config.size(); ++i)
    out += fmt::format("{}{}:{}", i ? "," : "", json_escape(t.config[i].first), json_escape(t.config[i].second));
  out += "}},\n";
  const auto& p = t.process;
  out += fmt::format("\"process\":{{\"pid\":{},\"host\":{},\"argv\":[", p.pid, json_escape(p.host));
  for (size_t i = 0; i < p.argv.size(); ++i) out += (i ? "," : "") + json_escape(p.argv[i]);
  out += fmt::format(
      "],\"start_time_unix_ns\":{},\"rank\":{},\"world_size\":{},\"local_rank\":{},\"driver_version\":{},"
      "\"runtime_version\":{},\"gpu\":{}}},\n",
      p.start_time_unix_ns, p.rank, p.world_size, p.local_rank, p.driver_version, p.runtime_version,
      json_escape(p.gpu));
  out += "\"modules\":[";
  for (size_t i = 0; i < t.modules.size(); ++i) {
    const auto& m = t.modules[i];
    out += fmt::format("{}\n{{\"path\":{},\"build_id\":{},\"bias\":{},\"ranges\":[", i ? "," : "",
                       json_escape(m.path), json_escape(m.build_id), hex(m.bias));
    for (size_t j = 0; j < m.ranges.size(); ++j)
      out += fmt::format("{}[{},{}]", j ? "," : "", hex(m.ranges[j].first), hex(m.ranges[j].second));
    out += "]}";
  }
  out += "],\n\"stacks\":[";
  for (size_t i = 0; i < t.stacks.size(); ++i)
    out += fmt::format("{}\n{{\"id\":{},\"stack\":{}}}", i ? "," : "", t.stacks[i].first,
                       stack_json(t.stacks[i].second));
  out += "],\n\"streams\":[";
  for (size_t i = 0; i < t.streams.size(); ++i) {
    const auto& s = t.streams[i];
    out += fmt::format("{}{{\"id\":{},\"launched\":{},\"landed\":{},\"breadcrumbs\":{}}}", i ? "," : "", s.id,
                       s.launched, s.landed, s.breadcrumbs ? "true" : "false");
  }
  out += "],\n\"launches\":[";
  for (size_t i = 0; i < t.launches.size(); ++i) out += (i ? ",\n" : "\n") + launch_json(t.launches[i]);
  out += "]";
  if (t.has_profile) {
    out += fmt::format(",\n\"profile\":{{\"capacity\":{},\"dropped\":{},\"sites\":[", t.profile.capacity,
                       t.profile.dropped);
    for (size_t i = 0; i < t.profile.sites.size(); ++i) {
      const auto& s = t.profile.sites[i];
      out += fmt::format("{}\n{{\"stack_id\":{},\"kernel\":{},\"count\":{}}}", i ? "," : "",
                         s.stack_id == 0xffffffffu ? std::string("null") : std::to_string(s.stack_id),
                         json_escape(s.kernel), s.count);
    }
    out += "]}";
  }
  out += ",\n\"report\":";
  out += t.has_fault ? report_to_json(t.report) : std::string("null");
  out += "}\n";
  return out;
}

std::string expand_trace_pattern(const std::string& pattern, const std::string& host, int pid, int rank,
                                 uint64_t start_unix_s) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    char c = pattern[++i];
    switch (c) {
      case 'h': out += host; break;
      case 'p': out += std::to_string(pid); break;
      case 'r': out += rank >= 0 ? std::to_string(rank) : std::string("norank"); break;
      case 'R': out += rank >= 0 ? "-rank" + std::to_string(rank) : std::string(); break;
      case 't': out += std::to_string(start_unix_s); break;
      case '%': out += '%'; break;
      default: out += '%'; out += c;
    }
  }
  return out;
}

bool write_trace_file(const std::string& path, const std::string& contents, std::string* written,
                      std::string* error) {
  std::string tmp = fmt::format("{}.tmp-{}", path, getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = fmt::format("cannot create {}: {}", tmp, strerror(errno));
    return false;
  }
  if (!base::write_all(fd, contents.data(), contents.size())) {
    *error = fmt::format("cannot write {}: {}", tmp, strerror(errno));
    close(fd);
    unlink(tmp.c_str());
    return false;
  }
  fsync(fd);
  close(fd);
  // link() never replaces an existing name, file or symbolic link.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::string target = path;
    if (attempt > 0) {
      auto dot = path.rfind('.');
      auto slash = path.rfind('/');
      if (dot != std::string::npos && (slash == std::string::npos || dot > slash))
        target = fmt::format("{}-{}{}", path.substr(0, dot), attempt, path.substr(dot));
      else
        target = fmt::format("{}-{}", path, attempt);
    }
    if (link(tmp.c_str(), target.c_str()) == 0) {
      unlink(tmp.c_str());
      *written = target;
      return true;
    }
    if (errno != EEXIST) {
      *error = fmt::format("cannot create {}: {}", target, strerror(errno));
      unlink(tmp.c_str());
      return false;
    }
  }
  unlink(tmp.c_str());
  *error = fmt::format("cannot create {}: every name up to -999 is taken", path);
  return false;
}

}  // namespace cdsa::report
