"""What a GPU run needs, checked on CPU: the device type in the run id (CPU ids unchanged),
device facts in metrics.json (old files still read), GPUs per run and round-robin workers,
fp32 similarity and distance under autocast, and a fed trainer that draws as the plain loop."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from seqbench import machine
from seqbench.data.dataset import SeqDataset
from seqbench.errors import ConfigError
from seqbench.models.base import get_model, resolve_config
from seqbench.models.contrastive import nt_xent
from seqbench.models.wasserstein import wasserstein2, wasserstein2_matrix
from seqbench.runs.execute import execute
from seqbench.runs.options import Pool
from seqbench.runs.request import RunRequest
from seqbench.runs.result import ResultError, RunResult
from seqbench.training import engine
from seqbench.training.context import RunContext
from seqbench.training.trainer import compile_encoder, make_optimizer

DATA = SimpleNamespace(checksum="0" * 64)


def test_the_device_type_is_part_of_the_run_id() -> None:
    cpu = RunRequest("sasrec", "beauty").resolve(DATA)
    cuda = RunRequest("sasrec", "beauty").resolve(DATA, "cuda")
    assert cpu.spec.identity()["device"] == "cpu"
    assert cuda.spec.identity() == {**cpu.spec.identity(), "device": "cuda"}
    blob = json.dumps(cuda.spec.identity(), sort_keys=True).encode()
    assert cuda.run_id == f"beauty-sasrec-{hashlib.sha256(blob).hexdigest()[:12]}"
    assert cuda.run_id != cpu.run_id


def test_a_run_planned_for_cuda_is_refused_by_a_cpu_worker(tmp_path: Path) -> None:
    run = RunRequest("sasrec", "beauty").resolve(DATA, "cuda")
    with pytest.raises(ConfigError, match="planned for cuda but this worker trains on cpu"):
        execute(run, RunContext(device="cpu", runs_dir=tmp_path), data=DATA)


def test_context_names_the_device_type_without_resolving_it() -> None:
    assert RunContext(device="cuda:1").device_type() == "cuda"
    assert RunContext(device="cpu").device_type() == "cpu"


OLD = {
    "run_id": "x-sasrec-0", "model": "sasrec", "dataset": "x", "protocol": "seqbench", "seed": 0,
    "ablate": {}, "best_epoch": 1, "epochs_run": 1, "stopped": "max_epochs", "valid": {},
    "test": {}, "n_users_evaluated": 1, "train_seconds": 1.0, "eval_seconds": 1.0, "params": 1,
    "peak_memory_mb": 1.0, "device": "cpu", "threads": 1, "data_checksum": "0", "version": "0.1",
}  # fmt: skip


def test_old_metrics_read_with_no_device_facts_and_new_ones_round_trip() -> None:
    old = RunResult.from_json(OLD, "m.json")
    assert (old.gpu, old.gpu_peak_mb, old.deterministic, old.compiled) == (None, None, None, False)
    new = {**OLD, "device": "cuda:0", "gpu": "NVIDIA H200", "gpu_peak_mb": 812.5,
           "torch_version": "2.13.0", "cuda_version": "12.8", "tf32_matmul": False,
           "tf32_cudnn": True, "deterministic": True, "compiled": False}  # fmt: skip
    assert RunResult.from_json(new, "m.json").to_json() == {
        **new,
        "budget_minutes": None,
        "precision": "fp32",
        "threads_reason": "",
        "objective": None,
        "last_epoch_share": 1.0,  # older runs trained whole epochs
        "host": None,  # older runs did not record where they ran
        "ray_node": None,
        "procs": 1,  # older runs trained in one process
    }
    with pytest.raises(ResultError, match=r"m\.json: gpu_peak_mb must be a number or null"):
        RunResult.from_json({**new, "gpu_peak_mb": "812"}, "m.json")


def test_device_facts_on_cpu() -> None:
    facts = machine.device_facts(torch.device("cpu"))
    assert (facts.gpu, facts.cuda_version, facts.tf32_matmul) == (None, None, None)
    assert facts.torch_version == torch.__version__
    assert facts.deterministic == torch.are_deterministic_algorithms_enabled()
    assert machine.gpu_peak_mb(torch.device("cpu")) is None


def test_deterministic_sets_cublas_workspace_and_algorithms(monkeypatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = torch.are_deterministic_algorithms_enabled()
    try:
        machine.set_deterministic()
        assert torch.are_deterministic_algorithms_enabled()
        import os

        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        torch.use_deterministic_algorithms(before)


def test_gpus_per_run_default_and_refusal() -> None:
    assert Pool().gpus("cuda") == 1.0 and Pool().gpus("cpu") == 0.0
    assert Pool(gpus_per_run=0.5).gpus("cuda") == 0.5
    with pytest.raises(ConfigError, match="--gpus-per-run 0 with --device cuda"):
        Pool(gpus_per_run=0).gpus("cuda")


def test_local_workers_sized_and_assigned_from_visible_gpus(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7")
    assert machine.visible_gpus() == ["3", "5", "7"]
    assert Pool(workers=None).size(10, "cuda") == 3
    assert Pool(workers=None, gpus_per_run=0.5).size(10, "cuda") == 6
    assert Pool(workers=None).size(2, "cuda") == 2
    assert [machine.gpu_of_worker(i, machine.visible_gpus()) for i in range(5)] == [
        "3", "5", "7", "3", "5",
    ]  # fmt: skip
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert machine.visible_gpus() == []


def test_bf16_on_cuda_needs_native_support(monkeypatch) -> None:
    def no_kwarg(**kwargs):
        raise TypeError("unexpected keyword argument 'including_emulation'")

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", no_kwarg)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 0))
    assert not machine.cuda_bf16_native()
    with pytest.raises(ConfigError, match="no native bf16"):
        machine.check_precision("bf16", torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    machine.check_precision("bf16", torch.device("cuda"))


@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled")
def test_grad_scaler_falls_back_on_torch_2_2(monkeypatch) -> None:
    assert isinstance(machine.grad_scaler(), torch.amp.GradScaler)
    monkeypatch.delattr(torch.amp, "GradScaler")
    with pytest.warns(Warning):  # torch.cuda.amp.GradScaler is deprecated (and off on CPU)
        machine.grad_scaler()


def bf16() -> contextlib.AbstractContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16)


def test_nt_xent_is_fp32_under_autocast() -> None:
    views = torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(0))
    fp32 = nt_xent(views, 0.3)
    with bf16():
        assert torch.equal(nt_xent(views, 0.3), fp32)  # a bf16 einsum is off by ~1e-2
    torch.testing.assert_close(fp32, nt_xent_plain(views, 0.3), rtol=1e-5, atol=1e-5)


def nt_xent_plain(views: torch.Tensor, tau: float) -> torch.Tensor:
    """Brute force: for each ordered pair of views and anchor, -log softmax of the positive."""
    m, b, _ = views.shape
    z = torch.nn.functional.normalize(views.double(), dim=-1)
    total = torch.zeros((), dtype=torch.float64)
    for x in range(m):
        for y in range(m):
            if x == y:
                continue
            pair = 0.0
            for i in range(b):
                logits = [z[x, i] @ z[y, j] / tau for j in range(b)]
                logits += [z[x, i] @ z[x, j] / tau for j in range(b) if j != i]
                pair = pair - torch.log_softmax(torch.stack(logits), 0)[i]
            total = total + pair / b
    return total.float()


def test_wasserstein_matrix_is_fp32_under_autocast_on_near_pairs() -> None:
    g = torch.Generator().manual_seed(0)
    mean, cov = torch.randn(6, 32, generator=g), torch.rand(6, 32, generator=g) + 0.5
    near_mean, near_cov = mean + 1e-2, cov + 1e-2
    exact = wasserstein2(
        mean.double()[:, None], cov.double()[:, None], near_mean.double(), near_cov.double()
    )
    with bf16():
        got = wasserstein2_matrix(mean, cov, near_mean, near_cov)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), exact, rtol=1e-3, atol=1e-4)


@pytest.fixture
def data(synthetic_frames) -> SeqDataset:
    inter, items = synthetic_frames
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "gpu-ready"})


@pytest.mark.parametrize("name", ["sasrec", "cbit"])
def test_fed_epoch_equals_the_plain_loop(data, tmp_path: Path, name: str) -> None:
    """The trainer (background feed, parts summed on the device) ends an epoch with the
    weights and loss of the plain loop: build all batches, then step through them."""
    from seqbench.evaluation.protocols import get_protocol
    from seqbench.runs.store import RunFolder
    from seqbench.training.trainer import Trainer

    def model():
        cls = get_model(name)
        cfg = resolve_config(cls, "synthetic", {"epochs": "1", "lr_schedule": "constant"})
        torch.manual_seed(0)
        return cls(cfg, data)

    plain = model()
    opt = make_optimizer(plain)
    batches = list(plain.train_batches(data, torch.Generator().manual_seed(3)))
    losses = []
    for batch in batches:
        opt.zero_grad(set_to_none=True)
        value, parts = engine.backward_batch(plain, batch)
        if plain.cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(plain.parameters(), plain.cfg.grad_clip)
        opt.step()
        plain.after_step(parts)
        losses.append(value)
    fed = model()
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    ctx = RunContext(device="cpu", runs_dir=tmp_path)
    result = Trainer(fed, data, get_protocol("seqbench"), 3, folder, ctx).fit(resume=False)
    assert result.history[0]["loss"] == sum(losses) / len(losses)
    for (k, a), b in zip(plain.state_dict().items(), fed.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    state = torch.load(folder.checkpoints[0], weights_only=True)
    assert state["cuda_rng"] == []  # a CPU run keeps no CUDA RNG state
    assert torch.equal(state["gen"], torch.Generator().manual_seed(3).get_state()) is False


def test_a_failing_batch_build_reaches_the_trainer(data, tmp_path: Path) -> None:
    from seqbench.evaluation.protocols import get_protocol
    from seqbench.runs.store import RunFolder
    from seqbench.training.trainer import Trainer

    cls = get_model("sasrec")
    m = cls(resolve_config(cls, "synthetic", {"epochs": "1"}), data)

    def broken(*args):
        raise ValueError("bad batch")
        yield

    m.train_batches = broken
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    trainer = Trainer(m, data, get_protocol("seqbench"), 0, folder, RunContext(device="cpu"))
    with pytest.raises(ValueError, match="bad batch"):
        trainer.fit(resume=False)


def test_compile_refuses_a_model_without_an_encoder(data) -> None:
    cls = get_model("gru4rec")
    with pytest.raises(ConfigError, match="--compile: GRU4Rec has no encoder"):
        compile_encoder(cls(resolve_config(cls, "synthetic", {}), data))
