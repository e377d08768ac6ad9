"""Read a Klenitskiy & Vasilev SASRec run's best weights (run_kv.py's state file) with
seqbench's `sasrec_ce` (positions=left, the port's) and seqbench's evaluator, protocol
`seqbench`: are the two models the same function, and do the two evaluations agree?

usage: SEQBENCH_DATA=DIR python same_weights.py RUN_JSON   (RUN_JSON.state.pt must exist;
seqbench importable; DIR holds the prepared ml-1m-5core, default ./data)
Prints the largest score difference over all test inputs (the same item ids on both sides),
the code's test metrics from its own top-100 (run_kv.py) and seqbench's from the same weights.
"""

import json
import sys

import torch

RUN = sys.argv[1]
import run_kv  # noqa: E402  (the code's modules, stand-ins and data reading)

from seqbench.data.dataset import load_dataset  # noqa: E402
from seqbench.evaluation.evaluator import summarize  # noqa: E402
from seqbench.evaluation.protocols import get_protocol, split_view  # noqa: E402
from seqbench.evaluation.sharded import model_evaluator  # noqa: E402
from seqbench.models.base import get_model, resolve_config  # noqa: E402

torch.set_num_threads(1)
P = get_protocol("seqbench")


def to_seqbench(sd: dict) -> dict:
    """The code's SeqRec state dict as seqbench sasrec_ce's (the same item ids)."""
    m = {k[len("model."):]: v for k, v in sd.items() if k.startswith("model.")}
    out = {"emb.item.weight": m["item_emb.weight"], "emb.pos.weight": m["pos_emb.weight"],
           "encoder.final.weight": m["last_layernorm.weight"],
           "encoder.final.bias": m["last_layernorm.bias"]}
    for i in range(2):
        b = f"encoder.blocks.{i}."
        w, bias = m[f"attention_layers.{i}.in_proj_weight"], m[f"attention_layers.{i}.in_proj_bias"]
        for j, name in enumerate("qkv"):
            out[b + f"attn.{name}.weight"] = w[64 * j: 64 * (j + 1)]
            out[b + f"attn.{name}.bias"] = bias[64 * j: 64 * (j + 1)]
        out[b + "attn.out.weight"] = m[f"attention_layers.{i}.out_proj.weight"]
        out[b + "attn.out.bias"] = m[f"attention_layers.{i}.out_proj.bias"]
        out[b + "ffn.lin1.weight"] = m[f"forward_layers.{i}.conv1.weight"].squeeze(-1)
        out[b + "ffn.lin1.bias"] = m[f"forward_layers.{i}.conv1.bias"]
        out[b + "ffn.lin2.weight"] = m[f"forward_layers.{i}.conv2.weight"].squeeze(-1)
        out[b + "ffn.lin2.bias"] = m[f"forward_layers.{i}.conv2.bias"]
        for k in ("weight", "bias"):
            out[b + f"ln1.{k}"] = m[f"attention_layernorms.{i}.{k}"]
            out[b + f"ln2.{k}"] = m[f"forward_layernorms.{i}.{k}"]
    return {k: v.clone().contiguous() for k, v in out.items()}


def code_scores(module, seqs: list[list[int]]) -> torch.Tensor:
    """The code model's scores of every item at the last position of each input."""
    module.eval()
    out = []
    with torch.no_grad():
        for s in range(0, len(seqs), 256):
            rows = [torch.tensor(x[-200:]) for x in seqs[s: s + 256]]
            ids = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
            o = module.model(ids, None)
            last = (ids != 0).sum(1) - 1
            out.append(o[torch.arange(len(rows)), last])
    return torch.cat(out)


def main() -> None:
    st = torch.load(RUN + ".state.pt", weights_only=False)
    sd = st["best_state"]
    data = split_view(load_dataset("ml-1m-5core"), P)
    cls = get_model("sasrec_ce")
    torch.manual_seed(0)
    sb = cls(resolve_config(cls, "ml-1m-5core", {"positions": "left"}), data)
    sb.load_state_dict(to_seqbench(sd))
    sb.eval()
    with torch.no_grad():
        got = summarize(model_evaluator(sb, data, "test", P, "cpu").run(sb))
    # the same weights' scores, both ways, on every user's test input (all but the last item)
    module = run_kv.make_module(3416)
    module.load_state_dict(sd)
    _, validation_full, test, _ = run_kv.prepare_data()
    seqs = validation_full.groupby("user_id", sort=True)["item_id"].agg(list).tolist()
    code = code_scores(module, seqs)[:, 1:]  # items 1..3416
    sb_ids = torch.arange(1, 3417)
    with torch.no_grad():
        rows = [torch.tensor(x[-200:]) for x in seqs]
        diffs = []
        for s in range(0, len(rows), 256):
            block = rows[s: s + 256]
            ids = torch.stack([torch.nn.functional.pad(r, (200 - len(r), 0)) for r in block])
            q = sb.encode(ids)[:, -1]
            scores = q @ sb.emb.item.weight.T
            diffs.append((scores[:, sb_ids] - code[s: s + 256]).abs().max())
    code_eval = run_kv.metrics(run_kv.test_ranks(module, validation_full, test))
    shown = ("HR@10", "NDCG@10", "HR@20", "NDCG@20")
    print(json.dumps({
        "run": RUN, "best_epoch": st["best_epoch"],
        "max_abs_score_diff": float(max(diffs)),
        "code_eval_same_weights": {k: code_eval[k] for k in shown},
        "seqbench_eval_same_weights": {k: got[k] for k in shown},
    }))


if __name__ == "__main__":
    main()
