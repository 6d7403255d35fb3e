#include "report/trace_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/io.h"

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

// Walks the document; the first problem found is kept in err_ with the path to it.
class TraceWalker {
 public:
  std::string err;

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

  // A required member of an object.
  const json* member(const json& obj, const std::string& where, const char* key) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      fail(where.empty() ? std::string("the top-level object") : where, fmt::format("missing field \"{}\"", key));
      return nullptr;
    }
    return &*it;
  }

  bool str(const json& obj, const std::string& where, const char* key, std::string* out) {
    const json* j = member(obj, where, key);
    if (!j || !expect(*j, json::value_t::string, at(where, key), "a string")) return false;
    *out = j->get_ref<const std::string&>();
    return true;
  }
  bool boolean(const json& obj, const std::string& where, const char* key, bool* out) {
    const json* j = member(obj, where, key);
    if (!j || !expect(*j, json::value_t::boolean, at(where, key), "true or false")) return false;
    *out = j->get<bool>();
    return true;
  }
  bool u64_value(const json& j, const std::string& where, uint64_t max, uint64_t* out) {
    if (!j.is_number_unsigned() || j.get<uint64_t>() > max)
      return fail(where, fmt::format("expected an integer in 0..{}, found {}", max,
                                     j.is_number_integer() ? j.dump() : std::string(type_name(j))));
    *out = j.get<uint64_t>();
    return true;
  }
  bool u64(const json& obj, const std::string& where, const char* key, uint64_t* out, uint64_t max = UINT64_MAX) {
    const json* j = member(obj, where, key);
    return j && u64_value(*j, at(where, key), max, out);
  }
  bool u32(const json& obj, const std::string& where, const char* key, uint32_t* out) {
    uint64_t v = 0;
    if (!u64(obj, where, key, &v, UINT32_MAX)) return false;
    *out = static_cast<uint32_t>(v);
    return true;
  }
  bool i32(const json& obj, const std::string& where, const char* key, int* out, int64_t lo = INT32_MIN,
           int64_t hi = INT32_MAX) {
    const json* j = member(obj, where, key);
    if (!j) return false;
    if (!j->is_number_integer() || (j->is_number_unsigned() && j->get<uint64_t>() > static_cast<uint64_t>(hi)) ||
        (!j->is_number_unsigned() && (j->get<int64_t>() < lo || j->get<int64_t>() > hi)))
      return fail(at(where, key), fmt::format("expected an integer in {}..{}, found {}", lo, hi,
                                              j->is_number_integer() ? j->dump() : std::string(type_name(*j))));
    *out = static_cast<int>(j->get<int64_t>());
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
  bool hex(const json& obj, const std::string& where, const char* key, uint64_t* out) {
    const json* j = member(obj, where, key);
    return j && hex_value(*j, at(where, key), out);
  }
  const json* object(const json& obj, const std::string& where, const char* key) {
    const json* j = member(obj, where, key);
    if (!j || !expect(*j, json::value_t::object, at(where, key), "an object")) return nullptr;
    return j;
  }
  const json* array(const json& obj, const std::string& where, const char* key) {
    const json* j = member(obj, where, key);
    if (!j || !expect(*j, json::value_t::array, at(where, key), "an array")) return nullptr;
    return j;
  }
  bool strings(const json& obj, const std::string& where, const char* key, std::vector<std::string>* out) {
    const json* a = array(obj, where, key);
    if (!a) return false;
    std::string w = at(where, key);
    for (size_t i = 0; i < a->size(); ++i) {
      if (!expect((*a)[i], json::value_t::string, at(w, i), "a string")) return false;
      out->push_back((*a)[i].get<std::string>());
    }
    return true;
  }
  bool dim3(const json& obj, const std::string& where, const char* key, uint32_t out[3]) {
    const json* j = member(obj, where, key);
    if (!j) return false;
    std::string w = at(where, key);
    if (!j->is_array() || j->size() != 3)
      return fail(w, fmt::format("expected an array of 3 unsigned 32-bit integers, found {}", type_name(*j)));
    for (size_t i = 0; i < 3; ++i) {
      uint64_t v = 0;
      if (!u64_value((*j)[i], at(w, i), UINT32_MAX, &v)) return false;
      out[i] = static_cast<uint32_t>(v);
    }
    return true;
  }

  // KEY: an array of objects. Calls read(element, its path) on each in turn; false at the first that is
  // not an object or that read refuses.
  template <class Read>
  bool objects(const json& obj, const std::string& where, const char* key, Read&& read) {
    const json* list = array(obj, where, key);
    if (!list) return false;
    const std::string wl = at(where, key);
    for (size_t i = 0; i < list->size(); ++i) {
      const json& e = (*list)[i];
      const std::string wi = at(wl, i);
      if (!expect(e, json::value_t::object, wi, "an object") || !read(e, wi)) return false;
    }
    return true;
  }

  bool stack(const json& obj, const std::string& where, const char* key, CallStack* out) {
    const json* s = object(obj, where, key);
    if (!s) return false;
    std::string w = at(where, key);
    if (!array(*s, w, "python") || !array(*s, w, "native")) return false;  // both present before either is read
    return objects(*s, w, "python",
                   [&](const json& f, const std::string& wf) {
                     PyFrame t;
                     if (!str(f, wf, "file", &t.file) || !str(f, wf, "function", &t.function) ||
                         !i32(f, wf, "line", &t.line) || !str(f, wf, "source", &t.source))
                       return false;
                     out->python.push_back(std::move(t));
                     return true;
                   }) &&
           objects(*s, w, "native", [&](const json& f, const std::string& wf) {
             ResolvedFrame t;
             if (!hex(f, wf, "pc", &t.pc) || !str(f, wf, "module", &t.module) ||
                 !hex(f, wf, "module_offset", &t.module_offset) || !str(f, wf, "function", &t.function) ||
                 !str(f, wf, "file", &t.file) || !i32(f, wf, "line", &t.line))
               return false;
             out->native.push_back(std::move(t));
             return true;
           });
  }

  bool launch(const json& l, const std::string& w, Launch* out) {
    if (!expect(l, json::value_t::object, w, "an object")) return false;
    if (!u64(l, w, "seq", &out->seq) || !u64(l, w, "stream_seq", &out->stream_seq) ||
        !u64(l, w, "stream_id", &out->stream_id) || !u64(l, w, "graph_id", &out->graph_id) ||
        !u64(l, w, "time_ns", &out->time_ns) || !u32(l, w, "ctx_id", &out->ctx_id) || !u32(l, w, "tid", &out->tid))
      return false;
    const json* sid = member(l, w, "stack_id");
    if (!sid) return false;
    if (sid->is_null()) {
      out->stack_id = 0xffffffffu;
    } else {
      uint64_t v = 0;
      if (!u64_value(*sid, at(w, "stack_id"), UINT32_MAX - 1, &v)) return false;
      out->stack_id = static_cast<uint32_t>(v);
    }
    if (!str(l, w, "kernel", &out->kernel) || !str(l, w, "kind", &out->kind)) return false;
    // "": a candidate whose launch record was overwritten in the ring (only its stream and number are known).
    if (!out->kind.empty() && out->kind != "kernel" && out->kind != "kernel_ex" && out->kind != "cooperative" &&
        out->kind != "graph")
      return fail(at(w, "kind"), fmt::format("expected kernel, kernel_ex, cooperative, graph or \"\", found \"{}\"",
                                             out->kind.substr(0, 40)));
    return dim3(l, w, "grid", out->grid) && dim3(l, w, "block", out->block) &&
           u32(l, w, "shared_mem", &out->shared_mem) && boolean(l, w, "captured", &out->captured) &&
           boolean(l, w, "per_thread_stream", &out->per_thread_stream);
  }

  // KEY: an array of {launch, stack} objects (a candidate's graph nodes or autograd forward candidates).
  bool nodes(const json& obj, const std::string& where, const char* key, std::vector<LaunchWithStack>* out) {
    return objects(obj, where, key, [&](const json& g, const std::string& wk) {
      LaunchWithStack node;
      const json* gl = member(g, wk, "launch");
      if (!gl || !launch(*gl, at(wk, "launch"), &node.launch) || !stack(g, wk, "stack", &node.stack)) return false;
      // Written since graph nodes say how they were made; absent in older files.
      if (g.contains("origin") && !str(g, wk, "origin", &node.node_origin)) return false;
      if (g.contains("uncertain") && !boolean(g, wk, "uncertain", &node.node_uncertain)) return false;
      out->push_back(std::move(node));
      return true;
    });
  }

  bool report(const json& r, const std::string& w, FaultReport* out) {
    if (!expect(r, json::value_t::object, w, "an object or null")) return false;
    if (!i32(r, w, "code", &out->code) || !str(r, w, "error_name", &out->error_name) ||
        !str(r, w, "error_string", &out->error_string) || !str(r, w, "surfaced_call", &out->surfaced_call) ||
        !u32(r, w, "surfaced_tid", &out->surfaced_tid) || !stack(r, w, "surfaced_stack", &out->surfaced_stack) ||
        !u64(r, w, "launches_recorded", &out->launches_recorded))
      return false;
    if (r.contains("fault_time_unix_ns") && !u64(r, w, "fault_time_unix_ns", &out->fault_time_unix_ns)) return false;
    // Written since reports name their rank and GPU; absent in older files.
    if (r.contains("origin")) {
      const json* o = member(r, w, "origin");
      const std::string wo = at(w, "origin");
      Origin& og = out->origin;
      if (!o || !expect(*o, json::value_t::object, wo, "an object") || !i32(*o, wo, "rank", &og.rank, -1) ||
          !i32(*o, wo, "world_size", &og.world_size, -1) || !i32(*o, wo, "pid", &og.pid) ||
          !str(*o, wo, "host", &og.host) || !i32(*o, wo, "gpu_ordinal", &og.gpu_ordinal, -1) ||
          !str(*o, wo, "gpu_name", &og.gpu_name) || !str(*o, wo, "gpu_pci_bus_id", &og.gpu_pci_bus_id))
        return false;
    }
    std::string attribution;
    if (!str(r, w, "attribution", &attribution)) return false;
    if (attribution == "exact")
      out->attribution = Attribution::Exact;
    else if (attribution == "ambiguous")
      out->attribution = Attribution::Ambiguous;
    else if (attribution == "unknown")
      out->attribution = Attribution::Unknown;
    else
      return fail(at(w, "attribution"),
                  fmt::format("expected exact, ambiguous or unknown, found \"{}\"", attribution.substr(0, 40)));
    bool candidates_ok = objects(r, w, "candidates", [&](const json& c, const std::string& wi) {
      Candidate cand;
      const json* l = member(c, wi, "launch");
      if (!l || !launch(*l, at(wi, "launch"), &cand.launch) || !stack(c, wi, "stack", &cand.stack) ||
          !u64(c, wi, "pending", &cand.pending) || !str(c, wi, "why", &cand.why))
        return false;
      if (!nodes(c, wi, "graph_nodes", &cand.graph_nodes)) return false;
      if (c.contains("graph_node_pick") && !i32(c, wi, "graph_node_pick", &cand.graph_node_pick)) return false;
      if (cand.graph_node_pick < -1 || cand.graph_node_pick >= static_cast<int>(cand.graph_nodes.size()))
        return fail(at(wi, "graph_node_pick"), "expected -1 or an index into graph_nodes");
      if (c.contains("graph_nodes_ambiguous") && !boolean(c, wi, "graph_nodes_ambiguous", &cand.graph_nodes_ambiguous))
        return false;
      // Written since the report names autograd nodes; absent in older files.
      if (c.contains("autograd_node") && !str(c, wi, "autograd_node", &cand.autograd_node)) return false;
      if (c.contains("forward_candidates") && !nodes(c, wi, "forward_candidates", &cand.forward_candidates))
        return false;
      out->candidates.push_back(std::move(cand));
      return true;
    });
    if (!candidates_ok) return false;
    if (r.contains("hints") && !strings(r, w, "hints", &out->hints)) return false;
    std::vector<std::string> device_messages;
    if (!strings(r, w, "device_messages", &device_messages)) return false;
    for (const auto& m : device_messages) {
      base::DeviceAssert a;
      if (!base::parse_device_assert(m, &a)) a.message = m;  // kept as printed even when it is no assert line
      out->device_asserts.push_back(std::move(a));
    }
    return strings(r, w, "notes", &out->notes) && str(r, w, "trace_path", &out->trace_path);
  }

  bool trace(const json& doc, TraceData* t) {
    if (!expect(doc, json::value_t::object, "", "a JSON object at the top level")) return false;
    std::string format;
    if (!str(doc, "", "format", &format)) return false;
    if (format != "cdsa-trace")
      return fail(
          "", fmt::format("not a cdsa trace file (format is \"{}\", expected \"cdsa-trace\")", format.substr(0, 40)));
    const json* version = member(doc, "", "version");
    if (!version) return false;
    if (!version->is_number_integer() || version->get<int64_t>() != kTraceVersion)
      return fail("", fmt::format("unsupported trace version {} (this cdsa reads version {})",
                                  version->dump().substr(0, 40), kTraceVersion));
    if (!str(doc, "", "reason", &t->reason)) return false;
    if (t->reason != "fault" && t->reason != "exit")
      return fail("reason", fmt::format("expected fault or exit, found \"{}\"", t->reason.substr(0, 40)));

    const json* cdsa = object(doc, "", "cdsa");
    if (!cdsa || !str(*cdsa, "cdsa", "version", &t->cdsa_version)) return false;
    const json* cfg = object(*cdsa, "cdsa", "config");
    if (!cfg) return false;
    for (auto it = cfg->begin(); it != cfg->end(); ++it) {
      if (!expect(it.value(), json::value_t::string, "cdsa.config." + it.key(), "a string")) return false;
      t->config.emplace_back(it.key(), it.value().get<std::string>());
    }

    const json* p = object(doc, "", "process");
    if (!p) return false;
    Process& pr = t->process;
    if (!i32(*p, "process", "pid", &pr.pid) || !str(*p, "process", "host", &pr.host) ||
        !strings(*p, "process", "argv", &pr.argv) ||
        !u64(*p, "process", "start_time_unix_ns", &pr.start_time_unix_ns) ||
        !i32(*p, "process", "rank", &pr.rank, -1) || !i32(*p, "process", "world_size", &pr.world_size, -1) ||
        !i32(*p, "process", "local_rank", &pr.local_rank, -1) ||
        !i32(*p, "process", "driver_version", &pr.driver_version) || !str(*p, "process", "gpu", &pr.gpu))
      return false;
    if (p->contains("runtime_version") && !i32(*p, "process", "runtime_version", &pr.runtime_version)) return false;

    bool modules_ok = objects(doc, "", "modules", [&](const json& m, const std::string& w) {
      ModuleRecord mt;
      if (!str(m, w, "path", &mt.path) || !str(m, w, "build_id", &mt.build_id) || !hex(m, w, "bias", &mt.bias))
        return false;
      const json* ranges = array(m, w, "ranges");
      if (!ranges) return false;
      for (size_t k = 0; k < ranges->size(); ++k) {
        const json& r = (*ranges)[k];
        std::string wr = at(at(w, "ranges"), k);
        uint64_t a = 0, b = 0;
        if (!r.is_array() || r.size() != 2)
          return fail(wr, fmt::format("expected [start, end], found {}", type_name(r)));
        if (!hex_value(r[0], at(wr, size_t{0}), &a) || !hex_value(r[1], at(wr, size_t{1}), &b)) return false;
        if (b < a) return fail(wr, "range ends before it starts");
        mt.ranges.emplace_back(a, b);
      }
      t->modules.push_back(std::move(mt));
      return true;
    });
    if (!modules_ok) return false;

    bool stacks_ok = objects(doc, "", "stacks", [&](const json& s, const std::string& w) {
      uint32_t id = 0;
      CallStack st;
      if (!u32(s, w, "id", &id) || !stack(s, w, "stack", &st)) return false;
      t->stacks.emplace_back(id, std::move(st));
      return true;
    });
    if (!stacks_ok) return false;

    bool streams_ok = objects(doc, "", "streams", [&](const json& s, const std::string& w) {
      Stream st;
      if (!u64(s, w, "id", &st.id) || !u64(s, w, "launched", &st.launched) || !u64(s, w, "landed", &st.landed) ||
          !boolean(s, w, "breadcrumbs", &st.breadcrumbs))
        return false;
      t->streams.push_back(st);
      return true;
    });
    if (!streams_ok) return false;

    const json* launches = array(doc, "", "launches");
    if (!launches) return false;
    for (size_t i = 0; i < launches->size(); ++i) {
      Launch l;
      if (!launch((*launches)[i], at("launches", i), &l)) return false;
      t->launches.push_back(std::move(l));
    }

    auto prof = doc.find("profile");
    if (prof != doc.end() && !prof->is_null()) {
      if (!expect(*prof, json::value_t::object, "profile", "an object or null")) return false;
      t->has_profile = true;
      if (!u32(*prof, "profile", "capacity", &t->profile.capacity) ||
          !u64(*prof, "profile", "dropped", &t->profile.dropped))
        return false;
      bool sites_ok = objects(*prof, "profile", "sites", [&](const json& s, const std::string& w) {
        ProfileSite site;
        const json* sid = member(s, w, "stack_id");
        if (!sid) return false;
        if (!sid->is_null()) {
          uint64_t v = 0;
          if (!u64_value(*sid, at(w, "stack_id"), UINT32_MAX - 1, &v)) return false;
          site.stack_id = static_cast<uint32_t>(v);
        }
        if (!str(s, w, "kernel", &site.kernel) || !u64(s, w, "count", &site.count)) return false;
        t->profile.sites.push_back(std::move(site));
        return true;
      });
      if (!sites_ok) return false;
    }

    const json* rep = member(doc, "", "report");
    if (!rep) return false;
    t->has_fault = !rep->is_null();
    if (t->has_fault && !report(*rep, "report", &t->report)) return false;
    if (t->reason == "fault" && !t->has_fault) return fail("report", "reason is \"fault\" but the report is null");
    return true;
  }
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

bool parse_impl(std::string_view text, TraceFile* out, std::string* error);

}  // namespace

bool parse_trace(std::string_view text, TraceFile* out, std::string* error) {
  if (parse_impl(text, out, error)) return true;
  *error = printable(*error);
  return false;
}

namespace {

bool parse_impl(std::string_view text, TraceFile* out, std::string* error) {
  *out = TraceFile{};
  if (text.empty()) {
    *error = "empty file";
    return false;
  }
  if (text.size() > kMaxTraceBytes) {
    *error = fmt::format("larger than {} bytes: not a trace file cdsa wrote", kMaxTraceBytes);
    return false;
  }
  if (!nesting_ok(text, kMaxTraceDepth, error)) return false;
  // No exceptions escape: a parse error is caught here, and the walk checks every type before reading.
  try {
    json doc;
    try {
      doc = json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      auto p = what.find("parse error");
      *error =
          fmt::format("not valid JSON (truncated or corrupted): {}", p == std::string::npos ? what : what.substr(p));
      return false;
    }
    TraceWalker w;
    if (!w.trace(doc, &out->data)) {
      *error = w.err;
      *out = TraceFile{};
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    *error = fmt::format("cannot be read: {}", e.what());
  } catch (...) {
    *error = "cannot be read: unexpected error";
  }
  *out = TraceFile{};
  return false;
}

// strerror() may share a buffer between threads; the reader promises to be reentrant.
std::string errno_text(int e) {
  char buf[256];
  return strerror_r(e, buf, sizeof buf);  // GNU strerror_r: returns the text (in buf or static)
}

}  // namespace

bool read_trace_file(const std::string& path, TraceFile* out, std::string* error) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer. Only regular files are read.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *error = errno_text(errno);
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file";
    close(fd);
    return false;
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxTraceBytes) {
    *error = fmt::format("{} bytes: larger than the {} bytes a trace file may have", st.st_size, kMaxTraceBytes);
    close(fd);
    return false;
  }
  std::string text;
  text.resize(static_cast<size_t>(st.st_size));
  const ssize_t done = base::read_full(fd, text.data(), text.size());  // fewer if it shrank while reading
  if (done < 0) {
    *error = fmt::format("read failed: {}", errno_text(errno));
    close(fd);
    return false;
  }
  close(fd);
  text.resize(static_cast<size_t>(done));
  return parse_trace(text, out, error);
}

}  // namespace cdsa::report
