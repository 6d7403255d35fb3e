"""Case 8: float64 labels from NumPy: an ordinary dtype error raised on the host, no device assert, no report."""
import numpy as np
import torch
import torch.nn as nn

model = nn.Linear(64, 10).cuda()
labels = torch.from_numpy(np.array([3, 7, 9, 1], dtype=np.float64)).cuda()
try:
    loss = nn.CrossEntropyLoss()(model(torch.randn(4, 64).cuda()), labels)
    print("loss", loss.item())
except RuntimeError as e:
    print("dtype error:", str(e).splitlines()[0])
torch.cuda.synchronize()
print("context alive", torch.ones(1, device="cuda").item())
