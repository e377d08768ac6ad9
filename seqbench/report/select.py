"""Filter finished runs (loaded by the run store) and refuse tables that mix incomparable runs.

Two runs are comparable only when they were measured under the same protocol definition and
on the same prepared data (dataset card checksum); every table goes through `check_comparable`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from seqbench.errors import SeqbenchError
from seqbench.evaluation.protocols import Protocol
from seqbench.runs.result import Evaluation, ResultError
from seqbench.runs.store import Run, check_table


class ReportError(SeqbenchError):
    """The requested table cannot be built honestly (mixed runs, nothing to show, ...)."""


@dataclass
class Selection:
    """The runs a table is built from, with notes on what was chosen for the user."""

    runs: list[Run]
    notes: list[str] = field(default_factory=list)
    #: the run ids the user named (--runs): each is shown or the table is refused
    named: frozenset[str] = frozenset()


def _matches(value: str, wanted: list[str] | None) -> bool:
    return not wanted or value.lower() in {w.lower() for w in wanted}


def select_runs(
    runs: list[Run],
    *,
    datasets: list[str] | None = None,
    models: list[str] | None = None,
    protocol: str | None = None,
    run_ids: set[str] | None = None,
) -> Selection:
    """Filter runs; without `protocol`, take the most common one among the matches and say so."""
    picked = [
        r
        for r in runs
        if _matches(r.dataset, datasets)
        and _matches(r.model, models)
        and (run_ids is None or r.run_id in run_ids)
    ]
    notes: list[str] = []
    if protocol is None and picked:
        counts = Counter(r.protocol for r in picked)
        if len(counts) > 1:
            newest = {r.protocol: r.finished_at for r in picked}
            protocol = max(counts, key=lambda p: (counts[p], newest[p]))
            others = ", ".join(
                f"{p} ({n} runs)" for p, n in sorted(counts.items()) if p != protocol
            )
            notes.append(
                f"several protocols in the run store: showing {protocol} "
                f"({counts[protocol]} runs); also present: {others} — choose with --protocol"
            )
    picked_before = picked
    if protocol is not None:
        picked = [r for r in picked if r.protocol == protocol]
    if not picked:
        wanted = " and ".join(
            f"{k} {', '.join(v)}" for k, v in (("datasets", datasets), ("models", models)) if v
        )
        where = f" matching {wanted}" if wanted else ""
        proto = f" under protocol {protocol}" if protocol else ""
        raise ReportError(
            f"no finished runs{where}{proto}: run `seqbench run MODEL` first "
            "(`seqbench runs` lists the store)"
        )
    dropped = sorted(r.run_id for r in picked_before if r.protocol != protocol) if protocol else []
    named = frozenset(run_ids or ())
    if named & set(dropped):
        first = sorted(named & set(dropped))[0]
        raise ReportError(
            f"--runs: run {first} was measured under another protocol than {protocol}: "
            "name runs of one protocol (or choose it with --protocol)"
        )
    return Selection(picked, notes, named)


@dataclass(frozen=True)
class EvaluatedRun(Run):
    """A run's best weights as re-evaluated on test under another protocol (`seqbench
    evaluate`): its test metrics, protocol and per-user metrics are the evaluation's."""

    evaluation: Evaluation

    @property
    def protocol_spec(self) -> Protocol:
        return self.evaluation.protocol_spec

    @property
    def has_per_user(self) -> bool:
        return self.folder.evaluation_per_user(self.protocol).is_file()

    @cached_property
    def per_user(self) -> pd.DataFrame:
        return pd.read_parquet(self.folder.evaluation_per_user(self.protocol))


def evaluated_under(runs: list[Run], protocol: str) -> list[Run]:
    """The runs as re-evaluated under `protocol`; an error naming the runs without one."""
    out: list[Run] = []
    missing = []
    for r in runs:
        path = r.folder.evaluation(protocol)
        if not path.is_file():
            missing.append(r.run_id)
            continue
        redo = f"`seqbench evaluate {r.run_id} --protocol {protocol} --force` redoes it"
        try:
            evaluation = Evaluation.read(path)
            check_table(r.folder.evaluation_per_user(protocol), ("user",))
        except ResultError as e:
            raise ReportError(f"{e}: {redo}") from None
        result = r.result.evaluated(protocol, evaluation.metrics)
        out.append(EvaluatedRun(r.path, result, r.spec, evaluation))
    if missing:
        raise ReportError(
            f"--evaluated-under {protocol}: {len(missing)} run(s) not evaluated under it "
            f"({_short(missing)}): run `seqbench evaluate RUN_ID --protocol {protocol}` first"
        )
    return out


def _short(run_ids: list[str], n: int = 3) -> str:
    shown = ", ".join(run_ids[:n])
    return shown + (f", … (+{len(run_ids) - n})" if len(run_ids) > n else "")


def check_comparable(runs: list[Run]) -> None:
    """Raise ReportError naming the difference if runs differ in protocol or dataset card."""
    protocols: dict[Protocol, list[Run]] = {}
    for r in runs:
        protocols.setdefault(r.protocol_spec, []).append(r)
    if len(protocols) > 1:
        groups = sorted(protocols.values(), key=len, reverse=True)
        specs = [g[0].protocol_spec.to_dict() for g in groups]
        names = {s.get("name") for s in specs}
        if len(names) > 1:
            detail = " vs ".join(
                f"{g[0].protocol} ({len(g)} runs: {_short([r.run_id for r in g])})" for g in groups
            )
            raise ReportError(
                f"runs measured under different protocols cannot share a table: {detail}; "
                "choose one with --protocol"
            )
        keys = sorted(
            k for k in set(specs[0]) | set(specs[1]) if specs[0].get(k) != specs[1].get(k)
        )
        detail = "; ".join(f"{k}: " + " vs ".join(repr(s.get(k)) for s in specs) for k in keys)
        raise ReportError(
            f"runs under protocol {specs[0].get('name')!r} were recorded with different "
            f"definitions of it ({detail}): {_short([r.run_id for r in groups[-1]])} — "
            "re-run them with the current protocol"
        )
    by_dataset: dict[str, dict[str, list[str]]] = {}
    for r in runs:
        by_dataset.setdefault(r.dataset, {}).setdefault(r.checksum, []).append(r.run_id)
    for dataset, sums in sorted(by_dataset.items()):
        if len(sums) > 1:
            ordered = sorted(sums.items(), key=lambda kv: len(kv[1]), reverse=True)
            detail = " vs ".join(
                f"checksum {c[:12] or '(none)'} ({len(ids)} runs: {_short(ids)})"
                for c, ids in ordered
            )
            raise ReportError(
                f"runs on dataset {dataset!r} were measured on different dataset cards: {detail}; "
                "remove the stale runs (or point --runs-dir elsewhere) and re-run them"
            )
