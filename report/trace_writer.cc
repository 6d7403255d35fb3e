#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "base/io.h"
#include "report/trace.h"
#include "report/trace_fields.h"

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

// Writes the objects of report/trace_fields.def as JSON, field by field in the table's order. Trace: the trace
// file (stacks by id only); SelfContained: the report alone, each stack also in place (Presence::Inline,
// InlineOnly).
class JsonWriter {
 public:
  enum class Mode { Trace, SelfContained };
  explicit JsonWriter(Mode mode) : mode_(mode) {}
  std::string out;

  template <class T, class K>
  void field(const char* k, const T& m, K kind, Presence p) {
    if (skipped(p)) return;
    key(k);
    value(m, kind);
  }
  template <class T, class F>
  void nested(const char* k, const T& m, trace_kind::Obj, Presence p, F&& visit) {
    if (skipped(p)) return;
    key(k);
    object(m, visit);
  }
  template <class T, class F>
  void nested(const char* k, const std::vector<T>& m, trace_kind::Objects, Presence p, F&& visit) {
    if (skipped(p)) return;
    key(k);
    // One element a line in the trace file's top-level lists (and the profile's sites): greppable, diffable.
    const bool lines = mode_ == Mode::Trace && depth_ <= 2;
    out += '[';
    for (size_t i = 0; i < m.size(); ++i) {
      if (i) out += ',';
      if (lines) out += '\n';
      object(m[i], visit);
    }
    out += ']';
  }
  template <class T, class F>
  void nullable(const char* k, const T& m, bool present, Presence p, F&& visit) {
    if (!present && p == Presence::Optional) return;  // an optional object is left out rather than null
    key(k);
    if (present)
      object(m, visit);
    else
      out += "null";
  }
  void constant(const char* k, trace_kind::Format) {
    key(k);
    out += "\"cdsa-trace\"";
  }
  void constant(const char* k, trace_kind::Version) {
    key(k);
    out += std::to_string(kTraceVersion);
  }

  // The object `m` through `visit` (a visit_<def> of report/trace_fields.h).
  template <class T, class F>
  void object(const T& m, F&& visit) {
    const bool first = first_;
    out += '{';
    first_ = true;
    ++depth_;
    visit(m);
    --depth_;
    out += '}';
    first_ = first;
  }

 private:
  bool skipped(Presence p) const {
    return (p == Presence::Inline || p == Presence::InlineOnly) && mode_ != Mode::SelfContained;
  }
  void key(const char* k) {
    if (!first_) out += ',';
    if (!first_ && depth_ == 1 && mode_ == Mode::Trace && ++top_keys_ > 2) out += '\n';  // after format, version
    first_ = false;
    out += '"';
    out += k;
    out += "\":";
  }
  static std::string hex(uint64_t v) { return fmt::format("\"{:#x}\"", v); }
  void value(uint64_t v, trace_kind::U64) { out += std::to_string(v); }
  void value(uint32_t v, trace_kind::U32) { out += std::to_string(v); }
  void value(int v, trace_kind::I32) { out += std::to_string(v); }
  void value(int v, trace_kind::Rank) { out += std::to_string(v); }
  void value(const std::string& v, trace_kind::Str) { out += json_escape(v); }
  void value(const std::string& v, trace_kind::LaunchKind) { out += json_escape(v); }
  void value(const std::string& v, trace_kind::Reason) { out += json_escape(v); }
  void value(bool v, trace_kind::Bool) { out += v ? "true" : "false"; }
  void value(uint64_t v, trace_kind::Hex) { out += hex(v); }
  void value(uint32_t v, trace_kind::StackId) { out += v == 0xffffffffu ? std::string("null") : std::to_string(v); }
  void value(Attribution v, trace_kind::Attribution) { out += json_escape(attribution_name(v)); }
  void value(const uint32_t (&v)[3], trace_kind::Dim3) { out += fmt::format("[{},{},{}]", v[0], v[1], v[2]); }
  void value(const std::vector<std::string>& v, trace_kind::Strings) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + json_escape(v[i]);
    out += ']';
  }
  void value(const std::vector<base::DeviceAssert>& v, trace_kind::DeviceMessages) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + json_escape(v[i].message);
    out += ']';
  }
  void value(const std::vector<std::pair<std::string, std::string>>& v, trace_kind::Config) {
    out += '{';
    for (size_t i = 0; i < v.size(); ++i)
      out += fmt::format("{}{}:{}", i ? "," : "", json_escape(v[i].first), json_escape(v[i].second));
    out += '}';
  }
  void value(const std::vector<std::pair<uint64_t, uint64_t>>& v, trace_kind::Ranges) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i)
      out += fmt::format("{}[{},{}]", i ? "," : "", hex(v[i].first), hex(v[i].second));
    out += ']';
  }

  Mode mode_;
  bool first_ = true;
  int depth_ = 0;
  int top_keys_ = 0;
};

}  // namespace

std::string report_to_json(const FaultReport& r) {
  JsonWriter w(JsonWriter::Mode::SelfContained);
  w.object(r, [&](const FaultReport& x) { visit_report(x, w); });
  return std::move(w.out);
}

void fill_report_stacks(TraceData* t) {
  std::map<uint32_t, const CallStack*> by_id;
  for (const auto& e : t->stacks) by_id.emplace(e.id, &e.stack);
  for_each_report_stack(t->report, [&](uint32_t id, CallStack& st) {
    auto it = by_id.find(id);
    if (it != by_id.end()) st = *it->second;
  });
}

std::string trace_to_json(const TraceData& t) {
  // Every stack the report names is stored once, under "stacks" (the report keeps only its id).
  std::map<uint32_t, const CallStack*> missing;
  {
    std::set<uint32_t> have;
    for (const auto& e : t.stacks) have.insert(e.id);
    if (t.has_fault)
      for_each_report_stack(t.report, [&](uint32_t id, const CallStack& st) {
        if (id != 0xffffffffu && !have.count(id)) missing.emplace(id, &st);
      });
  }
  const TraceData* src = &t;
  TraceData with_all;
  if (!missing.empty()) {
    with_all = t;
    for (const auto& [id, st] : missing) with_all.stacks.push_back({id, *st});
    std::stable_sort(with_all.stacks.begin(), with_all.stacks.end(),
                     [](const StackEntry& a, const StackEntry& b) { return a.id < b.id; });
    src = &with_all;
  }
  JsonWriter w(JsonWriter::Mode::Trace);
  w.object(*src, [&](const TraceData& x) { visit_trace(x, w); });
  w.out += '\n';
  return std::move(w.out);
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
