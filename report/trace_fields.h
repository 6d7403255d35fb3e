// The trace format's field lists as code: for each object of report/trace_fields.def, a function
// `visit_<def>(object, visitor)` that hands the visitor each field in the table's order, with its key, the
// member, its kind (a tag type of trace_kind) and its presence. The writer (report/trace_writer.cc) and the reader
// (report/trace_reader.cc) are visitors; tools/trace_schema.py reads the same table for the JSON Schema.
//
// A visitor has:
//   field(key, member, kind tag, Presence)                    a value
//   nested(key, member, kind tag Obj|Objects, Presence, visit) an object (visit(member)) or an array of them
//                                                             (visit(element) for each)
//   nullable(key, member, flag, Presence, visit)              an object or null; flag says which
//   constant(key, kind tag)                                   format, version
// Internal to report/: include it only from the writer and the reader.
#pragma once

#include <type_traits>

#include "report/trace.h"

namespace cdsa::report {

enum class Presence { Required, Optional, Inline, InlineOnly, Since2 };

namespace trace_kind {
struct U64 {};
struct U32 {};
struct I32 {};
struct Rank {};
struct Str {};
struct Bool {};
struct Strings {};
struct Hex {};
struct Dim3 {};
struct StackId {};
struct LaunchKind {};
struct Attribution {};
struct Reason {};
struct DeviceMessages {};
struct Config {};
struct Ranges {};
struct Format {};
struct Version {};
struct Obj {};
struct Objects {};
}  // namespace trace_kind

#define TRACE_OBJECT(def, Type, doc)                                       \
  template <class O, class V>                                              \
  void visit_##def(O& o, V& v) {                                           \
    static_assert(std::is_same_v<std::remove_const_t<O>, Type>, #def);
#define TRACE_FIELD(key, member, kind, presence, doc) \
  v.field(#key, o.member, trace_kind::kind{}, Presence::presence);
#define TRACE_NESTED(key, member, kind, def, presence, doc) \
  v.nested(#key, o.member, trace_kind::kind{}, Presence::presence, [&](auto& x) { visit_##def(x, v); });
#define TRACE_NULLABLE(key, member, flag, def, presence, doc) \
  v.nullable(#key, o.member, o.flag, Presence::presence, [&](auto& x) { visit_##def(x, v); });
#define TRACE_CONST(key, kind, doc) v.constant(#key, trace_kind::kind{});
#define TRACE_END() }
#include "report/trace_fields.def"

}  // namespace cdsa::report
