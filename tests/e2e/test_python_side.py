"""What cdsa adds to the program's own Python (python/cdsa/_hook.py, run by libcdsa.so): the note that ends the
program's traceback, and the rank and GPU in the report's header (docs/python.md, docs/multi-rank.md)."""
import re
import sys

import pytest

from conftest import SCRIPTS, marker_line, run_python

NOTE = re.compile(r"^cdsa(\[rank \d+\])?: the CUDA fault.*$", re.M)


def last_traceback(err):
    """The last traceback in ERR, from its 'Traceback' line to the end."""
    i = err.rfind("Traceback (most recent call last):")
    assert i >= 0, err
    return err[i:]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PEP 678 notes are 3.11+")
def test_uncaught_error_ends_with_the_launch_line(tmp_path):
    r = run_python("traceback_note.py", "uncaught", cwd=tmp_path)
    assert r.rc == 1 and r.reports == 1, r.err
    tb = last_traceback(r.err).rstrip().splitlines()
    assert tb[-2].startswith("simcuda.CudaError: CUDA error: cuMemcpyDtoH_v2 returned 710"), tb
    note = tb[-1]
    (trace,) = r.traces()
    # The launch's innermost frame outside site-packages and the standard library: simcuda.py's driver call.
    n, text = next((n, t.strip()) for n, t in enumerate((SCRIPTS / "simcuda.py").read_text().splitlines(), 1)
                   if "lib.cuLaunchKernel(" in t)
    assert note == (f"cdsa: the CUDA fault came from kernel nll_loss_forward_reduce_cuda_kernel_2d launched at "
                    f"simcuda.py:{n}: {text} (cdsa's report above; trace {trace.name})"), note
    assert len(NOTE.findall(r.err)) == 1


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PEP 678 notes are 3.11+")
def test_caught_error_carries_the_note_and_unrelated_errors_do_not(tmp_path):
    r = run_python("traceback_note.py", "caught", cwd=tmp_path)
    assert r.rc == 1 and r.reports == 1, r.err
    formatted = r.out.split("FORMATTED-BEGIN\n")[1].split("FORMATTED-END")[0]
    assert formatted.rstrip().splitlines()[-1].startswith("cdsa: the CUDA fault came from kernel nll_loss"), formatted
    tb = last_traceback(r.err)
    assert tb.rstrip().endswith("KeyError: 'unrelated'"), tb
    assert "cdsa" not in tb


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PEP 678 notes are 3.11+")
def test_a_program_that_traces_itself_still_gets_the_note_on_its_uncaught_error(tmp_path):
    r = run_python("traceback_note.py", "own-tracer", cwd=tmp_path)
    assert r.rc == 1 and r.reports == 1, r.err
    tb = last_traceback(r.err).rstrip().splitlines()
    assert tb[-1].startswith("cdsa: the CUDA fault came from kernel nll_loss"), tb


def test_without_a_fault_nothing_changes(tmp_path):
    with_cdsa = run_python("traceback_note.py", "no-fault", cwd=tmp_path)
    without = run_python("traceback_note.py", "no-fault", cwd=tmp_path, preload=False)
    assert with_cdsa.rc == without.rc == 1
    assert with_cdsa.err == without.err
    assert with_cdsa.traces() == []


def test_rank_set_by_the_program_names_the_report_and_the_trace(tmp_path):
    r = run_python("traceback_note.py", "rank-env", cwd=tmp_path)
    assert r.rc == 1 and r.reports == 1, r.err
    lines = r.report.splitlines()
    assert re.fullmatch(r"cdsa\[rank 5\]: rank 5 of 6, pid \d+ on \S+, GPU 0 cdsa simulated GPU \(PCI 0000:3B:00\.0\)",
                        lines[1]), lines[1]
    prefixed = [l for l in lines if l.startswith("cdsa")]
    assert prefixed and all(l.startswith("cdsa[rank 5]: ") for l in prefixed[1:]), prefixed
    (trace,) = r.traces()
    assert re.fullmatch(r"cdsa-.+-rank5-\d+\.json", trace.name), trace.name
    origin = r.trace()["report"]["origin"]
    assert (origin["rank"], origin["world_size"], origin["gpu_ordinal"], origin["gpu_name"],
            origin["gpu_pci_bus_id"]) == (5, 6, 0, "cdsa simulated GPU", "0000:3B:00.0")
    assert last_traceback(r.err).rstrip().splitlines()[-1].startswith("cdsa: the CUDA fault on rank 5 came from")


def test_without_a_rank_the_header_names_the_process_and_gpu(tmp_path):
    r = run_python("nll_loss.py", "10", cwd=tmp_path)
    header = r.report.splitlines()[1]
    assert re.fullmatch(r"cdsa: pid \d+ on \S+, GPU 0 cdsa simulated GPU \(PCI 0000:3B:00\.0\)", header), header
    (trace,) = r.traces()
    assert "rank" not in trace.name
