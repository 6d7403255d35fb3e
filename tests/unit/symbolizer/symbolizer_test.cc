// Unit tests for cdsa_symbolizer. Built with -g -O0 (see CMakeLists.txt).
#include <dlfcn.h>
#include <elf.h>
#include "test_backtrace.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "shim/common/config.h"
#include "symbolizer/native_symbolizer.h"
#include "testlib.h"

// A static (internal linkage, so not in .dynsym) function with a known line.
static __attribute__((noinline)) int cdsa_symtest_static_capture(uintptr_t* out, int max, int* line) {
  int n = cdsa_test_backtrace(out, max); *line = __LINE__;
  return n;
}
static const char kStaticName[] = "cdsa_symtest_static_capture(unsigned long*, int, int*)";
static const char kLibName[] = "cdsa_symtest::lib_capture(unsigned long*, int, int*)";
static const char kLibInlinedName[] = "cdsa_symtest::lib_capture_inlined(unsigned long*, int, int*)";

namespace {

constexpr int kMaxFrames = 64;

struct Stack {
  std::vector<uintptr_t> pcs;
  int line = 0;       // line of backtrace() in the capturing function
  int line2 = 0;      // inlined case: line of the inlined call
  int call_line = 0;  // line, in the helper below, of the call into it
};

__attribute__((noinline)) Stack capture_in_static() {
  Stack s;
  s.pcs.resize(kMaxFrames);
  int n = cdsa_symtest_static_capture(s.pcs.data(), kMaxFrames, &s.line); s.call_line = __LINE__;
  s.pcs.resize(n > 0 ? n : 0);
  return s;
}

__attribute__((noinline)) Stack capture_in_lib() {
  Stack s;
  s.pcs.resize(kMaxFrames);
  int n = cdsa_symtest::lib_capture(s.pcs.data(), kMaxFrames, &s.line); s.call_line = __LINE__;
  s.pcs.resize(n > 0 ? n : 0);
  return s;
}

__attribute__((noinline)) Stack capture_in_lib_inlined() {
  Stack s;
  s.pcs.resize(kMaxFrames);
  int lines[2] = {0, 0};
  int n = cdsa_symtest::lib_capture_inlined(s.pcs.data(), kMaxFrames, lines); s.call_line = __LINE__;
  s.line = lines[0];
  s.line2 = lines[1];
  s.pcs.resize(n > 0 ? n : 0);
  return s;
}

}  // namespace

// The tests live in the unit's namespace; the capture helpers above stay outside it, since the tests check
// their demangled names.
namespace cdsa::symbolizer {
namespace {

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const Module* module_for_file(const std::vector<Module>& map, const std::string& path) {
  for (const Module& m : map)
    if (same_file(m.path, path)) return &m;
  return nullptr;
}

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

// Build-id as printed by `readelf -n`, or "" if readelf is unavailable.
// read_build_id_from_file's answer as (true, id) or (false, the error's line).
bool read_id(const std::string& path, std::string* id, std::string* err) {
  base::StatusOr<std::string> r = read_build_id_from_file(path);
  *id = r.ok() ? *r : std::string();
  *err = r.status().message();
  return r.ok();
}

std::string readelf_build_id(const std::string& path) {
  if (std::strlen(CDSA_READELF) == 0) return {};
  const std::string out = run_command(std::string(CDSA_READELF) + " -n '" + path + "' 2>/dev/null");
  const size_t pos = out.find("Build ID: ");
  if (pos == std::string::npos) return {};
  const size_t start = pos + std::strlen("Build ID: ");
  const size_t end = out.find_first_not_of("0123456789abcdef", start);
  return out.substr(start, end - start);
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/cdsa_symtest_XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    path = p ? p : "";
  }
  ~TempDir() {
    if (!path.empty()) run_command("rm -rf '" + path + "'");
  }
};

bool copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  if (!in || !out) return false;
  out << in.rdbuf();
  return static_cast<bool>(out);
}

bool write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  return static_cast<bool>(out);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void expect_same_frames(const std::vector<NativeFrame>& a, const std::vector<NativeFrame>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i) + ": " + a[i].describe() + " vs " + b[i].describe());
    EXPECT_EQ(a[i].pc, b[i].pc);
    EXPECT_EQ(a[i].module, b[i].module);
    EXPECT_EQ(a[i].module_offset, b[i].module_offset);
    EXPECT_EQ(a[i].function, b[i].function);
    EXPECT_EQ(a[i].symbol_offset, b[i].symbol_offset);
    EXPECT_EQ(a[i].file, b[i].file);
    EXPECT_EQ(a[i].line, b[i].line);
    ASSERT_EQ(a[i].inlined.size(), b[i].inlined.size());
    for (size_t k = 0; k < a[i].inlined.size(); ++k) {
      EXPECT_EQ(a[i].inlined[k].function, b[i].inlined[k].function);
      EXPECT_EQ(a[i].inlined[k].file, b[i].inlined[k].file);
      EXPECT_EQ(a[i].inlined[k].line, b[i].inlined[k].line);
    }
  }
}

// A captured stack symbolized live, its PCs taken as return addresses.
std::vector<NativeFrame> symbolize_stack(const Stack& s, const SymbolizerOptions& o = SymbolizerOptions()) {
  return symbolize_live(s.pcs.data(), s.pcs.size(), true, o);
}

// Where frame `f` was symbolized to: its function, its source file (by its name's end), its line and its module
// (the same file as `module`); nullptr: that one is not checked.
void expect_at(const NativeFrame& f, const std::string& function, const char* file, int line,
               const char* module = nullptr) {
  EXPECT_EQ(f.function, function) << f.describe();
  if (file) {
    EXPECT_TRUE(ends_with(f.file, file)) << f.file;
  }
  EXPECT_EQ(f.line, line);
  if (module) {
    EXPECT_TRUE(same_file(f.module, module)) << f.module;
  }
}

// describe() of a frame there: "<function> (<module file name>+0x<offset>) ... at <file>:<line>".
void expect_described_as(const NativeFrame& f, const std::string& function, const std::string& module,
                         const std::string& file, int line) {
  const std::string d = f.describe();
  EXPECT_EQ(d.rfind(function + " (" + module + "+0x", 0), 0u) << d;
  EXPECT_TRUE(ends_with(d, " at " + file + ":" + std::to_string(line))) << d;
}

#define REQUIRE_LIBDW()                                                              \
  do {                                                                               \
    if (!symbolizer_has_libdw()) GTEST_SKIP() << symbolizer_backend_description(); \
  } while (0)

// What libcdsa.so's constructor and the CLI's main() do: the CDSA_* configuration (CDSA_LIBDW_PATH,
// CDSA_SYMBOLIZER_NO_LIBDW) picks the libdw. True when it keeps libdw from being used.
bool libdw_configured_off() {
  load_config();
  set_libdw_choice(config().libdw_path, config().no_libdw);
  return config().libdw_path[0] != '\0' || config().no_libdw;
}

// ---------------------------------------------------------------------------

TEST(Demangle, Basic) {
  EXPECT_EQ(demangle("_ZN2at6native3fooEi"), "at::native::foo(int)");
  EXPECT_EQ(demangle("_ZL27cdsa_symtest_static_capturePmiPi"), kStaticName);
  EXPECT_EQ(demangle("main"), "main");
  EXPECT_EQ(demangle("_Znot_valid!!"), "_Znot_valid!!");
  EXPECT_EQ(demangle(""), "");
  EXPECT_EQ(demangle(nullptr), "");
}

TEST(Describe, Format) {
  NativeFrame f;
  f.pc = 0x7f0000001234;
  f.module = "/opt/lib/libtorch_cuda.so";
  f.module_offset = 0x1a2b3c;
  f.function = "at::native::foo(int)";
  f.symbol_offset = 0x10;
  f.file = "/src/aten/Loss.cu";
  f.line = 250;
  EXPECT_EQ(f.describe(), "at::native::foo(int) (libtorch_cuda.so+0x1a2b3c) at Loss.cu:250");
  f.inlined.push_back({"inner()", "/src/a.h", 3});
  f.inlined.push_back({"mid()", "/src/b.h", 7});
  EXPECT_EQ(f.describe(),
            "at::native::foo(int) (libtorch_cuda.so+0x1a2b3c) at Loss.cu:250 "
            "[inlined: inner() at a.h:3; mid() at b.h:7]");
  NativeFrame g;
  g.pc = 0x10;
  EXPECT_EQ(g.describe(), "?? (0x10)");
  g.module = "/x/libfoo.so";
  g.module_offset = 0x1234;
  g.error = "binary changed since the run: build-id aa, recorded bb (/x/libfoo.so)";
  EXPECT_EQ(g.describe(),
            "?? (libfoo.so+0x1234) [binary changed since the run: build-id aa, recorded bb "
            "(/x/libfoo.so)]");
  g.error.clear();
  g.function = "foo";
  g.symbol_offset = 0x1c;
  EXPECT_EQ(g.describe(), "foo+0x1c (libfoo.so+0x1234)");
}

TEST(Backend, Description) {
  const bool off = libdw_configured_off();
  const std::string d = symbolizer_backend_description();
  EXPECT_FALSE(d.empty());
  if (!off) {
    // libdw-dev is a build requirement of this project, so libdw.so.1 is here.
    EXPECT_TRUE(symbolizer_has_libdw()) << d;
    EXPECT_EQ(d.rfind("libdw 0.", 0), 0u) << d;
  }
}

// ---------------------------------------------------------------------------
// Module map

TEST(ModuleMap, FindsTestBinaryAndLibraryWithBuildIds) {
  const Stack s = capture_in_static();
  const Stack l = capture_in_lib();
  ASSERT_GE(s.pcs.size(), 2u);
  ASSERT_GE(l.pcs.size(), 2u);
  const std::vector<Module> map = capture_module_map();
  ASSERT_FALSE(map.empty());

  // Main program first, resolved to the real executable.
  EXPECT_TRUE(same_file(map[0].path, CDSA_TEST_EXE)) << map[0].path;
  EXPECT_EQ(map[0].path[0], '/');

  for (const char* path : {CDSA_TEST_EXE, CDSA_TESTLIB_PATH}) {
    SCOPED_TRACE(path);
    const Module* m = module_for_file(map, path);
    ASSERT_NE(m, nullptr);
    EXPECT_FALSE(m->segments.empty());
    ASSERT_FALSE(m->build_id.empty());
    EXPECT_EQ(m->build_id.size() % 2, 0u);
    std::string file_id, err;
    ASSERT_TRUE(read_id(m->path, &file_id, &err)) << err;
    EXPECT_EQ(m->build_id, file_id);
    const std::string readelf_id = readelf_build_id(path);
    if (!readelf_id.empty()) {
      EXPECT_EQ(m->build_id, readelf_id);
    }
    for (const Segment& seg : m->segments) EXPECT_LT(seg.start, seg.end);
  }

  const Module* exe = find_module(map, s.pcs[0]);
  ASSERT_NE(exe, nullptr);
  EXPECT_TRUE(same_file(exe->path, CDSA_TEST_EXE));
  const Module* lib = find_module(map, l.pcs[0]);
  ASSERT_NE(lib, nullptr);
  EXPECT_TRUE(same_file(lib->path, CDSA_TESTLIB_PATH));
  // The PC lies in an executable PT_LOAD segment.
  bool in_text = false;
  for (const Segment& seg : lib->segments)
    if (l.pcs[0] >= seg.start && l.pcs[0] < seg.end && (seg.flags & PF_X)) in_text = true;
  EXPECT_TRUE(in_text);
  EXPECT_EQ(find_module(map, 0x10), nullptr);
}

TEST(ModuleMap, ReadBuildIdMatchesForcedLinkerBuildId) {
  std::string id, err;
  ASSERT_TRUE(read_id(CDSA_VARIANT_A_PATH, &id, &err)) << err;
  EXPECT_EQ(id, CDSA_VARIANT_A_BUILD_ID);
  ASSERT_TRUE(read_id(CDSA_VARIANT_B_PATH, &id, &err)) << err;
  EXPECT_EQ(id, CDSA_VARIANT_B_BUILD_ID);
  const std::string r = readelf_build_id(CDSA_VARIANT_A_PATH);
  if (!r.empty()) {
    EXPECT_EQ(r, CDSA_VARIANT_A_BUILD_ID);
  }
}

TEST(ModuleMap, ReadBuildIdErrors) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  std::string id, err;

  EXPECT_FALSE(read_id(dir.path + "/does-not-exist.so", &id, &err));
  EXPECT_NE(err.find("No such file"), std::string::npos) << err;

  EXPECT_FALSE(read_id(dir.path, &id, &err));
  EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;

  const std::string garbage = dir.path + "/garbage.so";
  ASSERT_TRUE(write_file(garbage, std::string(4096, '\x5a')));
  EXPECT_FALSE(read_id(garbage, &id, &err));
  EXPECT_NE(err.find("not an ELF file"), std::string::npos) << err;

  const std::string empty = dir.path + "/empty.so";
  ASSERT_TRUE(write_file(empty, ""));
  EXPECT_FALSE(read_id(empty, &id, &err));
  EXPECT_FALSE(err.empty());

  const std::string truncated = dir.path + "/truncated.so";
  ASSERT_TRUE(write_file(truncated, read_file(CDSA_TESTLIB_PATH).substr(0, 100)));
  EXPECT_FALSE(read_id(truncated, &id, &err));
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;

  // A FIFO must neither block nor be read.
  const std::string fifo = dir.path + "/fifo.so";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(read_id(fifo, &id, &err));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;
}

// ---------------------------------------------------------------------------
// Live symbolization (libdw)

TEST(SymbolizeLive, StaticFunctionInExecutable) {
  REQUIRE_LIBDW();
  const Stack s = capture_in_static();
  ASSERT_GE(s.pcs.size(), 3u);
  const std::vector<NativeFrame> f = symbolize_stack(s);
  ASSERT_EQ(f.size(), s.pcs.size());

  // Frame 0: inside the static function (named from .symtab, not .dynsym).
  EXPECT_EQ(f[0].pc, s.pcs[0]);
  expect_at(f[0], kStaticName, "symbolizer_test.cc", s.line, CDSA_TEST_EXE);
  EXPECT_TRUE(f[0].inlined.empty());
  EXPECT_TRUE(f[0].error.empty()) << f[0].error;
  EXPECT_GT(f[0].symbol_offset, 0u);
  const std::vector<Module> map = capture_module_map();
  const Module* exe = module_for_file(map, CDSA_TEST_EXE);
  ASSERT_NE(exe, nullptr);
  EXPECT_EQ(f[0].module_offset, s.pcs[0] - exe->bias);

  // Frame 1: the return address into capture_in_static (looked up at pc-1).
  expect_at(f[1], "(anonymous namespace)::capture_in_static()", "symbolizer_test.cc", s.call_line);

  expect_described_as(f[0], kStaticName, "symbolizer_unit_tests", "symbolizer_test.cc", s.line);

  // module_offset is what addr2line takes.
  if (std::strlen(CDSA_ADDR2LINE) != 0) {
    char off[32];
    std::snprintf(off, sizeof off, "0x%llx", static_cast<unsigned long long>(f[0].module_offset));
    const std::string out =
        run_command(std::string(CDSA_ADDR2LINE) + " -C -f -e '" + f[0].module + "' " + off);
    EXPECT_NE(out.find("cdsa_symtest_static_capture"), std::string::npos) << out;
    EXPECT_NE(out.find("symbolizer_test.cc:" + std::to_string(s.line)), std::string::npos) << out;
  }
}

TEST(SymbolizeLive, SharedLibraryFunction) {
  REQUIRE_LIBDW();
  const Stack l = capture_in_lib();
  ASSERT_GE(l.pcs.size(), 3u);
  const std::vector<NativeFrame> f = symbolize_stack(l);
  expect_at(f[0], kLibName, "testlib.cc", l.line, CDSA_TESTLIB_PATH);
  expect_at(f[1], "(anonymous namespace)::capture_in_lib()", nullptr, l.call_line, CDSA_TEST_EXE);
  expect_described_as(f[0], kLibName, "libcdsa_symtest_lib.so", "testlib.cc", l.line);
}

TEST(SymbolizeLive, InlinedFrames) {
  REQUIRE_LIBDW();
  const Stack l = capture_in_lib_inlined();
  ASSERT_GE(l.pcs.size(), 2u);
  const std::vector<NativeFrame> f = symbolize_stack(l);
  // The physical function, at the inlined call's call site...
  expect_at(f[0], kLibInlinedName, "testlib.cc", l.line2);
  // ...and the inlined helper at the PC's own line.
  ASSERT_EQ(f[0].inlined.size(), 1u) << f[0].describe();
  EXPECT_NE(f[0].inlined[0].function.find("inner_capture"), std::string::npos)
      << f[0].inlined[0].function;
  EXPECT_TRUE(ends_with(f[0].inlined[0].file, "testlib.cc")) << f[0].inlined[0].file;
  EXPECT_EQ(f[0].inlined[0].line, l.line);
  EXPECT_NE(f[0].describe().find(" [inlined: "), std::string::npos) << f[0].describe();
  EXPECT_EQ(f[1].line, l.call_line);

  // resolve_inlines = false: the line-table position, no inlined list.
  SymbolizerOptions o;
  o.resolve_inlines = false;
  const std::vector<NativeFrame> g = symbolize_live(l.pcs.data(), 1, true, o);
  EXPECT_EQ(g[0].function, kLibInlinedName);
  EXPECT_TRUE(g[0].inlined.empty());
  EXPECT_EQ(g[0].line, l.line);
}

TEST(SymbolizeLive, ExactPcsAndEdgeCases) {
  // No PCs.
  EXPECT_TRUE(symbolize_live(nullptr, 0, true).empty());
  // A PC in no module.
  const uintptr_t bogus[] = {0x10, 0x20};
  const std::vector<NativeFrame> f = symbolize_live(bogus, 2, true);
  ASSERT_EQ(f.size(), 2u);
  for (const NativeFrame& x : f) {
    EXPECT_TRUE(x.module.empty());
    EXPECT_TRUE(x.function.empty());
    EXPECT_TRUE(x.file.empty());
  }
  EXPECT_EQ(f[0].describe(), "?? (0x10)");
  // Exact PC of a function entry: the function itself, offset 0.
  const uintptr_t entry = reinterpret_cast<uintptr_t>(&cdsa_symtest::lib_capture);
  const std::vector<NativeFrame> g = symbolize_live(&entry, 1, false);
  EXPECT_EQ(g[0].function, kLibName);
  EXPECT_EQ(g[0].symbol_offset, 0u);
}

// ---------------------------------------------------------------------------
// dladdr fallback (forced by option)

TEST(SymbolizeLive, DladdrFallbackByOption) {
  SymbolizerOptions o;
  o.use_libdw = false;
  const Stack l = capture_in_lib();
  const Stack s = capture_in_static();
  const std::vector<NativeFrame> fl = symbolize_stack(l, o);
  const std::vector<NativeFrame> fs = symbolize_stack(s, o);
  // Exported function: named; no file:line without libdw.
  EXPECT_EQ(fl[0].function, kLibName) << fl[0].describe();
  EXPECT_TRUE(fl[0].file.empty());
  EXPECT_EQ(fl[0].line, 0);
  EXPECT_TRUE(fl[0].inlined.empty());
  EXPECT_TRUE(same_file(fl[0].module, CDSA_TESTLIB_PATH));
  EXPECT_GT(fl[0].symbol_offset, 0u);
  const std::vector<Module> map = capture_module_map();
  const Module* lib = module_for_file(map, CDSA_TESTLIB_PATH);
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(fl[0].module_offset, l.pcs[0] - lib->bias);
  EXPECT_EQ(fl[0].describe().rfind(std::string(kLibName) + "+0x", 0), 0u) << fl[0].describe();
  // Static function: not in .dynsym, so not named (and not misnamed).
  EXPECT_EQ(fs[0].function, "") << fs[0].describe();
  EXPECT_TRUE(same_file(fs[0].module, CDSA_TEST_EXE));

  // Same module/offset as the libdw path.
  const std::vector<NativeFrame> full = symbolize_stack(l);
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(full[i].module, fl[i].module);
    EXPECT_EQ(full[i].module_offset, fl[i].module_offset);
  }
}

// ---------------------------------------------------------------------------
// Offline symbolization

TEST(Offline, MatchesLiveForRecordedPcs) {
  REQUIRE_LIBDW();
  const Stack s = capture_in_static();
  const Stack l = capture_in_lib();
  const Stack i = capture_in_lib_inlined();
  const std::vector<Module> map = capture_module_map();
  OfflineSymbolizer off(map);
  for (const Stack* st : {&s, &l, &i}) {
    const std::vector<NativeFrame> live = symbolize_stack(*st);
    const std::vector<NativeFrame> rec = off.symbolize(st->pcs.data(), st->pcs.size(), true);
    expect_same_frames(live, rec);
    // The frames in the test binary and library are fully resolved offline.
    EXPECT_FALSE(rec[0].function.empty());
    EXPECT_GT(rec[0].line, 0);
    EXPECT_TRUE(rec[0].error.empty()) << rec[0].error;
    EXPECT_TRUE(rec[1].error.empty()) << rec[1].error;
  }
  EXPECT_EQ(off.symbolize(s.pcs.data(), 1, true)[0].function, kStaticName);
  EXPECT_EQ(off.symbolize(l.pcs.data(), 1, true)[0].function, kLibName);
  bool saw_exe = false, saw_lib = false;
  for (const ModuleStatus& st : off.module_statuses()) {
    if (same_file(st.path, CDSA_TEST_EXE)) {
      saw_exe = true;
      EXPECT_EQ(st.state, ModuleStatus::State::kOk) << st.message;
    }
    if (same_file(st.path, CDSA_TESTLIB_PATH)) {
      saw_lib = true;
      EXPECT_EQ(st.state, ModuleStatus::State::kOk) << st.message;
      EXPECT_EQ(st.file_build_id, st.recorded_build_id);
    }
  }
  EXPECT_TRUE(saw_exe);
  EXPECT_TRUE(saw_lib);
}

TEST(Offline, ElfSymtabFallbackWithoutLibdw) {
  const Stack s = capture_in_static();
  const Stack l = capture_in_lib();
  SymbolizerOptions o;
  o.use_libdw = false;
  OfflineSymbolizer off(capture_module_map(), o);
  const std::vector<NativeFrame> fs = off.symbolize(s.pcs.data(), s.pcs.size(), true);
  const std::vector<NativeFrame> fl = off.symbolize(l.pcs.data(), l.pcs.size(), true);
  // The ELF reader uses .symtab: even the static function is named.
  EXPECT_EQ(fs[0].function, kStaticName) << fs[0].describe();
  EXPECT_EQ(fs[1].function, "(anonymous namespace)::capture_in_static()");
  EXPECT_TRUE(fs[0].file.empty());
  EXPECT_EQ(fl[0].function, kLibName);
  EXPECT_TRUE(same_file(fl[0].module, CDSA_TESTLIB_PATH));
  if (symbolizer_has_libdw()) {
    const std::vector<NativeFrame> live = symbolize_stack(s);
    EXPECT_EQ(live[0].symbol_offset, fs[0].symbol_offset);
    EXPECT_EQ(live[0].module_offset, fs[0].module_offset);
  }
}

TEST(Offline, BuildIdMismatchIsReportedAndNothingGuessed) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string lib = dir.path + "/libcdsa_symtest_variant.so";
  ASSERT_TRUE(copy_file(CDSA_VARIANT_A_PATH, lib));
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  using CaptureFn = int (*)(uintptr_t*, int);
  auto fn = reinterpret_cast<CaptureFn>(dlsym(h, "cdsa_symtest_variant_capture"));
  ASSERT_NE(fn, nullptr);
  std::vector<uintptr_t> pcs(kMaxFrames);
  pcs.resize(fn(pcs.data(), kMaxFrames));
  ASSERT_GE(pcs.size(), 2u);

  const std::vector<Module> map = capture_module_map();
  const Module* m = find_module(map, pcs[0]);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->path, lib);
  EXPECT_EQ(m->build_id, CDSA_VARIANT_A_BUILD_ID);

  {  // Unchanged file: symbolized.
    OfflineSymbolizer off(map);
    const NativeFrame f = off.symbolize_pc(pcs[0], false);
    EXPECT_EQ(f.function, "cdsa_symtest_variant_capture") << f.describe();
    EXPECT_TRUE(f.error.empty()) << f.error;
  }

  // Replace the file at that path with another build (the mapped inode stays).
  ASSERT_TRUE(copy_file(CDSA_VARIANT_B_PATH, lib + ".new"));
  ASSERT_EQ(::rename((lib + ".new").c_str(), lib.c_str()), 0);

  for (bool use_libdw : {true, false}) {
    SCOPED_TRACE(use_libdw ? "libdw" : "elf symtab");
    SymbolizerOptions o;
    o.use_libdw = use_libdw;
    OfflineSymbolizer off(map, o);
    const std::vector<NativeFrame> f = off.symbolize(pcs.data(), pcs.size(), true);
    EXPECT_TRUE(f[0].function.empty()) << f[0].describe();
    EXPECT_TRUE(f[0].file.empty());
    EXPECT_EQ(f[0].line, 0);
    EXPECT_TRUE(f[0].inlined.empty());
    EXPECT_EQ(f[0].module, lib);
    EXPECT_EQ(f[0].module_offset, pcs[0] - m->bias);
    const std::string want = std::string("binary changed since the run: build-id ") +
                             CDSA_VARIANT_B_BUILD_ID + ", recorded " + CDSA_VARIANT_A_BUILD_ID;
    EXPECT_EQ(f[0].error.rfind(want, 0), 0u) << f[0].error;
    EXPECT_NE(f[0].describe().find(want), std::string::npos) << f[0].describe();
    // Other modules are unaffected (frame 1 is in this test binary).
    EXPECT_TRUE(f[1].error.empty()) << f[1].error;
    EXPECT_FALSE(f[1].function.empty());
    bool seen = false;
    for (const ModuleStatus& st : off.module_statuses()) {
      if (st.path != lib) continue;
      seen = true;
      EXPECT_EQ(st.state, ModuleStatus::State::kMismatch);
      EXPECT_EQ(st.recorded_build_id, CDSA_VARIANT_A_BUILD_ID);
      EXPECT_EQ(st.file_build_id, CDSA_VARIANT_B_BUILD_ID);
    }
    EXPECT_TRUE(seen);
  }

  // Live symbolization must not take names/lines from the replaced file
  // either: the mapped code is still variant A.
  const std::vector<NativeFrame> live = symbolize_live(pcs.data(), 1, true);
  EXPECT_EQ(live[0].function, "cdsa_symtest_variant_capture") << live[0].describe();
  EXPECT_TRUE(live[0].file.empty()) << live[0].describe();
  EXPECT_EQ(live[0].module, lib);
  if (symbolizer_has_libdw()) {
    EXPECT_FALSE(live[0].error.empty());
  }
  // (The handle is deliberately not dlclose'd.)
}

TEST(Offline, MissingGarbageAndTruncatedFilesGivePerModuleErrors) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string garbage = dir.path + "/libgarbage.so";
  ASSERT_TRUE(write_file(garbage, std::string(8192, '\x7f')));
  const std::string truncated = dir.path + "/libtruncated.so";
  ASSERT_TRUE(write_file(truncated, read_file(CDSA_TESTLIB_PATH).substr(0, 300)));
  const std::string fifo = dir.path + "/libfifo.so";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string nobuildid = dir.path + "/libnobuildid.so";  // no build-id, like recorded

  std::vector<Module> map;
  auto add = [&](const std::string& path, uint64_t base, const std::string& id) {
    Module m;
    m.path = path;
    m.bias = base;
    m.segments.push_back(Segment{base, base + 0x10000, 0, PF_R | PF_X});
    m.build_id = id;
    map.push_back(m);
  };
  add(dir.path + "/libmissing.so", 0x100000, "0123456789abcdef");
  add(garbage, 0x200000, "0123456789abcdef");
  add(truncated, 0x300000, "0123456789abcdef");
  add(fifo, 0x400000, "0123456789abcdef");
  add(dir.path, 0x500000, "0123456789abcdef");  // a directory

  for (bool use_libdw : {true, false}) {
    SCOPED_TRACE(use_libdw ? "libdw" : "elf symtab");
    SymbolizerOptions o;
    o.use_libdw = use_libdw;
    OfflineSymbolizer off(map, o);
    const uintptr_t pcs[] = {0x100123, 0x200123, 0x300123, 0x400123, 0x500123, 0x900000};
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<NativeFrame> f = off.symbolize(pcs, 6, false);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
    ASSERT_EQ(f.size(), 6u);
    for (size_t i = 0; i < 5; ++i) {
      SCOPED_TRACE(f[i].describe());
      EXPECT_TRUE(f[i].function.empty());
      EXPECT_TRUE(f[i].file.empty());
      EXPECT_EQ(f[i].module, map[i].path);
      EXPECT_EQ(f[i].module_offset, 0x123u);
      EXPECT_NE(f[i].error.find(map[i].path), std::string::npos) << f[i].error;
    }
    EXPECT_NE(f[0].error.find("No such file or directory"), std::string::npos) << f[0].error;
    EXPECT_NE(f[1].error.find("not an ELF file"), std::string::npos) << f[1].error;
    EXPECT_NE(f[2].error.find("truncated"), std::string::npos) << f[2].error;
    EXPECT_NE(f[3].error.find("not a regular file"), std::string::npos) << f[3].error;
    EXPECT_NE(f[4].error.find("not a regular file"), std::string::npos) << f[4].error;
    EXPECT_EQ(f[5].error, "pc not in any recorded module");
    const std::vector<ModuleStatus> st = off.module_statuses();
    ASSERT_EQ(st.size(), 5u);
    EXPECT_EQ(st[0].state, ModuleStatus::State::kMissing);
    for (size_t i = 1; i < 5; ++i) EXPECT_EQ(st[i].state, ModuleStatus::State::kUnreadable);
  }
  (void)nobuildid;
}

TEST(Offline, SeparateDebugInfoViaDebuglinkIsFoundAndVerified) {
  REQUIRE_LIBDW();
  if (std::strlen(CDSA_OBJCOPY) == 0) GTEST_SKIP() << "objcopy not found";
  const Stack l = capture_in_lib();
  std::vector<Module> map = capture_module_map();
  Module* lib = nullptr;
  for (Module& m : map)
    if (same_file(m.path, CDSA_TESTLIB_PATH)) lib = &m;
  ASSERT_NE(lib, nullptr);

  for (const char* layout : {"same-dir", ".debug", "wrong-build-id"}) {
    SCOPED_TRACE(layout);
    TempDir dir;
    ASSERT_FALSE(dir.path.empty());
    const std::string stripped = dir.path + "/libstripped.so";
    const std::string debug_dir =
        std::string(layout) == ".debug" ? dir.path + "/.debug" : dir.path;
    ASSERT_EQ(::mkdir((dir.path + "/.debug").c_str(), 0700), 0);
    const std::string objcopy = CDSA_OBJCOPY;
    const std::string debug_src =
        std::string(layout) == "wrong-build-id" ? CDSA_TESTLIB_OTHERID_PATH : CDSA_TESTLIB_PATH;
    // Debug info split out, then the library stripped of everything but
    // .dynsym and linked to it by name (.gnu_debuglink).
    ASSERT_EQ(std::system((objcopy + " --only-keep-debug '" + std::string(CDSA_TESTLIB_PATH) + "' '" +
                           dir.path + "/libstripped.so.debug'").c_str()), 0);
    ASSERT_EQ(std::system((objcopy + " --strip-all --add-gnu-debuglink='" + dir.path +
                           "/libstripped.so.debug' '" + std::string(CDSA_TESTLIB_PATH) + "' '" +
                           stripped + "'").c_str()), 0);
    // Put the (right or wrong) debug file where the layout says.
    ASSERT_EQ(std::system((objcopy + " --only-keep-debug '" + debug_src + "' '" + debug_dir +
                           "/libstripped.so.debug.tmp'").c_str()), 0);
    ::unlink((dir.path + "/libstripped.so.debug").c_str());
    ASSERT_EQ(::rename((debug_dir + "/libstripped.so.debug.tmp").c_str(),
                       (debug_dir + "/libstripped.so.debug").c_str()), 0);

    std::string id, err;
    ASSERT_TRUE(read_id(stripped, &id, &err)) << err;
    ASSERT_EQ(id, lib->build_id);  // stripping keeps the build-id note

    std::vector<Module> m2 = map;
    for (Module& m : m2)
      if (m.path == lib->path) m.path = stripped;
    OfflineSymbolizer off(m2);
    const NativeFrame f = off.symbolize_pc(l.pcs[0], false);
    EXPECT_EQ(f.function, kLibName) << f.describe();
    EXPECT_TRUE(f.error.empty()) << f.error;
    if (std::string(layout) == "wrong-build-id") {
      // Same code, other build-id: a foreign debug file is not used.
      EXPECT_TRUE(f.file.empty()) << f.describe();
      EXPECT_EQ(f.line, 0);
    } else {
      EXPECT_TRUE(ends_with(f.file, "testlib.cc")) << f.describe();
      EXPECT_EQ(f.line, l.line);
    }
  }
}

TEST(Offline, RecordedWithoutBuildIdButFileHasOneIsAMismatch) {
  const Stack l = capture_in_lib();
  std::vector<Module> map = capture_module_map();
  for (Module& m : map)
    if (same_file(m.path, CDSA_TESTLIB_PATH)) m.build_id.clear();
  OfflineSymbolizer off(map);
  const NativeFrame f = off.symbolize_pc(l.pcs[0], false);
  EXPECT_TRUE(f.function.empty()) << f.describe();
  EXPECT_NE(f.error.find("binary changed since the run"), std::string::npos) << f.error;
  EXPECT_NE(f.error.find("recorded none"), std::string::npos) << f.error;
}

TEST(Concurrency, LiveAndOfflineFromManyThreads) {
  const Stack s = capture_in_static();
  const Stack l = capture_in_lib_inlined();
  const std::vector<NativeFrame> want_s = symbolize_stack(s);
  const std::vector<NativeFrame> want_l = symbolize_stack(l);
  OfflineSymbolizer off(capture_module_map());
  std::vector<int> ok(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      int good = 0;
      for (int k = 0; k < 10; ++k) {
        const Stack& st = (t + k) % 2 ? s : l;
        const std::vector<NativeFrame>& want = (t + k) % 2 ? want_s : want_l;
        const std::vector<NativeFrame> got =
            t % 2 ? symbolize_live(st.pcs.data(), st.pcs.size(), true)
                  : off.symbolize(st.pcs.data(), st.pcs.size(), true);
        bool same = got.size() == want.size();
        for (size_t i = 0; same && i < got.size(); ++i)
          same = got[i].describe() == want[i].describe();
        good += same;
      }
      ok[t] = good;
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(ok[t], 10) << "thread " << t;
}

// ---------------------------------------------------------------------------
// A shared library linked like libcdsa.so works (and see the
// symbolizer.no_libdw_needed CMake test for its NEEDED entries).

TEST(LinkCheck, StaticLibstdcxxHiddenSharedLibraryRuns) {
  void* h = dlopen(CDSA_LINKCHECK_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto fn = reinterpret_cast<int (*)()>(dlsym(h, "cdsa_symtest_linkcheck"));
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(fn(), 1);
  // Only the entry point is exported.
  EXPECT_EQ(dlsym(h, "_ZN4cdsa10symbolizer8demangleEPKc"), nullptr);
}

// ---------------------------------------------------------------------------
// Run by the symbolizer.no_libdw_* CTest entries with libdw made unloadable
// (CDSA_LIBDW_PATH=/nonexistent/...) or disabled (CDSA_SYMBOLIZER_NO_LIBDW=1).

TEST(NoLibdwEnv, FallsBackToDladdrAndSaysSo) {
  if (!libdw_configured_off()) GTEST_SKIP() << "only with CDSA_LIBDW_PATH / CDSA_SYMBOLIZER_NO_LIBDW";
  EXPECT_FALSE(symbolizer_has_libdw());
  const std::string d = symbolizer_backend_description();
  EXPECT_NE(d.find("dladdr"), std::string::npos) << d;
  if (config().libdw_path[0] != '\0')
    EXPECT_EQ(d.rfind("libdw unavailable (dlopen /nonexistent/libdw.so.1: ", 0), 0u) << d;
  else
    EXPECT_EQ(d.rfind("libdw disabled by CDSA_SYMBOLIZER_NO_LIBDW", 0), 0u) << d;

  const Stack l = capture_in_lib();
  const Stack s = capture_in_static();
  const std::vector<NativeFrame> fl = symbolize_stack(l);
  const std::vector<NativeFrame> fs = symbolize_stack(s);
  EXPECT_EQ(fl[0].function, kLibName);
  EXPECT_TRUE(fl[0].file.empty());
  EXPECT_TRUE(same_file(fl[0].module, CDSA_TESTLIB_PATH));
  EXPECT_EQ(fs[0].function, "");
  EXPECT_TRUE(same_file(fs[0].module, CDSA_TEST_EXE));

  OfflineSymbolizer off(capture_module_map());
  EXPECT_EQ(off.symbolize_pc(s.pcs[0], false).function, kStaticName);
  EXPECT_EQ(off.symbolize_pc(l.pcs[0], false).function, kLibName);
  // libdw was never loaded into this process.
  EXPECT_EQ(dlopen("libdw.so.1", RTLD_NOW | RTLD_NOLOAD), nullptr);
}

}  // namespace
}  // namespace cdsa::symbolizer
