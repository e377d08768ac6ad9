"""--precision: bf16/fp16 autocast for training only, part of the run id unless fp32."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import write_tiny

from seqbench import machine as device
from seqbench.cli import main
from seqbench.errors import ConfigError
from seqbench.machine import check_precision, cpu_bf16_supported
from seqbench.models.sasrec import SASRec
from seqbench.runs.request import RunRequest
from seqbench.runs.sweep import SweepDefinition

DATA = SimpleNamespace(checksum="0" * 64)


def test_precision_is_part_of_every_run_id() -> None:
    ids = {p: RunRequest("sasrec", "beauty", precision=p).resolve(DATA) for p in device.PRECISIONS}
    assert len({r.run_id for r in ids.values()}) == 3
    assert ids["fp32"].spec.to_dict()["precision"] == "fp32"
    assert ids["bf16"].spec.to_dict()["precision"] == "bf16"
    s = ids["fp32"].spec
    by_hand = {
        "model": "sasrec", "dataset": "beauty", "config": s.config, "revision": 1,
        "protocol": s.protocol.to_dict(), "seed": 0, "data_checksum": DATA.checksum,
        "precision": "fp32", "device": "cpu",
    }  # fmt: skip
    digest = hashlib.sha256(json.dumps(by_hand, sort_keys=True).encode()).hexdigest()
    assert s.run_id == f"beauty-sasrec-{digest[:12]}"


def test_a_sweep_passes_its_precision_to_every_run() -> None:
    sweep = SweepDefinition("sasrec", ["beauty"], grid={"d": ["8", "16"]}, precision="bf16")
    assert [r.precision for r in sweep.requests()] == ["bf16", "bf16"]
    assert sweep.to_dict()["precision"] == "bf16"
    # an fp32 sweep's definition (hashed into its default name) is as before
    assert "precision" not in SweepDefinition("sasrec", ["beauty"]).to_dict()


def fake_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: str, onednn: bool) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: fpu {flags} sse2\nbugs\t\t: none\n")
    monkeypatch.setattr(device, "PROC_CPUINFO", info)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn)


@pytest.mark.parametrize(
    ("flags", "onednn", "supported"),
    [
        ("avx2 avx512f", False, False),
        ("avx2 avx512f avx512_bf16", False, True),
        ("avx2 amx_tile amx_bf16", False, True),
        ("avx2", True, True),  # oneDNN says bf16 is supported
    ],
)
def test_cpu_bf16_support_from_onednn_or_the_cpu_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: str, onednn: bool, supported: bool
) -> None:
    fake_cpu(monkeypatch, tmp_path, flags, onednn)
    assert cpu_bf16_supported() is supported


@pytest.mark.parametrize(
    ("precision", "dev", "message"),
    [
        ("fp8", "cpu", "--precision 'fp8': choose one of fp32, bf16, fp16"),
        ("fp16", "cpu", "--precision fp16 needs CUDA (this run is on cpu)"),
        ("bf16", "cpu", "--precision bf16: this CPU has no bf16 support"),
        ("bf16", "mps", "--precision bf16 runs on cpu or cuda, not mps"),
    ],
)
def test_unsupported_precisions_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, precision: str, dev: str, message: str
) -> None:
    fake_cpu(monkeypatch, tmp_path, "avx2", onednn=False)
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        check_precision(precision, torch.device(dev))
    check_precision("fp32", torch.device(dev))  # fp32 runs anywhere


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--precision", "fp16", "--device", "cpu"], "--precision fp16 needs CUDA"),
        (["--amp"], "--amp is now --precision: use --precision fp16 (CUDA) or bf16"),
    ],
)
def test_the_cli_refuses_in_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "sasrec", "--dataset", "synthetic", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_bf16_trains_the_loss_in_bf16_and_scores_in_fp32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tiny run with --precision bf16 (bf16 support faked: this CPU may lack it)."""
    monkeypatch.setattr(device, "cpu_bf16_supported", lambda: True)
    seen: dict[str, set] = {"loss": set(), "score": set()}
    loss, score_items = SASRec.loss, SASRec.score_items

    def spy_loss(self: SASRec, batch: dict, *plans) -> tuple[torch.Tensor, dict[str, float]]:
        out = loss(self, batch, *plans)
        autocast = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu")
        seen["loss"].add((autocast, out[0].dtype))
        return out

    def spy_score(self: SASRec, query: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        out = score_items(self, query, lo, hi)  # full ranking scores item tiles (issue 54)
        seen["score"].add((torch.is_autocast_enabled("cpu"), out.dtype))
        return out

    monkeypatch.setattr(SASRec, "loss", spy_loss)
    monkeypatch.setattr(SASRec, "score_items", spy_score)
    data, runs = write_tiny(tmp_path / "data"), tmp_path / "runs"
    base = ["run", "sasrec", "--dataset", "synthetic", "--epochs", "2", "--set", "d=8",
            "--threads", "1", "--data-dir", str(data), "--runs-dir", str(runs),
            "--no-progress"]  # fmt: skip
    main([*base, "--precision", "bf16"])
    assert seen == {
        "loss": {(torch.bfloat16, torch.float32)},  # autocast on; the loss itself in fp32
        "score": {(False, torch.float32)},  # evaluation without autocast
    }
    assert "· bf16 ·" in capsys.readouterr().out
    main(base)
    ids = {p.name: json.loads((p / "metrics.json").read_text()) for p in runs.iterdir()}
    ids = {k: v for k, v in ids.items() if not k.startswith(".")}
    assert sorted(m["precision"] for m in ids.values()) == ["bf16", "fp32"]
    bf16 = next(m for m in ids.values() if m["precision"] == "bf16")
    fp32 = next(m for m in ids.values() if m["precision"] == "fp32")
    assert bf16["run_id"] != fp32["run_id"] and bf16["epochs_run"] == 2
    assert 0 < bf16["valid"]["NDCG@10"] <= 1
