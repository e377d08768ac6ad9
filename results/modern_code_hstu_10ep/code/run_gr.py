"""Run meta-recsys/generative-recommenders' research trainer (train_fn, unmodified but for one
line: trainer/train.py `device = rank` -> the CPU) on seqbench's ML-1M-3416 in the code's CSV
form, one process on the CPU, one torch thread; one evaluation pass an epoch scores each
user's validation item (valid.csv) and test item (test.csv, user ids + 1,000,000).

usage: python run_gr.py SEED EPOCHS DATA_DIR OUT_DIR [GIN]
Writes OUT_DIR/epochs.jsonl (each epoch's validation and test means, CPU seconds) and
OUT_DIR/ranks_epN.json (each user's test and validation rank at epoch N; 2501 = beyond the
code's top 2,500).
"""

import json
import os
import random
import resource
import sys
import time

import numpy as np
import torch

SEED, EPOCHS, DATA, OUT = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
GIN = sys.argv[5] if len(sys.argv) > 5 else "configs/ml-1m/hstu-sampled-softmax-n128-final.gin"
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.abspath(OUT)
DATA = os.path.abspath(DATA)
GIN = os.path.join(HERE, GIN)
SHIFT = 1_000_000

torch.set_num_threads(1)
random.seed(SEED)
np.random.seed(SEED)
torch.manual_seed(SEED)
sys.path.insert(0, HERE)

import fbgemm_gpu  # noqa: E402,F401
import generative_recommenders.research.trainer.train as T  # noqa: E402
import gin  # noqa: E402
import torch.distributed as dist  # noqa: E402
from generative_recommenders.research.data.dataset import DatasetV2  # noqa: E402
from generative_recommenders.research.data.reco_dataset import RecoDataset  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import ConcatDataset, DataLoader  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402


def setup(rank, world_size, master_port):
    """train.py's setup with gloo (no NCCL on the CPU)."""
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(master_port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


class DDP(DistributedDataParallel):
    """DDP over one CPU process: no device_ids."""

    def __init__(self, module, device_ids=None, **kw):
        super().__init__(module, **kw)


def get_reco_dataset(dataset_name, max_sequence_length, chronological,
                     positional_sampling_ratio=1.0):
    """reco_dataset.get_reco_dataset's branch for a CSV of ids 1..N (as amzn-books, no
    shift): train on valid.csv less each row's last item, evaluate valid.csv's last item
    and, after it, test.csv's."""
    valid, test = os.path.join(DATA, "valid.csv"), os.path.join(DATA, "test.csv")
    pad = max_sequence_length + 1
    train = DatasetV2(ratings_file=valid, padding_length=pad, ignore_last_n=1,
                      chronological=chronological, sample_ratio=positional_sampling_ratio)
    evals = [DatasetV2(ratings_file=p, padding_length=pad, ignore_last_n=0,
                       chronological=chronological, sample_ratio=1.0) for p in (valid, test)]
    n = max(max(eval(s)) for s in evals[1].ratings_frame.sequence_item_ids)
    return RecoDataset(max_sequence_length=max_sequence_length, num_unique_items=n,
                       max_item_id=n, all_item_ids=list(range(1, n + 1)),
                       train_dataset=train, eval_dataset=ConcatDataset(evals))


class Recording:
    """The evaluation loader, keeping the user ids of the rows it yields in this pass."""

    def __init__(self, loader):
        self.loader, self.ids = loader, []

    def __iter__(self):
        self.ids = []
        for row in self.loader:
            self.ids.append(row["user_id"].clone())
            yield row

    def __len__(self):
        return len(self.loader)


loaders = []


def create_data_loader(dataset, batch_size, world_size, rank, shuffle,
                       prefetch_factor=128, num_workers=None, drop_last=False):
    """data_loader.create_data_loader with no worker processes and the sampler's shuffle
    seeded with the run's seed (the code fixes it at 0: one batch order for every seed)."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=SEED, drop_last=drop_last) if shuffle else None
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=0, sampler=sampler)
    if loaders:  # the second loader train_fn makes is the evaluation one
        loader = Recording(loader)
    loaders.append(loader)
    return sampler, loader


cpu_mark = [time.process_time()]
epoch_no = [0]
_add = T.add_to_summary_writer


def add_to_summary_writer(writer, batch_id, metrics, prefix, world_size):
    """At each epoch's evaluation, split the per-row metrics by user id into the validation
    and the test half and record them (then the code's own logging)."""
    if prefix == "eval_epoch":
        ids = torch.cat(loaders[1].ids)
        test = ids >= SHIFT
        rank = torch.round(1.0 / metrics["mrr"].double()).long()
        rec = {"epoch": batch_id + 1, "n_valid": int((~test).sum()), "n_test": int(test.sum())}
        for half, m in (("valid", ~test), ("test", test)):
            rec[half] = {k: float(v[m].double().mean()) for k, v in metrics.items()
                         if v.shape == ids.shape}
        rec["cpu_s"] = round(time.process_time() - cpu_mark[0], 1)
        cpu_mark[0] = time.process_time()
        with open(os.path.join(OUT, "epochs.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")
        users = ids.tolist()
        ranks = {"valid": {}, "test": {}}
        for u, r in zip(users, rank.tolist(), strict=True):
            if u >= SHIFT:
                ranks["test"][u - SHIFT] = r
            else:
                ranks["valid"][u] = r
        with open(os.path.join(OUT, f"ranks_ep{batch_id + 1}.json"), "w") as f:
            json.dump(ranks, f)
        print(f"epoch {batch_id + 1}: valid NDCG@10 {rec['valid']['ndcg@10']:.4f} test NDCG@10 "
              f"{rec['test']['ndcg@10']:.4f} cpu {rec['cpu_s']}s", flush=True)
    _add(writer, batch_id, metrics, prefix, world_size)


def main():
    os.makedirs(OUT, exist_ok=True)
    open(os.path.join(OUT, "epochs.jsonl"), "w").close()
    T.setup = setup
    T.DDP = DDP
    T.get_reco_dataset = get_reco_dataset
    T.create_data_loader = create_data_loader
    T.add_to_summary_writer = add_to_summary_writer
    if os.environ.get("GR_NO_ANOMALY", "1") == "1":  # speed only
        torch.autograd.set_detect_anomaly = lambda *a, **k: None
    gin.parse_config_file(GIN)
    gin.bind_parameter("train_fn.num_epochs", EPOCHS)
    os.chdir(OUT)
    t0, w0 = time.process_time(), time.time()
    T.train_fn(0, 1, 12355 + SEED)
    with open(os.path.join(OUT, "done.json"), "w") as f:
        json.dump({"seed": SEED, "epochs": EPOCHS, "cpu_s": round(time.process_time() - t0, 1),
                   "wall_s": round(time.time() - w0, 1), "torch": torch.__version__,
                   "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}, f)


if __name__ == "__main__":
    main()
