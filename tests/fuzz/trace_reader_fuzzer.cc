// libFuzzer target for the trace file reader (report/trace_reader.h): any bytes must give either a
// trace or one printable error line, never a crash, a hang, a leak or undefined behaviour. What reads
// must also format (the report text and the JSON) and read back the same after writing it again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "report/trace.h"
#include "report/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  cdsa::base::StatusOr<cdsa::report::TraceFile> tf = cdsa::report::parse_trace(text);
  if (!tf.ok()) {
    const std::string& error = tf.status().message();
    if (error.empty()) abort();
    for (unsigned char c : error)
      if (c < 0x20 || c >= 0x7f) abort();  // one printable line
    return 0;
  }
  std::string report = cdsa::report::format_report_text(tf->data.report);
  std::string json = cdsa::report::trace_to_json(tf->data);
  cdsa::base::StatusOr<cdsa::report::TraceFile> again = cdsa::report::parse_trace(json);
  if (!again.ok()) abort();                                        // the writer's output always reads
  if (cdsa::report::trace_to_json(again->data) != json) abort();  // and is a fixed point
  return report.empty() ? 1 : 0;
}
