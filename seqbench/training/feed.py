"""Feeding the training step: one epoch's batches built, split and planned on a background
thread (`engine.step_pieces`), so the host work of the next steps overlaps the device's work on
this one; on CUDA through pinned memory with non-blocking copies.

The thread is the only user of the epoch's generator while it builds, and it builds the whole
epoch's batches before the first piece (the step count sets the learning-rate schedule), so
every random draw happens in the same order as in a loop on the main thread: the digits are
the same. The generator's state after the build is what the epoch's checkpoint keeps.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import torch

from seqbench.data.dataset import SeqDataset
from seqbench.errors import stops_deferred
from seqbench.models.base import Batch, SeqModel
from seqbench.training.engine import Piece, step_pieces

#: how many steps' pieces wait ready ahead of the step (bounds the host and pinned memory)
AHEAD = 4
_END = object()


class EpochFeed:
    """One epoch's steps, prepared on a thread: `steps()` waits for the batches to be built,
    iterating yields each step's pieces on the device. `close()` stops an unfinished feed."""

    def __init__(
        self,
        model: SeqModel,
        data: SeqDataset,
        gen: torch.Generator,
        device: torch.device,
        skip: int = 0,
    ) -> None:
        self.model, self.data, self.gen, self.device = model, data, gen, device
        #: the generator before the build (a mid-epoch checkpoint rebuilds the same batches
        #: from it and `skip`s the steps already taken)
        self.gen_start, self.skip = gen.get_state(), skip
        self.gen_state: torch.Tensor | None = None
        #: the epoch's batches once built (held by the thread until the feed is closed)
        self.built: list[Batch] = []
        self._count = 0
        self._built = threading.Event()
        self._stop = threading.Event()
        self._ready: queue.Queue = queue.Queue(AHEAD)
        self._error: BaseException | None = None
        self._threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._run, name="seqbench-feed", daemon=True)
        try:
            with stops_deferred():  # a stop taken here finds the thread started: it is closed
                self._thread.start()
        except BaseException:
            if self._thread.ident is not None:  # started: ended before the stop goes on
                self.close()
            raise

    def _run(self) -> None:
        torch.set_num_threads(self._threads)  # a new thread starts with the process default
        try:
            batches = list(self.model.train_batches(self.data, self.gen))
            self._count, self.gen_state = len(batches), self.gen.get_state()
            self.built = batches
            self._built.set()
            for batch in batches[self.skip :]:
                if not self._put(step_pieces(self.model, batch, self.device)):
                    return
        except BaseException as e:  # re-raised on the training thread
            self._error = e
        finally:
            self._built.set()
            self._put(_END)

    def _put(self, item: object) -> bool:
        """Queue `item`, waiting for room; False once the feed is closed."""
        while not self._stop.is_set():
            try:
                self._ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def steps(self) -> int:
        """The epoch's number of optimiser steps (waits for the batches to be built)."""
        self._built.wait()
        self._raise()
        return self._count

    def __iter__(self) -> Iterator[list[Piece]]:
        while (item := self._ready.get()) is not _END:
            yield item
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Stop the thread (a feed abandoned mid-epoch, or prepared for an epoch not run)."""
        self._stop.set()
        self._thread.join()
        self.built = []
