"""Case 18: a DataLoader(num_workers=2) training epoch (the workers inherit LD_PRELOAD), then case 1."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Linear(64, 10).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
data = TensorDataset(torch.randn(256, 64), torch.randint(0, 10, (256,)))
for xb, yb in DataLoader(data, batch_size=32, num_workers=2):
    loss = criterion(model(xb.cuda()), yb.cuda())
    opt.zero_grad()
    loss.backward()
    opt.step()
print("epoch ok, workers fine, loss", loss.item(), flush=True)
loss = criterion(model(torch.randn(4, 64).cuda()), torch.tensor([3, 7, 10, 1]).cuda())  # LOSS-LINE
print("loss", loss.item())
