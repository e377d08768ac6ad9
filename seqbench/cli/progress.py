"""Training progress on stderr: bars on a terminal, else a plain line per epoch."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from seqbench.cli.app import bars, log
from seqbench.training.context import EpochReport, LogObserver, Observer


class TrainingBars(Observer):
    """The epoch and step bars of one run, drawn on stderr (stdout is for results)."""

    def __init__(self) -> None:
        self.bars = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            console=Console(stderr=True),
            transient=False,
        )
        self.train = self.step = None

    def on_start(self, epochs: int, done: int) -> None:
        self.bars.start()
        self.train = self.bars.add_task("train", total=epochs, completed=done, info="")

    def on_epoch_start(self, epoch: int, steps: int) -> None:
        self.step = self.bars.add_task(f"epoch {epoch}", total=steps, info="")

    def on_step(self, step: int, loss: float) -> None:
        self.bars.update(self.step, completed=step, info=f"loss {loss:.4f}")

    def on_epoch(self, report: EpochReport) -> None:
        if self.step is not None:
            self.bars.remove_task(self.step)
            self.step = None
        info = f"loss {report.loss:.4f}  best {report.metric} {report.best:.4f}"
        self.bars.update(self.train, completed=report.epoch, info=info)

    def on_end(self) -> None:
        self.bars.stop()

    def on_log(self, message: str) -> None:
        log(message)


def run_observer(progress: bool | None) -> Observer:
    """Bars for --progress (by default on a terminal), else a plain line per epoch."""
    return TrainingBars() if bars(progress) else LogObserver(log)
