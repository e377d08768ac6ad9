"""Read the LRURec code's trained weights with seqbench's LRURec and evaluator.

Run outside the package, from the repository root, after the code's runs exist:
    python results/modern_code_lrurec_10ep/read_code_weights.py CODE_DIR [--one-epoch]
CODE_DIR is a checkout of yueqirex/LRURec @ e02a559b whose runs/<prefix><seed>/ hold the
runs the code_runs*.json files describe. For each run it loads models/best_acc_model.pth into
seqbench's LRURec (the complex in/out projections as real and imaginary Linear layers), checks
the two models' scores on the test inputs, evaluates valid and test under cbit, reproduces the
code's reduction (the mean of per-batch means over batches of 256 users in id order) against
the number the code reported, and writes code_runs*_per_user.json beside this file
(--one-epoch: results/modern_code's 1-epoch runs, runs/e1_sS and e1nopad_sS, into
results/modern_code/code_runs_lrurec_per_user.json).
"""

import json
import sys
from pathlib import Path

import torch
from batch_means import batch_mean

from seqbench.data.dataset import load_dataset
from seqbench.evaluation.protocols import get_protocol, split_view
from seqbench.evaluation.sharded import model_evaluator
from seqbench.models.lrurec import LRURec, LRURecConfig

HERE = Path(__file__).parent
CODE = Path(sys.argv[1])
FILES = {
    "s": "code_runs",
    "nopad_s": "code_runs_no_padding_targets",
    "last_s": "code_runs_one_window",
    "opt_s": "code_runs_seqbench_optimizer",
}
KEYS = ("HR@5", "HR@10", "HR@20", "NDCG@5", "NDCG@10", "NDCG@20")
PROTOCOL = get_protocol("cbit")
DATA = split_view(load_dataset("beauty", "data"), PROTOCOL)
CONFIG = LRURecConfig(d=32, max_len=20)
torch.set_num_threads(1)
sys.path.insert(0, str(CODE))
import model.lru as code_lru  # noqa: E402  (the code's model, from CODE_DIR)

#: seqbench's evaluators of the two splits, built once for every run read
EVALUATORS = {
    s: model_evaluator(LRURec(CONFIG, DATA), DATA, s, PROTOCOL, "cpu") for s in ("valid", "test")
}
#: every test user's input window, the inputs both models score
TEST_INPUTS = torch.from_numpy(DATA.windows(*DATA.eval_split("test")[:2], CONFIG.max_len)).long()


def code_to_seqbench(sd: dict) -> dict:
    """The code's state dict under seqbench's parameter names (item ids are the same)."""
    out = {"item.weight": sd["embedding.token.weight"], "item_bias": sd["model.bias"]}
    for k in ("weight", "bias"):
        out[f"emb_norm.{k}"] = sd[f"embedding.layer_norm.{k}"]
    for i in range(2):
        block, lay = f"model.lru_blocks.{i}.", f"model.lru_blocks.{i}.lru_layer."
        out[f"lru.{i}.params_log"] = sd[lay + "params_log"]
        w, b = sd[lay + "in_proj.weight"], sd[lay + "in_proj.bias"]
        out[f"lru.{i}.b_re.weight"], out[f"lru.{i}.b_im.weight"] = w.real, w.imag
        out[f"lru.{i}.b_re.bias"], out[f"lru.{i}.b_im.bias"] = b.real, b.imag
        w, b = sd[lay + "out_proj.weight"], sd[lay + "out_proj.bias"]
        out[f"lru.{i}.c_re.weight"], out[f"lru.{i}.c_im.weight"] = w.real, w.imag
        out[f"lru.{i}.c_re.bias"] = b.real  # Re(W h + b) reads only b's real part
        for k in ("weight", "bias"):
            out[f"lru.{i}.layer_norm.{k}"] = sd[lay + f"layer_norm.{k}"]
            for m in ("w_1", "w_2", "layer_norm"):
                out[f"ffn.{i}.{m}.{k}"] = sd[block + f"feed_forward.{m}.{k}"]
    return {k: v.clone().contiguous() for k, v in out.items()}


def code_scores_gap(sd: dict, model: LRURec) -> float:
    """max |code − seqbench| over the last-position scores of every user's test input."""

    class Args:
        num_items, bert_hidden_units, bert_num_blocks = DATA.n_items, 32, 2
        bert_dropout = bert_attn_dropout = 0.2
        dataset_code = "beauty"

    code = code_lru.LRU(Args())
    code.load_state_dict(sd)
    code.eval()
    gap = 0.0
    with torch.no_grad():
        for b in range(0, len(TEST_INPUTS), 256):  # the code scores every position: [256, 32, n]
            x = TEST_INPUTS[b : b + 256]
            ours = model.query({"seqs": x}) @ model.item.weight.T + model.item_bias
            gap = max(gap, (code(x)[0][:, -1, :] - ours).abs().max().item())
    return gap


def read(prefix: str, seed: str, scores_gap: bool = True) -> tuple[dict, float]:
    path = CODE / "runs" / f"{prefix}{seed}" / "models" / "best_acc_model.pth"
    sd = torch.load(path, map_location="cpu")["model_state_dict"]
    model = LRURec(CONFIG, DATA)
    model.load_state_dict(code_to_seqbench(sd))
    model.eval()
    out = {}
    with torch.no_grad():
        for split in ("valid", "test"):
            pu = EVALUATORS[split].run(model).sort_values("user")  # the code's order
            means = {k: float(pu[k].mean()) for k in KEYS}
            out[split] = (means, {k: batch_mean(pu[k].to_numpy()) for k in KEYS})
    return out, code_scores_gap(sd, model) if scores_gap else 0.0


def one_epoch() -> None:
    """results/modern_code's 1-epoch runs (runs/e1_sS, e1nopad_sS) read per user."""
    study = HERE.parent / "modern_code"
    entry = json.loads((study / "code_runs.json").read_text())["lrurec"]
    sides = {"e1_s": entry["seeds"], "e1nopad_s": entry["without_padding_targets"]["seeds"]}
    out, checks = {}, []
    for prefix, printed in sides.items():
        seeds = {}
        for seed, s in printed.items():
            got, _ = read(prefix, seed, scores_gap=False)
            checks += [max(abs(got["test"][1][k] - s["test"][k]) for k in KEYS)]
            seeds[seed] = {
                "test": got["test"][0],
                "valid": got["valid"][0],
                "code_reported_test": {k: s["test"][k] for k in KEYS},
            }
        out[prefix] = seeds
    doc = {
        "lrurec": {
            "dataset": "beauty",
            "runs": "results/modern_code/code_runs.json's 1-epoch runs, trained again with its "
            "commands (runs/e1_sS unpatched, runs/e1nopad_sS with LRUREC_DROP_PADDING_TARGETS=1)",
            "metric_note": "test and valid = the mean over users of seqbench's evaluator (cbit) on "
            "the code's weights; the code's printed test numbers reproduced from them to within "
            f"{max(checks):.1e}",
            "seeds": out["e1_s"],
            "without_padding_targets": {"seeds": out["e1nopad_s"]},
        }
    }
    (study / "code_runs_lrurec_per_user.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(
        "one epoch",
        f"reduction {max(checks):.1e}",
        {p: [round(v["test"]["NDCG@10"], 5) for v in o.values()] for p, o in out.items()},
    )


if sys.argv[2:] == ["--one-epoch"]:
    one_epoch()
    sys.exit()
for prefix, name in FILES.items():
    doc = json.loads((HERE / f"{name}.json").read_text())
    entry, checks, gaps = doc["LRURec"], [], []
    for seed, s in entry["seeds"].items():
        got, gap = read(prefix, seed)
        gaps.append(gap)
        valid = next(v for v in s["valid_by_epoch"] if v["epoch"] == s["best_epoch"])
        for split, reported in (("test", s["test"]), ("valid", valid)):
            checks.append(max(abs(got[split][1][k] - reported[k]) for k in KEYS))
        s["code_reported_test"] = {k: s["test"][k] for k in KEYS}
        s["test"], s["valid_at_best_epoch"] = got["test"][0], got["valid"][0]
        del s["valid_by_epoch"]
    entry["metric_note"] = (
        "test (and valid_at_best_epoch) = the code's own best-epoch weights (each run's "
        "models/best_acc_model.pth) loaded into seqbench's LRURec and read by seqbench's "
        "evaluator under cbit: the mean over the 22,363 users. code_reported_test = the code's "
        "number, a mean of per-batch means (users in id order, batches of 256: the last batch of "
        "91 users weighs as much as a full one). From its per-user values seqbench reproduces the "
        f"code's reported valid and test numbers to within {max(checks):.1e} (every metric and "
        f"seed); the two models' test scores differ by at most {max(gaps):.1e}"
    )
    entry["reading"] = "python results/modern_code_lrurec_10ep/read_code_weights.py CODE_DIR"
    (HERE / f"{name}_per_user.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(
        name,
        f"reduction {max(checks):.1e}",
        f"scores {max(gaps):.1e}",
        {k: round(v["test"]["NDCG@10"], 5) for k, v in entry["seeds"].items()},
    )
