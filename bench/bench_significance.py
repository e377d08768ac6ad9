"""Calibration of seqbench's significance tests: false-positive rate and power of the per-user
paired t-test on seed-averaged users (the test of seqbench <= 0.2.0 for every comparison, now
only for one trained model a side), of the two-level test (seeds and users,
`seqbench.report.stats.two_level`, the method-level test with >= 2 seeds a side) and of Welch's
t on the seed means (`stats.seed_means`, the test of runs that kept no per-user results).

Two parts:

simulate     (default) per-user metrics from a two-way random-effects model, x[i, u] =
             μ + effect·[method B] + v_u + w_u (method × user, sd --inter-sd, B only) + a_i
             (seed, sd --seed-sd) + e[i, u] (seed × user, sd --noise-sd); v_u (sd --user-sd)
             is shared by both methods. The rejection rate at α over --reps replicates per cell
             of the grid seed-level sd × users × seeds per side × effect: effect 0 gives the
             false-positive rate, the others the power. Writes --out (JSON) and prints a
             markdown table.
calibrate    the runs of a study folder (`--calibrate results/significance`): every
             configuration (dataset, model, ablation, settings, protocol) with >= 6 seeds has
             its first six seeds split into two groups of three in every way (10 splits; the
             group holding the first seed is side A), each split tested as if the groups were
             two methods, on every --metrics metric; and every pair of configurations that a
             table of the study compares with >= 2 seeds a side is tested as a real comparison.
             Writes FOLDER/calibration.json.

    python bench/bench_significance.py                      # the simulation, ~1-2 minutes
    python bench/bench_significance.py --reps 100 --users 1000
    python bench/bench_significance.py --calibrate results/significance
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from seqbench import __version__
from seqbench.report.stats import (
    paired_pvalue,
    seed_averaged,
    seed_means,
    two_level,
    user_matrix,
)
from seqbench.runs.exported import load_exported
from seqbench.study.parse import load_study
from seqbench.study.plan import plan

ALPHA = 0.05
#: the tests compared, by name in calibration.json, and the key of each one's p in a comparison
TESTS = {"per_user": "per_user_p", "new": "new_p", "seed_means": "seed_means_p"}


# ------------------------------------------------------------------ simulation


def simulate_cell(
    rng: np.random.Generator,
    reps: int,
    users: int,
    seeds: int,
    seed_sd: float,
    effect: float,
    args: argparse.Namespace,
) -> tuple[float, float, float]:
    """Rejection rates of the per-user test, the two-level test and Welch's t on the seed
    means over `reps` replicates."""
    old = new = means = 0
    for _ in range(reps):
        shared = rng.normal(0.0, args.user_sd, users)
        sides = []
        for side in (0, 1):
            inter = rng.normal(0.0, args.inter_sd, users) if side else 0.0
            x = (
                shared
                + inter
                + effect * side
                + rng.normal(0.0, seed_sd, (seeds, 1))
                + rng.normal(0.0, args.noise_sd, (seeds, users))
            )
            sides.append(x)
        a, b = sides
        old += stats.ttest_rel(a.mean(0), b.mean(0)).pvalue <= args.alpha
        new += two_level(a, b).p <= args.alpha
        means += seed_means(a.mean(1), b.mean(1)).p <= args.alpha
    return old / reps, new / reps, means / reps


def simulate(args: argparse.Namespace) -> dict:
    """The grid of rejection rates, and how long it took."""
    rng = np.random.default_rng(args.seed)
    rows = []
    t0 = time.perf_counter()
    for seed_sd, users, seeds, effect in itertools.product(
        args.seed_sds, args.users, args.seeds_per_side, [0.0, *args.effects]
    ):
        old, new, means = simulate_cell(rng, args.reps, users, seeds, seed_sd, effect, args)
        rows.append(
            {"seed_sd": seed_sd, "users": users, "seeds_per_side": seeds, "effect": effect,
             "per_user": old, "new": new, "seed_means": means}
        )  # fmt: skip
    return {
        "alpha": args.alpha,
        "reps": args.reps,
        "model": {
            "user_sd": args.user_sd,
            "noise_sd": args.noise_sd,
            "inter_sd": args.inter_sd,
            "seed": args.seed,
        },
        "rows": rows,
        "seconds": round(time.perf_counter() - t0, 1),
        "seqbench_version": __version__,
    }


def markdown(result: dict) -> str:
    """The simulation as a table: rejection rates per cell, per-user test vs two-level vs
    Welch's t on the seed means."""
    lines = [
        f"Rejection rate at α = {result['alpha']} over {result['reps']} replicates "
        f"(effect 0: false-positive rate; else power). Model: {result['model']}.",
        "",
        "| seed sd | users | seeds/side | effect | per-user t | two-level | seed means |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['seed_sd']:g} | {r['users']} | {r['seeds_per_side']} | {r['effect']:g} | "
            f"{r['per_user']:.3f} | {r['new']:.3f} | {r['seed_means']:.3f} |"
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ real runs


def config_key(run) -> str:
    """A configuration: everything of a run's identity but its seed."""
    return json.dumps(
        [run.dataset, run.model, run.ablate, run.settings, run.protocol_spec],
        sort_keys=True,
        default=str,
    )


def both_tests(a: Sequence, b: Sequence, metric: str) -> dict:
    """The per-user test's p, the two-level test's p, difference and 95% interval, and the p
    and interval of Welch's t on the seed means (the runs' test metric alone)."""
    old, n = paired_pvalue(seed_averaged(a, metric), seed_averaged(b, metric), "ttest")
    joined = user_matrix([*a, *b], metric).to_numpy(float).T
    est = two_level(joined[: len(a)], joined[len(a) :])
    means = seed_means([r.test[metric] for r in a], [r.test[metric] for r in b])
    low, high = est.interval
    return {"users": n, "per_user_p": old, "new_p": est.p, "difference": est.value,
            "interval": [low, high], "df": est.df, "seed_means_p": means.p,
            "seed_means_interval": list(means.interval),
            "seed_means_df": means.df}  # fmt: skip


def calibrate(folder: Path, metrics: Sequence[str], alpha: float) -> dict:
    """Null splits of every configuration with >= 6 seeds, and the real comparisons the
    study's tables make with >= 2 seeds a side."""
    runs = list(load_exported(folder / "metrics").values())
    groups: dict[str, list] = {}
    for r in runs:
        groups.setdefault(config_key(r), []).append(r)
    nulls, configs = [], []
    for _, rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r.seed)
        if len(rs) < 6:
            continue
        six = rs[:6]
        counts = {m: dict.fromkeys(TESTS, 0) for m in metrics}
        for rest in itertools.combinations(range(1, 6), 2):
            side_a = [six[0], *(six[i] for i in rest)]
            side_b = [r for r in six if r not in side_a]
            for m in metrics:
                res = both_tests(side_a, side_b, m)
                res.update(metric=m, seeds_a=[r.seed for r in side_a],
                           seeds_b=[r.seed for r in side_b])  # fmt: skip
                nulls.append(res)
                for test, key in TESTS.items():
                    counts[m][test] += res[key] <= alpha
        first = six[0]
        configs.append({
            "dataset": first.dataset, "model": first.model, "ablate": first.ablate,
            "protocol": first.protocol, "seeds": [r.seed for r in six],
            "users": nulls[-1]["users"], "rejections_of_10": counts,
        })  # fmt: skip
    n = len(nulls)
    rate = {t: sum(r[key] <= alpha for r in nulls) / n if n else None for t, key in TESTS.items()}
    by_metric = {
        m: {
            "null_comparisons": len(rows := [r for r in nulls if r["metric"] == m]),
            **{t: sum(r[key] <= alpha for r in rows) / len(rows) for t, key in TESTS.items()},
        }
        for m in metrics
        if any(r["metric"] == m for r in nulls)
    }
    return {
        "alpha": alpha,
        "null_comparisons": n,
        "false_positive_rate": rate,
        "false_positive_rate_by_metric": by_metric,
        "null_configurations": configs,
        "power": {"real_comparisons": real_comparisons(folder, runs, metrics, alpha)},
        "null_splits": nulls,
        "made_by": f"python bench/bench_significance.py --calibrate {folder}",
        "seqbench_version": __version__,
        "note": (
            "A null comparison is one split of a configuration's six seeds into 3 + 3 on one "
            "metric; the 10 splits of a configuration share its six trained models, so they "
            "are not independent. Rates are uncorrected (each comparison at alpha). 'new' is "
            "the two-level test (seeds and users), 'seed_means' Welch's t on the seed means "
            "alone (the test of runs that kept no per-user results)."
        ),
    }


def real_comparisons(folder: Path, runs: list, metrics: Sequence[str], alpha: float) -> list:
    """Each overall table of the study whose two models have >= 2 seeds each and differ in
    configuration: baseline against the other, on every metric."""
    study = load_study(folder)
    by_id = {r.run_id: r for r in runs}
    p = plan(study, need_data=False)
    ids = {}
    for s in p.runs:
        found = [r for r in runs if config_key(r) and r.dataset == s.dataset
                 and r.seed == s.request.seed and r.model == s.request.model
                 and r.ablate == {k: str(v) for k, v in s.request.ablate.items()}
                 and r.protocol == s.request.protocol]  # fmt: skip
        if found:
            ids.setdefault(s.label, []).append(found[0].run_id)
    out = []
    for t in study.tables:
        if t.layout != "overall" or not t.models or len(t.models) != 2 or t.baseline == "best":
            continue
        other = next(m for m in t.models if m != t.baseline)
        a = [by_id[i] for i in ids.get(other, [])]
        b = [by_id[i] for i in ids.get(t.baseline, [])]
        if len(a) < 2 or len(b) < 2 or config_key(a[0]) == config_key(b[0]):
            continue
        for m in metrics:
            res = both_tests(a, b, m)
            res.update(table=t.name, metric=m, better=other, other=t.baseline,
                       per_user_rejects=res["per_user_p"] <= alpha,
                       new_rejects=res["new_p"] <= alpha,
                       seed_means_rejects=res["seed_means_p"] <= alpha,
                       relative_interval=[v / np.mean([r.test[m] for r in b])
                                          for v in res["interval"]])  # fmt: skip
            out.append(res)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrate", type=Path, help="a study folder: write its calibration.json")
    ap.add_argument("--metrics", nargs="+", default=["NDCG@10", "HR@10"])
    ap.add_argument("--alpha", type=float, default=ALPHA)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--seed-sds", type=float, nargs="+", default=[0.0, 0.001, 0.002, 0.005])
    ap.add_argument("--users", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--seeds-per-side", type=int, nargs="+", default=[2, 3, 5])
    ap.add_argument("--effects", type=float, nargs="+", default=[0.005, 0.01])
    ap.add_argument("--user-sd", type=float, default=0.2)
    ap.add_argument("--noise-sd", type=float, default=0.15)
    ap.add_argument("--inter-sd", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("results/significance/simulation.json"))
    args = ap.parse_args()
    if args.calibrate is not None:
        result = calibrate(args.calibrate, args.metrics, args.alpha)
        path = args.calibrate / "calibration.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1, default=float) + "\n")
        tmp.replace(path)
        print(json.dumps({k: result[k] for k in ("alpha", "null_comparisons",
                                                 "false_positive_rate")}, indent=1))  # fmt: skip
        for r in result["power"]["real_comparisons"]:
            print(r["table"], r["metric"], "per-user p", r["per_user_p"], "new p", r["new_p"],
                  "interval", r["interval"])  # fmt: skip
        return
    result = simulate(args)
    text = markdown(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(args.out)
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
