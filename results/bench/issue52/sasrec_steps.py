"""CPU milliseconds per SASRec training step (its Beauty defaults: packed batches) as
`bench/bench_speed.py` steps it: 5 warm-up steps, then 5 blocks of 30; prints the median block
and the blocks. Run from a tree (`PYTHONPATH=TREE python sasrec_steps.py DATA_DIR`) to compare
two trees alternately in one run of measurements."""

import statistics
import sys
import time

import torch

from seqbench.data.dataset import load_dataset
from seqbench.models.base import get_model, resolve_config

try:
    from seqbench.training.engine import backward_batch
except ImportError:  # before issue 52: the engine was training/micro.py
    from seqbench.training.micro import backward_batch

torch.set_num_threads(1)
data = load_dataset("beauty", sys.argv[1] if len(sys.argv) > 1 else "data")
cls = get_model("sasrec")
torch.manual_seed(0)
model = cls(resolve_config(cls, "beauty", {}), data).train()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
batches = list(model.train_batches(data, torch.Generator().manual_seed(0)))[:155]


def step(batch: dict) -> None:
    opt.zero_grad(set_to_none=True)
    backward_batch(model, batch)
    opt.step()


for b in batches[:5]:
    step(b)
blocks = []
for k in range(5):
    t = time.process_time()
    for b in batches[5 + 30 * k : 35 + 30 * k]:
        step(b)
    blocks.append((time.process_time() - t) / 30 * 1000)
print(f"{statistics.median(blocks):.3f}", " ".join(f"{x:.2f}" for x in blocks))
