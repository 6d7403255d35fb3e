"""Cases 1 and 2: the seed's CrossEntropyLoss on a Linear(64, 10), labels [3, 7, LABEL, 1] (10 or -1),
surfaced at loss.item() two lines later. Usage: c01_cross_entropy.py LABEL"""
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
label = int(sys.argv[1]) if len(sys.argv) > 1 else 10
model = nn.Linear(64, 10).cuda()
criterion = nn.CrossEntropyLoss()
logits = model(torch.randn(4, 64).cuda())
labels = torch.tensor([3, 7, label, 1]).cuda()
loss = criterion(logits, labels)  # LOSS-LINE
print("loss call returned", flush=True)
print("loss", loss.item())  # SURFACE-LINE
