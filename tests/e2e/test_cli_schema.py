"""The trace file format is documented (docs/trace-format.md) and has a JSON Schema (docs/trace-schema.json):
every trace file real runs write must validate against it, and the schema must reject what the reader rejects."""
import json

import jsonschema
import pytest

from conftest import BUILD, PROGRAMS, ROOT, run_cli, run_program, run_python

SCHEMA = json.loads((ROOT / "docs" / "trace-schema.json").read_text())
FORMAT_DOC = (ROOT / "docs" / "trace-format.md").read_text()


def validator():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    return jsonschema.Draft202012Validator(SCHEMA)


RUNS = [
    ("nll_loss", lambda d: run_python("nll_loss.py", 10, cwd=d)),
    ("two_streams", lambda d: run_python("two_streams.py", cwd=d)),
    ("graph_replay", lambda d: run_python("graph_replay.py", cwd=d)),
    ("threads", lambda d: run_python("eight_threads.py", cwd=d)),
    ("clean_exit_profile", lambda d: run_python("no_fault.py", cwd=d, env={"CDSA_PROFILE": "1"})),
    ("fault_profile", lambda d: run_python("many_launches.py", cwd=d, env={"CDSA_PROFILE": "1"})),
    ("native", lambda d: run_program([PROGRAMS / "e2e_driver_cases", "nll", 10], cwd=d)),
    ("native_routes_always", lambda d: run_program([PROGRAMS / "e2e_driver_cases", "routes"], cwd=d,
                                                   env={"CDSA_TRACE": "always"})),
]


@pytest.mark.parametrize("name,make", RUNS, ids=[r[0] for r in RUNS])
def test_real_trace_files_validate(tmp_path, name, make):
    run = make(tmp_path)
    files = run.traces()
    assert len(files) == 1, (files, run.err)
    data = json.loads(files[0].read_text())
    errors = sorted(validator().iter_errors(data), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message[:200]}" for e in errors[:10])
    # The reader accepts what the schema accepts.
    r = run_cli("report", files[0].name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # Every field the file holds is documented.
    def keys(x, out):
        if isinstance(x, dict):
            for k, v in x.items():
                out.add(k)
                keys(v, out)
        elif isinstance(x, list):
            for v in x:
                keys(v, out)
        return out
    config_keys = set(data["cdsa"]["config"])
    for k in sorted(keys(data, set()) - config_keys):
        assert f"`{k}`" in FORMAT_DOC or f"`{k}[]`" in FORMAT_DOC, f"field {k} is not in docs/trace-format.md"


def test_schema_rejects_what_the_reader_rejects(tmp_path):
    run = run_python("nll_loss.py", 10, cwd=tmp_path)
    good = json.loads(run.traces()[0].read_text())
    v = validator()
    assert v.is_valid(good)
    bad = {
        "version": dict(good, version=3),
        "old_version": dict(good, version=1),  # version 1 held the report's stacks in place
        "format": dict(good, format="other"),
        "reason": dict(good, reason="crash"),
        "missing": {k: x for k, x in good.items() if k != "modules"},
        "fault_without_report": dict(good, report=None),
    }
    grid = json.loads(json.dumps(good))
    grid["report"]["candidates"][0]["launch"]["grid"] = [1, 2]
    bad["grid"] = grid
    pc = json.loads(json.dumps(good))
    surfaced = next(s for s in pc["stacks"] if s["id"] == pc["report"]["surfaced_stack_id"])
    surfaced["stack"]["native"][0]["pc"] = 12345
    bad["pc_number"] = pc
    for name, doc in bad.items():
        assert not v.is_valid(doc), name
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps(doc))
        r = run_cli("report", f.name, cwd=tmp_path)
        assert r.returncode == 1 and f.name in r.stderr, (name, r.stderr)
