// Compares the walker's layout tables with offsetof() values taken from the
// real headers of every CPython installation found at configure time
// (py_header_layout.c compiled once per installation), and unit-tests the
// pieces of python_stack.cc that need no interpreter.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "header_layout.h"
#include "pystack_header_sets.h"  // generated: CDSA_PYSTACK_HEADER_SETS / _MISSING
#include "shim/stacks/python_stack.h"

using cdsa::pystack::DebugOffsetsFields;
using cdsa::pystack::PyLayout;

// The functions of the per-installation objects.
#define CDSA_DECLARE(tag, label, include_dir) extern "C" void cdsa_header_layout_##tag(struct cdsa_header_layout*);
CDSA_PYSTACK_HEADER_SETS(CDSA_DECLARE)
#undef CDSA_DECLARE

namespace {

struct HeaderSet {
  std::string label;        // e.g. "3.11.7 (/root/.pyenv/...)"
  std::string skip_reason;  // non-empty: not installed
  void (*fn)(cdsa_header_layout*);
};

std::vector<HeaderSet> header_sets() {
  std::vector<HeaderSet> v;
#define CDSA_FOUND(tag, label, include_dir) \
  v.push_back({std::string(label) + " (" include_dir ")", "", cdsa_header_layout_##tag});
  CDSA_PYSTACK_HEADER_SETS(CDSA_FOUND)
#undef CDSA_FOUND
#define CDSA_MISSING(label, reason) v.push_back({label, reason, nullptr});
  CDSA_PYSTACK_HEADER_MISSING(CDSA_MISSING)
#undef CDSA_MISSING
  return v;
}

class HeaderOffsets : public ::testing::TestWithParam<HeaderSet> {};

void expect_layout_eq(const cdsa_header_layout& h, const PyLayout& L) {
#define CDSA_CMP(f) EXPECT_EQ(h.f, int64_t(L.f)) << "field " #f;
  CDSA_HDR_LAYOUT_FIELDS(CDSA_CMP)
#undef CDSA_CMP
}

TEST_P(HeaderOffsets, TableMatchesHeaders) {
  const HeaderSet& s = GetParam();
  if (!s.fn) GTEST_SKIP() << s.label << ": " << s.skip_reason;
  static cdsa_header_layout h;
  s.fn(&h);
  const int major = int((h.hexversion >> 24) & 0xff);
  const int minor = int((h.hexversion >> 16) & 0xff);
  ASSERT_EQ(major, 3);
  std::printf("checking %s: CPython %d.%d headers\n", s.label.c_str(), major, minor);
  PyLayout L;
  if (minor <= 12) {
    ASSERT_TRUE(cdsa::pystack::builtin_layout(minor, &L)) << "no built-in table for 3." << minor;
    EXPECT_EQ(h.has_debug_offsets, 0);
    expect_layout_eq(h, L);
    EXPECT_EQ(L.code_tag_mask, 0u);
    EXPECT_FALSE(L.state_auto);
  } else {
    ASSERT_EQ(h.has_debug_offsets, 1);
    DebugOffsetsFields f;
    ASSERT_TRUE(cdsa::pystack::debug_offsets_fields(minor, &f)) << "no _Py_DebugOffsets mirror for 3." << minor;
#define CDSA_CMP(field, member, ...) EXPECT_EQ(h.dbg.field, int64_t(f.field)) << "_Py_DebugOffsets." #member;
    CDSA_PY_DEBUG_OFFSETS_FIELDS(CDSA_CMP, CDSA_CMP, CDSA_CMP)
#undef CDSA_CMP
    EXPECT_LE(size_t(f.end), h.debug_offsets_size);
    const char* why = nullptr;
    ASSERT_TRUE(cdsa::pystack::layout_from_debug_offsets(minor, h.debug_offsets, h.debug_offsets_size, &L, &why))
        << why;
    expect_layout_eq(h, L);
  }
}

INSTANTIATE_TEST_SUITE_P(Installed, HeaderOffsets, ::testing::ValuesIn(header_sets()),
                         [](const ::testing::TestParamInfo<HeaderSet>& i) {
                           std::string n;
                           for (char c : i.param.label) {
                             if (c == ' ' || c == '(') break;
                             n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           }
                           return "v" + n + "_" + std::to_string(i.index);
                         });

// --- debug offsets parsing without headers ---------------------------------

// A 3.14-like _Py_DebugOffsets, filled at the positions of the 3.14 mirror
// with the values a default 3.14 build publishes.
std::vector<unsigned char> fake_debug_offsets(int minor, uint64_t version) {
  DebugOffsetsFields f;
  EXPECT_TRUE(cdsa::pystack::debug_offsets_fields(minor, &f));
  std::vector<unsigned char> b(size_t(f.end), 0);
  auto put = [&](int32_t pos, uint64_t v) { std::memcpy(b.data() + pos, &v, 8); };
  std::memcpy(b.data(), "xdebugpy", 8);
  put(f.version, version);
  put(f.free_threaded, 0);
  put(f.tstate_size, 4096);
  put(f.tstate_current_frame, 72);
  put(f.frame_size, 80);
  put(f.frame_previous, 8);
  put(f.frame_executable, 0);
  put(f.frame_instr_ptr, 56);
  put(f.frame_owner, 74);
  put(f.code_size, 216);
  put(f.code_filename, 112);
  put(f.code_name, 120);
  put(f.code_qualname, 128);
  put(f.code_linetable, 136);
  put(f.code_firstlineno, 68);
  put(f.code_adaptive, 208);
  put(f.pyobject_size, 16);
  put(f.pyobject_ob_type, 8);
  put(f.type_size, 416);
  put(f.type_flags, 168);
  put(f.unicode_size, 64);
  put(f.unicode_state, 32);
  put(f.unicode_length, 16);
  put(f.unicode_ascii_size, 40);
  return b;
}

TEST(DebugOffsets, Parses314) {
  auto b = fake_debug_offsets(14, 0x030E00F0);
  PyLayout L;
  const char* why = nullptr;
  ASSERT_TRUE(cdsa::pystack::layout_from_debug_offsets(14, b.data(), b.size(), &L, &why)) << why;
  EXPECT_EQ(L.minor, 14);
  EXPECT_EQ(L.tstate_current_frame, 72);
  EXPECT_EQ(L.tstate_cframe, -1);
  EXPECT_EQ(L.frame_owner, 74);
  EXPECT_EQ(L.code_adaptive, 208);
  EXPECT_EQ(L.code_firsttraceable, 192);
  EXPECT_EQ(L.code_basicsize, 216);
  EXPECT_EQ(L.type_flags, 168);
  EXPECT_EQ(L.type_dealloc, 48);
  EXPECT_EQ(L.str_compact_size, 56);
  EXPECT_EQ(L.code_tag_mask, 3u);
  EXPECT_TRUE(L.state_auto);
}

TEST(DebugOffsets, Rejects) {
  PyLayout L;
  const char* why = nullptr;
  std::vector<unsigned char> zeros(4096, 0);
  EXPECT_FALSE(cdsa::pystack::layout_from_debug_offsets(13, zeros.data(), zeros.size(), &L, &why));
  EXPECT_STREQ(why, "_PyRuntime.debug_offsets cookie missing");

  auto b = fake_debug_offsets(14, 0x030D00F0);  // says 3.13, asked as 3.14
  EXPECT_FALSE(cdsa::pystack::layout_from_debug_offsets(14, b.data(), b.size(), &L, &why));
  EXPECT_NE(std::string(why).find("version"), std::string::npos);

  b = fake_debug_offsets(14, 0x030E00F0);
  DebugOffsetsFields f;
  cdsa::pystack::debug_offsets_fields(14, &f);
  uint64_t one = 1;
  std::memcpy(b.data() + f.free_threaded, &one, 8);
  EXPECT_FALSE(cdsa::pystack::layout_from_debug_offsets(14, b.data(), b.size(), &L, &why));
  EXPECT_STREQ(why, "free-threaded build not supported");

  // A mirror shifted by one field (e.g. a field added upstream) must fail
  // the plausibility checks rather than be trusted.
  b = fake_debug_offsets(14, 0x030E00F0);
  std::vector<unsigned char> shifted(b.size() + 8, 0);
  std::memcpy(shifted.data(), b.data(), 24);
  std::memcpy(shifted.data() + 32, b.data() + 24, b.size() - 24);
  EXPECT_FALSE(cdsa::pystack::layout_from_debug_offsets(14, shifted.data(), shifted.size(), &L, &why));
  EXPECT_STREQ(why, "_PyRuntime.debug_offsets has an unexpected layout");

  EXPECT_FALSE(cdsa::pystack::layout_from_debug_offsets(15, b.data(), b.size(), &L, &why));
  EXPECT_FALSE(cdsa::pystack::layout_from_debug_offsets(14, b.data(), 16, &L, &why));
  EXPECT_FALSE(cdsa::pystack::builtin_layout(9, &L));
  EXPECT_FALSE(cdsa::pystack::builtin_layout(13, &L));
  EXPECT_FALSE(cdsa::pystack::debug_offsets_fields(12, &f));
}

// --- UTF-8 encoding ----------------------------------------------------------

TEST(EncodeUtf8, KindsAndTruncation) {
  char out[16];
  const uint8_t latin1[] = {'c', 'a', 'f', 0xE9};  // café
  EXPECT_EQ(cdsa::pystack::encode_utf8(latin1, 1, 4, out, sizeof out), 5u);
  EXPECT_STREQ(out, "caf\xC3\xA9");
  // Not enough room for the 2-byte é: stop before it.
  EXPECT_EQ(cdsa::pystack::encode_utf8(latin1, 1, 4, out, 5), 3u);
  EXPECT_STREQ(out, "caf");
  const uint16_t ucs2[] = {0x65B9, 0x6CD5, 0xD800};  // 方法 + lone surrogate
  EXPECT_EQ(cdsa::pystack::encode_utf8(ucs2, 2, 3, out, sizeof out), 9u);
  EXPECT_STREQ(out, "\xE6\x96\xB9\xE6\xB3\x95\xEF\xBF\xBD");
  EXPECT_EQ(cdsa::pystack::encode_utf8(ucs2, 2, 3, out, 6), 3u);
  const uint32_t ucs4[] = {0x20000, 'x', 0x110000};
  EXPECT_EQ(cdsa::pystack::encode_utf8(ucs4, 4, 3, out, sizeof out), 8u);
  EXPECT_STREQ(out, "\xF0\xA0\x80\x80x\xEF\xBF\xBD");
  EXPECT_EQ(cdsa::pystack::encode_utf8(ucs4, 4, 3, out, 4), 0u);
  EXPECT_STREQ(out, "");
  EXPECT_EQ(cdsa::pystack::encode_utf8(ucs4, 4, 3, out, 0), 0u);
  EXPECT_EQ(cdsa::pystack::encode_utf8(ucs4, 4, 3, nullptr, 8), 0u);
}

// --- no interpreter in this process ----------------------------------------

TEST(NoPython, DegradesQuietly) {
  EXPECT_EQ(cdsa::python_walker_init(), cdsa::PyWalkerState::NoPython);
  EXPECT_EQ(cdsa::python_walker_init(), cdsa::PyWalkerState::NoPython);  // idempotent
  EXPECT_STREQ(cdsa::python_walker_description(), "no Python interpreter in this process");
  cdsa::PyFrameKey keys[8];
  bool truncated = true;
  EXPECT_EQ(cdsa::capture_python_frames(keys, 8, &truncated), 0);
  EXPECT_FALSE(truncated);
  EXPECT_EQ(cdsa::capture_python_frames(nullptr, 8), 0);
  int dummy = 0;
  cdsa::PyFrameKey k{&dummy, 0, 1};
  char file[8] = "x", func[8] = "y";
  int line = 7;
  EXPECT_FALSE(cdsa::resolve_python_frame(k, file, sizeof file, func, sizeof func, &line));
  EXPECT_STREQ(file, "");
  EXPECT_STREQ(func, "");
  EXPECT_EQ(line, 0);
  EXPECT_EQ(cdsa::python_code_check(&dummy), 0u);
  EXPECT_EQ(cdsa::pystack::active_layout(), nullptr);
}

}  // namespace
