#include "shim/config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sys/auxv.h>

#include "shim/log.h"

extern char** environ;

namespace cdsa {

const ConfigVarDoc kConfigVars[] = {
    {"CDSA_DISABLE", "1: load but record nothing (every hook passes through)"},
    {"CDSA_NATIVE_DEPTH", "native frames recorded per launch, 0..256 (default 48)"},
    {"CDSA_PYTHON_DEPTH", "Python frames recorded per launch, 0..256 (default 24)"},
    {"CDSA_RING_SIZE", "launch records kept, 1024..16777216, rounded up to a power of two (default 65536)"},
    {"CDSA_STACK_TABLE", "distinct launch stacks kept, 256..1048576 (default 16384)"},
    {"CDSA_BREADCRUMBS", "0: no stream-ordered completion marks (attribution then lists candidates only)"},
    {"CDSA_TRACE", "fault (default): write a trace file on a fault; always: also at normal exit; off: never"},
    {"CDSA_TRACE_FILE", "trace file name pattern, %h host, %p pid, %r rank, %t start time (default cdsa-%h-%p.json)"},
    {"CDSA_BACKEND", "driver (default): driver-level interposition; cupti: CUPTI callbacks"},
    {"CDSA_EXIT_PROBE_MS", "at exit, wait up to this long for pending kernels to surface a fault, 0..600000 (default 2000)"},
    {"CDSA_QUIET", "1: do not print the report on stderr (the trace file is still written)"},
    {"CDSA_PROFILE", "1: count launches per (stack, kernel) for the whole run; the trace file gets them at exit"},
    {"CDSA_DEBUG_ENTRY_POINTS", "file: append one line per cuGetProcAddress request and driver dlsym (debugging)"},
};
const size_t kConfigVarCount = sizeof kConfigVars / sizeof kConfigVars[0];

namespace {

Config g_config;

bool parse_int(const char* name, const char* value, long lo, long hi, long* out) {
  errno = 0;
  char* end = nullptr;
  long v = strtol(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || v < lo || v > hi) {
    log_line("%s=%s: expected an integer in %ld..%ld; using the default", name, value, lo, hi);
    return false;
  }
  *out = v;
  return true;
}

bool parse_bool(const char* name, const char* value, bool* out) {
  if (!strcmp(value, "1") || !strcmp(value, "yes") || !strcmp(value, "on") || !strcmp(value, "true")) {
    *out = true;
    return true;
  }
  if (!strcmp(value, "0") || !strcmp(value, "no") || !strcmp(value, "off") || !strcmp(value, "false") ||
      !*value) {
    *out = false;
    return true;
  }
  log_line("%s=%s: expected 0 or 1; using the default", name, value);
  return false;
}

uint32_t round_up_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

void apply(Config& c, const char* name, const char* value) {
  long v = 0;
  if (!strcmp(name, "CDSA_DISABLE")) {
    bool b = false;
    if (parse_bool(name, value, &b)) c.enabled = !b;
  } else if (!strcmp(name, "CDSA_NATIVE_DEPTH")) {
    if (parse_int(name, value, 0, 256, &v)) c.native_depth = static_cast<int>(v);
  } else if (!strcmp(name, "CDSA_PYTHON_DEPTH")) {
    if (parse_int(name, value, 0, 256, &v)) c.python_depth = static_cast<int>(v);
  } else if (!strcmp(name, "CDSA_RING_SIZE")) {
    if (parse_int(name, value, 1024, 1 << 24, &v)) c.ring_size = round_up_pow2(static_cast<uint32_t>(v));
  } else if (!strcmp(name, "CDSA_STACK_TABLE")) {
    if (parse_int(name, value, 256, 1 << 20, &v)) c.stack_table_size = static_cast<uint32_t>(v);
  } else if (!strcmp(name, "CDSA_BREADCRUMBS")) {
    parse_bool(name, value, &c.breadcrumbs);
  } else if (!strcmp(name, "CDSA_TRACE")) {
    if (!strcmp(value, "fault")) c.trace = TraceMode::OnFault;
    else if (!strcmp(value, "always")) c.trace = TraceMode::Always;
    else if (!strcmp(value, "off") || !strcmp(value, "0")) c.trace = TraceMode::Off;
    else log_line("CDSA_TRACE=%s: expected fault, always or off; using fault", value);
  } else if (!strcmp(name, "CDSA_TRACE_FILE")) {
    if (!*value || strlen(value) >= sizeof c.trace_pattern)
      log_line("CDSA_TRACE_FILE: expected a non-empty name pattern shorter than %zu bytes; using %s",
               sizeof c.trace_pattern, c.trace_pattern);
    else
      strcpy(c.trace_pattern, value);
  } else if (!strcmp(name, "CDSA_BACKEND")) {
    if (!strcmp(value, "driver")) c.backend = Backend::Driver;
    else if (!strcmp(value, "cupti")) c.backend = Backend::Cupti;
    else log_line("CDSA_BACKEND=%s: expected driver or cupti; using driver", value);
  } else if (!strcmp(name, "CDSA_EXIT_PROBE_MS")) {
    if (parse_int(name, value, 0, 600000, &v)) c.exit_probe_ms = static_cast<int>(v);
  } else if (!strcmp(name, "CDSA_QUIET")) {
    parse_bool(name, value, &c.quiet);
  } else if (!strcmp(name, "CDSA_PROFILE")) {
    parse_bool(name, value, &c.profile);
  } else if (!strcmp(name, "CDSA_DEBUG_ENTRY_POINTS")) {
    // read by shim/interpose.cc itself
  } else {
    log_line("%s: unknown variable, ignored (`cdsa run --help` lists them)", name);
  }
}

}  // namespace

const Config& config() noexcept { return g_config; }

void load_config() noexcept {
  Config c;
  if (getauxval(AT_SECURE)) {
    c.secure = true;
    c.trace = TraceMode::Off;
    g_config = c;
    return;
  }
  for (char** e = environ; e && *e; ++e) {
    if (strncmp(*e, "CDSA_", 5) != 0) continue;
    const char* eq = strchr(*e, '=');
    if (!eq) continue;
    char name[64];
    size_t len = static_cast<size_t>(eq - *e);
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, *e, len);
    name[len] = '\0';
    apply(c, name, eq + 1);
  }
  g_config = c;
}

}  // namespace cdsa
