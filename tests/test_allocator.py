"""allocator.retain_freed_memory: a training step's freed activations stay mapped for the next step.

Oracle: the kernel's count of minor page faults (getrusage), in a fresh interpreter so the
allocator starts from its defaults. Without the setting glibc returns each step's freed blocks
to the OS and every page is faulted back in (the regression found in issue 40).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from seqbench.allocator import retain_freed_memory

STEPS = """
import ctypes, ctypes.util, resource, sys
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "retain":
    from seqbench.allocator import retain_freed_memory
    assert retain_freed_memory()
SIZE = 8 * 2**20
def step():  # three 8 MiB activations written, then freed (malloc directly: nothing between)
    blocks = [libc.malloc(SIZE) for _ in range(3)]
    for b in blocks:
        ctypes.memset(b, 1, SIZE)
    for b in reversed(blocks):
        libc.free(b)
step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES_PER_STEP = 3 * 8 * 2**20 // 4096


def faults(mode: str) -> int:
    """Minor page faults of 20 steps in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # glibc defaults
    out = subprocess.run(
        [sys.executable, "-c", STEPS, mode], capture_output=True, text=True, check=True, env=env
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not retain_freed_memory(), reason="not glibc: no mallopt to set")
def test_freed_activations_are_not_faulted_back_each_step():
    assert faults("default") > 10 * PAGES_PER_STEP  # the default allocator re-faults them
    assert faults("retain") < PAGES_PER_STEP  # kept: fewer faults in 20 steps than in one


def test_training_adam_is_the_per_parameter_loop_bit_for_bit():
    """make_optimizer batches Adam over parameters (foreach): the same floats as torch's
    per-parameter loop, oracle here, on SASRec's parameters with weight decay, 5 steps."""
    from seqbench.models.base import get_model, resolve_config
    from seqbench.testing.probe import train_data
    from seqbench.training.trainer import make_optimizer

    data = train_data()
    cls = get_model("sasrec")
    finals = []
    for oracle in (False, True):
        torch.manual_seed(0)
        sets = {"d": "16", "weight_decay": "0.01", "batching": "micro"}  # packed: fused Adam
        model = cls(resolve_config(cls, "synthetic", sets), data)
        opt = make_optimizer(model)
        if oracle:
            opt = torch.optim.Adam(
                opt.param_groups[0]["params"], **opt.defaults | {"foreach": False}
            )
        gen = torch.Generator().manual_seed(1)
        for _ in range(5):
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=gen)
            opt.step()
        finals.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*finals, strict=True))
