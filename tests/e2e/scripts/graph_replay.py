"""A kernel captured into a graph faults on a later replay, after its input changed: replayed once, its input
changed, replayed again.

graph_replay.py: captured with cuStreamBeginCapture_v2 (the graph is made at the end of the capture).
graph_replay.py to-graph: captured into an existing graph (cuStreamBeginCaptureToGraph, as JAX/XLA, cuda.core and
PyTorch's conditional nodes do)."""
import ctypes
import sys

import simcuda as cu

TO_GRAPH = sys.argv[1:2] == ["to-graph"]
lib = cu.lib
ctx, mod = cu.init()
index_select = cu.function(mod, "indexSelectSmallIndex")
s = cu.stream()
out = cu.alloc(4 * 64)
ids = cu.to_device([1, 2, 3, 4], ctypes.c_int64)


def capture():
    if TO_GRAPH:
        graph = cu.graph_create()
        cu.begin_capture_to_graph(s, graph)
    else:
        cu.check("cuStreamBeginCapture_v2", lib.cuStreamBeginCapture_v2(s, 0))
    cu.launch(index_select, [ctypes.c_uint64(out), ctypes.c_uint64(ids), ctypes.c_int32(4), ctypes.c_int32(1000)], stream=s)  # CAPTURE-SITE
    captured = cu.end_capture(s)
    if TO_GRAPH:
        assert captured.value == graph.value  # the same graph, now holding the kernel
    return cu.instantiate(captured)


exe = capture()
cu.graph_launch(exe, s)  # FIRST-REPLAY
cu.stream_synchronize(s)
print("first replay ok", flush=True)
bad = (ctypes.c_int64 * 4)(1, 2, 1000, 4)
cu.check("cuMemcpyHtoD_v2", lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ids), bad, ctypes.c_size_t(32)))
cu.graph_launch(exe, s)  # LAUNCH-SITE
cu.stream_synchronize(s)  # SURFACE-SITE
