"""graph_replay.py with its handles destroyed early, as many programs do; the replay still faults.

graph_destroyed_early.py: the CUgraph is destroyed as soon as it is instantiated: only the exec still names the
captured kernel node.
graph_destroyed_early.py exec-after-launch: the exec, too, is destroyed right after the faulting replay is launched
(the driver frees it when that replay is done): nothing names the capture any more, and the report, at that
destroy call or at the next synchronize, still lists its node."""
import os
import runpy
import sys

import simcuda as cu

instantiate = cu.lib.cuGraphInstantiateWithFlags
graph_launch = cu.lib.cuGraphLaunch
launches = 0


def instantiate_then_destroy(exe, graph, flags):
    r = instantiate(exe, graph, flags)
    if r == 0:
        cu.check("cuGraphDestroy", cu.lib.cuGraphDestroy(graph))
    return r


def launch_then_destroy(exe, stream):
    global launches
    r = graph_launch(exe, stream)
    launches += 1
    if launches == 2:  # the faulting replay: its exec goes at once (the fault may surface right here)
        print("exec destroyed:", cu.lib.cuGraphExecDestroy(exe), flush=True)
    return r


cu.lib.cuGraphInstantiateWithFlags = instantiate_then_destroy
if sys.argv[1:2] == ["exec-after-launch"]:
    cu.lib.cuGraphLaunch = launch_then_destroy
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "graph_replay.py"), run_name="__main__")
