"""Case 6: catch the device-side assert, then allocate: the context is dead, the second call fails too;
cdsa must print one report, not two."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(64, 10).cuda()
try:
    loss = nn.CrossEntropyLoss()(model(torch.randn(4, 64).cuda()), torch.tensor([3, 7, 10, 1]).cuda())  # LOSS-LINE
    print("loss", loss.item())
except RuntimeError as e:
    print("caught:", str(e).splitlines()[0], flush=True)
try:
    torch.zeros(1, device="cuda")
    print("zeros worked")
except RuntimeError as e:
    print("second failed:", str(e).splitlines()[0])
