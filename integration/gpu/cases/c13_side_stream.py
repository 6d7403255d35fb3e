"""Case 13: the bad loss on a side stream while the default stream is busy with a long kernel."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
logits = torch.randn(4, 10, device="cuda")
labels = torch.tensor([3, 7, 10, 1], device="cuda")
torch.cuda.synchronize()
side = torch.cuda.Stream()
torch.cuda._sleep(int(1e9))  # the default stream spins for a while
with torch.cuda.stream(side):
    loss = F.cross_entropy(logits, labels)  # SIDE-LOSS-LINE
print("side-stream loss returned", flush=True)
print("loss", loss.item())  # the fault surfaces here (.item())
