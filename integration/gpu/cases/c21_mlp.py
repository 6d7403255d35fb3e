"""Case 21b/21c: training steps, timed after warm-up (events would hide host overhead: wall clock around steps
ending in a synchronize). Usage: c21_mlp.py WORKLOAD [REPS]   WORKLOAD: gpu | launch | both
  gpu     GPU-bound: a bf16 MLP 8192 x 4096 (3 layers), 30 steps with AdamW: ~2.5 TFLOP per step, so per-launch
          overhead is a small share; prints "elapsed_s_gpu <median of REPS>"
  launch  launch-bound: a 2-layer MLP (256-512-10, batch 128), 200 steps with Adam; prints "elapsed_s_launch ..."
The suite runs bare and cdsa processes alternately (A B A B ...) and reports the ratios with their spread."""
import statistics
import sys
import time

import torch
import torch.nn as nn

workload = sys.argv[1] if len(sys.argv) > 1 else "both"
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
torch.manual_seed(0)


def timed(step, n, warm):
    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), loss


if workload in ("gpu", "both"):
    d = 4096
    big = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU(), nn.Linear(d, d)).cuda()
    opt_b = torch.optim.AdamW(big.parameters(), lr=1e-4, fused=True)
    xb = torch.randn(8192, d, device="cuda")
    yb = torch.randn(8192, d, device="cuda")

    def big_step():
        opt_b.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.mse_loss(big(xb).float(), yb)
        loss.backward()
        opt_b.step()
        return loss

    t, loss = timed(big_step, 30, 3)
    print(f"elapsed_s_gpu {t:.6f} loss {loss.item():.4f}", flush=True)
    del big, opt_b, xb, yb

if workload in ("launch", "both"):
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    x = torch.randn(128, 256, device="cuda")
    y = torch.randint(0, 10, (128,), device="cuda")

    def small_step():
        opt.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        opt.step()
        return loss

    t, loss = timed(small_step, 200, 20)
    print(f"elapsed_s_launch {t:.6f} loss {loss.item():.4f}", flush=True)
