"""Case 9: the bad loss, then 1,000 other ops before .item(): still the loss line."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(64, 10).cuda()
loss = nn.CrossEntropyLoss()(model(torch.randn(4, 64).cuda()), torch.tensor([3, 7, 10, 1]).cuda())  # LOSS-LINE
x = torch.randn(256, device="cuda")
for _ in range(1000):
    x = x * 1.0001 + 0.5
print("1000 ops queued", flush=True)
print("loss", loss.item())
