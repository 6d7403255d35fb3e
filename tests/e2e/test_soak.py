"""Soak: 8 threads x 100k launches on their own streams, forks and exec'd children meanwhile, and 90% through
one thread's kernel asserts while the others keep launching. No crash, no hang, the failing launch named. Runs in
the normal, the ASan+UBSan and the TSan builds (tools/test.sh: label soak)."""
from conftest import PROGRAMS, run_program

PROGRAM = PROGRAMS / "e2e_report_first"


def test_soak_names_the_failing_launch(tmp_path):
    # All of it under TSan too: about 15 s there alone, 35 s on two busy cores.
    run = run_program([PROGRAM, "soak", 8, 100000], cwd=tmp_path, timeout=300)
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
