"""Both labs with ``rehearse_gpu="rtx4090"`` on a (fake) H200: vLLM gets the 4090's budget
(the scaled --gpu-memory-utilization) and the 4090's defaults; the lab says what that
reproduces and what it does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils.core import capacity
from course_utils.core.records import read_jsonl
from course_utils.lab import rehearsal
from tests.lab.test_labs_replay import (
    EVAL,
    FAKES,
    LAB01,
    LAB02,
    SLO_PARAMS,
    _run,
    _text,
    fake_env,  # noqa: F401 - the fixture, used by name
)

H200 = 150_109_880_320


@pytest.fixture
def on_h200(monkeypatch: pytest.MonkeyPatch, fake_env: Path) -> Path:  # noqa: F811
    """The labs' fakes (test_labs_replay.fake_env) on a fake H200; returns their folder."""
    monkeypatch.setenv("FAKE_VLLM_GPU_TOTAL_BYTES", str(H200))
    monkeypatch.setenv(rehearsal.TORCH_PYTHON_ENV, str(FAKES / "fake_torch_python.py"))
    return fake_env


def scaled(util: float) -> float:
    return round(util * capacity.GPUS["rtx4090"].total_gib * capacity.GIB / H200, 6)


def test_lab01_rehearses_the_4090_budget_and_llm_defaults(on_h200: Path, tmp_path: Path) -> None:
    starts = on_h200 / "llm-starts.jsonl"
    before = len(read_jsonl(starts))
    out = tmp_path / "knobs"
    nb = _run(
        LAB01,
        out,
        {
            "backend": "vllm",
            "model": "fake/qwen2.5-7b-instruct-awq",
            "values": [0.8, 0.9],
            "load_prompts": 8,
            "load_max_tokens": 16,
            "eval_set": str(EVAL),
            "rehearse_gpu": "rtx4090",
        },
    )
    text = _text(nb)
    assert "Rehearsing an RTX 4090" in text and "Not reproduced: speed" in text
    runs = read_jsonl(starts)[before:]
    assert [float(r["gpu_memory_utilization"]) for r in runs] == [scaled(0.8), scaled(0.9)]
    assert all(r["max_num_seqs"] == "256" and r["max_num_batched_tokens"] == "8192" for r in runs)
    recs = read_jsonl(out / "results.jsonl")
    assert [r["value"] for r in recs] == [0.8, 0.9]  # the target's values, as swept
    assert recs[0]["knobs"]["gpu_memory_utilization"] == scaled(0.8)
    assert json.loads((out / "rehearsal.json").read_text())["util_here"] == scaled(0.92)
    # a replay says what was rehearsed, without a GPU
    again = _text(_run(LAB01, tmp_path / "replay", {"backend": "replay", "replay_dir": str(out)}))
    assert "Rehearsing an RTX 4090" in again


def test_lab02_rehearses_the_4090_budget_and_serve_defaults(on_h200: Path, tmp_path: Path) -> None:
    starts = on_h200 / "serve-starts.jsonl"
    before = len(read_jsonl(starts))
    params = {
        **SLO_PARAMS,
        "knee_rates": [10],
        "batch1_prompts": 0,
        "candidates": [2],
        "second_candidates": [2048],
        "max_steps": 1,
        "gpu": "rtx4090",
        "lang": "zh",
        "rehearse_gpu": "rtx4090",
        "base_knobs": {},
    }
    nb = _run(LAB02, tmp_path / "slo", {"backend": "vllm", **params})
    assert "预演 RTX 4090" in _text(nb) and "不能复现：速度" in _text(nb)
    runs = [r["argv"] for r in read_jsonl(starts)[before:]]
    assert runs  # the knee scan's server and the loop's points
    for argv in runs:
        flag = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
        assert flag["--gpu-memory-utilization"] == str(scaled(0.92))
        assert flag["--max-num-batched-tokens"] == "2048"
        assert flag["--max-num-seqs"] in ("256", "2")  # the 4090's default, or a candidate


def test_the_shipped_command_reads_as_the_target_runs_it() -> None:
    """The recorded rehearsal ran 0.15557 of 139.8 GiB; on the 4090 that is 0.92 of 23.64."""
    r = rehearsal.load(Path("labs/results/h200-2026-12-02/lab02-4090"))
    assert r is not None and r.target == "RTX 4090"
    cmd = json.loads(Path("labs/results/h200-2026-12-02/lab02-4090/chosen.json").read_text())
    shipped = "vllm serve m --gpu-memory-utilization 0.15557 --max-num-seqs 256"
    assert r.on_target(shipped) == "vllm serve m --gpu-memory-utilization 0.92 --max-num-seqs 256"
    assert r.on_target(f"vllm serve m --gpu-memory-utilization={r.scale(0.98)}").endswith("=0.98")
    assert r.on_target("vllm serve m --max-num-seqs 256") == "vllm serve m --max-num-seqs 256"
    assert cmd["knobs"]["gpu_memory_utilization"] == r.util_here
