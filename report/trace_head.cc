#include "report/trace_head.h"

#include <cstring>

#include "report/trace.h"
#include "report/trace_enums.h"

namespace cdsa::report {

TraceHeadProbe::TraceHeadProbe(const std::string& session, int pid, const std::string& host)
    : session_field_("\"session\":" + json_escape(session)),
      process_prefix_("\"process\":{\"pid\":" + std::to_string(pid) + ",\"host\":" + json_escape(host) + ",") {}

bool TraceHeadProbe::of_session(const char* head) const {
  return strncmp(head, "{\"format\":\"cdsa-trace\"", 22) == 0 && strstr(head, session_field_.c_str());
}

bool TraceHeadProbe::fault(const char* head) const {
  const std::string reason = "\"reason\":\"" + std::string(trace_enum::Reason::fault) + "\"";
  const char* eol = strchr(head, '\n');
  const char* at = strstr(head, reason.c_str());
  return at && eol && at < eol;
}

bool TraceHeadProbe::written_by_process(const char* head) const { return strstr(head, process_prefix_.c_str()); }

}  // namespace cdsa::report
