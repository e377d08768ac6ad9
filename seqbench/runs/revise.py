"""Re-key runs of an earlier model revision whose numbers today's code still computes under a
config: a model's revision moved with its defaults, and the fields it added keep the old
arithmetic at a value (`REVISED`); `seqbench runs migrate` writes those values into the
record, stamps today's revision, and re-reads the run's ablation against today's defaults."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from seqbench.models.base import MODELS, SeqModel, resolve_config
from seqbench.models.departures import switched
from seqbench.runs.identity import ablation_of, hash_identity


@dataclass(frozen=True)
class Revised:
    """A record of `model` at revision `old` is today's revision at `fields` (absent from it
    then, at the value that keeps its numbers); `moved`: the fields whose default moved with
    the revision (the run's default config takes today's for them)."""

    old: int | str
    fields: dict[str, Any]
    moved: tuple[str, ...]


#: per model, the earlier revision a config keeps
REVISED: dict[str, Revised] = {
    # linrec 2 (issue 54): positions from each row's first item, prefixes from shared windows;
    # revision 1 counted positions from the window's end (share_step: read by no old rule)
    "linrec": Revised(
        1, {"positions": "right", "share_step": 0}, ("instances", "positions", "share_step")
    ),
}


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
    keys = ("model", "dataset", "protocol", "seed", "data_checksum", "precision", "device")
    identity = {**{k: rec[k] for k in keys}, "config": config, "revision": cls.revision}
    identity.update({k: rec[k] for k in ("code", "procs") if k in rec})
    new_id = hash_identity(identity)
    record = {**identity, "run_id": new_id, "default_config": default}
    record["departures"] = switched(cls.declared_departures(), config, default)
    moved = new_id != rec["run_id"]
    record["migrated_from"] = str(rec["run_id"] if moved else rec["migrated_from"])
    if "seqbench_version" in rec:
        record["seqbench_version"] = rec["seqbench_version"]
    ablate = ablation_of(config, default, cls.ablations)
    return new_id, record, {**metrics, "run_id": new_id, "ablate": ablate}
