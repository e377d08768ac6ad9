"""Scale benchmark: ML-20M-sized data through the real reader, `prepare` and a whole `run`.

Writes an ML-20M-shaped `ratings.csv` (header userId,movieId,rating,timestamp; ML-20M's users
per rating, >= 20 and <= 9,254 ratings per user as in the real file, no duplicate pairs, rows
sorted by user then movie), then, each in a child process whose resident size is sampled every
second:
  1. `seqbench prepare ml-20m --raw-dir ...`: wall time and peak RSS;
  2. `seqbench run sasrec --dataset ml-20m --epochs 1 --dry-run`: the estimate (seconds per
     epoch, memory) and the measured time to build one epoch's batches;
  3. `seqbench run sasrec --dataset ml-20m --epochs 1`: one SASRec epoch, full-ranking
     validation and test of every user, peak RSS and the RSS timeline.
Writes a JSON record (--out) with every figure; results/bench/scale.md reports them.
`--reuse` runs 2-3 on --work's prepared data; `--protocol` sets the run's evaluation.
`--yambda` writes a Yambda-50M-shaped flat listens.parquet of --rows listens and prepares it;
`--catalogue N` writes a ratings.csv rating each of N movies once and measures full CE and
sampled CE (dry runs) and a whole sampled-CE run over that catalogue. `--eval-items N` times
one full-ranking evaluation (`seqbench` preset) of `--eval-users` users of an untrained SASRec
over N items, in a child process per path (peak RSS as above): users only (fewer users a batch,
as a model without `item_ranges`) against item chunks (`evaluation.chunked`), alternated.

    python bench/bench_scale.py [--rows 20000000] [--threads 2] [--work DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

ML20M_RATINGS, ML20M_USERS, ML20M_MOVIES = 20_000_263, 138_493, 26_744
MIN_LEN, MAX_LEN = 20, 9_254  # ML-20M's shortest and longest user
N_ITEMS = 26_699  # prime: user u's items (start + k * step) mod N_ITEMS are all distinct


def write_ratings(path: Path, rows: int, seed: int = 0) -> dict[str, int]:
    """An ML-20M-shaped ratings.csv with `rows` ratings; returns its users, items and rows."""
    rng = np.random.default_rng(seed)
    n_users = max(1, round(ML20M_USERS * rows / ML20M_RATINGS))
    weights = rng.pareto(1.2, n_users) + 1
    lengths = MIN_LEN + np.floor(weights / weights.sum() * (rows - MIN_LEN * n_users))
    lengths = np.minimum(lengths.astype(np.int64), MAX_LEN)
    while (deficit := rows - int(lengths.sum())) > 0:  # exact total, no user above the cap
        room = np.flatnonzero(lengths < MAX_LEN)
        lengths[room[: min(deficit, len(room))]] += 1
    users = np.repeat(np.arange(1, n_users + 1), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    k = np.arange(rows) - starts
    step = np.repeat(rng.integers(1, N_ITEMS, n_users), lengths)
    first = np.repeat(rng.integers(0, N_ITEMS, n_users), lengths)
    items = (first + k * step) % N_ITEMS + 1
    order = np.lexsort((items, users))
    table = pa.table(
        {
            "userId": users[order],
            "movieId": items[order],
            "rating": (rng.integers(1, 11, rows) / 2).astype(np.float32),
            "timestamp": rng.integers(789_652_009, 1_427_784_002, rows),
        }
    )
    with open(path, "wb") as out:
        out.write(b"userId,movieId,rating,timestamp\n")
        pacsv.write_csv(table, out, pacsv.WriteOptions(include_header=False, quoting_style="none"))
    return {"users": n_users, "items": int(np.unique(items).size), "rows": rows}


YAMBDA_USERS, YAMBDA_ITEMS = 10_000, 934_057  # Yambda-50M: 10k users, ~50M events


def write_yambda(path: Path, rows: int, seed: int = 0) -> dict[str, int]:
    """A Yambda-shaped flat listens.parquet with `rows` listens, every one a "Listen+" (played
    over half the track): Yambda-50M's 10,000 users (a heavy tail of history lengths, repeats
    kept), items by a power-law popularity over its catalogue, time ascending per user."""
    rng = np.random.default_rng(seed)
    n_users = max(1, round(YAMBDA_USERS * rows / 50_000_000))
    weights = rng.pareto(1.5, n_users) + 1
    lengths = np.maximum(1, np.floor(weights / weights.sum() * rows)).astype(np.int64)
    lengths[: rows - int(lengths.sum())] += 1  # exact total (the floor dropped < n_users)
    uid = np.repeat(np.arange(n_users, dtype=np.uint32), lengths)
    items = (YAMBDA_ITEMS * rng.random(rows, dtype=np.float32) ** 3).astype(np.uint32)
    start = np.repeat(rng.integers(0, 20_000_000, n_users), lengths)
    k = np.arange(rows) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    table = pa.table(
        {
            "uid": uid,
            "timestamp": (start + k * 40).astype(np.uint32),
            "item_id": items,
            "is_organic": rng.integers(0, 2, rows, dtype=np.uint8),
            "played_ratio_pct": rng.integers(51, 101, rows, dtype=np.uint16),
            "track_length_seconds": rng.integers(60, 400, rows, dtype=np.uint32),
        }
    )
    pq.write_table(table, path)
    return {"users": n_users, "items": int(np.unique(items).size), "rows": rows}


def write_catalogue(path: Path, items: int, per_user: int = 200, seed: int = 0) -> dict[str, int]:
    """A ratings.csv (ML-20M's format) whose users together rate each of `items` movies once:
    items // per_user users of `per_user` ratings, the movies in a random order."""
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(1, items // per_user + 1), per_user)
    movies = rng.permutation(items)[: len(users)] + 1
    table = pa.table(
        {
            "userId": users,
            "movieId": movies,
            "rating": np.full(len(users), 4.0, dtype=np.float32),
            "timestamp": 1_000_000_000 + np.arange(len(users)),
        }
    )
    with open(path, "wb") as out:
        out.write(b"userId,movieId,rating,timestamp\n")
        pacsv.write_csv(table, out, pacsv.WriteOptions(include_header=False, quoting_style="none"))
    return {"users": int(users[-1]), "items": len(users), "rows": len(users)}


def sampled(cmd: list[str], env: dict[str, str], log: Path) -> dict:
    """Run `cmd`, sampling its resident size every second; wall time, CPU seconds (user +
    system, all its threads), peak, the load average before and after, and the timeline."""
    t0, load = time.perf_counter(), os.getloadavg()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = used.ru_utime + used.ru_stime
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        timeline: list[tuple[float, float]] = []
        peak = 0.0
        while proc.poll() is None:
            status = Path(f"/proc/{proc.pid}/status")
            try:
                fields = dict(
                    line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
                )
                rss = int(fields["VmRSS"].split()[0]) / 2**20  # GiB
                peak = max(peak, int(fields["VmHWM"].split()[0]) / 2**20)
                timeline.append((round(time.perf_counter() - t0, 1), round(rss, 3)))
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(1.0)
    wall = time.perf_counter() - t0
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = used.ru_utime + used.ru_stime - cpu0
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): see {log}")
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_gib": round(peak, 2),
        "load": [round(x, 1) for x in (*load, *os.getloadavg())],
        "timeline": timeline,
    }


def main() -> None:
    """Generate the file, prepare it, dry-run and run SASRec; print and write the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="sasrec")
    ap.add_argument("--protocol", default="seqbench", help="evaluation protocol of the run")
    ap.add_argument("--work", type=Path, default=None, help="work folder to keep (default: temp)")
    ap.add_argument("--out", type=Path, default=None, help="JSON record of the figures")
    ap.add_argument("--skip-run", action="store_true", help="generate and prepare only")
    ap.add_argument("--reuse", action="store_true", help="--work's prepared data, if there")
    ap.add_argument("--catalogue", type=int, default=0, help="instead: a catalogue this large")
    ap.add_argument("--yambda", action="store_true", help="--rows as a Yambda-50M-shaped file")
    ap.add_argument("--eval-items", type=int, default=0, help="instead: evaluation over N items")
    ap.add_argument("--eval-users", type=int, default=1024, help="users --eval-items ranks")
    ap.add_argument("--repeats", type=int, default=1, help="--eval-items: runs of each path")
    ap.add_argument("--eval-child", choices=("users", "items", "whole"), help=argparse.SUPPRESS)
    ap.add_argument(
        "--eval-only",
        action="store_true",
        help="--work's prepared data (made if absent): time full-ranking validation + test only",
    )
    ap.add_argument("--ranks", type=Path, default=None, help="--eval-only: save per-user counts")
    args = ap.parse_args()
    if args.eval_child == "whole":
        return eval_whole(args)
    if args.eval_child:
        return eval_child(args)
    work = args.work or Path(tempfile.mkdtemp(prefix="seqbench-scale-"))
    raw, data, runs = work / "raw", work / "data", work / "runs"
    raw.mkdir(parents=True, exist_ok=True)
    threads = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
    seqbench = [sys.executable, "-m", "seqbench"]
    record: dict = {"rows": args.rows, "threads": args.threads, "load_before": os.getloadavg()}
    try:
        if args.catalogue:
            record.update(catalogue(args, seqbench, raw, data, runs, env, work))
            return
        if args.eval_items:
            record.update(eval_paths(args, env, work))
            return
        if args.yambda:
            t = time.perf_counter()
            record["generated"] = write_yambda(raw / "listens.parquet", args.rows)
            record["generate_s"] = round(time.perf_counter() - t, 1)
            print(f"wrote {args.rows:,} listens in {record['generate_s']} s: {record['generated']}")
            prep = [*seqbench, "prepare", "yambda-50m-listens", "--raw-dir", str(raw)]
            prep += ["--data-dir", str(data), "--no-download", "--force"]
            record["prepare"] = sampled(prep, env, work / "prep.log")
            print(
                f"prepare: {record['prepare']['wall_s']} s, {record['prepare']['peak_rss_gib']} GiB"
            )
            return
        if args.eval_only:
            if not (data / "ml-20m" / "card.json").exists():
                record["generated"] = write_ratings(raw / "ratings.csv", args.rows)
                prep = [*seqbench, "prepare", "ml-20m", "--raw-dir", str(raw)]
                prep += ["--data-dir", str(data), "--no-download", "--force"]
                record["prepare"] = sampled(prep, env, work / "prep.log")
            cmd = [sys.executable, __file__, "--eval-child", "whole", "--work", str(work)]
            cmd += ["--threads", threads, "--protocol", args.protocol, "--model", args.model]
            cmd += ["--ranks", str(args.ranks)] if args.ranks else []
            r = sampled(cmd, env, work / "eval_only.log")
            r.update(json.loads((work / "eval_only.log").read_text().splitlines()[-1]))
            record["eval_only"] = r
            print({k: v for k, v in r.items() if k != "timeline"})
            return
        if args.reuse and (data / "ml-20m" / "card.json").exists():
            record.update(run_and_estimate(args, seqbench, data, runs, env, work))
            return
        t = time.perf_counter()
        record["generated"] = write_ratings(raw / "ratings.csv", args.rows)
        record["generate_s"] = round(time.perf_counter() - t, 1)
        print(f"wrote {args.rows:,} ratings in {record['generate_s']} s: {record['generated']}")
        prep = [*seqbench, "prepare", "ml-20m", "--raw-dir", str(raw), "--data-dir", str(data)]
        record["prepare"] = sampled([*prep, "--no-download", "--force"], env, work / "prep.log")
        print(f"prepare: {record['prepare']['wall_s']} s, {record['prepare']['peak_rss_gib']} GiB")
        if not args.skip_run:
            record.update(run_and_estimate(args, seqbench, data, runs, env, work))
    finally:
        if args.out:
            args.out.write_text(json.dumps(record, indent=1) + "\n")
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def catalogue(
    args: argparse.Namespace,
    seqbench: list[str],
    raw: Path,
    data: Path,
    runs: Path,
    env: dict,
    work: Path,
) -> dict:
    """A catalogue of `--catalogue` items: prepare it, then the peak memory of full CE (dry
    run: a few steps, the catalogue in chunks of items) and of a whole sampled-CE run (one
    epoch, then full-ranking validation and test of every user against every item)."""
    out: dict = {"catalogue": write_catalogue(raw / "ratings.csv", args.catalogue)}
    prep = [*seqbench, "prepare", "ml-20m", "--raw-dir", str(raw), "--data-dir", str(data)]
    out["prepare"] = sampled([*prep, "--no-download", "--force"], env, work / "prep.log")
    run = [*seqbench, "run", "sasrec", "--dataset", "ml-20m", "--data-dir", str(data)]
    run += ["--epochs", "1", "--threads", str(args.threads), "--runs-dir", str(runs)]
    small = ["--set", "batch_size=16", "--set", "max_len=20"]  # a CE step is ~0.1 TFLOP
    for name, extra in (
        ("ce_dry_run", ["--ablate", "loss=ce", *small, "--dry-run"]),
        ("sampled_ce_dry_run", ["--ablate", "loss=sampled_ce", "--dry-run"]),
        ("sampled_ce_run", ["--ablate", "loss=sampled_ce"]),
    ):
        out[name] = sampled([*run, *extra], env, work / f"{name}.log")
        out[name]["log_tail"] = (work / f"{name}.log").read_text()[-1500:]
        print(f"{name}: {out[name]['wall_s']} s, peak {out[name]['peak_rss_gib']} GiB")
    return out


def eval_paths(args: argparse.Namespace, env: dict, work: Path) -> dict:
    """Each path's child (`eval_child`) `--repeats` times, alternated: peak RSS, CPU seconds
    and the evaluation's own; how many users rank otherwise in the item path."""
    out: dict = {"items": args.eval_items, "users": args.eval_users, "runs": []}
    child = [sys.executable, __file__, "--eval-items", str(args.eval_items)]
    child += ["--eval-users", str(args.eval_users), "--threads", str(args.threads)]
    for i in range(args.repeats):
        for path in ("users", "items"):
            ranks = work / f"ranks_{path}.npy"
            cmd = [*child, "--eval-child", path, "--out", str(ranks)]
            r = sampled(cmd, env, work / f"eval_{path}_{i}.log")
            r.update(json.loads((work / f"eval_{path}_{i}.log").read_text().splitlines()[-1]))
            del r["timeline"]
            out["runs"].append({"path": path, **r})
            print(f"{path}: {r}")
    a, b = (np.load(work / f"ranks_{p}.npy") for p in ("users", "items"))
    out["ranks_differ"] = int((a != b).sum())
    print(f"users whose rank differs between the paths: {out['ranks_differ']} of {len(a)}")
    return out


def eval_child(args: argparse.Namespace) -> None:
    """One full-ranking evaluation over `--eval-items` items: `--eval-users` users of 50
    random items each, SASRec's defaults untrained; prints a JSON line of its figures."""
    import torch

    from seqbench.data.dataset import SeqDataset
    from seqbench.evaluation.evaluator import Evaluator
    from seqbench.evaluation.protocols import get_protocol
    from seqbench.models.base import get_model, resolve_config

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    users, per = args.eval_users, 50
    inter = pd.DataFrame(
        {
            "user": np.repeat(np.arange(users), per),
            "item": rng.integers(1, args.eval_items + 1, users * per),
            "position": np.tile(np.arange(per), users),
        }
    )
    card = {"stats": {"users": users, "items": args.eval_items}}
    data = SeqDataset.from_frames("scale", inter, None, card)
    cls = get_model("sasrec")
    model = cls(resolve_config(cls, "ml-20m"), data).eval()
    ev = Evaluator(data, "test", get_protocol("seqbench"), model.input_window)
    scorer = model if args.eval_child == "items" else WholeRows(model)
    size, chunk = ev.plan(scorer)
    t, cpu = time.perf_counter(), time.process_time()
    ranks = ev.run(scorer)["rank"].to_numpy()
    np.save(args.out, ranks)
    figures = {"eval_cpu_s": round(time.process_time() - cpu, 1), "batch_users": size}
    figures.update(eval_wall_s=round(time.perf_counter() - t, 1), item_chunk=chunk)
    print(json.dumps(figures))


def eval_whole(args: argparse.Namespace) -> None:
    """Full-ranking validation and test of every user of --work's prepared ML-20M shape by an
    untrained `--model` (its ML-20M defaults), each timed alone (wall, CPU of all threads);
    prints a JSON line of the figures; `--ranks` saves every user's (above, equal)."""
    import torch

    from seqbench.data.dataset import load_dataset
    from seqbench.evaluation.evaluator import Evaluator
    from seqbench.evaluation.protocols import get_protocol
    from seqbench.models.base import get_model, resolve_config

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = load_dataset("ml-20m", args.work / "data")
    cls = get_model(args.model)
    model = cls(resolve_config(cls, "ml-20m"), data).eval()
    protocol = get_protocol(args.protocol)
    figures: dict = {"load_start": [round(x, 2) for x in os.getloadavg()]}
    counts = {}
    for split in ("valid", "test"):
        ev = Evaluator(data, split, protocol, model.input_window, model.cfg.eval_batch_size)
        t, cpu = time.perf_counter(), time.process_time()
        df = ev.run(model)
        figures[f"{split}_wall_s"] = round(time.perf_counter() - t, 2)
        figures[f"{split}_cpu_s"] = round(time.process_time() - cpu, 2)
        figures[f"{split}_users"] = len(df)
        figures[f"{split}_ndcg10"] = float(df["NDCG@10"].mean())
        counts[split] = df[["user", "above", "equal"]].to_numpy()
    figures["valid_test_wall_s"] = round(figures["valid_wall_s"] + figures["test_wall_s"], 2)
    figures["valid_test_cpu_s"] = round(figures["valid_cpu_s"] + figures["test_cpu_s"], 2)
    figures["load_end"] = [round(x, 2) for x in os.getloadavg()]
    figures["maxrss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    if args.ranks:
        np.savez(args.ranks, **counts)
    print(json.dumps(figures))


class WholeRows:
    """A model's `score` alone (no `item_ranges`): the evaluator's user-bounded path."""

    def __init__(self, model) -> None:
        self.model, self.training = model, False

    def score(self, batch: dict):
        return self.model.score(batch)

    def train(self, mode: bool = True):
        return self

    def eval(self):
        return self


def run_and_estimate(
    args: argparse.Namespace, seqbench: list[str], data: Path, runs: Path, env: dict, work: Path
) -> dict:
    """The dry run's estimate, then the real one-epoch run (its store's metrics.json)."""
    run = [*seqbench, "run", args.model, "--dataset", "ml-20m", "--data-dir", str(data)]
    run += ["--epochs", "1", "--threads", str(args.threads), "--runs-dir", str(runs)]
    run += ["--protocol", args.protocol]
    out: dict = {"dry_run": sampled([*run, "--dry-run"], env, work / "dry.log")}
    text = " ".join((work / "dry.log").read_text().split())
    estimate = re.search(r"1 epoch ≈ (.+?); peak memory ≈ ([\d.,]+) ([MG]B)", text)
    build = re.search(r"building the epoch's batches \(([\d.e+-]+) s\)", text)
    steps = re.search(r"≈ ([\d.]+) s/step", text)
    if estimate and build and steps:
        unit = 1024 if estimate.group(3) == "GB" else 1
        out["estimate"] = {
            "epoch": estimate.group(1),
            "s_per_step": float(steps.group(1)),
            "batch_build_s": float(build.group(1)),
            "peak_mb": float(estimate.group(2).replace(",", "")) * unit,
        }
    print(f"dry run: {out.get('estimate')} ({out['dry_run']['wall_s']} s)")
    out["run"] = sampled(run, env, work / "run.log")
    metrics = next(runs.glob("*/metrics.json"))
    m = json.loads(metrics.read_text())
    keys = ("train_seconds", "eval_seconds", "peak_memory_mb", "n_users_evaluated", "params")
    out["run"]["metrics"] = {k: m[k] for k in keys}
    history = pd.read_parquet(metrics.parent / "history.parquet")
    out["run"]["epoch_cpu_seconds"] = float(history["cpu_seconds"].iloc[0])
    r = out["run"]
    print(f"run: {r['wall_s']} s, peak {r['peak_rss_gib']} GiB, {r['metrics']}")
    return out


if __name__ == "__main__":
    main()
