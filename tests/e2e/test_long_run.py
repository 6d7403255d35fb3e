"""A long run (issue 17): 200,000 distinct launch sites over 8 threads -- twelve times what the stack table holds
(CDSA_STACK_TABLE, 16,384) -- through 4,096 generated kernels, after a graph captured and replayed at the very start;
then a fault. The failing launch's stack and kernel are in the report; the early graph, replayed at the end, still
has its capture-time stack; and cdsa's resident memory grew by no more than its tables' reserved size at the
configured sizes plus its per-thread blocks (asked of the recorder itself, tests/bench/recorder_bench.cc), compared
with the same run without cdsa. Label soak: the sanitizer builds run it too, with fewer sites."""
import os
import re
import pathlib
import subprocess
import sys

import pytest

from conftest import BUILD, PROGRAMS, SANITIZED, clean_env, marker_line, run_program

HERE = pathlib.Path(__file__).resolve().parent
PROGRAM = PROGRAMS / "e2e_long_run"
SOURCE = HERE / "programs" / "long_run.cc"
BENCH = BUILD / "tests" / "bench" / "libcdsa_recorder_bench.so"
THREADS = 8
TSAN = "tsan" in os.environ.get("E2E_PRELOAD_FIRST", "")
# 200,000 sites in all; under TSan (a launch ~20x slower) 40,000: still well over the stack table (16,384).
SITES = 5000 if TSAN else 25000
NLL = "kernel nll_loss_forward_reduce_cuda_kernel_2d"
# Under TSan no trace file: symbolizing a full stack table for it takes TSan ~25 s (the normal and ASan builds write it).
ENV = {"CDSA_TRACE": "off"} if TSAN else {}


def site(marker):
    return f"long_run.cc:{marker_line(SOURCE, marker)[0]}"


def rss_growth_kib(run):
    line = next(l for l in run.out.splitlines() if l.startswith(f"program: {THREADS} threads x {SITES} sites, rss"))
    before, after = (int(w) for w in re.findall(r"(\d+) kB", line))
    return after - before


def cdsa_reserved_bytes(env):
    """What libcdsa.so maps for its tables at `env`'s settings, and per launching thread (the recorder's own
    accounting, recorder_mapped_bytes and native_cache_bytes_per_thread), asked in a child with that env."""
    code = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); l.cdsa_rb_load_config();"
            "l.cdsa_rb_mapped_bytes.restype=l.cdsa_rb_thread_bytes.restype=ctypes.c_uint64;"
            "assert l.cdsa_rb_init()==0; print(l.cdsa_rb_mapped_bytes(), l.cdsa_rb_thread_bytes())")
    e = clean_env(env, preload=False)
    e.pop("LD_PRELOAD", None)
    out = subprocess.run([sys.executable, "-c", code, str(BENCH)], env=e, capture_output=True, text=True, check=True)
    tables, per_thread = map(int, out.stdout.split())
    return tables, per_thread


def check_run(run, tmp_path):
    assert run.rc == 3, (run.rc, run.out, run.err[-3000:])
    assert run.reports == 1, run.err[-3000:]
    # The table was reclaimed, not overflowed: no launch went unrecorded for lack of room. In a sanitizer build on two
    # busy cores (CI runs the soak beside it) a reclaim cycle can outlast an insert's bounded 20 ms wait a few times
    # (TSan in CI at 251d5d0: 3 and 7 of 40,000): a handful refused is timing; a reclaim that does not work refuses over
    # half the sites (the table holds 16,384), so the bound of one in a thousand still tells them apart.
    refused = re.search(r"launch stack table \(\d+ stacks\) was full at times: (\d+) launch stacks", run.err)
    if SANITIZED:
        assert refused is None or int(refused.group(1)) <= THREADS * SITES // 1000, run.err[-3000:]
    else:
        assert refused is None and "launch stack table" not in run.err, run.err[-3000:]
    return run.launch_part()


@pytest.fixture(scope="module")
def bare_growth(tmp_path_factory):
    if SANITIZED:
        return None
    bare = run_program([PROGRAM, "long-run", THREADS, SITES, "fresh"], cwd=tmp_path_factory.mktemp("bare"),
                       preload=False, timeout=300)
    assert bare.rc == 3, (bare.rc, bare.out, bare.err[-2000:])
    return rss_growth_kib(bare)


def test_fault_at_a_fresh_site_after_200k_sites(tmp_path, bare_growth):
    run = run_program([PROGRAM, "long-run", THREADS, SITES, "fresh"], cwd=tmp_path, env=ENV, timeout=300)
    part = check_run(run, tmp_path)
    assert NLL in part, part
    # The failing launch's own stack: the fault's site, under the recursion that made every stack distinct.
    assert "fresh_fault(" in part and site("FRESH-FAULT") in part, part
    assert site("LAUNCH-SITE") in part and site("ONE-SITE") in part, part
    assert "surfaced at cuStreamSynchronize" in run.report, run.report
    if bare_growth is None:
        return
    tables, per_thread = cdsa_reserved_bytes({})
    added = rss_growth_kib(run) - bare_growth
    bound = (tables + THREADS * per_thread) // 1024
    print(f"resident memory added by cdsa over {THREADS * SITES} sites: {added} KiB (bound {bound} KiB: tables "
          f"{tables // 1024} KiB + {THREADS} x {per_thread // 1024} KiB per thread)")
    assert added <= bound, (added, bound)


def test_early_graph_replayed_at_the_end_keeps_its_capture_stack(tmp_path):
    run = run_program([PROGRAM, "long-run", THREADS, SITES, "graph"], cwd=tmp_path, env=ENV, timeout=300)
    part = check_run(run, tmp_path)
    assert "graph launch (graph" in part, part
    assert NLL in part, part
    assert site("LATE-REPLAY") in part, part
    assert "capture_early_graph(" in part and site("EARLY-CAPTURE") in part, part


@pytest.mark.skipif(TSAN, reason="a timing property: under TSan a reclaim cycle outlasts the inserts' bounded 20 ms "
                    "wait on one core (seen in CI: stacks refused); the races are what the TSan build checks, in the "
                    "two tests above")
def test_on_one_core_the_table_keeps_up(tmp_path):
    # Eight launching threads pinned to one core: the thread that reclaims is often descheduled mid-cycle while the
    # others launch from new sites. They must not use up the table's room meanwhile and record launches without
    # their stacks (they give the reclaiming thread the core).
    run = run_program(["taskset", "-c", "0", PROGRAM, "long-run", THREADS, SITES, "fresh"], cwd=tmp_path, env=ENV,
                      timeout=300)
    part = check_run(run, tmp_path)
    assert NLL in part and site("FRESH-FAULT") in part, part
