#include "cli/options.h"

#include <cstdio>
#include <cstring>

namespace cdsa::cli {
namespace {

bool has_name(const std::string& names, const char* arg) {
  size_t start = 0;
  while (start <= names.size()) {
    size_t bar = names.find('|', start);
    if (bar == std::string::npos) bar = names.size();
    if (names.compare(start, bar - start, arg) == 0 && strlen(arg) == bar - start) return true;
    start = bar + 1;
  }
  return false;
}

}  // namespace

int parse_command_line(const CommandLine& cl, int argc, char** argv, int* next) {
  const char* cmd = cl.command.c_str();
  int i = 0;
  for (; i < argc; ++i) {
    const char* a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(cl.help.c_str(), stdout);
      return 0;
    }
    if (cl.all_positional) {
      if (int rc = cl.positional(a); rc != kGoOn) return rc;
      continue;
    }
    if (cl.command_follows && !strcmp(a, "--")) {
      ++i;
      break;
    }
    const Option* opt = nullptr;
    for (const auto& o : cl.options)
      if (has_name(o.names, a)) opt = &o;
    if (opt) {
      const char* value = nullptr;
      if (opt->takes_value) {
        if (i + 1 >= argc) {
          fprintf(stderr, "cdsa %s: %s needs %s\n", cmd, a, opt->needs.c_str());
          return 2;
        }
        value = argv[++i];
      }
      if (!opt->set(value)) {
        fprintf(stderr, "cdsa %s: %s needs %s\n", cmd, a, opt->needs.c_str());
        return 2;
      }
    } else if (a[0] == '-') {
      fprintf(stderr, "cdsa %s: unknown option %s%s\n", cmd, a, cl.unknown_hint.c_str());
      return 2;
    } else if (cl.command_follows) {
      break;  // the command starts here (no "--" given)
    } else if (int rc = cl.positional(a); rc != kGoOn) {
      return rc;
    }
  }
  if (next) *next = i;
  return kGoOn;
}

int usage_error(const CommandLine& cl) {
  fprintf(stderr, "%s\n", cl.help.substr(0, cl.help.find('\n')).c_str());
  return 2;
}

}  // namespace cdsa::cli
