"""Scale benchmark: prepare an ML-20M-sized ratings.csv (20M interactions); report time and memory.

Writes a synthetic ML-20M-like `ratings.csv` (header userId,movieId,rating,timestamp; rows sorted
by user then movie like the real file; no duplicate pairs) into a temp folder, then runs
`seqbench prepare ml-20m` on it in a child process and reports its wall time and peak RSS.
Target on a 2-core machine: <= 60 s and <= 6 GB.

    python bench/bench_prepare.py [--rows 20000000] [--threads 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

N_USERS = 138_493
N_ITEMS = 26_699  # prime: user u's items (start + k * step) mod N_ITEMS are all distinct
CHILD = """
import json, resource, sys, time
from pathlib import Path
from seqbench.data.prepare import prepare
raw, root = Path(sys.argv[1]), Path(sys.argv[2])
t = time.perf_counter()
result = prepare("ml-20m", [raw], root, force=True, download=False)
wall = time.perf_counter() - t
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu = usage.ru_utime + usage.ru_stime
out = {"wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": usage.ru_maxrss * 1024}
print(json.dumps({**out, "stats": result.card["stats"]}))
"""


def write_ratings(path: Path, rows: int, seed: int = 0) -> None:
    """An ML-20M-like ratings.csv with `rows` interactions (ML-20M user ratio, >= 20 per user)."""
    rng = np.random.default_rng(seed)
    n_users = max(1, round(N_USERS * rows / 20_000_263))
    weights = rng.pareto(1.2, n_users) + 1
    lengths = 20 + np.floor(weights / weights.sum() * (rows - 20 * n_users)).astype(np.int64)
    lengths = np.minimum(lengths, N_ITEMS - 1)
    while (deficit := rows - int(lengths.sum())) > 0:  # exact total, no user above the cap
        lengths[np.flatnonzero(lengths < N_ITEMS - 1)[:deficit]] += 1
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


def main() -> None:
    """Generate the file, run prepare in a child process with the given threads, print results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="work folder to keep (default: temp)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="seqbench-bench-"))
    raw = work / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        write_ratings(raw / "ratings.csv", args.rows)
        size = (raw / "ratings.csv").stat().st_size
        print(
            f"wrote {args.rows:,} ratings ({size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s"
        )
        load = os.getloadavg()[0]
        threads = str(args.threads)
        env = {**os.environ, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
        t = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(raw), str(work / "data")],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        total = time.perf_counter() - t
        res = json.loads(out.stdout.strip().splitlines()[-1])
        child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        print(f"load average before: {load:.1f} on {os.cpu_count()} cores (other jobs slow it)")
        print(f"prepare ml-20m: {res['wall_s']:.1f} s inside prepare(), {total:.1f} s in all")
        print(f"CPU time of the child process: {res['cpu_s']:.1f} s (user + system, incl. imports)")
        print(f"peak memory: {max(res['peak_rss_bytes'], child_rss) / 2**30:.2f} GiB")
        print(f"stats: {res['stats']}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
