#include "shim/common/config.h"

#include <sys/auxv.h>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "shim/common/log.h"

extern char** environ;

namespace cdsa {
namespace {

// ---- the names of each enum's values (the Choice kind) ----

template <class E>
struct Choice {
  const char* name;
  E value;
  bool listed;  // named in messages and help (false: an accepted alias)
};
constexpr Choice<TraceMode> kTraceChoices[] = {{"fault", TraceMode::OnFault, true},
                                               {"always", TraceMode::Always, true},
                                               {"off", TraceMode::Off, true},
                                               {"0", TraceMode::Off, false}};
constexpr Choice<Backend> kBackendChoices[] = {{"driver", Backend::Driver, true}, {"cupti", Backend::Cupti, true}};

template <class E>
struct Choices {
  const Choice<E>* b;
  const Choice<E>* e;
  const Choice<E>* begin() const { return b; }
  const Choice<E>* end() const { return e; }
};
Choices<TraceMode> choices(TraceMode) { return {std::begin(kTraceChoices), std::end(kTraceChoices)}; }
Choices<Backend> choices(Backend) { return {std::begin(kBackendChoices), std::end(kBackendChoices)}; }

template <class E>
const char* choice_name(E v) {
  for (const auto& c : choices(v))
    if (c.value == v) return c.name;
  return "?";
}

// ---- problems: one message each, handed to the caller's function ----

struct Problems {
  ConfigProblemFn fn;
  void* ctx;
  void operator()(const char* fmt, ...) const __attribute__((format(printf, 2, 3))) {
    if (!fn) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fn(ctx, buf);
  }
};

// ---- one parser per kind: set `field` from `value`, or say why not and leave the default ----

bool parse_long(const char* name, const char* value, long lo, long hi, long* out, const Problems& problem) {
  errno = 0;
  char* end = nullptr;
  long v = strtol(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || v < lo || v > hi) {
    problem("%s=%s: expected an integer in %ld..%ld; using the default", name, value, lo, hi);
    return false;
  }
  *out = v;
  return true;
}

bool parse_flag(const char* name, const char* value, bool* out, const Problems& problem) {
  for (const char* yes : {"1", "yes", "on", "true"})
    if (!strcmp(value, yes)) return *out = true, true;
  for (const char* no : {"0", "no", "off", "false", ""})
    if (!strcmp(value, no)) return *out = false, true;
  problem("%s=%s: expected 0 or 1; using the default", name, value);
  return false;
}

uint32_t round_up_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

template <class D>
void set_Int(int& f, const char* name, const char* value, long lo, long hi, D, const Problems& problem) {
  long v = 0;
  if (parse_long(name, value, lo, hi, &v, problem)) f = static_cast<int>(v);
}
template <class D>
void set_Count(uint32_t& f, const char* name, const char* value, long lo, long hi, D, const Problems& problem) {
  long v = 0;
  if (parse_long(name, value, lo, hi, &v, problem)) f = static_cast<uint32_t>(v);
}
template <class D>
void set_Pow2(uint32_t& f, const char* name, const char* value, long lo, long hi, D, const Problems& problem) {
  long v = 0;
  if (parse_long(name, value, lo, hi, &v, problem)) f = round_up_pow2(static_cast<uint32_t>(v));
}
template <class D>
void set_Flag(bool& f, const char* name, const char* value, long, long, D, const Problems& problem) {
  parse_flag(name, value, &f, problem);
}
template <class D>
void set_NotFlag(bool& f, const char* name, const char* value, long, long, D, const Problems& problem) {
  bool b = false;
  if (parse_flag(name, value, &b, problem)) f = !b;
}
template <class E>
void set_Choice(E& f, const char* name, const char* value, long, long, E def, const Problems& problem) {
  for (const auto& c : choices(f))
    if (!strcmp(value, c.name)) return void(f = c.value);
  char expected[256] = "";
  size_t listed = 0, n = 0;
  for (const auto& c : choices(f)) listed += c.listed;
  for (const auto& c : choices(f)) {
    if (!c.listed) continue;
    size_t len = strlen(expected);
    snprintf(expected + len, sizeof expected - len, "%s%s", n == 0 ? "" : n + 1 == listed ? " or " : ", ", c.name);
    ++n;
  }
  problem("%s=%s: expected %s; using %s", name, value, expected, choice_name(def));
}
template <size_t N, class D>
void set_Text(char (&f)[N], const char* name, const char* value, long lo, long, D def, const Problems& problem) {
  size_t len = strlen(value);
  if (len < static_cast<size_t>(lo) || len >= N)
    problem("%s: expected a non-empty name pattern shorter than %zu bytes; using %s", name, N, def);
  else
    memcpy(f, value, len + 1);
}

// ---- the value of each kind as text (the trace's config object, the defaults in help) ----

std::string text_Int(int v) { return std::to_string(v); }
std::string text_Count(uint32_t v) { return std::to_string(v); }
std::string text_Pow2(uint32_t v) { return std::to_string(v); }
std::string text_Flag(bool v) { return v ? "1" : "0"; }
std::string text_NotFlag(bool v) { return v ? "0" : "1"; }
template <class E>
std::string text_Choice(E v) {
  return choice_name(v);
}
std::string text_Text(const char* v) { return v; }

// The names a Choice field accepts; none for other kinds.
template <class T>
std::vector<std::string> choice_names(const T& v) {
  std::vector<std::string> out;
  if constexpr (std::is_enum_v<T>)
    for (const auto& c : choices(v)) out.push_back(c.name);
  return out;
}

std::string fmt_range(long lo, long hi) { return ", " + std::to_string(lo) + ".." + std::to_string(hi); }

// The end of a help line: the default, or that there is none (an unset Text variable).
std::string default_note(const std::string& d) { return d.empty() ? " (default: unset)" : " (default " + d + ")"; }

// What help adds after the description, before "(default ...)".
std::string range_text(const char* kind, long lo, long hi) {
  if (!strcmp(kind, "Int") || !strcmp(kind, "Count")) return fmt_range(lo, hi);
  if (!strcmp(kind, "Pow2")) return fmt_range(lo, hi) + ", rounded up to a power of two";
  return "";
}

void apply(Config& c, const char* var, size_t len, const char* value, const Problems& problem) {
#define CDSA_VAR(name, field, kind, def, lo, hi, run, key, help) \
  if (len == sizeof(#name) - 1 && !memcmp(var, #name, len)) {    \
    set_##kind(c.field, #name, value, lo, hi, def, problem);     \
    return;                                                      \
  }
#include "shim/common/config_vars.def"
#undef CDSA_VAR
  problem("%.*s: unknown variable, ignored (`cdsa run --help` lists them)", static_cast<int>(len), var);
}

// What load_config() found, printed by report_config_problems_once(): lines in a fixed buffer (no allocation in
// the constructor), written once before any other thread can exist and only read afterwards.
char g_problems[8192];
size_t g_problems_len = 0;
unsigned g_problems_dropped = 0;
std::atomic<bool> g_problems_reported{false};

void keep_problem(void*, const char* message) noexcept {
  size_t n = strlen(message);
  if (g_problems_len + n + 1 > sizeof g_problems) {
    ++g_problems_dropped;
    return;
  }
  for (size_t i = 0; i < n; ++i)  // one line each, whatever the value held
    g_problems[g_problems_len++] = message[i] == '\n' ? ' ' : message[i];
  g_problems[g_problems_len++] = '\n';
}

}  // namespace

Config g_config;

Config parse_config(const char* const* envp, bool secure, ConfigProblemFn fn, void* ctx) noexcept {
  Config c;
  if (secure) {
    c.secure = true;
    c.trace = TraceMode::Off;
    return c;
  }
  Problems problem{fn, ctx};
  for (const char* const* e = envp; e && *e; ++e) {
    if (strncmp(*e, "CDSA_", 5) != 0) continue;
    const char* eq = strchr(*e, '=');
    if (!eq) continue;
    apply(c, *e, static_cast<size_t>(eq - *e), eq + 1, problem);
  }
  return c;
}


void load_config() noexcept {
  g_problems_len = 0;
  g_problems_dropped = 0;
  g_config = parse_config(environ, getauxval(AT_SECURE) != 0, keep_problem, nullptr);
}

void stand_aside_for_another_copy() noexcept { g_config.enabled = false; }

void begin_session(const char* id) noexcept {
  size_t n = strnlen(id, sizeof g_config.session - 1);
  memcpy(g_config.session, id, n);
  g_config.session[n] = '\0';
}

void report_config_problems_once() noexcept {
  if (g_problems_reported.exchange(true, std::memory_order_acq_rel)) return;
  for (size_t i = 0; i < g_problems_len;) {
    const char* line = g_problems + i;
    size_t n = static_cast<size_t>(static_cast<const char*>(memchr(line, '\n', g_problems_len - i)) - line);
    log_line("%.*s", static_cast<int>(n), line);
    i += n + 1;
  }
  if (g_problems_dropped) log_line("%u more configuration problems not shown", g_problems_dropped);
}

std::vector<std::string> config_problems(const char* const* envp) {
  std::vector<std::string> out;
  parse_config(
      envp, false,
      [](void* ctx, const char* message) noexcept {
        static_cast<std::vector<std::string>*>(ctx)->emplace_back(message);
      },
      &out);
  return out;
}

std::vector<std::pair<std::string, std::string>> config_fields(const Config& c) {
  std::vector<std::pair<std::string, std::string>> out;
#define CDSA_VAR(name, field, kind, def, lo, hi, run, key, help) \
  if (*key) out.emplace_back(key, text_##kind(c.field));
#include "shim/common/config_vars.def"
#undef CDSA_VAR
  return out;
}

std::vector<ConfigVar> config_vars() {
  const Config d;
  std::vector<ConfigVar> out;
#define CDSA_VAR(VAR, FIELD, KIND, DEF, LO, HI, RUN, KEY, DOC)                                   \
  {                                                                                              \
    ConfigVar v;                                                                                 \
    v.name = #VAR;                                                                               \
    std::string option = RUN;                                                                    \
    size_t space = option.find(' ');                                                             \
    v.run_option = option.substr(0, space);                                                      \
    v.run_meta = space == std::string::npos ? "" : option.substr(space + 1);                     \
    v.default_text = text_##KIND(d.FIELD);                                                       \
    v.run_value = v.default_text == "1" ? "0" : "1";                                             \
    v.help = std::string(DOC) + range_text(#KIND, LO, HI) + default_note(v.default_text);         \
    v.kind = #KIND;                                                                              \
    v.lo = LO;                                                                                   \
    v.hi = HI;                                                                                   \
    v.choices = choice_names(d.FIELD);                                                           \
    out.push_back(std::move(v));                                                                 \
  }
#include "shim/common/config_vars.def"
#undef CDSA_VAR
  return out;
}

}  // namespace cdsa
