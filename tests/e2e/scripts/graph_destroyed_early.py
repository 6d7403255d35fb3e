"""graph_replay.py with its CUgraph destroyed as soon as it is instantiated, as many programs do: when the
replay faults, only the exec still names the captured kernel node."""
import os
import runpy

import simcuda as cu

instantiate = cu.lib.cuGraphInstantiateWithFlags


def instantiate_then_destroy(exe, graph, flags):
    r = instantiate(exe, graph, flags)
    if r == 0:
        cu.check("cuGraphDestroy", cu.lib.cuGraphDestroy(graph))
    return r


cu.lib.cuGraphInstantiateWithFlags = instantiate_then_destroy
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "graph_replay.py"), run_name="__main__")
