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
calibrate    the runs of a study folder (`--calibrate results/significance`, and the runs of
             any --also folders): every configuration (dataset, model, ablation, settings,
             protocol) with >= 6 seeds has its first six seeds split into two groups of three
             in every way (10 splits; the group holding the first seed is side A), each split
             tested as if the groups were two methods, on every --metrics metric. Every pair of
             such configurations on the same data card and protocol (two different models)
             makes a method × user null: per split a fresh random half S of the users, side A's
             seed i scores as configuration P on S and Q elsewhere, side B's seed j as Q on S and
             P elsewhere, so the two "methods" differ user by user as P and Q do (a real method
             × user interaction) and are of equal mean quality by construction (the halves are
             random). Every pair of configurations that a table of the study compares with
             >= 2 seeds a side is tested as a real comparison. Beside the per-user, two-level
             and Welch tests, the exact seed-level permutation test (floor 0.1 with 3 v 3, so it
             never rejects at 0.05). Writes FOLDER/calibration.json.

    python bench/bench_significance.py                      # the simulation, ~1-2 minutes
    python bench/bench_significance.py --reps 100 --users 1000
    python bench/bench_significance.py --calibrate results/significance \
        --also results/significance_interaction
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
    permutation_floor,
    seed_means,
    seed_permutation,
    ttest,
    two_level,
    user_matrix,
)
from seqbench.runs.exported import load_exported
from seqbench.study.parse import load_study
from seqbench.study.plan import plan

ALPHA = 0.05
#: the tests compared, by name in calibration.json, and the key of each one's p in a comparison
TESTS = {
    "per_user": "per_user_p",
    "new": "new_p",
    "seed_means": "seed_means_p",
    "seed_permutation": "seed_permutation_p",
}
#: the random halves of the users in the method × user nulls
HALVES_SEED = 0


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
        [run.dataset, run.model, run.ablate, run.settings, run.protocol_spec.to_dict()],
        sort_keys=True,
        default=str,
    )


def matrix_tests(a: np.ndarray, b: np.ndarray) -> dict:
    """Every test of two sides' seeds × users matrices (same users, same columns): the
    per-user test's p, the two-level test's p, difference, interval and df, Welch's t on the
    seed means (each seed's mean over these users) and the exact permutation p of them."""
    old = ttest(a.mean(0), b.mean(0))
    est = two_level(a, b)
    means = seed_means(a.mean(1), b.mean(1))
    low, high = est.interval
    return {"users": a.shape[1], "per_user_p": old, "new_p": est.p, "difference": est.value,
            "interval": [low, high], "df": est.df, "seed_means_p": means.p,
            "seed_means_interval": list(means.interval), "seed_means_df": means.df,
            "seed_permutation_p": seed_permutation(a.mean(1), b.mean(1)),
            "seed_permutation_floor": permutation_floor(len(a), len(b))}  # fmt: skip


def both_tests(a: Sequence, b: Sequence, metric: str) -> dict:
    """`matrix_tests` of two groups of runs on one metric, over the users every run evaluated."""
    joined = user_matrix([*a, *b], metric).to_numpy(float).T
    return matrix_tests(joined[: len(a)], joined[len(a) :])


def splits(six: Sequence) -> list[tuple[list, list]]:
    """The 10 ways of splitting six seeds into 3 + 3, the first seed always on side A."""
    out = []
    for rest in itertools.combinations(range(1, 6), 2):
        side_a = [six[0], *(six[i] for i in rest)]
        out.append((side_a, [r for r in six if r not in side_a]))
    return out


def tally(rows: list, alpha: float) -> dict:
    """Rejections at alpha of each test over `rows`, by metric."""
    metrics = dict.fromkeys(r["metric"] for r in rows)
    return {
        m: {t: sum(r[key] <= alpha for r in rows if r["metric"] == m) for t, key in TESTS.items()}
        for m in metrics
    }


def interaction_nulls(p: list, q: list, metrics: Sequence[str]) -> list[dict]:
    """Method × user nulls of two six-seed configurations P and Q on the same users: per split
    of the seeds, a fresh random half S of the users; side A's seed i is P_i on S and Q_i off
    it, side B's seed j is Q_j on S and P_j off it."""
    rng = np.random.default_rng(HALVES_SEED)
    index = {id(r): i for i, r in enumerate(p)}
    rows = []
    frames = {m: user_matrix([*p, *q], m).to_numpy(float).T for m in metrics}
    n = next(iter(frames.values())).shape[1]
    for side_a, _ in splits(p):
        ia = [index[id(r)] for r in side_a]
        ib = [i for i in range(6) if i not in ia]
        half = np.zeros(n, dtype=bool)
        half[rng.permutation(n)[: n // 2]] = True
        for m, x in frames.items():
            xp, xq = x[:6], x[6:]
            a = np.where(half, xp[ia], xq[ia])
            b = np.where(half, xq[ib], xp[ib])
            res = matrix_tests(a, b)
            res.update(metric=m, seeds_a=[p[i].seed for i in ia], seeds_b=[p[i].seed for i in ib],
                       half_users=int(half.sum()))  # fmt: skip
            rows.append(res)
    return rows


def config_row(runs: Sequence, rows: list, alpha: float, **extra: object) -> dict:
    first = runs[0]
    return {"dataset": first.dataset, "model": first.model, "ablate": first.ablate,
            "protocol": first.protocol, "seeds": [r.seed for r in runs],
            "users": rows[-1]["users"], **extra,
            "rejections_of_10": tally(rows, alpha)}  # fmt: skip


def rates(rows: list, metrics: Sequence[str], alpha: float) -> tuple[dict, dict]:
    """False-positive rates of each test over `rows`, overall and by metric."""
    n = len(rows)
    overall = {t: sum(r[key] <= alpha for r in rows) / n if n else None for t, key in TESTS.items()}
    by_metric = {
        m: {
            "null_comparisons": len(mine := [r for r in rows if r["metric"] == m]),
            **{t: sum(r[key] <= alpha for r in mine) / len(mine) for t, key in TESTS.items()},
        }
        for m in metrics
        if any(r["metric"] == m for r in rows)
    }
    return overall, by_metric


def calibrate(
    folder: Path, metrics: Sequence[str], alpha: float, also: Sequence[Path] = ()
) -> dict:
    """Null splits of every configuration with >= 6 seeds, the method × user nulls of every
    pair of them on one data card and protocol, and the real comparisons the study's tables
    make with >= 2 seeds a side."""
    runs = list(load_exported(folder / "metrics").values())
    extra = [r for f in also for r in load_exported(f / "metrics").values()]
    groups: dict[str, list] = {}
    for r in [*runs, *extra]:
        groups.setdefault(config_key(r), []).append(r)
    sixes = [sorted(rs, key=lambda r: r.seed)[:6] for _, rs in sorted(groups.items())]
    sixes = [six for six in sixes if len(six) == 6]
    nulls, configs = [], []
    for six in sixes:
        rows = []
        for side_a, side_b in splits(six):
            for m in metrics:
                res = both_tests(side_a, side_b, m)
                res.update(metric=m, seeds_a=[r.seed for r in side_a],
                           seeds_b=[r.seed for r in side_b])  # fmt: skip
                rows.append(res)
        nulls += rows
        configs.append(config_row(six, rows, alpha, kind="seed split"))
    mixed = []
    for p, q in itertools.combinations(sixes, 2):
        same = (p[0].dataset, p[0].checksum, p[0].protocol_spec)
        if same != (q[0].dataset, q[0].checksum, q[0].protocol_spec):
            continue
        if p[0].model == q[0].model:
            continue
        rows = interaction_nulls(p, q, metrics)
        for r in rows:
            r["pair"] = [p[0].model, q[0].model]
        mixed += rows
        configs.append(config_row(p, rows, alpha, kind="method x user", other=q[0].model,
                                  other_seeds=[r.seed for r in q]))  # fmt: skip
    everything = nulls + mixed
    rate, by_metric = rates(everything, metrics, alpha)
    return {
        "alpha": alpha,
        "null_comparisons": len(everything),
        "false_positive_rate": rate,
        "false_positive_rate_by_metric": by_metric,
        "false_positive_rate_seed_splits": rates(nulls, metrics, alpha)[0],
        "false_positive_rate_method_x_user": rates(mixed, metrics, alpha)[0],
        "null_configurations": configs,
        "power": {"real_comparisons": real_comparisons(folder, runs, metrics, alpha)},
        "null_splits": nulls,
        "method_x_user_nulls": mixed,
        "made_by": "python bench/bench_significance.py --calibrate "
        + " --also ".join(map(str, [folder, *also])),
        "seqbench_version": __version__,
        "note": (
            "A seed-split null is one split of a configuration's six seeds into 3 + 3 on one "
            "metric; a method x user null mixes two configurations P and Q (two different "
            "models) on a random half of the users each way (side A: P on the half, Q off it; "
            "side B the other way round), so the sides differ user by user but are of equal "
            "mean quality by construction. The 10 splits of a configuration share its six "
            "trained models, so they are not independent. Rates are uncorrected (each "
            "comparison at alpha). 'new' is the two-level test (seeds and users), "
            "'seed_means' Welch's t on the seed means alone, 'seed_permutation' the exact "
            "permutation test of the seed means (floor 2 / C(6, 3) = 0.1: it cannot reject "
            "at 0.05 with 3 v 3)."
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
    ap.add_argument("--also", type=Path, nargs="*", default=[], help="more study folders' runs")
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
        result = calibrate(args.calibrate, args.metrics, args.alpha, args.also)
        path = args.calibrate / "calibration.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1, default=float) + "\n")
        tmp.replace(path)
        keys = (
            "alpha",
            "null_comparisons",
            "false_positive_rate",
            "false_positive_rate_seed_splits",
            "false_positive_rate_method_x_user",
        )
        print(json.dumps({k: result[k] for k in keys}, indent=1))  # fmt: skip
        for c in result["null_configurations"]:
            print(c["kind"], c["model"], c.get("other", ""), c["protocol"], c["users"],
                  c["rejections_of_10"])  # fmt: skip
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
