"""Gather run_gr.py's runs (runs/code-sSEED) into the `agreement` table's file of external runs
(`seqbench.report.external`): each seed's test metrics at its best validation NDCG@10 epoch,
every epoch's validation and test means, budgets and how the code was run.

usage: python code_runs.py OUT_JSON RUN_DIR...
"""

import json
import os
import sys

NAMES = {"ndcg@10": "NDCG@10", "hr@10": "HR@10", "ndcg@50": "NDCG@50", "hr@50": "HR@50",
         "mrr": "MRR", "hr@1": "HR@1", "ndcg@1": "NDCG@1", "hr@100": "HR@100",
         "ndcg@100": "NDCG@100"}


def named(means: dict) -> dict:
    """The code's metric means under seqbench's names (those it has)."""
    return {NAMES[k]: v for k, v in means.items() if k in NAMES}


def read_json(path: str):
    with open(path) as f:
        return json.load(f)


def seed_record(run: str) -> tuple[int, dict, dict]:
    """A run's seed, its record (test at the best validation NDCG@10 epoch) and its test ranks."""
    done = read_json(os.path.join(run, "done.json"))
    with open(os.path.join(run, "epochs.jsonl")) as f:
        epochs = [json.loads(line) for line in f]
    assert len(epochs) == done["epochs"]
    assert all(e["n_valid"] == e["n_test"] == 6040 for e in epochs)
    best = max(epochs, key=lambda e: e["valid"]["ndcg@10"])  # the first of equals, as max
    ranks = read_json(os.path.join(run, f"ranks_ep{best['epoch']}.json"))
    return done["seed"], {
        "test": named(best["test"]),
        "valid": named(best["valid"]),
        "best_epoch": best["epoch"],
        "epochs": done["epochs"],
        "still_improving": True,
        "by_epoch": [{"epoch": e["epoch"], "cpu_s": e["cpu_s"], "valid": named(e["valid"]),
                      "test": named(e["test"])} for e in epochs],
        "cpu_s": done["cpu_s"], "wall_s": done["wall_s"], "max_rss_mb": done["max_rss_mb"],
        "torch": done["torch"],
    }, ranks["test"]


def main(out: str, runs: list[str]) -> None:
    records = sorted((str(s), r, ranks) for s, r, ranks in map(seed_record, runs))
    seeds = {s: r for s, r, _ in records}
    doc = {"HSTU": {
        "dataset": "ml-1m-5core",
        "code": (
            "github meta-recsys/generative-recommenders @"
            " db1bf8f2e8f6a92a738dafd52a245eafb25a222b, generative_recommenders/research/"
            " (trainer/train.py:train_fn), run outside this repository"
        ),
        "environment": (
            "torch 2.13.0+cpu, fbgemm_gpu_cpu 1.8.0, gin-config, absl-py, tensorboard; one torch"
            " thread, nice"
        ),
        "patched": (
            "one line of its files: trainer/train.py:258 `device = rank` -> `device ="
            " os.environ.get(\"GR_DEVICE\", rank)` (GR_DEVICE=cpu); only research/ and configs/"
            " extracted, with empty __init__.py files for the package folders. Everything else in"
            " run_gr.py, which calls train_fn(rank=0, world_size=1) in place of main.py's mp.spawn"
            " over CUDA devices and replaces, in the train module's namespace: setup (gloo, not"
            " nccl), DDP (no device_ids), get_reco_dataset (the DATA folder's valid.csv for"
            " training and evaluation, ids 1..N as the amzn-books branch; the evaluation set is"
            " valid.csv's rows then test.csv's, whose user ids are + 1,000,000),"
            " create_data_loader (no workers; the DistributedSampler's shuffle seed = the run's"
            " seed, the code fixes it at 0), add_to_summary_writer (at each epoch's evaluation"
            " the per-row metrics are split by user id into the validation and test halves and"
            " written out, then the code's own logging); autograd anomaly mode off (speed only);"
            " torch, numpy and random seeded with the seed (train_fn seeds only random, with 42)."
            " Checked: seed 0's first epoch gives the same validation and test NDCG@10 as the"
            " earlier 3-epoch wrapper (results/modern_code_hstu/code_runs.json) to 2e-10."
        ),
        "data": (
            "make_data.py writes seqbench's prepared ml-1m-5core (ML-1M-3416) as the code's"
            " sasrec_format.csv: valid.csv without each user's test item (the code trains on all"
            " but the row's last item, every position a target, and evaluates the last ="
            " seqbench's validation item), test.csv whole (evaluates the test item with the"
            " validation item in the input); ratings and timestamps 0 (the file has none)"
        ),
        "settings": (
            "configs/ml-1m/hstu-sampled-softmax-n128-final.gin unchanged but for num_epochs 10:"
            " 2 blocks, 1 head, dqk = dv = 50, item_embedding_dim 50, max_sequence_length 200,"
            " dropout 0.2, linear_dropout 0.2, SampledSoftmaxLoss with 128 local (uniform)"
            " negatives, temperature 0.05, L2-normalised item and user embeddings, AdamW lr 1e-3"
            " betas (0.9, 0.98) weight decay 0, batch 128"
        ),
        "command": (
            "GR_DEVICE=cpu nice python run_gr.py SEED 10 data/ml-1m-5core runs/code-sSEED (data:"
            " python make_data.py SEQBENCH_DATA/ml-1m-5core data/ml-1m-5core; then python"
            " code_runs.py code_runs.json runs/code-s0 runs/code-s1 runs/code-s2)"
        ),
        "metric_note": (
            "means over the 6,040 users; full ranking over items 1..3416 excluding the items of the"
            " input window (at most 200; seqbench's cbit); MRR over the code's top 2,500 (ranks"
            " beyond count as 2,501); the code has no epoch selection: here the epoch with the"
            " best validation NDCG@10 is reported, as seqbench selects; still_improving: the"
            " code has no early stopping and its 101-epoch config was cut at 10"
        ),
        "seeds": seeds,
    }}
    with open(out + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(out + ".tmp", out)
    ranks = out.replace(".json", "_ranks.json")
    with open(ranks + ".tmp", "w") as f:
        json.dump({"note": "each user's rank of the test item at the seed's best validation"
                   " epoch, as the code ranks (2501 = beyond its top 2,500), by seed",
                   "ranks": {s: ranks for s, _, ranks in records}}, f)
    os.replace(ranks + ".tmp", ranks)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
