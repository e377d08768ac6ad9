"""Which of seqbench's files and functions one training step of MODEL runs: the epoch's
batches built (the feed), one batch's pieces planned, its loss, backward and optimiser step, on
tiny synthetic data at the model's defaults. Prints each file's length and the lines of the
functions it ran (whole bodies), then the totals: `python trace_step.py sasrec`."""

import inspect
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.base import get_model, resolve_config
from seqbench.runs.store import RunFolder
from seqbench.training.context import RunContext
from seqbench.training.feed import EpochFeed
from seqbench.training.trainer import Trainer

seen: dict[str, set[CodeType]] = defaultdict(set)


def record(frame: FrameType, event: str, arg: Any) -> None:
    if event == "call" and "/seqbench/" in frame.f_code.co_filename:
        seen[frame.f_code.co_filename].add(frame.f_code)


def main(name: str) -> None:
    inter, items = generate(n_users=60, n_items=40, min_len=5, max_len=12, seed=3)
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "trace"})
    cls = get_model(name)
    sets = {"epochs": "1", "max_len": "12", "batch_size": "32"}
    torch.manual_seed(0)
    model = cls(resolve_config(cls, "synthetic", sets), data)
    with tempfile.TemporaryDirectory() as tmp:
        folder = RunFolder(Path(tmp))
        trainer = Trainer(model, data, get_protocol("seqbench"), 0, folder, RunContext())
        opt = torch.optim.Adam(model.parameters())
        threading.setprofile(record)
        sys.setprofile(record)
        feed = EpochFeed(model, data, torch.Generator().manual_seed(0), trainer.device)
        feed.steps()
        trainer.step(next(iter(feed)), opt, None)
        sys.setprofile(None)
        threading.setprofile(None)
        feed.close()
    files = lines = 0
    for path in sorted(seen):
        ran = sum(len(inspect.getsourcelines(code)[0]) for code in seen[path])
        n = len(Path(path).read_text().splitlines())
        files, lines = files + n, lines + ran
        where = path.split("/seqbench/")[-1]
        print(f"{where:34s} {n:4d} lines, {len(seen[path]):2d} functions: {ran:4d}")
    print(f"{len(seen)} files, {files} lines; the functions run: {lines} lines")


if __name__ == "__main__":
    main(sys.argv[1])
