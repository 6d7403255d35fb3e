"""Soak: 8 threads x 100k launches on their own streams, forks and exec'd children meanwhile, and 90% through
one thread's kernel asserts while the others keep launching. No crash, no hang, the failing launch named. Runs in
the normal, the ASan+UBSan and the TSan builds (tools/test.sh: label soak)."""
import os

from conftest import PROGRAMS, run_program

PROGRAM = PROGRAMS / "e2e_report_first"
TSAN = "tsan" in os.environ.get("E2E_PRELOAD_FIRST", "")


def test_soak_names_the_failing_launch(tmp_path):
    launches = 20000 if TSAN else 100000  # TSan runs a launch ~20x slower; the other builds take all of it
    run = run_program([PROGRAM, "soak", 8, launches], cwd=tmp_path, timeout=300)
    assert run.rc == 3, (run.rc, run.out, run.err[-3000:])
    assert "fault surfaced 1, 0 child failures" in run.out, run.out
    assert run.reports == 1, run.err[-3000:]
    part = run.launch_part()
    assert "the failing launch (the first launch on its stream" in part, part
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in part, part
    assert "soak_fault(" in part and "launch_bad_loss(" in part, part
    # Whichever thread's call first returns the sticky error surfaces it: the faulting thread's synchronize, or
    # another thread's next launch on its own stream (both are real orders; the verdict must not depend on it).
    assert "surfaced at cuStreamSynchronize" in run.report or "surfaced at cuLaunchKernel" in run.report, run.report
