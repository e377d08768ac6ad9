"""Time to Split's released leave-one-out SASRec results, read for placing this study's rows.

Gusak et al. (RecSys 2025) publish one test and one validation CSV per dataset and model, one
row per point of a 108-point grid (hidden units x blocks x heads x dropout, in that product
order). This prints, for Beauty and ML-1M, the grid point chosen on validation NDCG@10 (their
published value) and the grid point with seqbench's SASRec+ architecture (d 64, 2 blocks, 1
head, dropout 0.1): `python time_to_split.py CLONE > time_to_split.md` on a clone of
monkey0head/time-to-split at 5a33f9f73229fc6f0130598e844d0c610029205c (the CSVs are read,
nothing of theirs is run).
"""

import csv
import itertools
import sys
from pathlib import Path

#: their runs/configs/model/SASRec.yaml `hyper`, in the order runs/train.py takes the product
GRID = list(itertools.product([32, 64, 128, 256], [1, 2, 3], [1, 2, 4], [0.1, 0.3, 0.5]))
SEQBENCH = (64, 2, 1, 0.1)
METRICS = ("HR@10", "NDCG@10", "HR@20", "NDCG@20")


def rows(path: Path) -> dict[int, dict[str, float]]:
    """One CSV of theirs as grid point -> metric -> value."""
    with path.open() as f:
        return {
            int(r["grid_point"]): {k: float(v) for k, v in r.items()} for r in csv.DictReader(f)
        }


def main(clone: Path) -> None:
    print(
        "| dataset | grid point | d, blocks, heads, dropout | valid NDCG@10 | "
        + " | ".join(METRICS)
        + " |"
    )
    print("|---|---|---|---:|" + "---:|" * len(METRICS))
    for name in ("Beauty", "Movielens-1m"):
        folder = clone / "data/results/leave-one-out" / name / "SASRec/final_results"
        val, test = rows(folder / "val.csv"), rows(folder / "test.csv")
        best = max(val, key=lambda g: val[g]["NDCG@10"])
        for label, point in (
            ("best on validation", best),
            ("seqbench's architecture", GRID.index(SEQBENCH)),
        ):
            values = " | ".join(f"{test[point][m]:.4f}" for m in METRICS)
            setting = ", ".join(str(x) for x in GRID[point])
            valid = val[point]["NDCG@10"]
            print(f"| {name} | {point} ({label}) | {setting} | {valid:.4f} | {values} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
