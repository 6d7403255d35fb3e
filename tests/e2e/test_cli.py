"""End-to-end: the cdsa CLI's post-mortem commands (report, export, merge, flame, top) over trace files
written by real runs on the simulated driver."""
import json
import os
import pathlib
import pty
import shutil
import subprocess

import pytest

from cdsa_report import live_block
from conftest import BUILD, CDSA, PROGRAMS, SCRIPTS, clean_env, marker_line, run_program, run_python
from conftest import run_cli as cdsa


def one_trace(run):
    files = run.traces()
    assert len(files) == 1, (files, run.err)
    return files[0]


CASES = [
    ("nll_loss.py", [10]),
    ("two_streams.py", []),
    ("graph_replay.py", []),
    ("embedding.py", []),
    ("many_launches.py", []),
]


@pytest.mark.parametrize("script,args", CASES, ids=[c[0] for c in CASES])
def test_report_from_file_equals_live_report(tmp_path, script, args):
    run = run_python(script, *args, cwd=tmp_path)
    assert run.reports == 1, run.err
    trace = one_trace(run)
    rep = cdsa("report", trace.name, cwd=tmp_path)
    assert rep.returncode == 0 and rep.stderr == "", rep.stderr
    assert rep.stdout == live_block(run.err)
    assert f"cdsa: trace file {trace.name}\n" in rep.stdout


def test_report_of_a_native_program_equals_live_report(tmp_path):
    run = run_program([PROGRAMS / "e2e_driver_cases", "nll", 10], cwd=tmp_path)
    assert run.reports == 1, run.err
    trace = one_trace(run)
    rep = cdsa("report", trace.name, cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == live_block(run.err)
    line, _ = marker_line(pathlib.Path(__file__).parent / "programs" / "driver_cases.cc", "LAUNCH-SITE")
    assert f"driver_cases.cc:{line}" in rep.stdout


def blank_native_names(stack):
    for f in stack["native"]:
        f["function"], f["file"], f["line"] = "", "", 0


def stripped_copy(trace):
    """A copy of the trace file, beside it, with the native frames' recorded names removed from the report's
    stacks (what the offline pass must restore). The report names its stacks by id; each is stored once, under
    "stacks"."""
    data = json.loads(trace.read_text())
    ids = {data["report"]["surfaced_stack_id"]} | {c["launch"]["stack_id"] for c in data["report"]["candidates"]}
    assert None not in ids
    for s in data["stacks"]:
        if s["id"] in ids:
            blank_native_names(s["stack"])
    stripped = trace.parent / "stripped.json"
    stripped.write_text(json.dumps(data))
    return stripped


def test_offline_symbolization_restores_every_native_frame(tmp_path):
    """With the recorded names removed, the offline pass alone (from the module map and build-ids) must
    print the same native frames as the live process did."""
    run = run_program([PROGRAMS / "e2e_driver_cases", "nll", 10], cwd=tmp_path)
    trace = one_trace(run)
    stripped = stripped_copy(trace)
    rep = cdsa("report", stripped.name, cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert "launch_loss(" in rep.stdout and "main (e2e_driver_cases+0x" in rep.stdout
    assert rep.stdout == live_block(run.err).replace(trace.name, stripped.name)
    # And without the offline pass the names are really gone.
    bare = cdsa("report", "--no-resymbolize", stripped.name, cwd=tmp_path)
    assert "launch_loss(" not in bare.stdout


def test_rebuilt_binary_is_detected_by_build_id(tmp_path):
    prog = tmp_path / "prog"
    shutil.copy(PROGRAMS / "e2e_driver_cases", prog)
    run = run_program([prog, "nll", 10], cwd=tmp_path)
    assert run.reports == 1, run.err
    trace = one_trace(run)
    recorded = next(m["build_id"] for m in json.loads(trace.read_text())["modules"] if m["path"] == str(prog))
    # "Rebuild" it: another ELF file at the same path, with another build-id.
    prog.unlink()
    shutil.copy(BUILD / "lib" / "sim" / "libcuda.so.1", prog)
    stripped = stripped_copy(trace)
    for name in (trace.name, stripped.name):
        rep = cdsa("report", name, cwd=tmp_path)
        assert rep.returncode == 0, rep.stderr
        note = [l for l in rep.stdout.splitlines() if l.startswith("cdsa: note: prog: binary changed since the run")]
        assert len(note) == 1, rep.stdout
        assert f"recorded {recorded}" in note[0]
    # The recorded names stay; nothing is guessed from the new file for the stripped frames.
    assert "launch_loss(" in cdsa("report", trace.name, cwd=tmp_path).stdout
    rep = cdsa("report", stripped.name, cwd=tmp_path).stdout
    assert "launch_loss(" not in rep and "?? (prog+0x" in rep


def test_report_json_is_the_stored_report(tmp_path):
    """--json prints the stored report object, with each stack it names by id also in place."""
    run = run_python("nll_loss.py", 10, cwd=tmp_path)
    trace = one_trace(run)
    rep = cdsa("report", "--json", trace.name, cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    got = json.loads(rep.stdout)
    data = json.loads(trace.read_text())
    stored = data["report"]
    stacks = {s["id"]: s["stack"] for s in data["stacks"]}
    assert got["trace_path"] == trace.name
    got["trace_path"] = stored["trace_path"]
    assert got.pop("surfaced_stack") == stacks[stored["surfaced_stack_id"]]
    assert stacks[stored["surfaced_stack_id"]]["python"], stacks
    for c in got["candidates"]:
        assert c.pop("stack") == stacks[c["launch"]["stack_id"]]
    assert got == stored
    assert "stack" not in stored["candidates"][0] and "surfaced_stack" not in stored  # stored once, by id
    assert stored["fault_time_unix_ns"] > json.loads(trace.read_text())["process"]["start_time_unix_ns"]


def test_report_of_a_clean_run(tmp_path):
    run = run_python("no_fault.py", cwd=tmp_path, env={"CDSA_TRACE": "always"})
    assert run.rc == 0 and run.err == "", run.err
    trace = one_trace(run)
    rep = cdsa("report", trace.name, cwd=tmp_path)
    assert rep.returncode == 0
    assert "no fault in this run (trace written at exit); 101 launch records kept" in rep.stdout
    assert cdsa("report", "--json", trace.name, cwd=tmp_path).stdout == "null\n"


def hostile_inputs(good):
    data = json.loads(good)
    out = {
        "empty": "",
        "not-json": "hello, world\n",
        "truncated": good[: len(good) // 2],
        "truncated-at-1": good[:1],
        "array": "[1, 2, 3]",
        "wrong-format": json.dumps(dict(data, format="perfetto")),
        "wrong-version": json.dumps(dict(data, version=3)),
        "deep": "[" * 100000 + "]" * 100000,
        "deep-object": '{"a":' * 5000 + "1" + "}" * 5000,
        "huge-number": good.replace('"code":710', '"code":1e400', 1),
        "negative-seq": good.replace('"seq":1,', '"seq":-1,', 1),
        "bad-hex": good.replace('"pc":"0x', '"pc":"0xzz', 1),
        "long-hex": good.replace('"pc":"0x', '"pc":"0x1234567890abcdef1', 1),
        "nul-bytes": good[:200] + "\0\0\0" + good[200:],
        "invalid-utf8": good.replace('"host":"', '"host":"\udcff', 1),
    }
    for key, value in [("launches", {"a": 1}), ("stacks", [1]), ("report", [])]:
        out[f"wrong-type-{key}"] = json.dumps(dict(data, **{key: value}))
    missing = dict(data)
    del missing["process"]
    out["missing-process"] = json.dumps(missing)
    grid = json.loads(good)
    grid["report"]["candidates"][0]["launch"]["grid"] = [1, 2]
    out["short-grid"] = json.dumps(grid)
    big = json.loads(good)
    big["report"]["candidates"][0]["launch"]["grid"] = [1, 2, 2 ** 40]
    out["grid-overflow"] = json.dumps(big)
    return out


@pytest.fixture(scope="module")
def good_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("good")
    run = run_python("nll_loss.py", 10, cwd=d)
    return one_trace(run).read_text()


@pytest.mark.parametrize("cmd", ["report", "export --chrome", "flame", "top", "merge"])
def test_every_bad_input_gets_one_error_line(tmp_path, good_trace, cmd):
    for name, text in hostile_inputs(good_trace).items():
        f = tmp_path / f"{name}.json"
        f.write_bytes(text.encode("utf-8", "surrogateescape"))
        r = cdsa(*cmd.split(), f.name, cwd=tmp_path, timeout=60)
        assert r.returncode == 1, (name, r.returncode, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and f"{f.name}: " in lines[0], (name, r.stderr)
        assert r.stdout == "" or cmd == "merge", (name, r.stdout)
    for special in ["/nonexistent/trace.json", str(tmp_path)]:
        if cmd == "merge" and special == str(tmp_path):
            continue  # a directory is merge's normal input
        r = cdsa(*cmd.split(), special, cwd=tmp_path, timeout=60)
        assert r.returncode == 1 and special in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    r = cdsa(*cmd.split(), fifo.name, cwd=tmp_path, timeout=60)  # must not wait for a writer
    assert r.returncode == 1 and "not a regular file" in r.stderr, r.stderr


def stream_name(sid):
    # Ids with the top bit set were made by cdsa from the handle (the report prints them the same way).
    return f"stream <handle {sid & ~(1 << 63):#x}>" if sid >> 63 else f"stream {sid}"


def test_export_chrome_holds_every_launch(tmp_path):
    run = run_python("two_streams.py", cwd=tmp_path)
    trace = one_trace(run)
    out = tmp_path / "timeline.json"
    r = cdsa("export", "--chrome", trace.name, "-o", out.name, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    ev = json.loads(out.read_text())["traceEvents"]
    data = json.loads(trace.read_text())
    tracks = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    # A track for every stream that ran a launch (a stream with only a copy on it, the NULL stream's upload, has none).
    assert sorted(tracks.values()) == sorted(stream_name(s["id"]) for s in data["streams"] if s["launched"])
    launches = {e["args"]["seq"]: e for e in ev if e["ph"] == "X"}
    assert sorted(launches) == sorted(l["seq"] for l in data["launches"])
    stacks = {s["id"]: s["stack"] for s in data["stacks"]}
    for l in data["launches"]:
        e = launches[l["seq"]]
        assert e["args"]["kernel"] == l["kernel"] and e["name"].endswith(l["kernel"])
        assert tracks[e["tid"]] == stream_name(l["stream_id"])
        py = stacks[l["stack_id"]]["python"]
        assert [s for s in e["args"]["stack"] if ".py:" in s] == [f"{f['file']}:{f['line']} in {f['function']}"
                                                                  for f in reversed(py)]
    failing = [e for e in ev if e["ph"] == "X" and e["cat"] == "failing-launch"]
    cand_seqs = sorted(c["launch"]["seq"] for c in data["report"]["candidates"])
    assert sorted(e["args"]["seq"] for e in failing) == cand_seqs
    assert all(e["name"].startswith("FAULT: ") and "710" in e["args"]["fault"] for e in failing)
    assert [e for e in ev if e["ph"] == "i" and e["cat"] == "fault"]
    # To stdout as well, the same document.
    assert json.loads(cdsa("export", "--chrome", trace.name, cwd=tmp_path).stdout)["traceEvents"] == ev


def test_export_of_a_thousand_launches(tmp_path):
    run = run_python("many_launches.py", cwd=tmp_path)
    trace = one_trace(run)
    ev = json.loads(cdsa("export", "--chrome", trace.name, cwd=tmp_path).stdout)["traceEvents"]
    kernels = [e["args"]["kernel"] for e in ev if e["ph"] == "X"]
    assert kernels.count("fill_f32") == 1000 and kernels.count("nll_loss_forward_reduce_cuda_kernel_2d") == 1


def run_rank(tmp, rank, script, *args, env=None):
    e = {"RANK": str(rank), "WORLD_SIZE": "3", "CDSA_TRACE_FILE": str(tmp / "cdsa-rank%r-%p.json")}
    e.update(env or {})
    return run_python(script, *args, cwd=tmp, env=e)


def test_merge_names_the_rank_that_faulted_first(tmp_path):
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    # Rank 2 faults first, rank 0 later (so neither rank order nor file order gives the answer), rank 1 is clean.
    # Both faults are device asserts on one host: the same evidence, so the clock of that host orders them.
    first = run_rank(jobdir, 2, "embedding.py")
    later = run_rank(jobdir, 0, "nll_loss.py", 10)
    clean = run_rank(jobdir, 1, "no_fault.py", env={"CDSA_TRACE": "always"})
    assert first.reports == 1 and later.reports == 1 and clean.err == ""
    files = sorted(jobdir.glob("*.json"))
    assert len(files) == 3
    t = {json.loads(f.read_text())["process"]["rank"]: f for f in files}
    assert json.loads(t[2].read_text())["report"]["fault_time_unix_ns"] < \
        json.loads(t[0].read_text())["report"]["fault_time_unix_ns"]
    for args in ([jobdir], files, list(reversed(files))):
        r = cdsa("merge", *args, cwd=tmp_path)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        out = r.stdout
        assert "3 trace files: 2 faulted, 0 saw only the aftermath, 1 clean" in out
        head = out.split("\n\n")[1]
        assert head.startswith("First fault: rank 2 "), out
        assert "kernel indexSelectSmallIndex" in head and "embedding.py" in head
        faulted = out.split("Ranks that faulted, by each one's own evidence")[1].split("\n\n")[0]
        order = [l.split()[1] for l in faulted.splitlines() if l.startswith("  rank")]
        assert order == ["2", "0"], out
        assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in faulted
        n, _ = marker_line(SCRIPTS / "nll_loss.py", "LAUNCH-SITE")
        assert f"  {SCRIPTS / 'nll_loss.py'}:{n} in compute_loss\n" in faulted
        clean_part = out.split("Clean ranks (no fault; trace written at exit):\n")[1]
        assert clean_part.split()[:2] == ["rank", "1"]


def test_merge_lists_aftermath_ranks_and_skips_bad_files(tmp_path):
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    run_rank(jobdir, 0, "nll_loss.py", 10)
    # A rank that saw the error but had no failing launch of its own (as after a collective timed out).
    src = next(jobdir.glob("*.json"))
    data = json.loads(src.read_text())
    data["process"]["rank"] = 1
    data["report"]["attribution"] = "unknown"
    data["report"]["candidates"] = []
    data["report"]["fault_time_unix_ns"] += 10 ** 9
    (jobdir / "cdsa-rank1.json").write_text(json.dumps(data))
    (jobdir / "cdsa-broken.json").write_text("{")
    # A rank with no error that exited with work that never finished (its kernel waited for the dead peer).
    run_rank(jobdir, 2, "no_fault.py", env={"CDSA_TRACE": "always"})
    hung = next(f for f in jobdir.glob("*.json") if '"rank":2' in f.read_text())
    data = json.loads(hung.read_text())
    assert data["report"] is None and data["streams"][0]["landed"] == data["streams"][0]["launched"]
    data["streams"][0]["landed"] -= 3
    hung.write_text(json.dumps(data))
    r = cdsa("merge", jobdir, cwd=tmp_path)
    assert r.returncode == 1
    assert len(r.stderr.splitlines()) == 1 and "cdsa-broken.json" in r.stderr and "(skipped)" in r.stderr
    assert "3 trace files: 1 faulted, 2 saw only the aftermath, 0 clean, 1 unreadable" in r.stdout
    assert r.stdout.split("\n\n")[1].startswith("First fault: rank 0 ")
    after = r.stdout.split("only saw the aftermath")[1].splitlines()[1:]
    assert after[0].split()[:3] == ["rank", "1", "+1.000"]
    assert after[1].split()[:2] == ["rank", "2"]
    assert f"exited with 3 launches unfinished on stream {data['streams'][0]['id']}" in after[1]


def test_merge_orders_by_evidence_not_by_the_clocks_of_different_hosts(tmp_path):
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    run_rank(jobdir, 2, "nll_loss.py", 10)
    src = next(jobdir.glob("*.json"))
    base = json.loads(src.read_text())
    src.unlink()

    def rank(r, host, dt, asserts=True, kernel=None):
        d = json.loads(json.dumps(base))
        d["process"].update(rank=r, host=host, pid=1000 + r)
        d["report"]["fault_time_unix_ns"] += dt * 10 ** 9
        if not asserts:
            d["report"]["device_messages"] = []
        if kernel:
            d["report"]["candidates"][0]["launch"]["kernel"] = kernel
        (jobdir / f"cdsa-{host}-rank{r}.json").write_text(json.dumps(d))

    # By the clocks rank 3 came first, then 1, 2, 0; by evidence: the device asserts (ranks 0 and 2, on two hosts:
    # by rank), then rank 1's own launch without the device's text, then rank 3's collective.
    rank(0, "nodeB", 9)
    rank(1, "nodeA", 2, asserts=False)
    rank(2, "nodeA", 5)
    rank(3, "nodeB", 0, asserts=False, kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    r = cdsa("merge", jobdir, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n\n")[1].startswith("First fault: rank 0 (pid 1000 on nodeB)"), r.stdout
    faulted = r.stdout.split("Ranks that faulted")[1].split("\n\n")[0].splitlines()
    rows = [l.split() for l in faulted if l.startswith("  rank")]
    assert [row[1] for row in rows] == ["0", "2", "1", "3"], r.stdout
    assert rows[0][2] == "+0.000" and rows[1][2:4] == ["other", "host"] and rows[3][2] == "-9.000", rows
    assert "its failing launch is a collective" in "\n".join(faulted)
    assert "Rank 4 wrote no trace" not in r.stdout  # WORLD_SIZE is 3 in run_rank: rank 3 is beyond it
    base["process"]["world_size"] = 8
    base["process"]["rank"] = 6
    (jobdir / "cdsa-nodeC-rank6.json").write_text(json.dumps(base))
    r = cdsa("merge", jobdir, cwd=tmp_path)
    assert "\nRanks 4-5, 7 wrote no trace: exited without a fault of their own, or killed" in r.stdout, r.stdout


def test_merge_session_keeps_one_run(tmp_path):
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    run_rank(jobdir, 0, "nll_loss.py", 10, env={"CDSA_SESSION": "nodeA:42:1"})
    run_rank(jobdir, 1, "nll_loss.py", 10, env={"CDSA_SESSION": "nodeA:43:2"})
    run_rank(jobdir, 2, "nll_loss.py", 10)
    sessions = sorted(json.loads(f.read_text())["process"]["session"] for f in jobdir.glob("*.json"))
    assert sessions[:2] == ["nodeA:42:1", "nodeA:43:2"] and sessions[2].count(":") == 2, sessions  # its own
    r = cdsa("merge", "--session", "nodeA:43:2", jobdir, cwd=tmp_path)
    assert r.returncode == 0 and "cdsa merge: 1 trace file: 1 faulted" in r.stdout, r.stdout
    assert "First fault: rank 1 " in r.stdout
    # The launcher's form: nothing unless a process other than the session's root faulted.
    t = next(f for f in jobdir.glob("*.json") if '"rank":1,' in f.read_text())
    pid, host = json.loads(t.read_text())["process"]["pid"], json.loads(t.read_text())["process"]["host"]
    own = cdsa("merge", "--launcher-summary", "--session", "nodeA:43:2", jobdir, cwd=tmp_path)
    assert own.returncode == 0 and own.stdout == "" and "launcher summary" in own.stderr  # nodeA:43 is not it
    data = json.loads(t.read_text())
    data["process"]["session"] = f"{host}:{pid}:2"
    t.write_text(json.dumps(data))
    root = cdsa("merge", "--launcher-summary", "--session", f"{host}:{pid}:2", jobdir, cwd=tmp_path)
    assert root.returncode == 0 and root.stdout == "" and root.stderr == "", root.stderr
    bad = cdsa("merge", "--launcher-summary", jobdir, cwd=tmp_path)
    assert bad.returncode == 2 and "--launcher-summary needs --session ID" in bad.stderr


def stderr_on_a_terminal(*args):
    """Runs cdsa with stderr on a pseudo-terminal: (process, what the terminal received)."""
    master, slave = pty.openpty()
    p = subprocess.run([str(CDSA), *map(str, args)], stdout=subprocess.PIPE, stderr=slave, timeout=60)
    os.close(slave)
    seen = b""
    try:
        while True:
            chunk = os.read(master, 4096)
            if not chunk:
                break
            seen += chunk
    except OSError:
        pass
    os.close(master)
    return p, seen


def test_long_operations_show_progress_only_on_a_terminal(tmp_path):
    run_rank(tmp_path, 0, "nll_loss.py", 10)
    plain = cdsa("merge", tmp_path, cwd=tmp_path)
    assert plain.stderr == ""
    p, seen = stderr_on_a_terminal("merge", tmp_path)
    assert p.returncode == 0
    assert b"cdsa: reading trace files 1/1" in seen and seen.endswith(b"\r\x1b[K")  # the line is erased
    assert p.stdout.decode() == plain.stdout
    trace = next(tmp_path.glob("cdsa-*.json"))
    plain = cdsa("report", trace, cwd=tmp_path)
    assert plain.stderr == ""
    p, seen = stderr_on_a_terminal("report", trace)
    assert p.returncode == 0 and p.stdout.decode() == plain.stdout
    assert b"cdsa: symbolizing modules 1/" in seen and seen.endswith(b"\r\x1b[K")


def folded(text):
    return [(line.rsplit(" ", 1)[0].split(";"), int(line.rsplit(" ", 1)[1])) for line in text.splitlines()]


def launch_native_frames(tmp_path, env):
    """The native frames (root first) under the Python frames of many_launches.py's fill_f32 launches."""
    run = run_python("many_launches.py", cwd=tmp_path, env={"CDSA_PROFILE": "1", **env})
    trace = one_trace(run)
    r = cdsa("flame", trace.name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    frames = [f for f, _ in folded(r.stdout) if f[-1] == "fill_f32"][0]
    first_py = next(i for i, f in enumerate(frames) if ".py:" in f)
    trace.unlink()
    return frames[:first_py]


def test_native_stack_stops_at_the_interpreter_unless_native_full(tmp_path):
    short = launch_native_frames(tmp_path, {})
    full = launch_native_frames(tmp_path, {"CDSA_NATIVE_FULL": "1"})
    assert full[0] == "_start" and "Py_BytesMain" in full, full
    assert "_start" not in short and "Py_BytesMain" not in short, short
    # The innermost native frames are the same; only the interpreter's below them are left out.
    assert len(short) < len(full) and full[-len(short):] == short, (short, full)


def test_profile_flame_and_top(tmp_path):
    run = run_python("many_launches.py", cwd=tmp_path, env={"CDSA_PROFILE": "1"})
    assert run.reports == 1
    trace = one_trace(run)
    data = json.loads(trace.read_text())
    assert data["cdsa"]["config"]["profile"] == "1"
    sites = data["profile"]["sites"]
    assert sum(s["count"] for s in sites) == 1002 and data["profile"]["dropped"] == 0
    ids = {s["id"] for s in data["stacks"]}
    assert all(s["stack_id"] in ids for s in sites)

    r = cdsa("flame", trace.name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = folded(r.stdout)
    assert sum(n for _, n in lines) == 1002
    fill = [(frames, n) for frames, n in lines if frames[-1] == "fill_f32"]
    assert len(fill) == 1 and fill[0][1] == 1000
    frames = fill[0][0]
    n, _ = marker_line(SCRIPTS / "many_launches.py", "OTHER-SITE")
    launch_line = next(i for i, t in enumerate((SCRIPTS / "simcuda.py").read_text().splitlines(), 1)
                       if "lib.cuLaunchKernel(" in t)
    py = [f for f in frames if ".py:" in f]
    assert py == [f"<module> (many_launches.py:{n})", f"launch (simcuda.py:{launch_line})"], frames
    first_py = frames.index(py[0])
    assert frames[first_py:-1] == py  # Python frames, outermost first, right under the kernel
    native = frames[:first_py]  # native frames below them, root (outermost) first
    # By default the native stack stops at the innermost interpreter frame (CDSA_NATIVE_FULL=1 keeps _start...).
    assert native and "_start" not in native and "Py_BytesMain" not in native and "ffi_call" in native, native
    assert native.index("_ctypes_callproc") < native.index("ffi_call")
    only_py = folded(cdsa("flame", "--python-only", trace.name, cwd=tmp_path).stdout)
    assert [f for f, k in only_py if f[-1] == "fill_f32"][0] == py + ["fill_f32"]

    r = cdsa("top", trace.name, "-n", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == f"1002 launches from {len(sites)} launch sites"
    assert out[2].split()[:3] == ["1000", "99.8%", "fill_f32"]
    assert f"many_launches.py:{n} in <module>" in r.stdout
    assert "nll_loss_forward" not in r.stdout  # -n 1
    assert "nll_loss_forward" in cdsa("top", trace.name, cwd=tmp_path).stdout


def test_profile_is_written_at_exit_through_cdsa_run(tmp_path):
    env = clean_env(preload=False)
    if os.environ.get("E2E_PRELOAD_FIRST"):  # sanitizer builds: `cdsa run` keeps the runtime first
        env["LD_PRELOAD"] = os.environ["E2E_PRELOAD_FIRST"]
    r = subprocess.run([str(CDSA), "run", "--profile", "--", "python3", str(SCRIPTS / "no_fault.py")], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    files = sorted(tmp_path.glob("cdsa-*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["reason"] == "exit" and data["report"] is None
    counts = {s["kernel"]: s["count"] for s in data["profile"]["sites"]}
    assert counts == {"fill_f32": 100, "nll_loss_forward_reduce_cuda_kernel_2d": 1}
    top = cdsa("top", files[0].name, cwd=tmp_path).stdout
    assert top.splitlines()[0] == "101 launches from 2 launch sites"
    # Without the profile, flame and top say what is missing.
    run_python("nll_loss.py", 10, cwd=tmp_path)
    other = [f for f in tmp_path.glob("cdsa-*.json") if f != files[0]][0]
    r = cdsa("flame", other.name, cwd=tmp_path)
    assert r.returncode == 1 and "no launch-site profile" in r.stderr


def test_run_help_lists_profile(tmp_path):
    r = cdsa("run", "--help", cwd=tmp_path)
    assert "--profile" in r.stdout and "CDSA_PROFILE" in r.stdout
    top = cdsa("--help", cwd=tmp_path).stdout
    for c in ("report", "export", "merge", "flame", "top"):
        assert f"cdsa {c} " in top


THREADED = '''
import ctypes, threading
import simcuda as cu
ctx, mod = cu.init()
fill = cu.function(mod, "fill_f32")
N = 4000


def worker(barrier):
    cu.set_current(ctx)
    s = cu.stream()
    buf = cu.alloc(4 * 16)
    args = [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(1)]
    barrier.wait()
    for i in range(N):
        if i % 4 == 0:
            cu.launch(fill, args, stream=s)  # SITE-A
        else:
            cu.launch(fill, args, stream=s)  # SITE-B


barrier = threading.Barrier(8)
threads = [threading.Thread(target=worker, args=(barrier,)) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
cu.synchronize()
'''


def test_profile_counts_exactly_under_eight_threads(tmp_path):
    script = tmp_path / "threaded.py"
    script.write_text(THREADED)
    r = subprocess.run(["python3", str(script)], cwd=tmp_path, env=clean_env({"CDSA_PROFILE": "1"}),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    files = sorted(tmp_path.glob("cdsa-*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    stacks = {s["id"]: s["stack"] for s in data["stacks"]}
    lines = {m: marker_line(script, m)[0] for m in ("SITE-A", "SITE-B")}
    per_line = {}
    for s in data["profile"]["sites"]:
        py = stacks[s["stack_id"]]["python"]
        line = next(f["line"] for f in py if f["file"] == str(script) and f["function"] == "worker")
        per_line[line] = per_line.get(line, 0) + s["count"]
    assert per_line == {lines["SITE-A"]: 8 * 1000, lines["SITE-B"]: 8 * 3000}
    assert data["profile"]["dropped"] == 0
    top = cdsa("top", files[0].name, cwd=tmp_path).stdout
    assert top.splitlines()[0].startswith("32000 launches from ")


def test_export_several_ranks_into_one_timeline(tmp_path):
    run_rank(tmp_path, 1, "embedding.py")
    run_rank(tmp_path, 0, "many_launches.py")  # runs after rank 1: on one host its launches come later
    files = sorted(tmp_path.glob("cdsa-*.json"))
    assert len(files) == 2
    r = cdsa("export", "--chrome", *[f.name for f in files], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["otherData"]["clocks"] == "aligned (one host)"
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert len(procs) == 2
    by_rank = {}
    for f in files:
        data = json.loads(f.read_text())
        pid = data["process"]["pid"]
        assert procs[pid].startswith(f"cdsa: rank {data['process']['rank']} (pid {pid} on ")
        launches = [e for e in ev if e["ph"] == "X" and e["pid"] == pid]
        assert sorted(e["args"]["seq"] for e in launches) == sorted(l["seq"] for l in data["launches"])
        assert len([e for e in launches if e["cat"] == "failing-launch"]) == 1
        by_rank[data["process"]["rank"]] = launches
    assert max(e["ts"] for e in by_rank[1]) < min(e["ts"] for e in by_rank[0])
    bad = cdsa("export", "--chrome", files[0].name, "missing.json", cwd=tmp_path)
    assert bad.returncode == 1 and bad.stdout == "" and bad.stderr.startswith("cdsa export: missing.json: ")


V1 = pathlib.Path(__file__).resolve().parents[1] / "data" / "trace-v1"
V1_FILES = ["nll", "graph", "autograd", "native", "profile_exit"]


@pytest.mark.parametrize("name", V1_FILES)
def test_version_1_files_still_read(name):
    """Real version 1 trace files (tests/data/trace-v1, written by cdsa before stacks were stored once: each report
    stack in place and again under "stacks"): `cdsa report` prints what that cdsa printed from them
    (NAME.report.txt, made with --no-resymbolize), with and without the offline pass."""
    assert json.loads((V1 / f"{name}.json").read_text())["version"] == 1
    want = (V1 / f"{name}.report.txt").read_text()
    for args in (["--no-resymbolize"], []):
        rep = cdsa("report", *args, f"{name}.json", cwd=V1)
        assert rep.returncode == 0, rep.stderr
        if args or name not in ("native", "autograd"):  # the offline pass may fill names the run lacked
            assert rep.stdout == want, args
    as_json = json.loads(cdsa("report", "--json", f"{name}.json", cwd=V1).stdout)
    if name != "profile_exit":
        assert as_json["surfaced_stack"]["python"] or as_json["surfaced_stack"]["native"]
        assert all(c["stack"]["python"] or c["stack"]["native"] for c in as_json["candidates"])


def test_version_1_files_merge_export_and_profile():
    """The other readers take version 1 files too: merge, export, top, flame."""
    rep = cdsa("merge", "nll.json", "native.json", "graph.json", cwd=V1)
    assert rep.returncode == 0 and "3 trace files: 3 faulted" in rep.stdout, rep.stdout + rep.stderr
    assert cdsa("top", "profile_exit.json", cwd=V1).stdout.startswith("101 launches from 2 launch sites")
    assert "fill_f32" in cdsa("flame", "profile_exit.json", cwd=V1).stdout
    chrome = json.loads(cdsa("export", "--chrome", "nll.json", "graph.json", cwd=V1).stdout)
    assert chrome["otherData"]["sources"] == ["nll.json", "graph.json"]
