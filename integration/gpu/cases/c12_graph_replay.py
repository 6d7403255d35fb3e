"""Case 12: a CUDA graph whose captured index op faults on replay after the index tensor is overwritten.
Usage: c12_graph_replay.py [reset]   (12b, reset: the graph and its exec are destroyed right after that replay)"""
import sys

import torch

torch.manual_seed(0)
x = torch.randn(1000, 8, device="cuda")
idx = torch.tensor([1, 2, 3], device="cuda")
out = torch.empty(3, 8, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm-up outside capture, as torch.cuda.graph requires
    out.copy_(x.index_select(0, idx))
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out.copy_(x.index_select(0, idx))  # CAPTURE-LINE
g.replay()
print("first replay ok", out.sum().item(), flush=True)
idx.fill_(1000)
g.replay()  # REPLAY-LINE
if sys.argv[1:2] == ["reset"]:
    try:
        g.reset()  # cudaGraphExecDestroy / cudaGraphDestroy while the replay may still run
    except RuntimeError as e:  # the destroy call may itself surface the fault
        print("reset:", e, flush=True)
print("second replay returned?", out.sum().item())  # the fault surfaces here (.item())
