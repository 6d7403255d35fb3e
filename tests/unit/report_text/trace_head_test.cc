// A trace's first bytes as the launcher summary reads them (report/trace_head.h), from files the writer made.
#include <gtest/gtest.h>

#include <string>

#include "report/trace.h"
#include "report/trace_head.h"

namespace cdsa::report {
namespace {

std::string written(const char* reason, bool fault, int pid, const char* session) {
  TraceData t;
  t.reason = reason;
  t.has_fault = fault;
  t.process.pid = pid;
  t.process.host = "node7";
  t.process.session = session;
  std::string text = trace_to_json(t);
  return text.substr(0, kTraceHeadBytes);
}

TEST(TraceHead, TheSessionTheReasonAndTheWriterAreReadFromTheHead) {
  const TraceHeadProbe probe("node7:100:5000", 100, "node7");
  const std::string root_exit = written("exit", false, 100, "node7:100:5000");
  const std::string child_fault = written("fault", true, 101, "node7:100:5000");
  const std::string other = written("fault", true, 101, "node8:1:1");
  EXPECT_TRUE(probe.of_session(root_exit.c_str()));
  EXPECT_FALSE(probe.fault(root_exit.c_str()));
  EXPECT_TRUE(probe.written_by_process(root_exit.c_str()));
  EXPECT_TRUE(probe.of_session(child_fault.c_str()));
  EXPECT_TRUE(probe.fault(child_fault.c_str()));
  EXPECT_FALSE(probe.written_by_process(child_fault.c_str()));
  EXPECT_FALSE(probe.of_session(other.c_str()));
  EXPECT_FALSE(probe.of_session("{\"not\":\"a trace\"}"));
}

}  // namespace
}  // namespace cdsa::report
