#include "report/trace_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "base/io.h"
#include "report/trace_enums.h"
#include "report/trace_fields.h"

namespace cdsa::report {
namespace {

using json = nlohmann::json;

// The JSON parser and the walk below recurse per nesting level: refuse deep
// nesting before parsing, so hostile input cannot exhaust the stack.
bool nesting_ok(std::string_view text, int max_depth, std::string* error) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        *error = fmt::format("JSON nested deeper than {} levels", max_depth);
        return false;
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a non-integer number";
    default:
      return "something else";
  }
}

// Reads the document through the table (report/trace_fields.h): each visited field is looked up in the current
// JSON object and checked before it is stored; the first problem found is kept in `err` with the path to it, and
// every later visit does nothing.
class TraceReader {
 public:
  std::string err;

  bool ok() const { return err.empty(); }

  bool read(const json& doc, TraceData* t) {
    if (!expect(doc, json::value_t::object, "", "a JSON object at the top level")) return false;
    obj_ = &doc;
    visit_trace(*t, *this);
    if (!ok()) return false;
    if (t->reason == trace_enum::Reason::fault && !t->has_fault) return fail("report", "reason is \"fault\" but the report is null");
    if (t->has_fault && !report_stacks(t)) return false;
    return true;
  }

  // ---- the visitor (report/trace_fields.h) ----
  template <class T, class K>
  void field(const char* key, T& m, K kind, Presence p) {
    if (const json* j = find(key, p)) value(*j, at(where_, key), m, kind);
  }
  template <class T, class F>
  void nested(const char* key, T& m, trace_kind::Obj, Presence p, F&& visit) {
    const json* j = find(key, p);
    if (!j) return;
    const std::string w = at(where_, key);
    if (expect(*j, json::value_t::object, w, "an object")) inside(*j, w, m, visit);
  }
  template <class T, class F>
  void nested(const char* key, std::vector<T>& m, trace_kind::Objects, Presence p, F&& visit) {
    const json* j = find(key, p);
    if (!j) return;
    const std::string wl = at(where_, key);
    if (!expect(*j, json::value_t::array, wl, "an array")) return;
    for (size_t i = 0; i < j->size() && ok(); ++i) {
      const json& e = (*j)[i];
      const std::string wi = at(wl, i);
      T x{};
      if (!expect(e, json::value_t::object, wi, "an object")) return;
      inside(e, wi, x, visit);
      if (ok() && check(x, wi)) m.push_back(std::move(x));
    }
  }
  template <class T, class F>
  void nullable(const char* key, T& m, bool& present, Presence p, F&& visit) {
    present = false;
    const json* j = find(key, p);
    if (!j || j->is_null()) return;
    const std::string w = at(where_, key);
    if (!expect(*j, json::value_t::object, w, "an object or null")) return;
    present = true;
    inside(*j, w, m, visit);
  }
  void constant(const char* key, trace_kind::Format) {
    const json* j = find(key, Presence::Required);
    if (!j) return;
    if (!expect(*j, json::value_t::string, at(where_, key), "a string")) return;
    const std::string& format = j->get_ref<const std::string&>();
    if (format != "cdsa-trace")
      fail("", fmt::format("not a cdsa trace file (format is \"{}\", expected \"cdsa-trace\")", format.substr(0, 40)));
  }
  void constant(const char* key, trace_kind::Version) {
    const json* j = find(key, Presence::Required);
    if (!j) return;
    if (!j->is_number_integer() || j->get<int64_t>() < kOldestTraceVersion || j->get<int64_t>() > kTraceVersion) {
      fail("", fmt::format("unsupported trace version {} (this cdsa reads versions {} to {})", j->dump().substr(0, 40),
                           kOldestTraceVersion, kTraceVersion));
      return;
    }
    version_ = static_cast<int>(j->get<int64_t>());
  }

 private:
  bool fail(const std::string& where, const std::string& what) {
    if (err.empty()) err = where.empty() ? what : fmt::format("{}: {}", where, what);
    return false;
  }
  bool expect(const json& j, json::value_t t, const std::string& where, const char* what) {
    if (j.type() == t) return true;
    return fail(where, fmt::format("expected {}, found {}", what, type_name(j)));
  }
  static std::string at(const std::string& where, const char* key) {
    return where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
  }
  static std::string at(const std::string& where, size_t i) { return fmt::format("{}[{}]", where, i); }

  // The member `key` of the current object, or null: absent and allowed to be (by its presence and this file's
  // version), or after a problem.
  const json* find(const char* key, Presence p) {
    if (!ok()) return nullptr;
    if (p == Presence::Inline && version_ >= 2) return nullptr;  // stored once, under "stacks"
    if (p == Presence::InlineOnly) return nullptr;                   // no file stores it in place
    if (p == Presence::Since2 && version_ < 2) return nullptr;
    auto it = obj_->find(key);
    if (it != obj_->end()) return &*it;
    if (p != Presence::Optional)
      fail(where_.empty() ? std::string("the top-level object") : where_, fmt::format("missing field \"{}\"", key));
    return nullptr;
  }
  template <class T, class F>
  void inside(const json& j, const std::string& w, T& m, F& visit) {
    const json* obj = obj_;
    std::string where = std::move(where_);
    obj_ = &j;
    where_ = w;
    visit(m);
    obj_ = obj;
    where_ = std::move(where);
  }

  // Checks that span fields, after an element was read.
  template <class T>
  bool check(const T&, const std::string&) {
    return true;
  }
  bool check(const Candidate& c, const std::string& w) {
    if (c.graph_node_pick < -1 || c.graph_node_pick >= static_cast<int>(c.graph_nodes.size()))
      return fail(at(w, "graph_node_pick"), "expected -1 or an index into graph_nodes");
    return true;
  }
  bool check(const StackEntry& e, const std::string& w) {
    if (!stack_ids_.insert(e.id).second) return fail(at(w, "id"), fmt::format("stack {} is listed twice", e.id));
    return true;
  }

  // Version 2 stores the report's stacks under "stacks" only: each id the report names must be there. Version 1
  // stored them in place: those not under "stacks" join it, so that every stack is in one table either way.
  bool report_stacks(TraceData* t) {
    if (version_ < 2) {
      for_each_report_stack(t->report, [&](uint32_t id, const CallStack& st) {
        if (id != 0xffffffffu && stack_ids_.insert(id).second) t->stacks.push_back({id, st});
      });
      // Version 1 gave the surfaced stack no id: it gets the first one free, so that it is kept when written again.
      FaultReport& r = t->report;
      if (!r.surfaced_stack.python.empty() || !r.surfaced_stack.native.empty()) {
        uint32_t id = 0;
        while (stack_ids_.count(id)) ++id;
        stack_ids_.insert(id);
        r.surfaced_stack_id = id;
        t->stacks.push_back({id, r.surfaced_stack});
      }
      std::sort(t->stacks.begin(), t->stacks.end(),
                [](const StackEntry& a, const StackEntry& b) { return a.id < b.id; });
      return true;
    }
    std::vector<std::pair<std::string, uint32_t>> refs;  // where, id
    const FaultReport& r = t->report;
    refs.emplace_back("report.surfaced_stack_id", r.surfaced_stack_id);
    for (size_t i = 0; i < r.candidates.size(); ++i) {
      const Candidate& c = r.candidates[i];
      const std::string wc = at(at("report", "candidates"), i);
      refs.emplace_back(at(at(wc, "launch"), "stack_id"), c.launch.stack_id);
      for (size_t k = 0; k < c.graph_nodes.size(); ++k) {
        refs.emplace_back(at(at(at(at(wc, "graph_nodes"), k), "launch"), "stack_id"), c.graph_nodes[k].launch.stack_id);
        refs.emplace_back(at(at(at(wc, "graph_nodes"), k), "update_stack_id"), c.graph_nodes[k].update_stack_id);
      }
      for (size_t k = 0; k < c.forward_candidates.size(); ++k)
        refs.emplace_back(at(at(at(at(wc, "forward_candidates"), k), "launch"), "stack_id"),
                          c.forward_candidates[k].launch.stack_id);
    }
    for (const auto& [w, id] : refs)
      if (id != 0xffffffffu && !stack_ids_.count(id)) return fail(w, fmt::format("stack {} is not in stacks", id));
    fill_report_stacks(t);
    return true;
  }

  // ---- values, by kind ----
  bool u64_value(const json& j, const std::string& where, uint64_t max, uint64_t* out) {
    if (!j.is_number_unsigned() || j.get<uint64_t>() > max)
      return fail(where, fmt::format("expected an integer in 0..{}, found {}", max,
                                     j.is_number_integer() ? j.dump() : std::string(type_name(j))));
    *out = j.get<uint64_t>();
    return true;
  }
  bool i32_value(const json& j, const std::string& where, int64_t lo, int* out) {
    const int64_t hi = INT32_MAX;
    if (!j.is_number_integer() || (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(hi)) ||
        (!j.is_number_unsigned() && (j.get<int64_t>() < lo || j.get<int64_t>() > hi)))
      return fail(where, fmt::format("expected an integer in {}..{}, found {}", lo, hi,
                                     j.is_number_integer() ? j.dump() : std::string(type_name(j))));
    *out = static_cast<int>(j.get<int64_t>());
    return true;
  }
  // Addresses are written as "0x..." strings (JSON numbers lose precision above 2^53 in many readers).
  bool hex_value(const json& j, const std::string& where, uint64_t* out) {
    if (!expect(j, json::value_t::string, where, "a hexadecimal string \"0x...\"")) return false;
    const std::string& s = j.get_ref<const std::string&>();
    if (s.size() < 3 || s.size() > 18 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
      return fail(where, fmt::format("expected a hexadecimal string \"0x...\" of at most 16 digits, found \"{}\"",
                                     s.substr(0, 40)));
    uint64_t v = 0;
    for (size_t i = 2; i < s.size(); ++i) {
      char c = s[i];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0)
        return fail(where, fmt::format("expected a hexadecimal string \"0x...\", found \"{}\"", s.substr(0, 40)));
      v = (v << 4) | static_cast<uint64_t>(d);
    }
    *out = v;
    return true;
  }
  bool string_value(const json& j, const std::string& w, std::string* out) {
    if (!expect(j, json::value_t::string, w, "a string")) return false;
    *out = j.get_ref<const std::string&>();
    return true;
  }
  bool strings_value(const json& j, const std::string& w, std::vector<std::string>* out) {
    if (!expect(j, json::value_t::array, w, "an array")) return false;
    for (size_t i = 0; i < j.size(); ++i) {
      if (!expect(j[i], json::value_t::string, at(w, i), "a string")) return false;
      out->push_back(j[i].get<std::string>());
    }
    return true;
  }

  void value(const json& j, const std::string& w, uint64_t& m, trace_kind::U64) { u64_value(j, w, UINT64_MAX, &m); }
  void value(const json& j, const std::string& w, uint32_t& m, trace_kind::U32) {
    uint64_t v = 0;
    if (u64_value(j, w, UINT32_MAX, &v)) m = static_cast<uint32_t>(v);
  }
  void value(const json& j, const std::string& w, int& m, trace_kind::I32) { i32_value(j, w, INT32_MIN, &m); }
  void value(const json& j, const std::string& w, int& m, trace_kind::Rank) { i32_value(j, w, -1, &m); }
  void value(const json& j, const std::string& w, std::string& m, trace_kind::Str) { string_value(j, w, &m); }
  void value(const json& j, const std::string& w, bool& m, trace_kind::Bool) {
    if (expect(j, json::value_t::boolean, w, "true or false")) m = j.get<bool>();
  }
  void value(const json& j, const std::string& w, std::vector<std::string>& m, trace_kind::Strings) {
    strings_value(j, w, &m);
  }
  void value(const json& j, const std::string& w, uint64_t& m, trace_kind::Hex) { hex_value(j, w, &m); }
  void value(const json& j, const std::string& w, uint32_t (&m)[3], trace_kind::Dim3) {
    if (!j.is_array() || j.size() != 3) {
      fail(w, fmt::format("expected an array of 3 unsigned 32-bit integers, found {}", type_name(j)));
      return;
    }
    for (size_t i = 0; i < 3; ++i) {
      uint64_t v = 0;
      if (!u64_value(j[i], at(w, i), UINT32_MAX, &v)) return;
      m[i] = static_cast<uint32_t>(v);
    }
  }
  void value(const json& j, const std::string& w, uint32_t& m, trace_kind::StackId) {
    if (j.is_null()) {
      m = 0xffffffffu;
      return;
    }
    uint64_t v = 0;
    if (u64_value(j, w, UINT32_MAX - 1, &v)) m = static_cast<uint32_t>(v);
  }
  // `s` as one of the values of `kind` (report/trace_enums.h): its index, or -1 after saying what was expected
  // (`also`: one more accepted value, named last).
  int enum_index(const std::string& w, std::string_view kind, const std::string& s, const char* also = nullptr) {
    std::vector<std::string_view> values = trace_enum_values(kind);
    for (size_t i = 0; i < values.size(); ++i)
      if (s == values[i]) return static_cast<int>(i);
    if (also) values.push_back(also);
    std::string expected;
    for (size_t i = 0; i < values.size(); ++i)
      expected += fmt::format("{}{}", i == 0 ? "" : i + 1 == values.size() ? " or " : ", ", values[i]);
    fail(w, fmt::format("expected {}, found \"{}\"", expected, s.substr(0, 40)));
    return -1;
  }
  void value(const json& j, const std::string& w, std::string& m, trace_kind::LaunchKind) {
    if (!string_value(j, w, &m)) return;
    // "": a candidate whose launch record was overwritten in the ring (only its stream and number are known).
    if (!m.empty()) enum_index(w, "LaunchKind", m, "\"\"");
  }
  void value(const json& j, const std::string& w, std::string& m, trace_kind::Reason) {
    if (string_value(j, w, &m)) enum_index(w, "Reason", m);
  }
  void value(const json& j, const std::string& w, Attribution& m, trace_kind::Attribution) {
    std::string a;
    if (!string_value(j, w, &a)) return;
    const int i = enum_index(w, "Attribution", a);  // the rows are in report::Attribution's order
    if (i >= 0) m = static_cast<Attribution>(i);
  }
  void value(const json& j, const std::string& w, std::vector<base::DeviceAssert>& m, trace_kind::DeviceMessages) {
    std::vector<std::string> lines;
    if (!strings_value(j, w, &lines)) return;
    for (const auto& line : lines) {
      base::DeviceAssert a;
      if (!base::parse_device_assert(line, &a)) a.message = line;  // kept as printed even when it is no assert line
      m.push_back(std::move(a));
    }
  }
  void value(const json& j, const std::string& w, std::vector<std::pair<std::string, std::string>>& m,
             trace_kind::Config) {
    if (!expect(j, json::value_t::object, w, "an object")) return;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!expect(it.value(), json::value_t::string, at(w, it.key().c_str()), "a string")) return;
      m.emplace_back(it.key(), it.value().get<std::string>());
    }
  }
  void value(const json& j, const std::string& w, std::vector<std::pair<uint64_t, uint64_t>>& m, trace_kind::Ranges) {
    if (!expect(j, json::value_t::array, w, "an array")) return;
    for (size_t k = 0; k < j.size(); ++k) {
      const json& r = j[k];
      const std::string wr = at(w, k);
      uint64_t a = 0, b = 0;
      if (!r.is_array() || r.size() != 2) {
        fail(wr, fmt::format("expected [start, end], found {}", type_name(r)));
        return;
      }
      if (!hex_value(r[0], at(wr, size_t{0}), &a) || !hex_value(r[1], at(wr, size_t{1}), &b)) return;
      if (b < a) {
        fail(wr, "range ends before it starts");
        return;
      }
      m.emplace_back(a, b);
    }
  }

  const json* obj_ = nullptr;  // the object whose fields are being read
  std::string where_;          // its path ("" at the top level)
  int version_ = kTraceVersion;
  std::set<uint32_t> stack_ids_;  // the ids under "stacks"
};

// Error messages quote pieces of the file: keep them one printable ASCII line.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

base::Status parse_impl(std::string_view text, TraceFile* out);

}  // namespace

base::StatusOr<TraceFile> parse_trace(std::string_view text) {
  TraceFile out;
  base::Status s = parse_impl(text, &out);
  if (!s.ok()) return base::Status::error(printable(s.message()));
  return out;
}

namespace {

base::Status parse_impl(std::string_view text, TraceFile* out) {
  *out = TraceFile{};
  if (text.empty()) return base::Status::error("empty file");
  if (text.size() > kMaxTraceBytes)
    return base::Status::error(fmt::format("larger than {} bytes: not a trace file cdsa wrote", kMaxTraceBytes));
  if (std::string error; !nesting_ok(text, kMaxTraceDepth, &error)) return base::Status::error(error);
  // No exceptions escape: a parse error is caught here, and the walk checks every type before reading.
  try {
    json doc;
    try {
      doc = json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      auto p = what.find("parse error");
      return base::Status::error(
          fmt::format("not valid JSON (truncated or corrupted): {}", p == std::string::npos ? what : what.substr(p)));
    }
    TraceReader w;
    if (!w.read(doc, &out->data)) {
      *out = TraceFile{};
      return base::Status::error(w.err);
    }
    return {};
  } catch (const std::exception& e) {
    *out = TraceFile{};
    return base::Status::error(fmt::format("cannot be read: {}", e.what()));
  } catch (...) {
    *out = TraceFile{};
    return base::Status::error("cannot be read: unexpected error");
  }
}

// strerror() may share a buffer between threads; the reader promises to be reentrant.
std::string errno_text(int e) {
  char buf[256];
  return strerror_r(e, buf, sizeof buf);  // GNU strerror_r: returns the text (in buf or static)
}

}  // namespace

base::StatusOr<TraceFile> read_trace_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer. Only regular files are read.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return base::Status::error(errno_text(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return base::Status::error(S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxTraceBytes) {
    close(fd);
    return base::Status::error(
        fmt::format("{} bytes: larger than the {} bytes a trace file may have", st.st_size, kMaxTraceBytes));
  }
  std::string text;
  text.resize(static_cast<size_t>(st.st_size));
  const ssize_t done = base::read_full(fd, text.data(), text.size());  // fewer if it shrank while reading
  if (done < 0) {
    const int e = errno;
    close(fd);
    return base::Status::error(fmt::format("read failed: {}", errno_text(e)));
  }
  close(fd);
  text.resize(static_cast<size_t>(done));
  return parse_trace(text);
}

}  // namespace cdsa::report
