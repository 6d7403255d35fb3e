"""CPU-side checks of the GPU suite (integration/gpu), run in CI where there is no GPU: the scripts parse and
compile, the case list covers issue 3's 21 cases (1, 11 and 14 under both backends), case 22 and the issue-7
facts (23a-23e); the report checks accept a report of the real format and reject a wrong one; the CUPTI fallback
table matches the backend's messages; the native cases build with nvcc when it is installed (with the suite's own
commands); issue 16's judges (PDL overlap and its facts, coredump facts) read their programs' lines; and the harness survives: fake slow and hanging cases (every finished verdict written, the hang
reported as timed out, its whole process tree gone, total within the budget), SIGTERM (results written, trees
killed), run.sh end to end without a GPU on the carried library, and a configure with only the carried prefix."""
import concurrent.futures
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import types

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SUITE = HERE / "suite.py"


def load_suite():
    spec = importlib.util.spec_from_file_location("gpu_suite", SUITE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("script", ["run.sh", "prepare_carry.sh"])
def test_shell_scripts_parse(script):
    p = subprocess.run(["bash", "-n", str(HERE / script)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_python_files_compile():
    files = [*sorted(HERE.glob("suite*.py")), *sorted((HERE / "cases").glob("*.py"))]  # suite.py and its parts
    assert len(files) >= 20
    for f in files:
        compile(f.read_text(), str(f), "exec")  # raises SyntaxError with the file and line


def test_list_has_every_case_and_both_backends():
    p = subprocess.run(["bash", str(HERE / "run.sh"), "--list"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = [l.split() for l in p.stdout.splitlines()[:-1] if re.match(r"^\s*\d+\s", l)]
    assert sorted({int(r[0]) for r in rows}) == list(range(1, 30))
    keys = [r[1] for r in rows]
    for k in ("1/cupti", "11a/cupti", "11b/cupti", "14/cupti", "22", "23a", "23b", "23c", "23d", "23e", "24a", "24b", "24c", "24d", "25a", "26", "21b", "21c"):
        assert k in keys, k
    # the torch.compile cases start first, the cost cases run last
    assert keys[:2] == ["11b", "11b/cupti"], keys[:3]
    assert keys[-3:] == ["21a", "21b", "21c"], keys[-3:]
    assert p.stdout.strip().splitlines()[-1].startswith("29 cases")


def test_dry_run_self_check_passes():
    p = subprocess.run([sys.executable, str(SUITE), "--dry-run"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "suite self-check: OK" in p.stdout
    assert p.stdout.count("would run") == len(load_suite().all_cases())


def test_self_check_rejects_a_synchronize_before_the_subject(tmp_path, monkeypatch):
    suite = load_suite()
    cases = tmp_path / "cases"
    shutil.copytree(suite.CASES, cases)
    text = (cases / "c12_graph_replay.py").read_text()
    (cases / "c12_graph_replay.py").write_text(text + "torch.cuda.synchronize()\n")
    monkeypatch.setattr(suite, "CASES", cases)
    problems = suite.self_check()
    assert any("c12_graph_replay.py calls torch.cuda.synchronize()" in p for p in problems), problems


def test_run_sh_needs_a_logdir():
    p = subprocess.run(["bash", str(HERE / "run.sh")], capture_output=True, text=True)
    assert p.returncode == 2 and "usage" in p.stderr


def fake_run(suite, err, out="", rc=1):
    return suite.Run(["x"], rc, out, err, 0.1, False, pathlib.Path("/nonexistent"))


def report_text(suite, script, marker, kernel="void at::native::nll_loss_forward_reduce_cuda_kernel_2d<float, long>(float*)"):
    n, text = suite.marker_line(suite.CASES / script, marker)
    return f"""Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [2,0,0] Assertion failed.

==================== cdsa: asynchronous CUDA fault ====================
cdsa: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered
cdsa: surfaced at cuMemcpyDtoH_v2 (thread 7), called from (most recent call last):
    File "{suite.CASES / script}", line {n + 2}, in <module>
      print("loss", loss.item())
cdsa: the failing launch (the first launch on its stream whose completion never landed):
  kernel {kernel}  grid (1,1,1) block (32,1,1) shared 0 B  stream 1  launch #3 (#3 on its stream)  thread 7
  Launched from (most recent call last):
    File "{suite.CASES / script}", line {n}, in <module>
      {text}
    at::native::nll_loss_forward (libtorch_cuda.so+0x1234)
cdsa: trace file cdsa-h-1.json
=======================================================================
Traceback (most recent call last):
  File "{suite.CASES / script}", line {n + 2}, in <module>
    print("loss", loss.item())
RuntimeError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.

"""


def test_report_checks_accept_the_real_format_and_reject_a_wrong_line():
    suite = load_suite()
    good = fake_run(suite, report_text(suite, "c01_cross_entropy.py", "LOSS-LINE"))
    ok, ev = suite.check_named(good, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss")
    assert ok, ev
    assert "c01_cross_entropy.py:" in ev and "named" in ev and "surfaced at cuMemcpyDtoH_v2" in ev
    wrong_line = fake_run(suite, report_text(suite, "c01_cross_entropy.py", "SURFACE-LINE"))
    ok, ev = suite.check_named(wrong_line, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss")
    assert not ok and "NOT named" in ev
    wrong_kernel = fake_run(suite, report_text(suite, "c01_cross_entropy.py", "LOSS-LINE", kernel="vectorized_elementwise"))
    assert not suite.check_named(wrong_kernel, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss")[0]
    two = fake_run(suite, good.err + good.err)
    assert not suite.check_named(two, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss")[0]
    fell_back = fake_run(suite, "cdsa: CDSA_BACKEND=cupti: the one CUPTI subscriber slot is taken; recording launches "
                                "through driver interposition instead\n" + good.err)
    assert suite.check_named(fell_back, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss", "driver")[0]
    ok, ev = suite.check_named(fell_back, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss", "cupti")
    assert not ok and "CUPTI backend did not run" in ev
    # the informational notice (CUPTI missed a launch that interposition recorded) is no fallback
    notice = fake_run(suite, "cdsa: CDSA_BACKEND=cupti: CUPTI did not report a launch that the driver interposition "
                             "saw; such launches are recorded through interposition\n" + good.err)
    assert suite.check_named(notice, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss", "cupti")[0]
    ok, ev = suite.check_no_report(fake_run(suite, "", out="loss 0.5 finite\n", rc=0), r"loss \S+ finite")
    assert ok, ev
    assert not suite.check_no_report(good)[0]


def test_ddp_judge_wants_the_whole_report_before_the_jobs_own_lines():
    # Case 26: the report must end before torch's, c10d's and NCCL's own error lines, and name the step's line.
    suite = load_suite()
    script, marker = "c26_ddp_watchdog.py", "STEP-LINE"
    good = report_text(suite, script, marker)
    report, rest = good.split("Traceback", 1)
    watchdog = ("[rank0]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:1900] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
                "Process group watchdog thread terminated with exception: CUDA error: device-side assert triggered\n"
                "vm:1234:1240 [0] NCCL WARN Cuda failure 'device-side assert triggered'\n")
    ok, ev = suite.check_report_first(fake_run(suite, report + watchdog + "Traceback" + rest, rc=-6), script, marker,
                                      "nll_loss")
    assert ok, ev
    assert "report whole before the job's first own line" in ev and "rc -6" in ev, ev
    # the watchdog's line before the report's end (the report cut short by the abort, or printed after it)
    cut = report.index("  Launched from")
    late = report[:cut] + watchdog + report[cut:] + "Traceback" + rest
    ok, ev = suite.check_report_first(fake_run(suite, late, rc=-6), script, marker, "nll_loss")
    assert not ok and "the job's own line came first: [rank0]:[E1201" in ev, ev
    nccl_first = "vm:1234:1240 [0] NCCL WARN Cuda failure 'device-side assert triggered'\n" + good
    ok, ev = suite.check_report_first(fake_run(suite, nccl_first, rc=-6), script, marker, "nll_loss")
    assert not ok and "NCCL WARN" in ev, ev
    # no closing rule: the process died mid-report
    ok, ev = suite.check_report_first(fake_run(suite, report.rsplit("=====", 1)[0].rstrip("=") , rc=-6), script, marker,
                                      "nll_loss")
    assert not ok, ev
    # the wrong line named
    ok, _ = suite.check_report_first(fake_run(suite, report_text(suite, "c01_cross_entropy.py", "LOSS-LINE")), script,
                                     marker, "nll_loss")
    assert not ok


def test_traceback_block_ignores_what_cdsa_adds():
    suite = load_suite()
    err = report_text(suite, "c01_cross_entropy.py", "LOSS-LINE")
    bare = err[err.find("Traceback"):]
    block = suite.traceback_block(err)
    assert block.startswith("Traceback (most recent call last):") and block.endswith("incorrect.")
    assert block == suite.traceback_block("Loss.cu:250: Assertion failed.\n" + bare + "[other trailing text]\n")
    assert block != suite.traceback_block(bare.replace("line", "line 9", 1))


def test_cupti_fallback_table_matches_the_backend_messages():
    """Every 'CDSA_BACKEND=cupti:' message of the backend that ends in a fallback is in the suite's table, and the
    informational ones are not: the table and the backend cannot drift apart unnoticed."""
    suite = load_suite()
    sources = [ROOT / "cupti_tracer" / "backend.cc", ROOT / "cupti_tracer" / "stub.cc"]
    messages = []
    for src in sources:
        text = src.read_text()
        for m in re.finditer(r'(?:log_line|CDSA_NOTICE_ONCE)\(\s*((?:"[^"]*"\s*)+)(.*?)\);', text, re.S):
            literal = "".join(re.findall(r'"([^"]*)"', m.group(1)))
            if literal.startswith("CDSA_BACKEND=cupti:"):
                falls_back = "fallback_text()" in m.group(2) or "instead" in literal
                sample = re.sub(r"%[-0-9.]*[a-z]+", "X", literal).replace("%s", "X")
                messages.append((sample, falls_back))
    assert len(messages) >= 5, messages
    for sample, falls_back in messages:
        assert suite.is_cupti_fallback("cdsa: " + sample) == falls_back, sample


def test_native_check_wants_function_and_file_line():
    suite = load_suite()
    n, _ = suite.marker_line(suite.CASES / "native_faults.cu", "LAUNCH-LINE")
    err = f"""==================== cdsa: asynchronous CUDA fault ====================
cdsa: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered
cdsa: surfaced at cuStreamSynchronize (thread 1), called from (most recent call last):
cdsa: the failing launch (the first launch on its stream whose completion never landed):
  kernel assert_kernel(int)  grid (1,1,1) block (32,1,1) shared 0 B  stream 13  launch #6 (#6 on its stream)  thread 1
  Launched from (most recent call last):
    main (nf_static+0x9e1f) at /x/native_faults.cu:140
    launch_bad(CUstream_st*) (nf_static+0x9b2a) at /x/native_faults.cu:{n}
=======================================================================
"""
    ok, ev = suite.check_native(fake_run(suite, err), "launch_bad", "native_faults.cu", "LAUNCH-LINE", "assert_kernel")
    assert ok, ev
    assert "surfaced at cuStreamSynchronize" in ev
    ok, _ = suite.check_native(fake_run(suite, err.replace(f":{n}\n", ":1\n")), "launch_bad", "native_faults.cu",
                               "LAUNCH-LINE", "assert_kernel")
    assert not ok
    ok, ev = suite.check_native(fake_run(suite, err), "launch_bad", "native_faults.cu", "LAUNCH-LINE", "assert_kernel",
                                code=700)
    assert not ok and "700" in ev


def test_graph_update_check_wants_kernel_replay_and_update_lines():
    """Case 25a's judge: the asserting kernel as the named node, the replay line in the replay's stack and the
    update line in the node's; a report naming the node's first kernel or its ADD-LINE is a failure."""
    suite = load_suite()
    src = suite.CASES / "graph_node_update.cu"
    replay, _ = suite.marker_line(src, "REPLAY-LINE")
    update, _ = suite.marker_line(src, "UPDATE-LINE")
    add, _ = suite.marker_line(src, "ADD-LINE")
    err = f"""==================== cdsa: asynchronous CUDA fault ====================
cdsa: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered
cdsa: surfaced at cuStreamSynchronize (thread 1), called from (most recent call last):
    main (graph_update+0x1234) at /x/graph_node_update.cu:99
cdsa: the failing launch (the first launch on its stream whose completion never landed):
  graph launch (graph 3)  stream 13  launch #2 (#2 on its stream)  thread 1
    (first unfinished launch on stream 13; 1 launch on it had not completed)
  Launched from (most recent call last):
    main (graph_update+0x1300) at /x/graph_node_update.cu:98
    replay(CUgraphExec_st*, CUstream_st*) (graph_update+0x1100) at /x/graph_node_update.cu:{replay}
  The graph holds 1 kernel node:
  - kernel checked_index_kernel(float*, long const*, int, int)  grid (1,1,1) block (32,1,1) shared 0 B  [node of graph 3]
    Changed by cuGraphExecKernelNodeSetParams_v2 at (most recent call last):
      main (graph_update+0x1200) at /x/graph_node_update.cu:97
      change_node(CUgraphExec_st*, CUgraphNode_st*, CUDA_KERNEL_NODE_PARAMS_v2_st*) (graph_update+0x1000) at /x/graph_node_update.cu:{update}
=======================================================================
"""
    ok, ev = suite.check_graph_update(fake_run(suite, err))
    assert ok, ev
    assert "exact" in ev and "surfaced at cuStreamSynchronize" in ev
    stale = err.replace("checked_index_kernel(float*, long const*, int, int)", "fill_kernel(float*, int)").replace(
        "Changed by cuGraphExecKernelNodeSetParams_v2", "Added by cuGraphAddKernelNode_v2").replace(
        f"graph_node_update.cu:{update}", f"graph_node_update.cu:{add}")
    ok, ev = suite.check_graph_update(fake_run(suite, stale))
    assert not ok and "NOT checked_index_kernel" in ev
    no_replay_line = err.replace(f"graph_node_update.cu:{replay}", "graph_node_update.cu:1")
    assert not suite.check_graph_update(fake_run(suite, no_replay_line))[0]
    assert not suite.check_graph_update(fake_run(suite, err + err))[0]


NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if pathlib.Path("/usr/local/cuda/bin/nvcc").exists() else None)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_native_cases_build_with_the_suites_commands(tmp_path):
    suite = load_suite()
    home = str(pathlib.Path(NVCC).resolve().parent.parent)
    ctx = types.SimpleNamespace(nvcc=NVCC, cuda_home=home, arch="sm_90")
    jobs = suite.native_jobs(ctx, tmp_path)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = dict(zip(jobs, pool.map(lambda a: subprocess.run(a, capture_output=True, text=True), jobs.values())))
    for name, p in done.items():
        assert p.returncode == 0, " ".join(jobs[name]) + "\n" + p.stdout + p.stderr
    assert "driver_assert_kernel" in (tmp_path / "driver_api.ptx").read_text()
    # -cudart shared finds libcudart.so.13 without LD_LIBRARY_PATH: the toolkit's folder is in its run path
    dyn = subprocess.run(["readelf", "-d", str(tmp_path / "nf_shared")], capture_output=True, text=True).stdout
    assert "libcudart.so" in dyn and suite.cudart_libdir(home) in dyn, dyn
    syms = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / "fact_logger.so")], capture_output=True, text=True).stdout
    for s in ("fprintf", "vfprintf", "fwrite", "fputs", "write", "dlsym"):
        assert re.search(rf" T {s}$", syms, re.M), s


def test_every_case_function_runs_to_a_verdict(tmp_path):
    """Each case's code, fed canned process results, returns (verdict, evidence) without raising: a typo in a case
    must not first show on the GPU machine, where each minute counts."""
    suite = load_suite()

    class FakeCtx:
        python, sanitizer, logdir = sys.executable, "/usr/bin/true", tmp_path
        libcdsa = str(tmp_path / "build" / "lib" / "libcdsa.so")  # with the walker's probe beside it (case 28)

        def __init__(self):
            self.calls = []
            probe = tmp_path / "build" / "tests" / "unit" / "python_stack" / "libpystack_probe.so"
            probe.parent.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"")

        def left(self):
            return 300.0

        def py(self, script, *args):
            assert (suite.CASES / script).exists(), script
            return [sys.executable, str(suite.CASES / script), *map(str, args)]

        def bin(self, name):
            return "/usr/bin/true"

        def run(self, key, argv, **kw):
            self.calls.append((key, kw))
            cwd = tmp_path / key.replace("/", "_") / kw.get("tag", "")
            cwd.mkdir(parents=True, exist_ok=True)
            (cwd / "cdsa-h-1.json").write_text('{"launches": []}')
            out = ("elapsed_s 0.5 loss 1.0\nelapsed_s_gpu 0.3\nelapsed_s_launch 0.2\nloss 0.5 finite\nloss nan\n"
                   "dtype error: x\ncontext alive 1.0\nepoch ok\nsecond failed: x\ncuda kernel events: 3\nlaunched\n"
                   "memop-cost launch host_us 2.0 gpu_us 1.5\nmemop-cost launch+memop host_us 2.5 gpu_us 1.9\n"
                   "memop-cost slot 99999 (expect 99999)\nattr 122 1 rc 0\nmemop32 rc 0\nmemop64 rc 0\n"
                   "main tid 10\nhelper tid 11\ncudaGetKernel 0x1 rc 0\n"
                   "capture-if begin 0 end 0 instantiate 0 launch 0 body_ran 1\n"
                   "pdl-time pairs 2000 us_per_pair 9.5 overlapped 1990 broken_waits 0 between nothing\n"
                   "memop-wait overlapped yes memop_waits_for_primary no event_waits_for_primary yes "
                   "kernel_waits_for_primary yes memop_ms 3.0 sync CUDA_SUCCESS\n"
                   "freed-copy free call CUDA_ERROR_INVALID_VALUE sync CUDA_SUCCESS ctx CUDA_SUCCESS\n"
                   "coredump-flags enable CUDA_SUCCESS file CUDA_SUCCESS generation lightweight+skip_abort\n"
                   "coredump-survived yes\npci-driver rc 0 id 0000:3B:00.0\n"
                   "OK: CPython 3.12.3 (built-in layout); 4000 stack comparisons (CDLL and PyDLL)\n"
                   "driver 13050\nmissing unknown rc 0 status 1 pfn NULL\nmissing too-old rc 0 status 2 pfn NULL\n"
                   "ep cuLaunchHostFunc 13010 0 0x1 0x2 0x1\nep cuGraphAddNode 13040 0 0x3 0x3 0x3\n"
                   "cudart 13050 /x/libcudart.so.13\ncall cudaLaunchHostFunc_v2 rc 0\nhost calls 1\n")
            return suite.Run(argv, 1, out, report_text(suite, "c01_cross_entropy.py", "LOSS-LINE"), 0.5, False, cwd)

    for case in suite.all_cases():
        ctx = FakeCtx()
        verdict = case.fn(ctx, case.key, case.backend)
        assert isinstance(verdict, tuple) and verdict[0] in (True, False, suite.INFO) and isinstance(verdict[1], str), case.key
        assert ctx.calls, f"{case.key} ran nothing"
        if case.backend == "cupti":
            assert all(kw.get("backend") == "cupti" or "CDSA_BACKEND" in (kw.get("env") or {})
                       for _, kw in ctx.calls if kw.get("preload", True)), case.key


# ---------------------------------------------------------------------------------------------- the harness
def live_processes_with(text, logdir):
    """Live (non-zombie) processes whose command line holds `text` and that run in this suite's `logdir` (each
    case runs in logdir/runs/<case>, and its children inherit that: another suite run on the machine, such as a
    second checkout's tests, is not counted)."""
    out = []
    logdir = os.path.realpath(logdir)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = pathlib.Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = pathlib.Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cwd = os.readlink(f"/proc/{d}/cwd")
        except OSError:
            continue
        if text in cmd and state not in ("Z", "X") and (cwd + "/").startswith(logdir + "/"):
            out.append(int(d))
    return out


def hang_pgid(logdir):
    m = re.search(r"tree started (\d+)", (logdir / "f3.out").read_text())
    assert m, (logdir / "f3.out").read_text()
    return int(m.group(1))


def test_fake_slow_and_hanging_cases_within_the_budget(tmp_path):
    """The issue's 'done when': every finished verdict written, the hung case reported as timed out, its whole
    process tree gone (the process group and the grandchild that left it), total time within the budget."""
    suite = load_suite()
    budget = 12
    t0 = time.time()
    p = subprocess.run([sys.executable, str(SUITE), "--logdir", str(tmp_path), "--fake-cases", "2", "--budget", str(budget)],
                       capture_output=True, text=True, timeout=60)
    wall = time.time() - t0
    assert p.returncode == 1, p.stdout + p.stderr
    assert wall < budget, f"{wall:.1f} s for a {budget} s budget"
    res = json.loads((tmp_path / "results.json").read_text())
    status = {k: v["status"] for k, v in res["results"].items()}
    assert status == {"f1": "PASS", "f2": "PASS", "f3": "TIMEOUT", "f4": "PASS", "f5": "FAIL", "f6": "TIMEOUT"}, status
    assert "timed out after 2 s" in res["results"]["f3"]["evidence"]
    assert res["finished"] == res["total"] == 6
    table = (tmp_path / "table.md").read_text()
    assert re.search(r"\| f3 \| .* \| TIMEOUT \|", table) and re.search(r"\| f2 \| .* \| PASS \|", table), table
    assert "process tree killed" in (tmp_path / "f3.err").read_text()
    assert suite.group_members(hang_pgid(tmp_path)) == []
    assert live_processes_with("time.sleep(1000)", tmp_path) == []


def test_sigterm_writes_the_finished_verdicts_and_kills_the_trees(tmp_path):
    p = subprocess.Popen([sys.executable, str(SUITE), "--logdir", str(tmp_path), "--fake-cases", "60", "--budget", "120",
                          "--mirror", str(tmp_path / "mirror")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results = tmp_path / "mirror" / "results.json"
    t_end = time.time() + 20
    while time.time() < t_end:  # until the quick cases and the slow one have finished (the hang goes on)
        if results.exists() and {"f1", "f2", "f4"} <= set(json.loads(results.read_text())["results"]):
            break
        time.sleep(0.1)
    pgid = hang_pgid(tmp_path)
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=20)
    assert p.returncode == 124, out
    assert time.time() - t0 < 8
    res = json.loads(results.read_text())
    assert res["note"] == "stopped by SIGTERM", res
    status = {k: v["status"] for k, v in res["results"].items()}
    assert status["f1"] == status["f2"] == status["f4"] == "PASS" and "f3" not in status, status
    assert (tmp_path / "results.json").read_text() == results.read_text()
    assert "| f3 | reported as timed out, tree killed | NOT RUN |" in (tmp_path / "table.md").read_text()
    assert suite_group_gone(pgid)
    assert live_processes_with("time.sleep(1000)", tmp_path) == []


def suite_group_gone(pgid):
    return load_suite().group_members(pgid) == []


def test_run_sh_without_a_gpu_uses_the_carried_library_when_the_build_fails(tmp_path):
    """run.sh end to end on a machine without a GPU: the build fails (stand-in cmake and ninja), the carried
    libcdsa.so is used, every case is skipped with 'no GPU', and results.json and table.md are there."""
    probe = subprocess.run([sys.executable, "-c", load_suite().GPU_PROBE], capture_output=True, text=True)
    if probe.returncode == 0:
        pytest.skip("this machine has a GPU")
    carry = tmp_path / "carry"
    (carry / "build" / "lib").mkdir(parents=True)
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / "stand_in.c"
    src.write_text("int cdsa_stand_in(void) { return 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(carry / "build" / "lib" / "libcdsa.so")], check=True)
    (carry / "COMMIT").write_text("0123abc\n")
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    for tool in ("cmake", "ninja"):
        (fakebin / tool).write_text("#!/bin/sh\necho \"$0: stand-in that fails\" >&2\nexit 1\n")
        (fakebin / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDSA_")}
    env.update(PATH=f"{fakebin}:{env['PATH']}", CDSA_CARRY=str(carry), PYTHON=sys.executable)
    logdir = tmp_path / "logs"
    t0 = time.time()
    p = subprocess.run(["bash", str(HERE / "run.sh"), str(logdir), "--budget", "120"], capture_output=True, text=True,
                       env=env, timeout=120)
    wall = time.time() - t0
    assert p.returncode == 2, p.stdout + p.stderr
    assert wall < 30, wall
    assert "build failed" in p.stdout and "using the carried libcdsa.so built at 0123abc" in p.stdout, p.stdout
    res = json.loads((logdir / "results.json").read_text())
    assert res["total"] == len(load_suite().all_cases()) == res["finished"]
    assert {v["status"] for v in res["results"].values()} == {"SKIP"}
    assert all(v["evidence"].startswith("no GPU") for v in res["results"].values())
    assert (logdir / "table.md").read_text().count("| SKIP |") == res["total"]


HAVE_DEV_PACKAGES = all(subprocess.run(["dpkg", "-L", p], capture_output=True).returncode == 0
                        for p in ("libfmt-dev", "nlohmann-json3-dev", "libgtest-dev", "libdw-dev")) if shutil.which("dpkg") else False


@pytest.mark.skipif(not (HAVE_DEV_PACKAGES and shutil.which("cmake") and shutil.which("ninja")),
                    reason="needs the Debian -dev packages, cmake and ninja")
def test_the_carried_prefix_alone_configures_cdsa(tmp_path):
    """prepare_carry.sh --no-build fills the prefix and configures cdsa with every system search path switched
    off; the same configure without the prefix fails, so it is the prefix that makes it work."""
    carry = tmp_path / "carry"
    env = dict(os.environ, CDSA_CARRY=str(carry))
    p = subprocess.run(["bash", str(HERE / "prepare_carry.sh"), "--no-build"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "configures with the carried prefix alone" in p.stdout
    assert (carry / "rtlib" / "libunwind.so.8").exists() and (carry / "rtlib" / "libdw.so.1").exists()
    assert not (carry / "build" / "lib" / "libcdsa.so").exists()
    bare = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tmp_path / "b"), "-G", "Ninja",
                           "-DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF", "-DCMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH=OFF",
                           "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF",
                           f"-DCMAKE_MAKE_PROGRAM={shutil.which('ninja')}", f"-DPython3_EXECUTABLE={sys.executable}",
                           f"-DCMAKE_C_COMPILER={shutil.which('cc')}", f"-DCMAKE_CXX_COMPILER={shutil.which('c++')}"],
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode != 0 and 'provided by "fmt"' in bare.stdout + bare.stderr, bare.stdout + bare.stderr


def test_pdl_pairs_judge_wants_the_overlap_kept_and_tells_the_time():
    suite = load_suite()
    line = "pdl-time pairs 2000 us_per_pair {us} overlapped {k} broken_waits {b} between nothing\n"
    run = lambda us, k, b=0: fake_run(suite, "", out=line.format(us=us, k=k, b=b), rc=0)
    between = [("memop", run(14.0, 0)), ("event", fake_run(suite, "", out="", rc=2))]
    ok, ev = suite.check_pdl_pairs([(run(9.0, 1990), run(9.2, 1985)), (run(9.1, 1992), run(9.3, 1990))], between)
    assert ok is True, ev
    assert "9.05 us/pair bare" in ev and "cdsa 1.022x" in ev and "cdsa 1988/2000" in ev, ev
    assert "memop between the kernels (bare): 14.00 us/pair, overlapped 0/2000" in ev and "event between: no timing" in ev
    # cdsa lost the overlap (a mark between the kernels): fails
    assert suite.check_pdl_pairs([(run(9.0, 1990), run(14.0, 0))])[0] is False
    # a wait that did not wait: fails even with the overlap kept
    assert suite.check_pdl_pairs([(run(9.0, 1990, 1), run(9.0, 1990))])[0] is False
    # no overlap even bare: nothing to keep, told as info
    assert suite.check_pdl_pairs([(run(14.0, 0), run(14.0, 0))])[0] == suite.INFO
    assert suite.check_pdl_pairs([(fake_run(suite, "", rc=1), run(9.0, 1))])[0] is False


def test_pdl_memop_fact_says_what_it_means_for_the_attribution_constant():
    suite = load_suite()
    fact = ("memop-wait overlapped yes memop_waits_for_primary {m} event_waits_for_primary yes "
            "kernel_waits_for_primary yes memop_ms 201.3 sync CUDA_SUCCESS\n")
    verdict, ev = suite.check_pdl_memop_wait(fake_run(suite, "", out=fact.format(m="yes"), rc=0))
    assert verdict == suite.INFO and "kLandedPdlMarkProvesPrimary may become true" in ev, ev
    verdict, ev = suite.check_pdl_memop_wait(fake_run(suite, "", out=fact.format(m="no"), rc=0))
    assert "must stay false" in ev, ev
    assert suite.check_pdl_memop_wait(fake_run(suite, "boom", rc=2))[0] is False
    # cdsa's placement (event record + wait before the memop): must wait for the primary, or a proven mark is wrong
    waited = fact.rstrip("\n") + " placement waited\n"
    plain = fake_run(suite, "", out=fact.format(m="no"), rc=0)
    verdict, ev = suite.check_pdl_memop_wait(plain, fake_run(suite, "", out=waited.format(m="yes"), rc=0))
    assert verdict is True and "cdsa's placement (event record + wait, then the memop): overlapped yes" in ev, ev
    verdict, ev = suite.check_pdl_memop_wait(plain, fake_run(suite, "", out=waited.format(m="no"), rc=0))
    assert verdict is False and "wrong certainty" in ev, ev
    verdict, _ = suite.check_pdl_memop_wait(plain, fake_run(suite, "", out=waited.format(m="untested"), rc=0))
    assert verdict == suite.INFO
    # the plain run's line given where the waited one was expected: no answer, not a pass
    assert suite.check_pdl_memop_wait(plain, plain)[0] is False
    verdict, ev = suite.check_freed_copy([
        fake_run(suite, "", out="freed-copy free call CUDA_ERROR_INVALID_VALUE sync CUDA_SUCCESS ctx CUDA_SUCCESS\n", rc=0),
        fake_run(suite, "", rc=134)])
    assert verdict == suite.INFO and "free: call CUDA_ERROR_INVALID_VALUE" in ev and "no answer (rc 134)" in ev, ev


def test_coredump_judge_records_the_drivers_text_and_survival():
    suite = load_suite()
    out = ("coredump-logs-callback CUDA_SUCCESS\n"
           "coredump-flags enable CUDA_SUCCESS file CUDA_SUCCESS generation lightweight+skip_abort\n"
           "coredump-callbacks start yes (CUDA_SUCCESS) complete yes (CUDA_SUCCESS)\n"
           "coredump-log level 1: GPU exception in illegal_address_kernel, coredump written\n"
           "coredump-fault launch CUDA_SUCCESS sync CUDA_ERROR_ILLEGAL_ADDRESS ms 812.0\n"
           "coredump-callback start ms 20.5\ncoredump-file bytes 1048576\ncoredump-survived yes\n")
    bare = fake_run(suite, "", out=out, rc=0)
    under = fake_run(suite, "", out="", rc=-6)
    verdict, ev = suite.check_coredump(bare, under)
    assert verdict == suite.INFO, ev
    assert "kernel named by the driver: yes" in ev and "survived yes" in ev and "start ms 20.5" in ev, ev
    assert "cdsa: no facts (rc -6)" in ev, ev


def test_the_pdl_and_coredump_cases_are_listed_with_their_expected_seconds():
    suite = load_suite()
    cases = {c.key: c for c in suite.all_cases()}
    for key in ("25b", "25b2", "25b3", "25c", "29a", "29b"):
        assert key in cases and cases[key].expect_s > 0, key
    keys = [c.key for c in suite.all_cases()]
    # issue 16's cases in the order of their worth: the report first, the overlap next, the facts after
    assert keys.index("25a") < keys.index("25b") < keys.index("25b2") < keys.index("25b3") < keys.index("25c")


def test_pci_bus_id_judge_tells_the_letter_case_the_header_and_the_xid_form():
    """Case 27 (info): canned probe output in each letter case; cdsa's header matched against the driver's string."""
    suite = load_suite()
    probe = lambda bus, rc=0, extra="pci-smi 00000000:3B:00.0\npci-torch 59 domain 0 device 0\n": fake_run(
        suite, "", out=f"pci-driver rc {rc} id {bus}\n" + extra, rc=0)
    header = lambda bus: fake_run(suite, f"cdsa: pid 7 on h, GPU 0 NVIDIA H200 (PCI {bus})\n", rc=134)
    verdict, ev = suite.check_pci_bus_id(probe("0000:3B:00.0"), header("0000:3B:00.0"))
    assert verdict == suite.INFO, ev
    assert "driver '0000:3B:00.0', upper case, format DDDD:BB:DD.F" in ev and "Xid-style PCI:0000:3b:00" in ev, ev
    assert "cdsa header '(PCI 0000:3B:00.0)': same string" in ev, ev
    assert "nvidia-smi: 00000000:3B:00.0" in ev and "torch: 59 domain 0" in ev, ev
    verdict, ev = suite.check_pci_bus_id(probe("0000:3b:00.0"), header("0000:3B:00.0"))
    assert verdict == suite.INFO and "lower case" in ev and "Xid-style PCI:0000:3b:00" in ev, ev
    assert "same but for letter case" in ev, ev
    verdict, ev = suite.check_pci_bus_id(probe("0000:3b:0A.0"), header("0000:18:00.0"))
    assert "mixed case" in ev and "differs" in ev and "PCI:0000:3b:0a" in ev, ev
    verdict, ev = suite.check_pci_bus_id(probe("0000:18:00.0", extra="pci-smi none: no nvidia-smi\n"), None)
    assert verdict == suite.INFO and "no letters case" in ev and "no faulting run" in ev, ev
    assert "nvidia-smi: none: no nvidia-smi" in ev and "torch: ?" in ev, ev
    # an odd format, a header without the id, a refusal: still info
    verdict, ev = suite.check_pci_bus_id(probe("00000000:3B:00.0"), fake_run(suite, "no report", rc=1))
    assert verdict == suite.INFO and "format not DDDD:BB:DD.F" in ev and "Xid-style PCI:0000:3b:00" in ev, ev
    assert "cdsa header: no PCI id" in ev, ev
    verdict, ev = suite.check_pci_bus_id(probe("-", rc=101), None)
    assert verdict == suite.INFO and "refused: rc 101" in ev, ev
    # only a crashed probe fails
    assert suite.check_pci_bus_id(fake_run(suite, "Segmentation fault", rc=-11), None)[0] is False
    assert suite.check_pci_bus_id(fake_run(suite, "", out="pci-driver none: no libcuda.so.1\n", rc=1), None)[0] is False
    assert suite.letter_case("0000:3B:00.0") == "upper" and suite.xid_form("0000:3B:00.0") == "PCI:0000:3b:00"
    keys = [c.key for c in suite.all_cases()]
    cases = {c.key: c for c in suite.all_cases()}
    assert cases["27"].expect_s > 0 and keys.index("26") < keys.index("27") < keys.index("21a")


def test_entry_point_judges_tell_the_ceilings_premise_and_how_cudart_asked():
    """Cases 29a/29b (info): canned output of entry_point_pointers.c and c29_cudart_entry_points.py."""
    suite = load_suite()
    typedefs = {("cuLaunchHostFunc", 10000, False): "CUstream,CUhostFn,void *",
                ("cuLaunchHostFunc", 13010, False): "CUstream,CUhostFn,void *,unsigned int",
                ("cuGraphAddNode", 12030, False): "CUgraphNode *,CUgraph", ("cuGraphAddNode", 13040, False): "CUgraphNode *,CUgraph"}
    out = ("driver 13050\nmissing unknown rc 0 status 1 pfn NULL\nmissing too-old rc 500 status 2 pfn NULL\n"
           "ep cuLaunchHostFunc 10000 0 0x1 0x1 0x2\nep cuLaunchHostFunc 13010 0 0x2 0x1 0x2\n"
           "ep cuGraphAddNode 13040 0 0x4 0x3 0x4\n")
    verdict, ev = suite.check_entry_pointers(fake_run(suite, "", out=out, rc=0), typedefs)
    assert verdict == suite.INFO, ev
    assert "premise holds for 1, breaks for 1: cuGraphAddNode@13040/0 other function, same prototype" in ev, ev
    assert "unknown rc 0 status 1 pfn NULL, too-old rc 500 status 2 pfn NULL" in ev, ev
    log = "cuGetProcAddress cuLaunchHostFunc 13010 0 -> PFN_cuLaunchHostFunc_v13010 wrapped\n"
    run = fake_run(suite, "", out="cudart 13050 /x\ncall cudaLaunchHostFunc_v2 rc 0\nhost calls 1\n", rc=0)
    verdict, ev = suite.check_cudart_entry_points(run, log)
    assert verdict == suite.INFO and "cuLaunchHostFunc@13010/0 PFN_cuLaunchHostFunc_v13010 wrapped" in ev, ev
