"""Case 11 (torch.compile): a compiled function indexing out of bounds; Inductor's generated Triton kernel
carries the bounds assert."""
import torch


@torch.compile
def gather_rows(x, i):
    return x[i] * 2


x = torch.randn(1000, 16, device="cuda")
good = torch.tensor([1, 2, 3], device="cuda")
print("warm", gather_rows(x, good).sum().item(), flush=True)
bad = torch.tensor([1, 2, 1000], device="cuda")
y = gather_rows(x, bad)  # COMPILED-CALL
print("compiled call returned", flush=True)
print("sum", y.sum().item())
