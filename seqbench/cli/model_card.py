"""`seqbench models [MODEL]`: the registered models, or one model's paper, defaults, ablation axes
and declared departures; both as blocks of labelled lines that read at 80 columns."""

from __future__ import annotations

import dataclasses
import re
import textwrap

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from seqbench.models.base import MODELS, SeqModel, field_choices, get_model
from seqbench.models.departures import BASIS_TEXT, Departure

#: the label column of a block: the longest label, its colon and a space
LABEL_WIDTH = len("authors' code: ")


def print_model_card(name: str, console: Console) -> None:
    """Print the model's card; each departure as a block (topic, paper, authors' code,
    seqbench, switch)."""
    cls = get_model(name)
    console.print(f"[bold]{cls.name}[/bold] — {escape(cls.paper)}")
    defaults = dataclasses.asdict(cls.Config())
    console.print(f"revision: {cls.revision} (its run ids hash it; it moves with its numbers)")
    console.print("defaults: " + " ".join(f"{k}={v}" for k, v in defaults.items()))
    for dataset, values in cls.dataset_defaults.items():
        if values:
            console.print(f"  {dataset}: " + " ".join(f"{k}={v}" for k, v in values.items()))
    console.print("ablation axes: " + (axes_text(cls) or "none"))
    presets = [n for n in MODELS.names() if MODELS.get(n).preset_of == cls.name]
    if presets:
        console.print("presets: " + ", ".join(presets))
    if cls.preset_of:
        console.print(f"preset of: {cls.preset_of} (the same model, its own defaults)")
    console.print()
    console.print(Text(f"{cls.name}: declared departures", style="bold"))
    for d in cls.declared_departures():
        console.print()
        print_block(console, departure_heading(d), departure_lines(d))


def axes_text(cls: type[SeqModel]) -> str:
    """The model's ablation axes with their choices (`<value>` for a numeric axis)."""
    return ", ".join(
        f"{a}=" + "|".join(map(str, field_choices(cls.Config, a) or ("<value>",)))
        for a in cls.ablations
    )


def departure_heading(d: Departure) -> str:
    """The topic and why seqbench's default is what it is."""
    return f"{d.topic} — {BASIS_TEXT[d.basis]}"


def departure_lines(d: Departure) -> list[tuple[str, str]]:
    """(label, text) lines of one departure's block."""
    return [
        ("paper", d.paper),
        ("authors' code", d.code),
        ("seqbench", d.seqbench),
        ("switch", d.switch),
    ]


#: a paper's venue and year at the end of its citation ("ICDM 2018"; "2021" where no venue)
VENUE = re.compile(r"(?:([A-Z][A-Za-z-]*) )?((?:19|20)\d\d)")


def short_paper(paper: str) -> tuple[str, str]:
    """(authors and venue, year) of a model's citation: its first part and its last venue."""
    found = VENUE.findall(paper)
    authors = paper.split(",")[0]
    if not found:
        return authors, ""
    venue, year = found[-1]
    return (f"{authors}, {venue}" if venue else authors), year


def model_rows() -> list[tuple[str, str, str, str]]:
    """(name, paper's authors and venue, year, family) of every registered model."""
    return [
        (name, *short_paper(MODELS.get(name).paper), MODELS.get(name).family)
        for name in MODELS.names()
    ]


#: the widest name, paper and year columns of the model list
CAPS = (12, 28, 4)


def print_model_list(console: Console) -> None:
    """One line per registered model: name, paper (authors, venue), year and family; the card
    of one with `seqbench models NAME`."""
    rows = model_rows()
    # columns as wide as their entries, at most CAP: a long plugin name or citation overhangs
    # its own line only, never widening every built-in model's past 80 columns
    widths = [min(max(len(r[i]) for r in rows), cap) for i, cap in enumerate(CAPS)]
    for name, paper, year, family in rows:
        console.print(
            f"{name:<{widths[0]}}  {year:<{widths[2]}}  {paper:<{widths[1]}}  {family}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print(
        "seqbench models NAME: a model's paper, defaults, ablation axes and departures",
        markup=False,
        highlight=False,
    )


def print_block(console: Console, heading: str, lines: list[tuple[str, str]]) -> None:
    """A bold heading, then each (label, text) wrapped at the console's width with a hanging
    indent under the text; words are never split (a longer word overhangs the width)."""
    console.print(Text(heading, style="bold"))
    for label, text in lines:
        for line in wrap_labelled(label, text, console.width):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def wrap_labelled(label: str, text: str, width: int) -> list[str]:
    """'  label:  text…' wrapped to `width`, continuation lines aligned under the text."""
    first = f"  {label + ':':<{LABEL_WIDTH - 1}} "
    return textwrap.wrap(
        text,
        width,
        initial_indent=first,
        subsequent_indent=" " * len(first),
        break_long_words=False,
        break_on_hyphens=False,
    ) or [first.rstrip()]
