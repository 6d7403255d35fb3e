// The trace reader against the writer: everything written reads back the same, and every kind of bad
// input is refused with a message that says where and what.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "report/trace.h"
#include "report/trace_reader.h"

namespace cdsa::report {
namespace {

// parse_trace / read_trace_file's answer as (true, the trace) or (false, the error's line).
bool parse_trace(std::string_view text, TraceFile* tf, std::string* error) {
  base::StatusOr<TraceFile> r = cdsa::report::parse_trace(text);
  *tf = r.ok() ? std::move(*r) : TraceFile{};
  *error = r.status().message();
  return r.ok();
}
bool read_trace_file(const std::string& path, TraceFile* tf, std::string* error) {
  base::StatusOr<TraceFile> r = cdsa::report::read_trace_file(path);
  *tf = r.ok() ? std::move(*r) : TraceFile{};
  *error = r.status().message();
  return r.ok();
}

CallStack sample_stack(int salt) {
  CallStack s;
  s.python.push_back({"/src/train.py", "Model.forward", 42 + salt, "loss = crit(out, \"tgt\")\t# \\ done"});
  s.python.push_back({"<string>", "<module>", 1, ""});
  s.native.push_back({0x7fffffffffffull + static_cast<uint64_t>(salt), "/usr/lib/libtorch_cuda.so", 0x1a2b3c,
                      "at::native::nll(at::Tensor const&)", "Loss.cu", 250});
  s.native.push_back({0xffffffffffffffffull, "", 0, "", "", 0});
  return s;
}

Launch sample_launch(uint64_t seq) {
  Launch l;
  l.seq = seq;
  l.stream_seq = seq * 2;
  l.stream_id = (1ull << 63) | 0x55550000ull;
  l.graph_id = 7;
  l.time_ns = 18446744073709551615ull;
  l.ctx_id = 4294967295u;
  l.tid = 1234;
  l.stack_id = seq % 2 ? 3 : 0xffffffffu;
  l.kernel = "_Z6kernelPfi\xe2\x9c\x93";
  l.kind = seq % 2 ? "graph" : "kernel_ex";
  l.grid[0] = 4294967295u;
  l.block[2] = 64;
  l.shared_mem = 49152;
  l.captured = seq % 2;
  l.per_thread_stream = !(seq % 2);
  return l;
}

TraceData sample_trace() {
  TraceData t;
  t.cdsa.version = "0.1.0";
  t.cdsa.config = {{"native_depth", "48"}, {"trace_file", "cdsa-%h-%p.json"}};
  t.process = {4242,  "node-17",    {"python3", "-c", "print(\"\\n\")"}, 1795984067852451555ull, 3, 64, 1,
               13000, "NVIDIA H200", 13000, ""};
  t.modules.push_back({"/usr/bin/python3.11",
                       "a7516ae81afc8457",
                       0x55d74942f000ull,
                       {{0x55d74942f000ull, 0x55d74942f760ull}, {0x55d749430000ull, 0x55d749430155ull}}});
  t.modules.push_back({"linux-vdso.so.1", "", 0, {}});
  t.stacks.push_back({3, sample_stack(1)});
  t.stacks.push_back({9, CallStack{}});
  t.launches = {sample_launch(1), sample_launch(2)};
  t.streams.push_back({1, 10, 9, true});
  t.streams.push_back({(1ull << 63) | 5, 0, 0, false});
  t.reason = "fault";
  t.has_fault = true;
  FaultReport& r = t.report;
  r.code = 710;
  r.error_name = "CUDA_ERROR_ASSERT";
  r.error_string = "device-side assert triggered";
  r.surfaced_call = "cuMemcpyDtoH_v2";
  r.surfaced_tid = 4242;
  r.surfaced_stack_id = 5;  // not under stacks: the writer adds it
  r.surfaced_stack = sample_stack(2);
  r.attribution = Attribution::Ambiguous;
  Candidate c;
  c.launch = sample_launch(1);
  c.stack = sample_stack(1);  // stack 3, as the launch says
  c.pending = 2;
  c.why = "first unfinished launch";
  c.graph_nodes.emplace_back();
  c.graph_nodes.back().launch = sample_launch(2);
  c.graph_nodes.back().stack = sample_stack(4);
  c.graph_nodes.back().launch.stack_id = 11;  // not under stacks either
  r.candidates.push_back(c);
  r.candidates.push_back(Candidate{});
  r.device_asserts = base::parse_device_asserts(
      "Loss.cu:250: nll: block: [0,0,0], thread: [2,0,0] Assertion `t >= 0` failed.\nnot an assert line\n");
  r.device_asserts.push_back(base::DeviceAssert{});
  r.device_asserts.back().message = "a line the driver printed that is no assert line";
  r.notes = {"ring overwrote"};
  r.launches_recorded = 99;
  r.fault_time_unix_ns = 1795984068000000000ull;
  r.origin = {3, 64, 4242, "node-17", 1, "NVIDIA H200", "0000:3B:00.0"};
  t.has_profile = true;
  t.profile.capacity = 8192;
  t.profile.dropped = 5;
  t.profile.sites = {{3, "fill", 1000}, {0xffffffffu, "", 2}};
  return t;
}

TEST(TraceReader, ReadsBackEverythingTheWriterWrites) {
  TraceData t = sample_trace();
  std::string text = trace_to_json(t);
  TraceFile tf;
  std::string error;
  ASSERT_TRUE(parse_trace(text, &tf, &error)) << error;
  EXPECT_EQ(trace_to_json(tf.data), text);
  EXPECT_EQ(format_report_text(tf.data.report), format_report_text(t.report));
  EXPECT_EQ(tf.data.report.fault_time_unix_ns, t.report.fault_time_unix_ns);
  EXPECT_EQ(tf.data.profile.sites.size(), 2u);
  EXPECT_EQ(tf.data.launches[0].stack_id, 3u);
  EXPECT_EQ(tf.data.launches[1].stack_id, 0xffffffffu);
  // The device's assert lines come back parsed (the file keeps them as printed): the hints read their fields.
  ASSERT_EQ(tf.data.report.device_asserts.size(), 2u);
  EXPECT_EQ(tf.data.report.device_asserts[0].function, "nll");
  EXPECT_EQ(tf.data.report.device_asserts[0].condition, "t >= 0");
  EXPECT_EQ(tf.data.report.device_asserts[1].function, "");
  EXPECT_EQ(tf.data.report.device_asserts[1].message, "a line the driver printed that is no assert line");
}

// Version 2 stores each stack once, under "stacks": the report names them by id, and reading fills them in.
TEST(TraceReader, EachStackIsStoredOnce) {
  TraceData t = sample_trace();
  const std::string text = trace_to_json(t);
  // sample_stack(1) is stack 3: the launches' stack, the candidate's and the profile's, written once.
  const std::string line = "\"line\":43,";
  EXPECT_EQ(text.find(line), text.rfind(line)) << text;
  EXPECT_EQ(text.find("\"surfaced_stack\""), std::string::npos);
  EXPECT_EQ(text.find("\"stack\":{\"python\""), text.find("{\"id\":3,\"stack\":") + 8);
  TraceFile tf;
  std::string error;
  ASSERT_TRUE(parse_trace(text, &tf, &error)) << error;
  std::vector<uint32_t> ids;
  for (const auto& e : tf.data.stacks) ids.push_back(e.id);
  EXPECT_EQ(ids, (std::vector<uint32_t>{3, 5, 9, 11}));  // the report's surfaced stack and graph node's joined
  const FaultReport& r = tf.data.report;
  EXPECT_EQ(r.surfaced_stack_id, 5u);
  EXPECT_EQ(r.surfaced_stack.python.at(0).line, 44);
  EXPECT_EQ(r.candidates[0].stack.python.at(0).line, 43);
  EXPECT_EQ(r.candidates[0].graph_nodes[0].stack.python.at(0).line, 46);
  EXPECT_TRUE(r.candidates[1].stack.python.empty());  // a candidate without a stack keeps none
}

// The report alone (cdsa report --json, the Python API) holds its stacks in place, beside their ids.
TEST(TraceReader, TheReportAloneHoldsItsStacks) {
  TraceData t = sample_trace();
  const std::string json = report_to_json(t.report);
  EXPECT_NE(json.find("\"surfaced_stack_id\":5,\"surfaced_stack\":{\"python\":[{\"file\":\"/src/train.py\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"stack_id\":3,"), std::string::npos);
  EXPECT_NE(json.find("\"stack\":{\"python\":[{\"file\":\"/src/train.py\",\"function\":\"Model.forward\",\"line\":43"),
            std::string::npos);
  EXPECT_EQ(json.find('\n'), std::string::npos);
}

// Real files of version 1, written by cdsa before stacks were stored once (tests/data/trace-v1: a Python fault,
// a graph replay, an autograd backward launch, a native program, an exit trace with a profile): each reads, its
// report stacks filled, and written again as version 2 it reads back the same.
TEST(TraceReader, ReadsVersionOneFiles) {
  for (const char* name : {"nll", "graph", "autograd", "native", "profile_exit"}) {
    SCOPED_TRACE(name);
    std::string path = std::string(CDSA_TRACE_V1_DIR) + "/" + name + ".json";
    TraceFile tf;
    std::string error;
    ASSERT_TRUE(read_trace_file(path, &tf, &error)) << error;
    std::stringstream raw;
    raw << std::ifstream(path).rdbuf();
    EXPECT_NE(raw.str().find("\"version\":1,"), std::string::npos);
    const TraceData& t = tf.data;
    if (t.has_fault) {
      EXPECT_FALSE(t.report.surfaced_stack.python.empty() && t.report.surfaced_stack.native.empty());
      EXPECT_NE(t.report.surfaced_stack_id, 0xffffffffu);  // given the first free id
      ASSERT_FALSE(t.report.candidates.empty());
      for (const auto& c : t.report.candidates)
        EXPECT_FALSE(c.stack.python.empty() && c.stack.native.empty());
    }
    const std::string v2 = trace_to_json(t);
    EXPECT_NE(v2.find("\"version\":2,"), std::string::npos);
    TraceFile again;
    ASSERT_TRUE(parse_trace(v2, &again, &error)) << error;
    EXPECT_EQ(trace_to_json(again.data), v2);
    EXPECT_EQ(format_report_text(again.data.report), format_report_text(t.report));
    EXPECT_EQ(again.data.stacks.size(), t.stacks.size());
    if (std::string(name) == "graph") {
      EXPECT_FALSE(t.report.candidates[0].graph_nodes.at(0).stack.python.empty());
    } else if (std::string(name) == "autograd") {
      EXPECT_FALSE(t.report.candidates[0].forward_candidates.empty());
    } else if (std::string(name) == "profile_exit") {
      EXPECT_TRUE(t.has_profile && !t.has_fault);
    }
  }
}

TEST(TraceReader, ExitTraceWithoutProfileOrFaultTime) {
  TraceData t = sample_trace();
  t.reason = "exit";
  t.has_fault = false;
  t.has_profile = false;
  TraceFile tf;
  std::string error;
  ASSERT_TRUE(parse_trace(trace_to_json(t), &tf, &error)) << error;
  EXPECT_FALSE(tf.data.has_fault);
  EXPECT_FALSE(tf.data.has_profile);
  // Files written before fault_time_unix_ns existed still read (it is optional in version 1).
  t = sample_trace();
  std::string text = trace_to_json(t);
  auto p = text.find("\"fault_time_unix_ns\":");
  ASSERT_NE(p, std::string::npos);
  text.erase(p, text.find(',', p) - p + 1);
  ASSERT_TRUE(parse_trace(text, &tf, &error)) << error;
  EXPECT_EQ(tf.data.report.fault_time_unix_ns, 0u);
}

TEST(TraceReader, ReportOriginReadsBackAndIsOptional) {
  TraceData t = sample_trace();
  TraceFile tf;
  std::string error;
  ASSERT_TRUE(parse_trace(trace_to_json(t), &tf, &error)) << error;
  const Origin& o = tf.data.report.origin;
  EXPECT_EQ(o.rank, 3);
  EXPECT_EQ(o.world_size, 64);
  EXPECT_EQ(o.pid, 4242);
  EXPECT_EQ(o.host, "node-17");
  EXPECT_EQ(o.gpu_ordinal, 1);
  EXPECT_EQ(o.gpu_name, "NVIDIA H200");
  EXPECT_EQ(o.gpu_pci_bus_id, "0000:3B:00.0");
  // Files written before reports named their origin still read: no header line, no rank prefix.
  std::string text = trace_to_json(t);
  auto p = text.find("\"origin\":");
  ASSERT_NE(p, std::string::npos);
  text.erase(p, text.find('}', p) - p + 2);
  ASSERT_TRUE(parse_trace(text, &tf, &error)) << error;
  EXPECT_EQ(tf.data.report.origin.rank, -1);
  EXPECT_EQ(format_report_text(tf.data.report).find("rank"), std::string::npos);
  // A bad origin is refused with where it is.
  text = trace_to_json(t);
  p = text.find("\"gpu_ordinal\":1");
  text.replace(p, 15, "\"gpu_ordinal\":\"1\"");
  EXPECT_FALSE(parse_trace(text, &tf, &error));
  EXPECT_NE(error.find("report.origin.gpu_ordinal"), std::string::npos) << error;
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  auto p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  if (p != std::string::npos) s.replace(p, from.size(), to);
  return s;
}

struct BadCase {
  const char* name;
  std::string from, to;
  const char* expect;  // substring of the error
};

TEST(TraceReader, EachBadFieldIsNamed) {
  const std::string good = trace_to_json(sample_trace());
  const BadCase cases[] = {
      {"format", "\"cdsa-trace\"", "\"chrome\"", "not a cdsa trace file"},
      {"version", "\"version\":2", "\"version\":3", "unsupported trace version 3 (this cdsa reads versions 1 to 2)"},
      {"version-0", "\"version\":2", "\"version\":0", "unsupported trace version 0"},
      {"version-string", "\"version\":2", "\"version\":\"2\"", "unsupported trace version"},
      {"reason", "\"reason\":\"fault\"", "\"reason\":\"oops\"", "reason: expected fault or exit"},
      {"pid", "\"pid\":4242", "\"pid\":\"4242\"", "process.pid: expected an integer"},
      {"rank", "\"rank\":3", "\"rank\":-2", "process.rank: expected an integer in -1.."},
      {"pid-float", "\"pid\":4242", "\"pid\":4242.5", "process.pid"},
      {"bias", "\"bias\":\"0x55d74942f000\"", "\"bias\":1", "modules[0].bias: expected a hexadecimal string"},
      {"hex-digits", "\"bias\":\"0x55d74942f000\"", "\"bias\":\"0xg\"", "modules[0].bias"},
      {"hex-long", "\"bias\":\"0x55d74942f000\"", "\"bias\":\"0x11112222333344445\"", "at most 16 digits"},
      {"range", "[\"0x55d74942f000\",\"0x55d74942f760\"]", "[\"0x55d74942f760\",\"0x55d74942f000\"]",
       "modules[0].ranges[0]: range ends before it starts"},
      {"range-arity", "[\"0x55d74942f000\",\"0x55d74942f760\"]", "[\"0x55d74942f000\"]", "modules[0].ranges[0]"},
      {"stack-id", "\"id\":3", "\"id\":-3", "stacks[0].id"},
      {"py-line", "\"line\":43", "\"line\":null", "stacks[0].stack.python[0].line"},
      {"grid", "\"grid\":[4294967295,0,0]", "\"grid\":[4294967296,0,0]",
       "launches[0].grid[0]: expected an integer in 0..4294967295"},
      {"grid-arity", "\"grid\":[4294967295,0,0]", "\"grid\":[1,2]", "launches[0].grid: expected an array of 3"},
      {"kind", "\"kind\":\"graph\"", "\"kind\":\"warp\"", "launches[0].kind"},
      {"captured", "\"captured\":true", "\"captured\":1", "launches[0].captured: expected true or false"},
      {"attribution", "\"attribution\":\"ambiguous\"", "\"attribution\":\"maybe\"", "report.attribution"},
      {"candidates", "\"candidates\":[", "\"candidates\":[1,", "report.candidates[0]: expected an object"},
      {"notes", "\"notes\":[\"ring overwrote\"]", "\"notes\":[1]", "report.notes[0]: expected a string"},
      {"profile", "\"count\":1000", "\"count\":-1", "profile.sites[0].count"},
      {"report-type", "\"report\":{", "\"report\":7,\"old\":{", "report: expected an object or null"},
      {"config", "\"native_depth\":\"48\"", "\"native_depth\":48", "cdsa.config.native_depth: expected a string"},
      {"missing", "\"streams\":", "\"streamz\":", "missing field \"streams\""},
      {"surfaced-id", "\"surfaced_stack_id\":5", "\"surfaced_stack_id\":6",
       "report.surfaced_stack_id: stack 6 is not in stacks"},
      {"surfaced-id-missing", "\"surfaced_stack_id\":5,", "", "report: missing field \"surfaced_stack_id\""},
      {"node-stack", "\"stack_id\":11", "\"stack_id\":12",
       "report.candidates[0].graph_nodes[0].launch.stack_id: stack 12 is not in stacks"},
      {"stack-twice", "\"id\":9", "\"id\":3", "stack 3 is listed twice"},
  };
  for (const auto& c : cases) {
    TraceFile tf;
    std::string error;
    EXPECT_FALSE(parse_trace(replace_once(good, c.from, c.to), &tf, &error)) << c.name;
    EXPECT_NE(error.find(c.expect), std::string::npos) << c.name << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << c.name;
  }
}

TEST(TraceReader, FaultWithoutReportIsRefused) {
  TraceData t = sample_trace();
  t.has_fault = false;
  TraceFile tf;
  std::string error;
  EXPECT_FALSE(parse_trace(trace_to_json(t), &tf, &error));
  EXPECT_NE(error.find("reason is \"fault\" but the report is null"), std::string::npos) << error;
}

TEST(TraceReader, MalformedTextIsRefusedInOneLine) {
  const std::string good = trace_to_json(sample_trace());
  const std::string inputs[] = {"",
                                "{",
                                good.substr(0, good.size() / 3),
                                std::string(100000, '['),
                                "{\"a\":" + std::string(70, '[') + std::string(70, ']') + "}",
                                "null",
                                "[]",
                                "\"cdsa-trace\"",
                                std::string("{\"format\":\"cdsa-trace\xff\xfe\"}"),
                                std::string("\0\0\0", 3)};
  for (const auto& in : inputs) {
    TraceFile tf;
    std::string error;
    EXPECT_FALSE(parse_trace(in, &tf, &error)) << in.substr(0, 40);
    EXPECT_FALSE(error.empty());
    for (unsigned char ch : error) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << error;
  }
}

TEST(TraceReader, OnlyRegularFilesAreRead) {
  char dir[] = "/tmp/cdsa-reader-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string d = dir;
  TraceFile tf;
  std::string error;
  EXPECT_FALSE(read_trace_file(d + "/missing.json", &tf, &error));
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;
  EXPECT_FALSE(read_trace_file(d, &tf, &error));
  EXPECT_EQ(error, "is a directory");
  std::string fifo = d + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(read_trace_file(fifo, &tf, &error));  // returns at once: no writer is waited for
  EXPECT_EQ(error, "not a regular file");
  std::string good = d + "/good.json";
  std::ofstream(good) << trace_to_json(sample_trace());
  EXPECT_TRUE(read_trace_file(good, &tf, &error)) << error;
  unlink(good.c_str());
  unlink(fifo.c_str());
  rmdir(dir);
}

// The fuzzer's checked-in corpus: every file is answered (accepted or refused), and the valid seeds read.
TEST(TraceReader, FuzzCorpusIsAnswered) {
  DIR* d = opendir(CDSA_FUZZ_CORPUS);
  ASSERT_NE(d, nullptr) << CDSA_FUZZ_CORPUS;
  int files = 0, valid = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string path = std::string(CDSA_FUZZ_CORPUS) + "/" + e->d_name;
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    TraceFile tf;
    std::string error;
    bool ok = parse_trace(ss.str(), &tf, &error);
    EXPECT_TRUE(ok || !error.empty()) << path;
    if (std::string(e->d_name).rfind("valid-", 0) == 0) {
      EXPECT_TRUE(ok) << path << ": " << error;
    }
    if (ok) {
      ++valid;
      EXPECT_FALSE(format_report_text(tf.data.report).empty());
    }
    ++files;
  }
  closedir(d);
  EXPECT_GE(files, 5);
  EXPECT_GE(valid, 2);
}

}  // namespace
}  // namespace cdsa::report
