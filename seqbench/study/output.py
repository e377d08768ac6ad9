"""A study's tables, built by the report code from the study's stored runs, and the files of
its results folder: each table in its formats (and figure), each run's small files, and the
generated block of the README."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import get_protocol
from seqbench.io import atomic_dir, atomic_path
from seqbench.paths import inside
from seqbench.report.layouts import LAYOUTS, TableOptions
from seqbench.report.render import FORMATS, render
from seqbench.report.select import ReportError, Run
from seqbench.report.significance import SignificanceOptions
from seqbench.report.table_model import Entry, Table, all_runs, unique
from seqbench.runs.exported import ExportedRun, copy_exported, export
from seqbench.runs.result import Evaluation
from seqbench.runs.store import RunStore
from seqbench.study.plan import Plan, StudyRun, TablePlan, table_plans
from seqbench.study.spec import STUDY_FILE, Study

#: the folder of a study that holds its runs' small files, one sub-folder per run id
RUN_FILES = "metrics"
README_FILE = "README.md"
BEGIN = "<!-- seqbench:study:begin -->"
END = "<!-- seqbench:study:end -->"


@dataclass
class Built:
    """One table of a study: the format-free table, or why it could not be built yet."""

    plan: TablePlan
    table: Table | None
    reason: str = ""


@dataclass
class StudyOutput:
    """Everything a study renders: its tables and, per planned run, the stored run (or None)."""

    plan: Plan
    runs: list[Run | None]
    tables: list[Built] = field(default_factory=list)
    #: (run id, protocol) -> the run's best weights re-evaluated on test under that protocol
    evaluations: dict[tuple[str, str], Evaluation] = field(default_factory=dict)

    @property
    def done(self) -> list[Run]:
        """The stored runs, once each (two configurations may resolve to the same run)."""
        return unique(r for r in self.runs if r is not None)


def study_notes(p: Plan) -> list[str]:
    """What every table of the study says first: the study, its one budget and, when not
    fp32, its training precision."""
    s = p.study
    return [
        f"{s.title} — {s.protocol_text()}, seeds {s.seeds_text()}; budget: "
        f"{s.budget_text()}" + s.precision_clause() + "."
    ]


#: how a table's note lists the runs it lacks (`render_study` reads it back)
NOT_YET = "Not in the run store yet: "


def build(
    p: Plan,
    run_ids: Sequence[str | None],
    store: RunStore,
    notes: Sequence[str] = (),
    committed: Mapping[str, Run] | None = None,
    data_dir: str | Path | None = None,
) -> StudyOutput:
    """Build each table of the planned study from the runs the store has, else from the
    `committed` copies of the study folder (an `audit` table from the prepared data under
    `data_dir`); `notes` go first in every table (then a note on runs not in the store yet)."""
    stored = {**(committed or {}), **{r.run_id: r for r in store.list_runs()}}
    found = [stored.get(i) if i is not None else None for i in run_ids]
    out = StudyOutput(p, found)
    for run in out.done:
        for protocol in p.study.evaluate:
            if (path := run.folder.evaluation(protocol)).is_file():
                out.evaluations[run.run_id, protocol] = Evaluation.read(path)
    by_id = {id(s): r for s, r in zip(p.runs, found, strict=True)}
    for tp in table_plans(p):
        missing = sorted({describe(s) for s in tp.runs if by_id[id(s)] is None})
        extra = [f"{NOT_YET}{'; '.join(missing)}."] if missing else []
        try:
            table = build_table(tp, by_id, data_dir)
        except ReportError as e:
            out.tables.append(Built(tp, None, str(e)))
            continue
        if table is None:
            out.tables.append(Built(tp, None, "no run of this table is in the run store yet"))
            continue
        table.notes = [*notes, *extra, *table.notes]
        out.tables.append(Built(tp, table))
    return out


def describe(s: StudyRun) -> str:
    return f"{s.label} on {s.dataset} seed {s.request.seed}"


def build_table(
    tp: TablePlan, by_id: dict[int, Run | None], data_dir: str | Path | None = None
) -> Table | None:
    """The table in its layout from the stored runs of its entries (None: no run stored), or
    from the prepared data under `data_dir` for a layout that reads data; a baseline without
    runs in the table falls back to the best other entry."""
    t = tp.table
    layout = LAYOUTS.get(t.layout)
    entries = []
    for e in tp.entries:
        per = {d: [r for s in rs if (r := by_id[id(s)]) is not None] for d, rs in e.runs.items()}
        runs = {d: rs for d, rs in per.items() if rs}
        entries.append(Entry(e.label, runs, e.reference, e.group))
    if not layout.cards and not all_runs(entries):
        return None
    datasets = [d for d in tp.datasets if layout.cards or any(e.runs.get(d) for e in entries)]
    options = TableOptions(
        title=t.title,
        tests=SignificanceOptions(t.test, t.alpha, t.correction, ci=t.ci),
        baseline=t.baseline if any(e.label == t.baseline for e in entries) else "best",
        published=tp.published,
        published_sources=t.published_sources,
        dataset_labels=tp.labels,
        budget_columns=t.budget_columns,
        param=t.param,
        data_dir=data_dir,
        protocols=tp.protocols,
        external=t.external,
        margin=t.margin,
    )
    return layout.build(entries, datasets, t.metrics, options)


# ------------------------------------------------------------------ the results folder


def display_path(folder: Path) -> str:
    """The folder as the README names it: relative to the working directory when inside it
    (committed files never carry a machine's absolute path), else its name."""
    rel = os.path.relpath(folder.resolve(), Path.cwd())
    return folder.name if rel.startswith("..") else rel


def write_folder(
    folder: Path,
    out: StudyOutput,
    store: RunStore,
    keep: Collection[str] = (),
    preserve: Iterable[Run] = (),
) -> list[Path]:
    """Write the study's tables (each format, figures as PNG; those named in `keep` stay as
    they are, and then the README too), its runs' small files under metrics/<run_id>/ (replacing
    that folder; committed runs in `preserve` are kept there too) and the README block; every
    file via a temp file and a rename."""
    written = []
    for b in out.tables:
        if b.table is None or b.plan.table.name in keep:
            continue
        for fmt in b.plan.table.formats:
            path = inside(folder, f"{b.plan.table.name}.{FORMATS.get(fmt).suffix}", "table")
            with atomic_path(path) as tmp:
                tmp.write_text(render(b.table, fmt))
            written.append(path)
        if b.table.figure is not None:
            path = inside(folder, f"{b.plan.table.name}.png", "table")
            with atomic_path(path) as tmp:
                b.table.figure.savefig(
                    tmp, format="png", dpi=150, bbox_inches="tight", metadata={"Software": None}
                )
            written.append(path)
    if out.done:  # (with no run stored yet, earlier files stay until there is one)
        with atomic_dir(folder / RUN_FILES) as tmp:
            done = {r.run_id for r in out.done}
            for run in [*out.done, *(r for r in preserve if r.run_id not in done)]:
                to = inside(tmp, run.run_id, "run id")
                if isinstance(run, ExportedRun):
                    copy_exported(run, to)
                else:
                    export(store, run.run_id, to)
        written.append(folder / RUN_FILES)
    if keep:
        return written
    readme = folder / README_FILE
    old = readme.read_text() if readme.is_file() else None
    text = splice_readme(old, readme_block(out, display_path(folder)), out.plan.study.title)
    with atomic_path(readme) as tmp:
        tmp.write_text(text)
    written.append(readme)
    return written


def evaluation_lines(out: StudyOutput) -> list[str]:
    """Each run's best weights tested under the study's other presets (`evaluate`), next to
    the test metrics of the protocol it was trained and selected under."""
    presets = out.plan.study.evaluate
    if not presets:
        return []
    head = [f"{out.plan.study.protocol} (trained)", *presets]
    lines = [
        "### The same best weights under other protocol presets",
        "",
        "Test HR@10 / NDCG@10 of each run's validation-selected weights (`seqbench evaluate "
        "RUN --protocol P`, stored in the run's evaluations/):",
        "",
        "| model | dataset | seed | " + " | ".join(head) + " |",
        "|---|---|---|" + "---:|" * len(head),
    ]
    for sr, run in zip(out.plan.runs, out.runs, strict=True):
        if run is None:
            continue
        cells = [f"{run.test['HR@10']:.4f} / {run.test['NDCG@10']:.4f}"]
        for p in presets:
            e = out.evaluations.get((run.run_id, p))
            cells.append(f"{e.metrics['HR@10']:.4f} / {e.metrics['NDCG@10']:.4f}" if e else "–")
        lines.append(
            f"| {sr.label} | {sr.dataset} | {sr.request.seed} | " + " | ".join(cells) + " |"
        )
    protocols = "; ".join(f"`{p}`: {get_protocol(p).description}" for p in presets)
    return [*lines, "", f"Presets: {protocols}.", ""]


def table_lines(out: StudyOutput) -> list[str]:
    """Each table of the README block: its title, links to its files and its markdown."""
    lines: list[str] = []
    for b in out.tables:
        t = b.plan.table
        lines += [f"### {t.title}", ""]
        if b.table is None:
            lines += [f"_Not rendered: {b.reason}._", ""]
            continue
        links = " · ".join(
            f"[{FORMATS.get(fmt).display}]({t.name}.{FORMATS.get(fmt).suffix})" for fmt in t.formats
        )
        figure = f" · [figure]({t.name}.png)" if b.table.figure is not None else ""
        lines += [f"Files: {links}{figure}", "", render(b.table, "markdown").rstrip(), ""]
    return lines


def run_lines(out: StudyOutput) -> list[str]:
    """The README block's list of runs: each planned run's id, epochs, stop, time, params (and
    its protocol label in a study with several)."""
    several = len(out.plan.study.used_protocols()) > 1
    extra = ("protocol | ", "---|") if several else ("", "")
    lines = [
        "### Runs",
        "",
        f"| model | dataset | {extra[0]}seed | run | epochs (best) | stopped | train s | params |",
        f"|---|---|{extra[1]}---|---|---:|---|---:|---:|",
    ]
    for sr, run in zip(out.plan.runs, out.runs, strict=True):
        protocol = f"| {sr.protocol} " if several else ""
        head = f"| {sr.label} | {sr.dataset} {protocol}| {sr.request.seed} "
        if run is None:
            lines.append(head + "| not run yet | | | | |")
            continue
        m = run.result
        lines.append(
            head + f"| [`{run.run_id}`]({RUN_FILES}/{run.run_id}/) "
            f"| {m.epochs_shown} ({m.best_epoch}) | {m.stopped} "
            f"| {float(m.train_seconds):,.0f} | {int(m.params):,} |"
        )
    return lines


def readme_block(out: StudyOutput, folder: str) -> str:
    """The generated part of a study's README: what was run under which budget, how to
    re-create it, each table (markdown, with links to the other formats) and the runs."""
    p = out.plan
    s = p.study
    data = ", ".join(s.datasets.values())
    # found in the run store or in this folder: the same count on any machine, so a fresh
    # clone re-renders the block byte for byte
    n_done = sum(r is not None for r in out.runs)
    lines = [
        f"<!-- generated by `seqbench study run {folder}` from {STUDY_FILE}; "
        "edits between these markers are overwritten -->",
        "",
        "## Results (generated)",
        "",
        f"- {protocol_line(s)}; datasets: {data}; seeds: {s.seeds_text()}.",
        f"- Budget: {s.budget_text()}"
        + (f"; {s.threads} torch thread(s) per run" if s.threads else "")
        + (f", {s.workers} runs at a time" if s.workers > 1 else "")
        + s.precision_clause()
        + ".",
        f"- Runs finished: {n_done} of {len(out.runs)}, each one's files under "
        f"`{RUN_FILES}/<run_id>/`.",
        "- Re-create (trains only what the run store lacks, then rewrites this folder):",
        "",
        "```",
        *(s.prepare_command(d) for d in dict.fromkeys(s.datasets.values())),
        f"seqbench study run {folder}"
        + (f" --precision {s.precision}" if s.precision != "fp32" else ""),
        "```",
        "",
    ]
    lines += table_lines(out)
    lines += evaluation_lines(out)
    lines += run_lines(out)
    return "\n".join(lines) + "\n"


def protocol_line(s: Study) -> str:
    """'Protocol `seqbench` (description)', or each protocol of a study with several."""
    used = s.used_protocols()
    if s.protocol_text() == f"protocol {s.protocol}":
        return f"Protocol `{s.protocol}` ({get_protocol(s.protocol).description})"
    shown = (f"{k} = `{v}` ({get_protocol(v).description})" for k, v in used.items())
    return "Protocols: " + "; ".join(shown)


def splice_readme(text: str | None, block: str, title: str) -> str:
    """The README with the generated block between the markers replaced (appended when the
    markers are absent; a new README when there is none). Prose outside stays as it is."""
    generated = f"{BEGIN}\n{block.strip()}\n{END}\n"
    if text is None:
        return f"# {title}\n\n{generated}"
    if (BEGIN in text) != (END in text) or text.find(BEGIN) > text.find(END):
        raise ConfigError(
            f"{README_FILE}: the markers {BEGIN} and {END} must both be present, in that order "
            "(or both absent)"
        )
    if BEGIN not in text:
        return text.rstrip("\n") + "\n\n" + generated
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1].lstrip("\n")
    return head + generated + ("\n" + tail if tail else "")
