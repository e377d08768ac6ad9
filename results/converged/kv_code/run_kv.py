"""Run antklen/sasrec-bert4rec-recsys23 (SASRec, full CE: src/configs/SASRec.yaml with
run_final.sh's dataset.max_length=200) on seqbench's ML-1M-3416 (make_data.py writes it in the
code's 'user item' format), on the CPU, one thread.

The code's own datasets.py, models.py and modules.py are used unmodified; what PyTorch
Lightning 1.6.5 did around them (Trainer.fit with EarlyStopping(val_ndcg, max, patience 10),
ModelCheckpoint(save_top_k=1, val_ndcg, max), max_epochs 100, then the best weights predicted
top-100 with seen items filtered) is written out below, as run.py configures it.

usage: python run_kv.py SEED OUT_JSON [MAX_EPOCHS]

Resumable: at each epoch's end the state (weights, optimiser, best weights, early-stopping
counters, the torch, numpy and random generators) goes to OUT_JSON.state.pt; a rerun with the
same arguments continues from there (the next epoch's shuffle is the one it would have drawn).
"""

import json
import os
import random
import resource
import sys
import time
import types

import numpy as np
import torch
from torch import nn

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "src")
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "ml-1m-3416.txt")
MAIN = __name__ == "__main__"  # imported (same_weights.py): the code's modules only
SEED, OUT = (int(sys.argv[1]), sys.argv[2]) if MAIN else (0, "")
MAX_EPOCHS = int(sys.argv[3]) if MAIN and len(sys.argv) > 3 else 100
PATIENCE, MAX_LEN, BATCH, TEST_BATCH, TOP_K = 10, 200, 128, 256, 100

torch.set_num_threads(1)


class LightningModule(nn.Module):
    """Stands in for pl.LightningModule: `log` keeps the value for the epoch's weighted mean."""

    def log(self, name, value, **kw):
        self.logged.setdefault(name, []).append((float(value), self.batch_size))


pl = types.ModuleType("pytorch_lightning")
pl.LightningModule = LightningModule
sys.modules["pytorch_lightning"] = pl
tf = types.ModuleType("transformers")  # models.py imports them for BERT4Rec / GPT4Rec only
for name in ("BertConfig", "BertModel", "GPT2Config", "GPT2Model"):
    setattr(tf, name, None)
sys.modules["transformers"] = tf
sys.path.insert(0, SRC)

import pandas as pd  # noqa: E402
from datasets import CausalLMDataset, CausalLMPredictionDataset, PaddingCollateFn  # noqa: E402
from models import SASRec  # noqa: E402
from modules import SeqRec  # noqa: E402
from preprocess import add_time_idx  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

random.seed(SEED)
np.random.seed(SEED)
torch.manual_seed(SEED)


def prepare_data():
    """run.py's prepare_data (SASRec: no id shift; sort=False: the file's order)."""
    data = pd.read_csv(DATA, sep=" ", header=None, names=["user_id", "item_id"])
    data = add_time_idx(data, sort=False)
    train = data[data.time_idx_reversed >= 2]
    validation_full = data[data.time_idx_reversed >= 1]
    test = data[data.time_idx_reversed == 0]
    return train, validation_full, test, data.item_id.max()


def validate(module, loader):
    """The epoch's val_ndcg as Lightning reduces a logged value: the mean over batches
    weighted by each batch's size (here, a mean over users)."""
    module.eval()
    module.logged = {}
    with torch.no_grad():
        for i, batch in enumerate(loader):
            module.batch_size = len(batch["target"])
            module.validation_step(batch, i)
    out = {}
    for name, vals in module.logged.items():
        n = sum(b for _, b in vals)
        out[name] = sum(v * b for v, b in vals) / n
    return out


def test_ranks(module, data, test):
    """run.py's predict + evaluate: top-100 of the best weights with the whole history
    filtered; each user's rank of the test item (0 = not in the top 100)."""
    ds = CausalLMPredictionDataset(data, max_length=MAX_LEN)
    loader = DataLoader(ds, batch_size=TEST_BATCH, shuffle=False, collate_fn=PaddingCollateFn())
    module.eval()
    module.predict_top_k = TOP_K
    target = test.set_index("user_id")["item_id"].to_dict()
    ranks = {}
    with torch.no_grad():
        for i, batch in enumerate(loader):
            out = module.predict_step(batch, i)
            for u, preds in zip(out["user_ids"], out["preds"], strict=True):
                hit = np.flatnonzero(preds == target[int(u)])
                ranks[int(u)] = int(hit[0]) + 1 if len(hit) else 0
    return ranks


def metrics(ranks):
    """HR@k and NDCG@k (one relevant item) as means over users."""
    r = np.array(list(ranks.values()))
    out = {}
    for k in (1, 5, 10, 20, 50, 100):
        hit = (r >= 1) & (r <= k)
        out[f"HR@{k}"] = float(hit.mean())
        out[f"NDCG@{k}"] = float(np.where(hit, 1 / np.log2(np.maximum(r, 1) + 1), 0).mean())
    return out


def make_module(item_count):
    """The code's SASRec (SASRec.yaml's model_params, max length 200) in its SeqRec module."""
    model = SASRec(item_num=item_count, add_head=True, maxlen=MAX_LEN, hidden_units=64,
                   num_blocks=2, num_heads=1, dropout_rate=0.1)
    return SeqRec(model, lr=0.001, predict_top_k=10, filter_seen=True)


def save_state(path, module, opt, record, best, best_epoch, wait, best_state, epoch):
    """The run after `epoch`, whole or not at all (temp file, then rename)."""
    st = {"module": module.state_dict(), "opt": opt.state_dict(), "record": record,
          "best": best, "best_epoch": best_epoch, "wait": wait, "best_state": best_state,
          "epoch": epoch, "torch_rng": torch.get_rng_state(), "np_rng": np.random.get_state(),
          "py_rng": random.getstate()}
    torch.save(st, path + ".tmp")
    os.replace(path + ".tmp", path)


def main():
    t0, wall0 = time.process_time(), time.time()
    train, validation_full, test, item_count = prepare_data()
    train_ds = CausalLMDataset(train, max_length=MAX_LEN, full_negative_sampling=False)
    eval_ds = CausalLMPredictionDataset(validation_full, max_length=MAX_LEN, validation_mode=True)
    collate = PaddingCollateFn()
    train_loader = DataLoader(train_ds, batch_size=BATCH, shuffle=True, collate_fn=collate)
    eval_loader = DataLoader(eval_ds, batch_size=TEST_BATCH, shuffle=False, collate_fn=collate)
    module = make_module(item_count)
    opt = module.configure_optimizers()
    record = {"seed": SEED, "valid_by_epoch": [], "users": len(eval_ds)}
    best, best_epoch, wait, best_state, start = -float("inf"), 0, 0, None, 1
    state_path = OUT + ".state.pt"
    if os.path.exists(state_path):
        st = torch.load(state_path, weights_only=False)
        module.load_state_dict(st["module"])
        opt.load_state_dict(st["opt"])
        record, best, best_epoch, wait, best_state = (
            st["record"], st["best"], st["best_epoch"], st["wait"], st["best_state"])
        torch.set_rng_state(st["torch_rng"])
        np.random.set_state(st["np_rng"])
        random.setstate(st["py_rng"])
        start = st["epoch"] + 1
        record.setdefault("resumed_at", []).append(start)
        print(f"resuming at epoch {start}", flush=True)
    epoch = start - 1
    for epoch in range(start, MAX_EPOCHS + 1):
        if wait >= PATIENCE:
            epoch -= 1
            break
        module.train()
        losses, epoch_cpu = [], time.process_time()
        for i, batch in enumerate(train_loader):
            loss = module.training_step(batch, i)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        val = validate(module, eval_loader)
        record["valid_by_epoch"].append(
            {"epoch": epoch, "loss": float(np.mean(losses)), "NDCG@10": val["val_ndcg"],
             "HR@10": val["val_hit_rate"], "MRR@10": val["val_mrr"],
             "cpu_s": round(time.process_time() - epoch_cpu, 1)})
        print(f"epoch {epoch} loss {np.mean(losses):.4f} val_ndcg {val['val_ndcg']:.4f} "
              f"cpu {time.process_time() - t0:.0f}s", flush=True)
        if val["val_ndcg"] > best:  # EarlyStopping / ModelCheckpoint: strictly better
            best, best_epoch, wait = val["val_ndcg"], epoch, 0
            best_state = {k: v.clone() for k, v in module.state_dict().items()}
        else:
            wait += 1
        save_state(state_path, module, opt, record, best, best_epoch, wait, best_state, epoch)
        if wait >= PATIENCE:
            break
    module.load_state_dict(best_state)
    ranks = test_ranks(module, validation_full, test)
    record.update(
        epochs=epoch, best_epoch=best_epoch, stopped_early=wait >= PATIENCE,
        still_improving=wait < PATIENCE and epoch - best_epoch < PATIENCE,
        test=metrics(ranks), test_rank_by_user=ranks,
        cpu_s_epochs=round(sum(e["cpu_s"] for e in record["valid_by_epoch"]), 1),
        cpu_s_this_sitting=round(time.process_time() - t0, 1),
        wall_s_this_sitting=round(time.time() - wall0, 1),
        max_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        torch=torch.__version__)
    tmp = OUT + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, OUT)
    print("test", json.dumps(record["test"]))


if __name__ == "__main__":
    main()
