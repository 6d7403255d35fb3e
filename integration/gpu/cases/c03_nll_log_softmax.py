"""Case 3: NLLLoss on log_softmax, label 10 of 10 classes."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(64, 10).cuda()
log_probs = F.log_softmax(model(torch.randn(4, 64).cuda()), dim=1)
labels = torch.tensor([3, 7, 10, 1]).cuda()
loss = nn.NLLLoss()(log_probs, labels)  # LOSS-LINE
print("loss call returned", flush=True)
print("loss", loss.item())
