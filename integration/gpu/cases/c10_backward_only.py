"""Case 10: the forward is fine, only the backward kernel faults: index_select's backward (index_add) reads an
index that was corrupted after the forward (through .data, which autograd's version counter does not see).
The backward kernel is launched by autograd's device thread, which runs no Python code."""
import torch

torch.manual_seed(0)
w = torch.randn(100, 8, device="cuda", requires_grad=True)
idx = torch.tensor([1, 2, 3], device="cuda")
y = w.index_select(0, idx)  # FORWARD-LINE
idx.data[1] = 1000
print("forward ok", flush=True)
y.sum().backward()  # BACKWARD-LINE
print("grad", w.grad.sum().item())  # the fault surfaces here (.item())
