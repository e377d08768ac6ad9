"""Records written before a model changed, read as today's: a config field added since, at the
value that computes what the run did (`ADDED`, the revision unchanged), and an earlier revision
whose numbers today's code still computes under a config (`REVISED`: its revision moved with its
defaults); `seqbench runs migrate` writes those values into the record, stamps today's
revision, and re-reads the run's ablation against today's defaults."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from seqbench.models.base import MODELS, SeqModel, resolve_config
from seqbench.models.departures import switched
from seqbench.runs.identity import ablation_of, hash_identity, recorded_identity


@dataclass(frozen=True)
class Revised:
    """A record of `model` at revision `old` is today's revision at `fields` (absent from it
    then, at the value that keeps its numbers); `moved`: the fields whose default moved with
    the revision (the run's default config takes today's for them)."""

    old: int | str
    fields: dict[str, Any]
    moved: tuple[str, ...]


#: per model, config fields added after its runs were re-keyed (records with a `revision`),
#: each at the value that computes what the run computed: a record without the field gains
#: it and its id moves, its numbers do not (CHANGELOG names each addition)
ADDED: dict[str, dict[str, Any]] = {
    "cbit": {"dropout_masks": "bernoulli"},  # issue 54: int16 masks, a declared switch
}

#: per model, the earlier revision a config keeps
REVISED: dict[str, Revised] = {
    # linrec 2 (issue 54): positions from each row's first item, prefixes from shared windows;
    # revision 1 counted positions from the window's end (share_step: read by no old rule)
    "linrec": Revised(
        1, {"positions": "right", "share_step": 0}, ("instances", "positions", "share_step")
    ),
}


def with_added_fields(rec: dict[str, Any]) -> dict[str, Any]:
    """A re-keyed record with the `ADDED` fields it lacks, in its config and default config."""
    added = ADDED.get(str(rec["model"]), {})
    out = dict(rec)
    for key in ("config", "default_config"):
        if isinstance(rec.get(key), dict):
            out[key] = {**rec[key], **{k: v for k, v in added.items() if k not in rec[key]}}
    return out


def with_budget(rec: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """A record of a run trained under a time budget before run ids hashed it (seqbench <=
    0.5.x): the budget its result recorded, written into its identity (its id moves)."""
    minutes = metrics.get("budget_minutes")
    if "budget_minutes" in rec or minutes is None:
        return rec
    return {**rec, "budget_minutes": float(minutes)}


def revisable(rec: dict[str, Any]) -> bool:
    """Whether a record is of an earlier revision of its model that `REVISED` keeps."""
    rule = REVISED.get(str(rec.get("model")))
    return rule is not None and rec.get("revision") == rule.old != MODELS.get(rec["model"]).revision


def revise(
    rec: dict[str, Any], metrics: dict[str, Any], cls: type[SeqModel]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(new id, record, metrics) of a record of a model in `REVISED` at today's revision: its
    config with the revision's fields where absent, the default config's moved fields at
    today's defaults, its ablation and switched departures re-read against them; the id it had
    kept (`migrated_from`) where it moves."""
    rule = REVISED[str(rec["model"])]
    config = dataclasses.asdict(cls.Config(**{**rule.fields, **rec["config"]}))
    today = dataclasses.asdict(resolve_config(cls, str(rec["dataset"])))
    default = {**today, **rec.get("default_config", {})}
    default.update({k: today[k] for k in rule.moved})
    identity = recorded_identity(rec) | {"config": config, "revision": cls.revision}
    new_id = hash_identity(identity)
    record = {**identity, "run_id": new_id, "default_config": default}
    record["departures"] = switched(cls.declared_departures(), config, default)
    moved = new_id != rec["run_id"]
    record["migrated_from"] = str(rec["run_id"] if moved else rec["migrated_from"])
    if "seqbench_version" in rec:
        record["seqbench_version"] = rec["seqbench_version"]
    ablate = ablation_of(config, default, cls.ablations)
    return new_id, record, {**metrics, "run_id": new_id, "ablate": ablate}
