// A trace file's first bytes, read without a JSON parser: the writer (report/trace_writer.cc) lays out a trace with
// its format first and, in its first line, its reason and its "process" object (pid, host, session) before the
// large arrays. libcdsa.so's launcher summary (shim/intercept/launcher_summary.cc) looks at every trace file of its
// session at exit, and reads only their heads (kTraceHeadBytes each).
//
// Contract: pure functions of the bytes handed in (NUL-terminated); thread-safe; a TraceHeadProbe allocates only
// when made.
//
//   TraceHeadProbe probe(session, root_pid, root_host);
//   if (probe.of_session(head)) { bool fault = probe.fault(head); bool root = probe.written_by_process(head); }
#pragma once

#include <cstddef>
#include <string>

namespace cdsa::report {

// What is read of each file: "reason" and process.session are in the first bytes.
constexpr size_t kTraceHeadBytes = 8192;

class TraceHeadProbe {
 public:
  // The session the traces must name (CDSA_SESSION's "host:pid:ms"), and the process whose own traces are told
  // apart from its descendants'.
  TraceHeadProbe(const std::string& session, int pid, const std::string& host);
  // A cdsa trace whose process ran in the session.
  bool of_session(const char* head) const;
  // Its reason is "fault" (on the head's first line, where the writer puts it).
  bool fault(const char* head) const;
  // Written by the process named when the probe was made.
  bool written_by_process(const char* head) const;

 private:
  std::string session_field_, process_prefix_;
};

}  // namespace cdsa::report
