"""Re-key run folders stored before run ids hashed each model's revision (seqbench <= 0.5.0):
each run's new id is computed from its own recorded spec, written out in full, and the folder
is renamed to it, its old id kept in its record. Nothing is re-trained and no number changes.

Before, a run id hashed the seqbench version, and a config field sitting at a value that kept
the ids of runs stored before the field was left out of the hash (`quiet`); what such an absent
field meant is frozen here (`ABSENT`), the only place that still knows it. A run of an earlier
model revision that a config keeps is re-keyed to today's (`runs.revise`), and a run trained
under a time budget before ids hashed it takes that budget into its id.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqbench.errors import ConfigError
from seqbench.io import atomic_path, write_json
from seqbench.models.base import MODELS, ModelConfig, SeqModel, resolve_config
from seqbench.models.losses import LOSSES
from seqbench.plugins import origin
from seqbench.runs.identity import ablation_of, hash_identity, recorded_identity
from seqbench.runs.result import load_json
from seqbench.runs.revise import REVISED, revisable, revise, with_added_fields, with_budget
from seqbench.runs.store import EVALUATIONS, PARTIAL_PREFIX, RunFolder

#: the releases whose models compute what today's do from the same full config (every change
#: of numbers since 0.2.0 came with a config field: batching=micro is 0.2.0's arithmetic,
#: bias_tables=shared with pos_init=truncated HSTU's 0.4.0; CHANGELOG.md)
RELEASES = ("0.2.0", "0.3.0", "0.4.0", "0.5.0")
#: the keys an old run id hashed (precision, device and code only when recorded)
OLD_KEYS = ("model", "dataset", "config", "protocol", "seed", "data_checksum", "version")
OLD_OPTIONAL = ("precision", "code", "device")

_BASE = {"min_epochs": 0, "optimizer": "adam", "order": "original"}
_OBJECTIVE = {
    "ce_chunk": 2048,
    "gbce_t": 0.75,
    "loss": "bce",
    "negatives": 0,
    "sampling": "uniform",
}
_CLOZE = {**_OBJECTIVE, "ce_chunk": 0, "loss": "ce"}
_SASREC = {
    **_BASE,
    **_OBJECTIVE,
    "attn_out_dropout": True,
    "attn_proj": True,
    "init": "seqbench",
    "instances": "all_positions",
    "positions": "right",
}
#: per model, the value a config field absent from an old record had (the fields its `quiet`
#: declarations left out of the run id at their default); other models: the shared ones
ABSENT: dict[str, dict[str, Any]] = {
    "bert4rec": {**_BASE, **_CLOZE},
    "bert4rec_s": {**_BASE, **_CLOZE},
    "bsarec": {**_BASE, "instances": "prefixes"},
    "caser": {**_BASE, **_OBJECTIVE, "instances": "windows"},
    "cbit": {**_BASE, **_CLOZE},
    "cl4srec": _SASREC,
    "cosebert": {**_BASE, **_CLOZE},
    "coserec": _SASREC,
    "duorec": {**_BASE, **_CLOZE, "instances": "prefixes"},
    "fearec": {**_BASE, "instances": "prefixes"},
    "fmlprec": {**_BASE, "instances": "prefixes"},
    "gru4rec": {**_BASE, **_CLOZE, "instances": "all_positions"},
    "gsasrec": {k: v for k, v in _SASREC.items() if k not in ("loss", "negatives")},
    "hstu": {
        "min_epochs": 0,
        "order": "original",
        "instances": "all_positions",
        "bias_tables": "shared",
        "pos_init": "truncated",
    },
    "linrec": {**_BASE, "instances": "prefixes", **REVISED["linrec"].fields},
    "lrurec": {"min_epochs": 0, "order": "original", "instances": "all_positions"},
    "nova_bert": {**_BASE, **_CLOZE},
    "popularity": _BASE,
    "sasrec": _SASREC,
    "sasrec_ce": {k: v for k, v in _SASREC.items() if k != "loss"},
    "stosa": {**_BASE, **_OBJECTIVE, "instances": "all_positions", "loss": "bpr"},
}

#: the suffix of a folder parked between its records' rewrite and its rename
MIGRATING = ".migrating"


class MigrationError(ConfigError):
    """A run folder that cannot be re-keyed (one line: the folder, why, the fix)."""


@dataclass(frozen=True)
class Move:
    """One run folder's re-keying: where it is, its old and new id, and its new records."""

    path: Path
    old_id: str
    new_id: str
    config: dict[str, Any]
    metrics: dict[str, Any]

    @property
    def moves(self) -> bool:
        """Whether anything changes (False: the folder is already today's and in place)."""
        return self.path.name != self.new_id or "revision" not in load_json(
            RunFolder(self.path).config
        )


def full_config(model: str, cls: type[SeqModel], recorded: dict[str, Any]) -> dict[str, Any]:
    """The complete config of an old record: its fields, the absent ones at the value their
    absence meant, CBiT's old `main_loss` key read as the loss, and `negatives_from` (left out
    wherever it drew outside the user's items) restored."""
    values = dict(recorded)
    fields = {f.name: f for f in dataclasses.fields(cls.Config)}
    if "main_loss" in values and "loss" in fields:
        main = values.pop("main_loss")
        if main == "bce":
            values["loss"] = "bce"
    for key, value in ABSENT.get(model, _BASE).items():
        if key in fields:
            values.setdefault(key, value)
    if "negatives_from" in fields and "negatives_from" not in values:
        default = fields["negatives_from"].default
        loss = values.get("loss", fields["loss"].default if "loss" in fields else "bce")
        keeps = default == "unseen" or (default == "default" and _unseen(loss))
        values["negatives_from"] = default if keeps else "unseen"
    return values


def _unseen(loss: str) -> bool:
    spec = LOSSES.get(loss) if loss in LOSSES else None
    return spec is not None and spec.negatives_from == "unseen"


def plan_move(path: Path) -> Move:
    """How one run folder is re-keyed, from its recorded spec (a one-line MigrationError when
    it cannot be: a record that does not hash to its id, a release whose arithmetic today's
    models do not compute, a model not registered, a config today's model cannot take)."""
    folder = RunFolder(path)
    rec = load_json(folder.config)
    metrics = load_json(folder.metrics)
    where = folder.config
    if "revision" in rec:  # already re-keyed: its record hashes to its id
        return _rekeyed(path, rec, metrics)
    old_id, cls = _old_record(where, rec)
    model = str(rec["model"])
    identity = {
        "model": model,
        "dataset": rec["dataset"],
        "config": dataclasses.asdict(_todays_config(where, old_id, cls, rec)),
        "revision": cls.revision,
        "protocol": rec["protocol"],
        "seed": rec["seed"],
        "data_checksum": rec["data_checksum"],
        "precision": rec.get("precision", "fp32"),
        "device": rec.get("device", "cpu"),
    }
    if (code := origin(cls)) is not None:
        identity["code"] = code.identity()
    identity = with_budget(identity, metrics)
    new_id = hash_identity(identity)
    default = rec.get("default_config")
    if default is None:
        default = dataclasses.asdict(resolve_config(cls, str(rec["dataset"])))
    recorded_ablate = {**rec.get("ablate", {}), **metrics.get("ablate", {})}
    axes = tuple(a for a in cls.ablations if a in recorded_ablate)
    ablate = ablation_of(identity["config"], default, axes)
    record = {
        **identity,
        "run_id": new_id,
        "migrated_from": old_id,
        "seqbench_version": str(rec["version"]),
    }
    for key in ("default_config", "departures"):
        if key in rec:
            record[key] = rec[key]
    new_metrics = {**metrics, "run_id": new_id, "ablate": ablate}
    if model in REVISED:  # its defaults moved since: read against today's
        return _revised(path, old_id, record, new_metrics)
    return Move(path, old_id, new_id, record, new_metrics)


def _rekeyed(path: Path, rec: dict[str, Any], metrics: dict[str, Any]) -> Move:
    """The move of a record already re-keyed (it hashes to its id): the config fields added
    since (`ADDED`), then a revision today's model computes under a config (`REVISED`)."""
    old_id = hash_identity(recorded_identity(rec))
    if old_id != rec.get("run_id"):
        where = RunFolder(path).config
        raise MigrationError(f"{where}: the record does not hash to its run_id: restore it")
    rec = with_budget(with_added_fields(rec), metrics)
    if revisable(rec):
        return _revised(path, old_id, rec, metrics)
    new_id = hash_identity(recorded_identity(rec))
    return Move(path, old_id, new_id, {**rec, "run_id": new_id}, {**metrics, "run_id": new_id})


def _revised(path: Path, old_id: str, rec: dict[str, Any], metrics: dict[str, Any]) -> Move:
    """The move of a record of a model whose revision `REVISED` keeps (`revise`)."""
    try:
        new_id, record, new_metrics = revise(rec, metrics, MODELS.get(str(rec["model"])))
    except (TypeError, ConfigError) as e:
        raise MigrationError(
            f"{path}: {rec['model']}'s config cannot take the record ({e})"
        ) from None
    return Move(path, old_id, new_id, record, new_metrics)


def _old_record(where: Path, rec: dict[str, Any]) -> tuple[str, type[SeqModel]]:
    """(old run id, today's model class) of a record of seqbench <= 0.5.0, checked: it hashes
    to its id, its release computes what today's models do and its model is registered."""
    old = {k: rec[k] for k in OLD_KEYS if k in rec}
    old.update({k: rec[k] for k in OLD_OPTIONAL if k in rec})
    old_id = hash_identity(old) if set(OLD_KEYS) <= set(rec) else None
    if old_id is None or old_id != rec.get("run_id"):
        raise MigrationError(
            f"{where}: the record does not hash to its run_id {rec.get('run_id')!r}: it was "
            "edited or is not a seqbench run; restore it or remove the folder"
        )
    model, version = str(rec["model"]), str(rec["version"])
    if version not in RELEASES:
        raise MigrationError(
            f"{where}: run {old_id} was made by seqbench {version}, whose numbers today's "
            f"models do not compute from its config ({', '.join(RELEASES)} can be re-keyed): "
            "re-run it, or remove the folder"
        )
    if model not in MODELS:
        raise MigrationError(
            f"{where}: model {model!r} is not registered: load its plugin with --plugin"
        )
    return old_id, MODELS.get(model)


def _todays_config(
    where: Path, old_id: str, cls: type[SeqModel], rec: dict[str, Any]
) -> ModelConfig:
    """The record's config as today's model takes it, every field given; its plugin source,
    if any, the loaded one."""
    model = str(rec["model"])
    config = full_config(model, cls, rec["config"])
    absent = sorted({f.name for f in dataclasses.fields(cls.Config)} - set(config))
    if absent:
        raise MigrationError(
            f"{where}: run {old_id} does not record {', '.join(absent)}, which decide "
            f"today's {model}: re-run it, or remove the folder"
        )
    try:
        cfg = cls.Config(**config)
    except TypeError as e:
        raise MigrationError(f"{where}: {model}'s config cannot take the record ({e})") from None
    code = origin(cls)
    if (code is None) != ("code" not in rec):
        raise MigrationError(
            f"{where}: run {old_id} was {'a plugin' if 'code' in rec else 'a built-in'} "
            f"model, today's {model} is not: load the plugin that made it with --plugin"
        )
    if code is not None and code.source != rec["code"].get("source_sha256"):
        raise MigrationError(
            f"{where}: run {old_id}'s plugin source {rec['code'].get('source_sha256', '')[:12]} "
            f"is not the loaded {model}'s ({code.source[:12]}): load the source that made it"
        )
    return cfg


def run_folders(root: Path) -> list[Path]:
    """The finished run folders of a store (or a study's metrics/ folder)."""
    if not root.is_dir():
        raise MigrationError(f"{root}: no such folder: give a run store or a metrics/ folder")

    def finished(p: Path) -> bool:
        parked = p.name.startswith(PARTIAL_PREFIX) and p.name.endswith(MIGRATING)
        plain = not p.name.startswith(PARTIAL_PREFIX)
        return p.is_dir() and (plain or parked) and RunFolder(p).metrics.is_file()

    return sorted(p for p in root.iterdir() if finished(p))


def plan_store(root: Path) -> list[Move]:
    """Every folder's move, refused as a whole on any collision: two runs re-keyed to one
    id, or a new id whose folder holds another run."""
    moves = [plan_move(p) for p in run_folders(root)]
    by_new: dict[str, list[Move]] = {}
    for m in moves:
        by_new.setdefault(m.new_id, []).append(m)
    for new_id, same in by_new.items():
        if len(same) > 1:
            names = ", ".join(m.path.name for m in same)
            raise MigrationError(
                f"{root}: runs {names} are one experiment ({new_id}): keep one of them "
                "(remove the others' folders), then migrate again"
            )
    names = {m.path.name for m in moves}
    for m in moves:
        target = root / m.new_id
        if target.exists() and m.path.name != m.new_id and m.new_id not in names:
            raise MigrationError(f"{target}: exists and is not a run of {root}: move it away")
    return moves


def apply_moves(moves: Iterable[Move], log: Callable[[str], None] = lambda s: None) -> int:
    """Write each moved run's records (atomically), then rename its folder; the count moved.
    A re-run after an interruption finishes what was left (a re-keyed record is kept)."""
    moves = [m for m in moves if m.moves]
    # two passes, so that a folder named like another's new id is out of the way first
    parked = []
    for m in moves:
        folder = RunFolder(m.path)
        write_json(folder.config, m.config)
        write_json(folder.metrics, m.metrics)
        for summary in sorted((m.path / EVALUATIONS).glob("*.json")):
            if not summary.name.endswith(".per_user.json"):
                write_json(summary, {**load_json(summary), "run_id": m.new_id})
        tmp = m.path.with_name(f"{PARTIAL_PREFIX}{m.new_id}{MIGRATING}")
        m.path.rename(tmp)
        parked.append((tmp, m))
    for tmp, m in parked:
        tmp.rename(m.path.with_name(m.new_id))
        log(f"{m.old_id} -> {m.new_id}")
    return len(parked)


#: the files whose run ids `rename_ids` replaces
TEXT_SUFFIXES = (".md", ".yaml", ".yml", ".txt", ".json", ".jsonl", ".csv", ".html", ".tex", ".py")


def rename_ids(
    paths: Iterable[Path],
    renamed: dict[str, str],
    dry_run: bool = False,
    stores: Iterable[Path] = (),
) -> list[Path]:
    """Replace each old run id by its new one in the text files under `paths`, outside the
    run `stores` (whose records keep the old id); the files changed."""
    skip = [s.resolve() for s in stores]
    files = [
        f
        for p in paths
        for f in ([p] if p.is_file() else sorted(p.rglob("*")))
        if f.is_file()
        and f.suffix in TEXT_SUFFIXES
        and not any(f.resolve().is_relative_to(s) for s in skip)
    ]
    pattern = re.compile("|".join(map(re.escape, sorted(renamed, key=len, reverse=True))))
    changed = []
    for f in files if renamed else ():
        text = f.read_text(errors="surrogateescape")
        new = pattern.sub(lambda m: renamed[m.group(0)], text)
        if new != text:
            changed.append(f)
            if not dry_run:
                with atomic_path(f) as tmp:
                    tmp.write_text(new, errors="surrogateescape")
    return changed
