"""Case 21: a small training loop (2-layer MLP, 200 steps), timed after warm-up; prints the best of REPS runs.
Usage: c21_mlp.py [REPS]"""
import sys
import time

import torch
import torch.nn as nn

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
x = torch.randn(128, 256, device="cuda")
y = torch.randint(0, 10, (128,), device="cuda")


def steps(n):
    for _ in range(n):
        opt.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return loss


steps(20)
best = float("inf")
for _ in range(reps):
    t0 = time.perf_counter()
    loss = steps(200)
    best = min(best, time.perf_counter() - t0)
print(f"elapsed_s {best:.6f} loss {loss.item():.4f}")
