"""A launcher like torchrun, small: starts one process per entry of argv[1:] (a rank_job.py mode each) with RANK,
WORLD_SIZE and LOCAL_RANK set, in this order: the "collective" ranks and waits for them (so their fault comes
first by the clock), then the others; when a rank fails it kills those still running (SIGTERM), as torchrun's
agent does, prints its own failure line and exits 1."""
import os
import signal
import subprocess
import sys
import time

modes = sys.argv[1:]
here = os.path.dirname(os.path.abspath(__file__))


def start(rank):
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(len(modes)))
    return subprocess.Popen([sys.executable, os.path.join(here, "rank_job.py"), modes[rank]], env=env)


procs = {}
for rank in [r for r, m in enumerate(modes) if m == "collective"]:
    procs[rank] = start(rank)
    procs[rank].wait()
for rank in [r for r, m in enumerate(modes) if m == "hang"]:
    procs[rank] = start(rank)
time.sleep(0.2)  # the hanging ranks are up
for rank in [r for r, m in enumerate(modes) if m not in ("collective", "hang")]:
    procs[rank] = start(rank)
    procs[rank].wait()
failed = [r for r, p in procs.items() if p.poll() not in (None, 0)]
for p in procs.values():
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        p.wait()
print(f"launcher: ranks {failed} failed" if failed else "launcher: all ranks done", file=sys.stderr, flush=True)
sys.exit(1 if failed else 0)
