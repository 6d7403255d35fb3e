#!/usr/bin/env python3
"""docs/trace-schema.json from the trace format's one table, report/trace_fields.def (which the writer and the
reader are made from too).

    trace_schema.py ROOT            prints the schema
    trace_schema.py --write ROOT    writes docs/trace-schema.json
    trace_schema.py --check ROOT    exit 1 unless docs/trace-schema.json is what the table makes and
                                    docs/trace-format.md names every field of the table (ctest trace_format.schema)

The schema describes what the writer writes now (version 2): a stack held in place (presence Inline or InlineOnly) is
only in the self-contained report (`cdsa report --json`), so it is not in the schema; Since2 fields are required."""
import json
import pathlib
import re
import sys

DEF = pathlib.Path("report", "trace_fields.def")
SCHEMA = pathlib.Path("docs", "trace-schema.json")
DOC = pathlib.Path("docs", "trace-format.md")
VERSION = re.compile(r"constexpr int kTraceVersion = (\d+);")

CALL = re.compile(r"^(TRACE_OBJECT|TRACE_FIELD|TRACE_NESTED|TRACE_NULLABLE|TRACE_CONST|TRACE_END|TRACE_ENUM)\((.*)\)\s*$")
# Kinds whose values are TRACE_ENUM rows, and the values each also accepts (a lost launch record has the empty kind).
ENUM_ALSO = {"LaunchKind": [""], "Attribution": [], "Reason": []}
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')

U64 = {"$ref": "#/$defs/u64"}
KINDS = {
    "U64": U64,
    "U32": {"$ref": "#/$defs/u32"},
    "I32": {"$ref": "#/$defs/i32"},
    "Rank": {"type": "integer", "minimum": -1, "maximum": 2147483647},
    "Str": {"type": "string"},
    "Bool": {"type": "boolean"},
    "Strings": {"type": "array", "items": {"type": "string"}},
    "DeviceMessages": {"type": "array", "items": {"type": "string"}},
    "Hex": {"$ref": "#/$defs/hex"},
    "Dim3": {"$ref": "#/$defs/dim3"},
    "StackId": {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 4294967294}, {"type": "null"}]},
    "Config": {"type": "object", "additionalProperties": {"type": "string"}},
    "Ranges": {"type": "array", "items": {"type": "array", "items": {"$ref": "#/$defs/hex"}, "minItems": 2,
                                          "maxItems": 2}},
}
BASE_DEFS = {
    "hex": {"type": "string", "pattern": "^0x[0-9a-fA-F]{1,16}$",
            "description": "An address or offset: a lower-case hexadecimal string, 0x-prefixed (JSON numbers lose "
                           "precision above 2^53 in many readers)."},
    "u64": {"type": "integer", "minimum": 0, "maximum": 18446744073709551615},
    "u32": {"type": "integer", "minimum": 0, "maximum": 4294967295},
    "i32": {"type": "integer", "minimum": -2147483648, "maximum": 2147483647},
    "dim3": {"type": "array", "items": {"$ref": "#/$defs/u32"}, "minItems": 3, "maxItems": 3},
}


def split_args(text):
    """The macro's arguments: commas outside string literals."""
    out, cur, i = [], "", 0
    while i < len(text):
        c = text[i]
        if c == '"':
            m = STRING.match(text, i)
            cur += m.group(0)
            i = m.end()
            continue
        if c == ",":
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    if cur.strip():
        out.append(cur.strip())
    return out


def unquote(s):
    m = STRING.fullmatch(s)
    if not m:
        raise SystemExit(f"{DEF}: expected a string literal, found {s}")
    return json.loads('"' + m.group(1) + '"')


def read_enums(root):
    """{kind: {"enum": [values...]}} from the TRACE_ENUM rows, in the table's order."""
    enums = {kind: [] for kind in ENUM_ALSO}
    for n, line in enumerate((root / DEF).read_text().splitlines(), 1):
        m = CALL.match(line.strip())
        if m and m.group(1) == "TRACE_ENUM":
            kind, value, _doc = split_args(m.group(2))
            if kind not in enums:
                raise SystemExit(f"{DEF}:{n}: TRACE_ENUM of an unknown kind {kind}")
            enums[kind].append(value)
    return {kind: {"enum": values + ENUM_ALSO[kind]} for kind, values in enums.items()}


def read_table(root):
    """[(def, description, [field dicts])] in the table's order."""
    KINDS.update(read_enums(root))
    objects, cur = [], None
    for n, line in enumerate((root / DEF).read_text().splitlines(), 1):
        m = CALL.match(line.strip())
        if not m:
            continue
        macro, args = m.group(1), split_args(m.group(2))
        where = f"{DEF}:{n}"
        if macro == "TRACE_OBJECT":
            cur = {"def": args[0], "type": args[1], "doc": unquote(args[2]), "fields": []}
        elif macro == "TRACE_ENUM":
            continue
        elif macro == "TRACE_END":
            objects.append(cur)
            cur = None
        elif cur is None:
            raise SystemExit(f"{where}: {macro} outside TRACE_OBJECT")
        elif macro == "TRACE_FIELD":
            key, _member, kind, presence, doc = args
            if kind not in KINDS:
                raise SystemExit(f"{where}: unknown kind {kind}")
            cur["fields"].append({"key": key, "schema": dict(KINDS[kind]), "presence": presence, "doc": unquote(doc)})
        elif macro == "TRACE_NESTED":
            key, _member, kind, ref, presence, doc = args
            item = {"$ref": f"#/$defs/{ref}"}
            schema = item if kind == "Obj" else {"type": "array", "items": item}
            cur["fields"].append({"key": key, "schema": schema, "presence": presence, "doc": unquote(doc)})
        elif macro == "TRACE_NULLABLE":
            key, _member, _flag, ref, presence, doc = args
            schema = {"oneOf": [{"type": "null"}, {"$ref": f"#/$defs/{ref}"}]}
            cur["fields"].append({"key": key, "schema": schema, "presence": presence, "doc": unquote(doc)})
        elif macro == "TRACE_CONST":
            key, kind, doc = args
            cur["fields"].append({"key": key, "const": kind, "presence": "Required", "doc": unquote(doc)})
    return objects


def object_schema(obj, version):
    props, required = {}, []
    for f in obj["fields"]:
        if f["presence"] in ("Inline", "InlineOnly"):
            continue  # only in the self-contained report
        if "const" in f:
            s = {"const": "cdsa-trace" if f["const"] == "Format" else version}
        else:
            s = f["schema"]
        s = dict(s)
        if "$ref" in s:  # a $ref with siblings is fine in draft 2020-12
            pass
        s["description"] = f["doc"]
        props[f["key"]] = s
        if f["presence"] in ("Required", "Since2"):
            required.append(f["key"])
    return {"type": "object", "description": obj["doc"], "properties": props, "required": required,
            "additionalProperties": True}


def schema(root):
    version = int(VERSION.search((root / "report" / "trace.h").read_text()).group(1))
    objects = read_table(root)
    top = objects[-1]
    if top["def"] != "trace":
        raise SystemExit(f"{DEF}: the last object must be trace (the file itself)")
    defs = dict(BASE_DEFS)
    for obj in objects[:-1]:
        defs[obj["def"]] = object_schema(obj, version)
    out = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/cdsa/cdsa/docs/trace-schema.json",
        "title": f"cdsa trace file, version {version}",
        "description": "Written by libcdsa.so on a fault (and at exit with CDSA_TRACE=always or CDSA_PROFILE=1); read "
                       "by `cdsa report|export|merge|flame|top`. See docs/trace-format.md. Generated from "
                       "report/trace_fields.def by tools/trace_schema.py: do not edit.",
        "$defs": defs,
    }
    out.update(object_schema(top, version))
    # A fault trace holds its report.
    out["if"] = {"properties": {"reason": {"const": "fault"}}}
    out["then"] = {"properties": {"report": {"$ref": "#/$defs/report"}}}
    return json.dumps(out, indent=2) + "\n"


def undocumented(root):
    doc = (root / DOC).read_text()
    keys = sorted({f["key"] for obj in read_table(root) for f in obj["fields"]})
    return [k for k in keys if f"`{k}`" not in doc and f"`{k}[]`" not in doc]


def main(argv):
    mode = argv[1] if len(argv) == 3 else ""
    if len(argv) not in (2, 3) or mode not in ("", "--write", "--check"):
        sys.exit("usage: trace_schema.py [--write|--check] ROOT")
    root = pathlib.Path(argv[-1])
    text = schema(root)
    if mode == "":
        sys.stdout.write(text)
    elif mode == "--write":
        (root / SCHEMA).write_text(text)
    else:
        bad = False
        if (root / SCHEMA).read_text() != text:
            print(f"{SCHEMA} is not what {DEF} makes: run tools/trace_schema.py --write {root}")
            bad = True
        for k in undocumented(root):
            print(f"{DOC} does not name the field `{k}` of {DEF}")
            bad = True
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv)
