"""End-to-end: programmatic dependent launch (PDL) kept intact, PDL faults named, two contexts; simulated driver.

The sim counts every PDL launch whose predecessor on its stream is not a kernel (SIM_CUDA_PDL_LOG, one line per PDL
launch: "<stream> kept|lost <predecessor>", tests/sim/README.md): under cdsa that count must be zero but for each
stream's first pair, whose primary's mark went out at once (its stream carried no PDL launch yet)."""
import pathlib

import pytest

from conftest import PROGRAMS, lost_after_first, marker_line, pdl_lines, py_frame, run_program, run_python

HERE = pathlib.Path(__file__).resolve().parent
CASES = PROGRAMS / "e2e_pdl_cases"
SOURCE = HERE / "programs" / "pdl_cases.cc"


def pdl_log(tmp_path):
    return tmp_path / "pdl.log"


def lost(tmp_path):
    return [l for l in pdl_lines(tmp_path) if " lost " in l]


def site(marker):
    return f"pdl_cases.cc:{marker_line(SOURCE, marker)[0]}"


def test_the_oracle_sees_a_broken_pair(tmp_path):
    # The oracle itself: a memop between the two kernels (what cdsa's mark after every launch used to be) is counted.
    run = run_program([CASES, "pairs", 3], cwd=tmp_path, preload=False, env={"SIM_CUDA_PDL_LOG": pdl_log(tmp_path)})
    assert run.rc == 0, run.err
    assert len(pdl_lines(tmp_path)) == 3 and lost(tmp_path) == []
    # With the event record between, as a user could: lost.
    assert all(" kept kernel" in l for l in pdl_lines(tmp_path))


@pytest.mark.parametrize("n", [1, 200])
def test_pdl_pairs_stay_intact_under_cdsa(tmp_path, n):
    run = run_program([CASES, "pairs", n], cwd=tmp_path, env={"SIM_CUDA_PDL_LOG": pdl_log(tmp_path)})
    assert run.rc == 0 and run.err == "", run.err
    assert f"pairs {n}: 1 2" in run.out  # the primaries' and secondaries' writes (other attributes, extra args)
    assert len(pdl_lines(tmp_path)) == n
    assert lost_after_first(tmp_path) == [], lost(tmp_path)[:5]
    assert len(lost(tmp_path)) <= 1
    assert run.traces() == []


def test_fault_in_a_pdl_secondary_is_named(tmp_path):
    run = run_program([CASES, "fault", "secondary"], cwd=tmp_path, env={"SIM_CUDA_PDL_LOG": pdl_log(tmp_path)})
    assert run.rc in (1, 3), run.err
    assert run.reports == 1, run.err
    assert lost_after_first(tmp_path) == []
    part = run.launch_part()
    assert "the failing launch" in part, run.report
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in part
    assert "launch #10 (#10 on its stream)" in part, part  # pair 5's secondary, not a clean pair's
    assert "launch_secondary(" in part and site("SECONDARY-SITE-2") in part
    assert "AMBIGUOUS" not in run.report
    t = run.trace()
    assert [c["launch"]["stream_seq"] for c in t["report"]["candidates"]] == [10]


def test_fault_in_a_pdl_primary_is_named(tmp_path):
    run = run_program([CASES, "fault", "primary"], cwd=tmp_path, env={"SIM_CUDA_PDL_LOG": pdl_log(tmp_path)})
    assert run.rc in (1, 3), run.err  # the sync, or the next pair's launch, sees the fault
    assert run.reports == 1, run.err
    # The event wait that proves a pair's mark sits after the secondary, never inside.
    assert lost_after_first(tmp_path) == []
    t = run.trace()
    seqs = [c["launch"]["stream_seq"] for c in t["report"]["candidates"]]
    # The failing pair is launches 9 and 10; the assert text names nll, the primary (9), and 10 is left out by it.
    # The clean pair before it (7, 8) runs nll too, but its mark was enqueued behind an event recorded after the pair
    # and waited on (cuda.h: the event captures the stream's contents), so its landing proves 7 finished.
    assert seqs == [9], run.report
    assert "AMBIGUOUS" not in run.report, run.report
    part = run.launch_part()
    assert "the failing launch" in part
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in part and "launch #9 (#9 on its stream)" in part, part
    assert site("PRIMARY-SITE") in part
    # (#9 itself may be its stream's tail, its mark never placed when the next pair's launch met the fault: the
    # assert text names it then.)
    assert "launch #7" not in part and "without the event wait" not in run.report, part


def test_fault_in_a_pdl_primary_of_another_kernel_is_exact(tmp_path):
    # The earlier pairs' primaries are another kernel: the unproven primary 7 is not what the assert names, so the
    # failing pair's primary is the one launch left: named exactly, no other pair blamed.
    run = run_program([CASES, "fault", "primary-distinct"], cwd=tmp_path, env={"SIM_CUDA_PDL_LOG": pdl_log(tmp_path)})
    assert run.rc in (1, 3), run.err
    assert run.reports == 1, run.err
    assert lost_after_first(tmp_path) == []
    assert "AMBIGUOUS" not in run.report, run.report
    t = run.trace()
    assert [c["launch"]["stream_seq"] for c in t["report"]["candidates"]] == [9], run.report
    part = run.launch_part()
    assert "the failing launch" in part
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in part and "launch #9 (#9 on its stream)" in part
    assert site("PRIMARY-SITE") in part


def test_deferred_mark_is_flushed_before_capture(tmp_path):
    run = run_program([CASES, "capture"], cwd=tmp_path)
    assert run.rc == 0 and run.err == "", run.err + run.out  # the sim instantiates only a graph without memops
    assert "replayed: 5" in run.out


def test_two_contexts_only_the_faulting_one_is_a_candidate(tmp_path):
    run = run_program([CASES, "two-contexts"], cwd=tmp_path)
    assert run.rc == 1, run.err
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert "AMBIGUOUS" not in run.report, run.report
    assert "kernel illegal_address" in part and "launch_faulting(" in part
    assert "launch_other_context(" not in part and "sleep_us" not in part
    assert "of other CUDA contexts had unfinished launches" in run.report


def test_python_pdl_pairs_intact(tmp_path):
    run = run_python("pdl_pairs.py", 50, -1, cwd=tmp_path, env={"SIM_CUDA_PDL_LOG": pdl_log(tmp_path)})
    assert run.rc == 0 and run.err == "", run.err
    assert len(pdl_lines(tmp_path)) == 50 and lost_after_first(tmp_path) == []


def test_python_fault_in_pdl_secondary_named(tmp_path):
    run = run_python("pdl_pairs.py", 6, 3, cwd=tmp_path, env={"SIM_CUDA_PDL_LOG": pdl_log(tmp_path)})
    assert run.rc != 0
    assert run.reports == 1, run.err
    assert lost_after_first(tmp_path) == []
    part = run.launch_part()
    assert "AMBIGUOUS" not in run.report, run.report
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in part
    assert "launch #8 (#8 on its stream)" in part, part
    assert py_frame("pdl_pairs.py", "LAUNCH-SITE", "<module>") in part
