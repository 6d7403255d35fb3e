"""tools/trace_schema.py --check fails on each kind of drift between the trace format's table
(report/trace_fields.def), the schema (docs/trace-schema.json) and the format doc (docs/trace-format.md), and the
schema it makes is a valid JSON Schema that a file with a stack held in place under the report does not need."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import jsonschema

ROOT = pathlib.Path(os.environ.get("CDSA_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[3]))
TOOL = ROOT / "tools" / "trace_schema.py"
FILES = ["report/trace_fields.def", "report/trace.h", "docs/trace-schema.json", "docs/trace-format.md"]


def copy_tree(tmp_path):
    for f in FILES:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, tmp_path / f)
    return tmp_path


def check(root):
    return subprocess.run([sys.executable, str(TOOL), "--check", str(root)], capture_output=True, text=True)


def test_the_tree_matches():
    r = check(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_new_field_must_reach_the_schema_and_the_doc(tmp_path):
    root = copy_tree(tmp_path)
    d = root / "report" / "trace_fields.def"
    d.write_text(d.read_text().replace(
        'TRACE_FIELD(why,', 'TRACE_FIELD(why_not, why_not, Str, Optional, "a new field")\nTRACE_FIELD(why,'))
    r = check(root)
    assert r.returncode == 1
    assert "docs/trace-schema.json is not what report/trace_fields.def makes" in r.stdout
    assert "does not name the field `why_not`" in r.stdout
    subprocess.run([sys.executable, str(TOOL), "--write", str(root)], check=True)
    schema = json.loads((root / "docs" / "trace-schema.json").read_text())
    assert "why_not" in schema["$defs"]["candidate"]["properties"]
    r = check(root)
    assert r.returncode == 1 and "schema" not in r.stdout and "`why_not`" in r.stdout


def test_a_hand_edited_schema_is_refused(tmp_path):
    root = copy_tree(tmp_path)
    s = root / "docs" / "trace-schema.json"
    s.write_text(s.read_text().replace('"maximum": 4294967294', '"maximum": 4294967295', 1))
    r = check(root)
    assert r.returncode == 1 and "is not what" in r.stdout


def test_the_version_comes_from_the_code(tmp_path):
    root = copy_tree(tmp_path)
    h = root / "report" / "trace.h"
    h.write_text(h.read_text().replace("constexpr int kTraceVersion = 2;", "constexpr int kTraceVersion = 3;"))
    assert check(root).returncode == 1


def test_schema_is_valid_and_stacks_in_place_are_not_in_it():
    schema = json.loads((ROOT / "docs" / "trace-schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    cand = schema["$defs"]["candidate"]
    assert "stack" not in cand["properties"] and "stack" not in cand["required"]
    assert "surfaced_stack_id" in schema["$defs"]["report"]["required"]
    assert "surfaced_stack" not in schema["$defs"]["report"]["properties"]
    assert schema["properties"]["version"] == {"const": 2, "description": "the format's version"}
