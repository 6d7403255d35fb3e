// The configuration table (shim/common/config_vars.def) and its parser: every bad value of every
// variable gives one message naming it and leaves the default; unknown names are reported;
// secure execution ignores the environment; problems are printed once, when asked; the
// README's table lists the same variables with the same defaults.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "shim/common/config.h"

extern char** environ;

namespace cdsa {
namespace {

struct Parsed {
  Config config;
  std::vector<std::string> problems;
};

Parsed parse(const std::vector<std::string>& env, bool secure = false) {
  std::vector<const char*> envp;
  for (const auto& e : env) envp.push_back(e.c_str());
  envp.push_back(nullptr);
  Parsed p;
  p.config = parse_config(
      envp.data(), secure,
      [](void* ctx, const char* m) noexcept { static_cast<std::vector<std::string>*>(ctx)->emplace_back(m); },
      &p.problems);
  if (!secure) {
    EXPECT_EQ(p.problems, config_problems(envp.data())) << "parse_config and config_problems disagree";
  }
  return p;
}

bool same(const char* a, const char* b) { return std::string(a) == b; }
template <class T>
bool same(const T& a, const T& b) {
  return a == b;
}

// Field by field, generated from the table: which fields of `a` differ from `b`.
std::vector<std::string> differences(const Config& a, const Config& b) {
  std::vector<std::string> out;
#define CDSA_VAR(name, field, kind, def, lo, hi, run, key, help) \
  if (!same(a.field, b.field)) out.push_back(#field);
#include "shim/common/config_vars.def"
#undef CDSA_VAR
  if (a.secure != b.secure) out.push_back("secure");
  return out;
}

// Values each kind must refuse.
std::vector<std::string> bad_values(const ConfigVar& v) {
  if (v.kind == "Int" || v.kind == "Count" || v.kind == "Pow2")
    return {
        "abc", "", "12x", "0x10", "1.5", std::to_string(v.lo - 1), std::to_string(v.hi + 1), "99999999999999999999999"};
  if (v.kind == "Flag" || v.kind == "NotFlag") return {"2", "maybe", "-1", "Y", "1 "};
  if (v.kind == "Choice") return {"bogus", "", v.choices.front() + "x", "FAULT", "DRIVER"};
  if (v.kind == "Text") return {"", std::string(static_cast<size_t>(v.hi) + 1, 'x')};
  ADD_FAILURE() << v.name << ": unknown kind " << v.kind;
  return {};
}

TEST(Config, TableIsComplete) {
  auto vars = config_vars();
  ASSERT_EQ(vars.size(), 18u);
  for (const auto& v : vars) {
    EXPECT_EQ(v.name.rfind("CDSA_", 0), 0u) << v.name;
    // Only a Text variable may be unset by default (CDSA_DEBUG_ENTRY_POINTS: no file, no log; CDSA_LIBDW_PATH: the
    // bundled or system libdw; CDSA_SESSION: no launcher tree yet, this process becomes its root).
    if (v.kind != "Text") {
      EXPECT_FALSE(v.default_text.empty()) << v.name;
    }
    std::string note = v.default_text.empty() ? "(default: unset)" : "(default " + v.default_text + ")";
    EXPECT_NE(v.help.find(note), std::string::npos) << v.help;
  }
}

TEST(Config, EveryBadValueOfEveryVariableGivesOneMessageAndTheDefault) {
  const Config defaults;
  int checked = 0;
  for (const auto& v : config_vars()) {
    for (const auto& bad : bad_values(v)) {
      SCOPED_TRACE(v.name + "=" + bad);
      Parsed p = parse({v.name + "=" + bad, "PATH=/bin"});
      ASSERT_EQ(p.problems.size(), 1u);
      EXPECT_EQ(p.problems[0].rfind(v.name, 0), 0u) << p.problems[0];
      EXPECT_NE(p.problems[0].find("using"), std::string::npos) << p.problems[0];
      EXPECT_EQ(differences(p.config, defaults), std::vector<std::string>{});
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

TEST(Config, MessagesKeepTheirWording) {
  EXPECT_EQ(parse({"CDSA_NATIVE_DEPTH=abc"}).problems,
            std::vector<std::string>{"CDSA_NATIVE_DEPTH=abc: expected an integer in 0..256; using the default"});
  EXPECT_EQ(parse({"CDSA_QUIET=maybe"}).problems,
            std::vector<std::string>{"CDSA_QUIET=maybe: expected 0 or 1; using the default"});
  EXPECT_EQ(parse({"CDSA_TRACE=sometimes"}).problems,
            std::vector<std::string>{"CDSA_TRACE=sometimes: expected fault, always or off; using fault"});
  EXPECT_EQ(parse({"CDSA_BACKEND=nvtx"}).problems,
            std::vector<std::string>{"CDSA_BACKEND=nvtx: expected driver or cupti; using driver"});
  EXPECT_EQ(parse({"CDSA_TRACE_FILE="}).problems,
            std::vector<std::string>{
                "CDSA_TRACE_FILE: expected a non-empty name pattern shorter than 512 bytes; using cdsa-%h%R-%p.json"});
}

TEST(Config, GoodValuesAreTaken) {
  Parsed p = parse({"CDSA_DISABLE=yes", "CDSA_NATIVE_DEPTH=256", "CDSA_PYTHON_DEPTH=0", "CDSA_RING_SIZE=1025",
                    "CDSA_STACK_TABLE=256", "CDSA_BREADCRUMBS=off", "CDSA_TRACE=0", "CDSA_TRACE_FILE=t-%p.json",
                    "CDSA_BACKEND=cupti", "CDSA_EXIT_PROBE_MS=600000", "CDSA_QUIET=true", "CDSA_PROFILE="});
  EXPECT_EQ(p.problems, std::vector<std::string>{});
  const Config& c = p.config;
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.native_depth, 256);
  EXPECT_EQ(c.python_depth, 0);
  EXPECT_EQ(c.ring_size, 2048u);
  EXPECT_EQ(c.stack_table_size, 256u);
  EXPECT_FALSE(c.breadcrumbs);
  EXPECT_EQ(c.trace, TraceMode::Off);
  EXPECT_STREQ(c.trace_pattern, "t-%p.json");
  EXPECT_EQ(c.backend, Backend::Cupti);
  EXPECT_EQ(c.exit_probe_ms, 600000);
  EXPECT_TRUE(c.quiet);
  EXPECT_FALSE(c.profile);
  EXPECT_EQ(differences(c, Config{}).size(), 11u);  // all but profile, set to its default
}

TEST(Config, UnknownNamesAreReportedOthersIgnored) {
  std::string long_name = "CDSA_" + std::string(100, 'X');
  Parsed p = parse({"CDSA_NATIV_DEPTH=8", long_name + "=1", "CDSAX=1", "NOT_CDSA_TRACE=x", "CDSA_QUIET", "HOME=/"});
  EXPECT_EQ(p.problems,
            (std::vector<std::string>{"CDSA_NATIV_DEPTH: unknown variable, ignored (`cdsa run --help` lists them)",
                                      long_name + ": unknown variable, ignored (`cdsa run --help` lists them)"}));
  EXPECT_EQ(differences(p.config, Config{}), std::vector<std::string>{});
}

TEST(Config, SecureExecutionIgnoresTheEnvironment) {
  Parsed p = parse({"CDSA_NATIVE_DEPTH=abc", "CDSA_BOGUS=1", "CDSA_TRACE=always", "CDSA_QUIET=1"}, /*secure=*/true);
  EXPECT_EQ(p.problems, std::vector<std::string>{});
  EXPECT_TRUE(p.config.secure);
  EXPECT_EQ(p.config.trace, TraceMode::Off);  // and no trace file
  EXPECT_FALSE(p.config.quiet);
  EXPECT_EQ(differences(p.config, Config{}), (std::vector<std::string>{"trace", "secure"}));
}

TEST(Config, TraceConfigObjectKeepsItsKeys) {
  // The trace format's "config" object (report/trace.h): these keys, in this order, with the defaults' text.
  std::vector<std::pair<std::string, std::string>> expected = {{"native_depth", "48"},
                                                               {"python_depth", "24"},
                                                               {"ring_size", "65536"},
                                                               {"stack_table_size", "16384"},
                                                               {"breadcrumbs", "1"},
                                                               {"trace", "fault"},
                                                               {"trace_file", "cdsa-%h%R-%p.json"},
                                                               {"backend", "driver"},
                                                               {"exit_probe_ms", "2000"},
                                                               {"profile", "0"},
                                                               {"native_all", "0"}};
  EXPECT_EQ(config_fields(Config{}), expected);
  Parsed p = parse({"CDSA_TRACE=always", "CDSA_RING_SIZE=3000"});
  auto fields = config_fields(p.config);
  EXPECT_EQ(fields[2].second, "4096");
  EXPECT_EQ(fields[5].second, "always");
}

// load_config() keeps the problems; report_config_problems_once() prints them on its first call only.
TEST(Config, ProblemsArePrintedOnceWhenAsked) {
  // Only this test's variables (the harness may set its own, e.g. TEST_BUILD_DIR).
  std::vector<std::string> others;
  for (char** e = environ; *e; ++e)
    if (!strncmp(*e, "CDSA_", 5)) others.emplace_back(*e, strcspn(*e, "="));
  for (const auto& name : others) unsetenv(name.c_str());
  setenv("CDSA_NATIVE_DEPTH", "abc", 1);
  setenv("CDSA_NOPE", "1", 1);
  setenv("CDSA_BACKEND", "a\nb", 1);  // still one line
  char path[] = "/tmp/config_test_stderr_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  load_config();
  off_t after_load = lseek(fd, 0, SEEK_CUR);
  report_config_problems_once();
  report_config_problems_once();
  dup2(saved, 2);
  close(saved);
  unsetenv("CDSA_NATIVE_DEPTH");
  unsetenv("CDSA_NOPE");
  unsetenv("CDSA_BACKEND");
  EXPECT_EQ(after_load, 0) << "load_config printed";
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  close(fd);
  unlink(path);
  std::vector<std::string> lines;
  for (size_t i = 0, j; (j = text.find('\n', i)) != std::string::npos; i = j + 1)
    lines.push_back(text.substr(i, j - i));
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines,
            (std::vector<std::string>{"cdsa: CDSA_BACKEND=a b: expected driver or cupti; using driver",
                                      "cdsa: CDSA_NATIVE_DEPTH=abc: expected an integer in 0..256; using the default",
                                      "cdsa: CDSA_NOPE: unknown variable, ignored (`cdsa run --help` lists them)"}));
  EXPECT_EQ(config().native_depth, 48);
}

// The README's configuration table: the same variables, in the same order, with the same defaults.
TEST(Config, ReadmeTableMatchesTheTable) {
  std::ifstream in(CDSA_README);
  ASSERT_TRUE(in) << CDSA_README;
  std::string line;
  bool in_section = false;
  std::vector<std::pair<std::string, std::string>> readme;
  std::regex row(R"(^\| `(CDSA_[A-Z_]+)` \| `([^`]*)` \|)");
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line.rfind("## Configuration", 0) == 0;
    std::smatch m;
    if (in_section && std::regex_search(line, m, row)) readme.emplace_back(m[1], m[2]);
  }
  std::vector<std::pair<std::string, std::string>> table;
  for (const auto& v : config_vars()) table.emplace_back(v.name, v.default_text);
  EXPECT_EQ(readme, table);
}

}  // namespace
}  // namespace cdsa
