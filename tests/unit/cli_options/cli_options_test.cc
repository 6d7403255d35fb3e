// cli/options.h: the option parser of every cdsa command: values, flags, help, the
// messages and exit statuses of usage errors, and `cdsa run`'s command boundary.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/options.h"

namespace cdsa::cli {
namespace {

struct Result {
  int rc;
  int next;
  std::string out, err;
};

Result parse(const CommandLine& cl, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  Result r{};
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  r.rc = parse_command_line(cl, static_cast<int>(argv.size()), argv.data(), &r.next);
  r.out = testing::internal::GetCapturedStdout();
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

struct Report {
  bool json = false;
  std::string out_file;
  long n = 0;
  std::vector<std::string> files;
  CommandLine cl{"demo",
                 "usage: cdsa demo FILE...\n",
                 {{"--json", false, store(json, true)},
                  {"-o|--output", true,
                   [this](const char* v) {
                     out_file = v;
                     return true;
                   },
                   "a file name"},
                  {"-n", true,
                   [this](const char* v) {
                     char* end = nullptr;
                     n = strtol(v, &end, 10);
                     return !*end && n > 0;
                   },
                   "a positive number"}},
                 [this](const char* a) {
                   files.push_back(a);
                   return kGoOn;
                 }};
};

TEST(CliOptions, FlagsValuesAndPositionalsInAnyOrder) {
  Report d;
  Result r = parse(d.cl, {"a.json", "--json", "--output", "out.json", "b.json", "-n", "3"});
  EXPECT_EQ(r.rc, kGoOn);
  EXPECT_EQ(r.next, 7);
  EXPECT_TRUE(d.json);
  EXPECT_EQ(d.out_file, "out.json");
  EXPECT_EQ(d.n, 3);
  EXPECT_EQ(d.files, (std::vector<std::string>{"a.json", "b.json"}));
  EXPECT_EQ(r.err, "");
}

TEST(CliOptions, HelpGoesToStdoutWithStatusZero) {
  Report d;
  for (const char* h : {"--help", "-h"}) {
    Result r = parse(d.cl, {"a.json", h, "--bogus"});
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.out, "usage: cdsa demo FILE...\n");
    EXPECT_EQ(r.err, "");
  }
}

TEST(CliOptions, UsageErrorsNameTheOptionOnce) {
  Report d;
  EXPECT_EQ(parse(d.cl, {"--bogus"}).err, "cdsa demo: unknown option --bogus\n");
  EXPECT_EQ(parse(d.cl, {"--bogus"}).rc, 2);
  Result missing = parse(d.cl, {"x", "-o"});
  EXPECT_EQ(missing.rc, 2);
  EXPECT_EQ(missing.err, "cdsa demo: -o needs a file name\n");
  Result refused = parse(d.cl, {"-n", "0"});
  EXPECT_EQ(refused.rc, 2);
  EXPECT_EQ(refused.err, "cdsa demo: -n needs a positive number\n");
  EXPECT_EQ(parse(d.cl, {"-"}).err, "cdsa demo: unknown option -\n");
}

TEST(CliOptions, PositionalRefusalIsTheExitStatus) {
  std::string path;
  CommandLine cl{"one", "", {}, [&](const char* a) {
                   if (!path.empty()) return 2;
                   path = a;
                   return kGoOn;
                 }};
  EXPECT_EQ(parse(cl, {"a"}).rc, kGoOn);
  path.clear();
  EXPECT_EQ(parse(cl, {"a", "b"}).rc, 2);
}

TEST(CliOptions, CommandFollowsStopsAtTheCommand) {
  std::vector<std::string> set;
  CommandLine cl{"run", "", {{"--trace", true, [&](const char* v) {
                                set.push_back(v);
                                return true;
                              }}}};
  cl.command_follows = true;
  cl.unknown_hint = " (see cdsa run --help)";
  Result r = parse(cl, {"--trace", "off", "--", "python3", "--trace", "x"});
  EXPECT_EQ(r.rc, kGoOn);
  EXPECT_EQ(r.next, 3);
  EXPECT_EQ(set, std::vector<std::string>{"off"});
  r = parse(cl, {"python3", "-c", "pass"});  // no "--": the first non-option
  EXPECT_EQ(r.rc, kGoOn);
  EXPECT_EQ(r.next, 0);
  r = parse(cl, {"--frobnicate", "--", "true"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "cdsa run: unknown option --frobnicate (see cdsa run --help)\n");
}

TEST(CliOptions, AllPositionalTakesDashesAsNames) {
  std::vector<std::string> got;
  CommandLine cl{"merge", "help\n", {}, [&](const char* a) {
                   got.push_back(a);
                   return kGoOn;
                 }};
  cl.all_positional = true;
  EXPECT_EQ(parse(cl, {"-x", "dir"}).rc, kGoOn);
  EXPECT_EQ(got, (std::vector<std::string>{"-x", "dir"}));
  EXPECT_EQ(parse(cl, {"-h"}).rc, 0);
}

}  // namespace
}  // namespace cdsa::cli
