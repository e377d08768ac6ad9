"""Gather run_kv.py's per-seed records into the `agreement` table's file of external runs
(`seqbench.report.external`): test metrics per seed, early stopping, budgets and how they ran.

usage: python code_runs.py OUT_JSON RUN_JSON...
"""

import json
import os
import sys

CODE = (
    "github antklen/sasrec-bert4rec-recsys23 @ 29c272e (src/datasets.py, models.py,"
    " modules.py, preprocess.py unmodified), run outside this repository"
)


def main(out: str, paths: list[str]) -> None:
    seeds, per_user = {}, {}
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        seeds[str(r["seed"])] = {
            "test": r["test"],
            "best_epoch": r["best_epoch"],
            "epochs": r["epochs"],
            "stopped_early": r["stopped_early"],
            "still_improving": r["still_improving"],
            "valid_by_epoch": r["valid_by_epoch"],
            "cpu_s_epochs": r["cpu_s_epochs"],
            "resumed_at": r.get("resumed_at", []),
            "torch": r["torch"],
        }
        per_user[str(r["seed"])] = r["test_rank_by_user"]
    doc = {"SASRec+": {
        "dataset": "ml-1m-5core",
        "code": CODE,
        "patched": (
            "nothing in the code's files; pytorch_lightning (not installed) replaced by run_kv.py:"
            " LightningModule = nn.Module whose log() keeps each validation batch's value and size;"
            " Trainer.fit written out as the code configures it (Adam from configure_optimizers,"
            " one optimiser step per training batch, validation after every epoch with the"
            " batch-size-weighted mean of the logged val_ndcg, EarlyStopping on val_ndcg mode max"
            " patience 10, ModelCheckpoint save_top_k=1 on val_ndcg, max_epochs 100, strictly"
            " better to count as better), the best weights predicted (predict_step, top 100,"
            " filter_seen) and scored; transformers stubbed (imported for BERT4Rec/GPT4Rec only);"
            " data-loader workers 0 (the config's 8: no effect on values); random, numpy and torch"
            " seeded with the seed (run.py seeds nothing); resumable at each epoch's end with the"
            " generators restored; CPU, one torch thread"
        ),
        "data": (
            "make_data.py writes seqbench's prepared ml-1m-5core (ML-1M-3416: 6,040 users, 3,416"
            " items, 999,611 interactions) as the code's 'user item' lines, each user's items in"
            " order, seqbench's ids; run.py's prepare_data (add_time_idx sort=False): training ="
            " all but each user's last two items, validation target = the second last, test"
            " target = the last with the validation item in the input"
        ),
        "settings": (
            "src/configs/SASRec.yaml with run_final.sh's dataset.max_length=200: maxlen 200,"
            " hidden 64, 2 blocks, 1 head, dropout 0.1, batch 128, Adam lr 1e-3 (betas 0.9, 0.999),"
            " full softmax CE (SeqRec), validation on all 6,040 users (validation_size 10,000),"
            " patience 10, at most 100 epochs"
        ),
        "command": (
            "python make_data.py SEQBENCH_DATA/ml-1m-5core data/ml-1m-3416.txt; nice python"
            " run_kv.py SEED runs/kv_sSEED.json; then python code_runs.py kv_code_runs.json"
            " runs/kv_s*.json"
        ),
        "metric_note": (
            "means over the 6,040 users of HR@k and NDCG@k (one relevant item) from the code's own"
            " top-100 after filter_seen (the whole history excluded = seqbench's protocol"
            " seqbench); the code computes the same means with the recommenders package (not"
            " installed here); test = the weights of the best validation NDCG@10 epoch"
        ),
        "seeds": dict(sorted(seeds.items())),
    }}
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, out)
    ranks_out = out.replace(".json", "_ranks.json")
    with open(ranks_out + ".tmp", "w") as f:
        note = "each user's rank of the test item in the code's filtered top 100 (0 = not in it)"
        json.dump({"note": note + ", by seed", "ranks": per_user}, f)
    os.replace(ranks_out + ".tmp", ranks_out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
