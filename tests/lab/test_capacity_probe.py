"""The capacity probe end to end against the fake vLLM, which prints vLLM 0.26.0's start-up
memory lines (tests/fakes/fake_memory.py) computed from its args."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.core import capacity
from course_utils.core.records import read_jsonl
from tests.tooling import tool

probe = tool("gpu/capacity_probe.py")
ProbeRecord = probe.ProbeRecord

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"
H200_TOTAL = 150_109_880_320


def model_dirs(tmp: Path) -> dict[str, str]:
    """Folders with the real configs (the fake reads config.json; no tokenizer training)."""
    from course_utils.lab.modelfolder import _source_config

    env = {}
    for key, spec in probe.MODELS.items():
        d = tmp / key
        d.mkdir()
        cfg, _ = _source_config(spec.shipped or "", (ROOT / spec.config) if spec.config else None)
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "tokenizer.json").write_text("{}")
        env[spec.env] = str(d)
    return env


@pytest.fixture
def probe_env(tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path,
              monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {"FAKE_VLLM_GPU_TOTAL_BYTES": str(H200_TOTAL),
           "FAKE_GPU": "NVIDIA H200,143771,143000,580;NVIDIA H200,143771,140000,580",
           **model_dirs(tmp_path)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def run_script(run: Path, *cases: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PY": sys.executable, "TORCH_PY": str(FAKES / "fake_torch_python.py"),
           "PYTHONPATH": str(ROOT / "src"), "CUDA_VISIBLE_DEVICES": "1", **extra}
    env.pop("OUT", None)
    return subprocess.run(["bash", str(ROOT / "tools/gpu/capacity_probe.sh"), str(run), *cases],
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_every_case_recorded_with_vllms_memory_lines(tmp_path: Path, probe_env: dict[str, str],
                                                     server_starts) -> None:
    run = tmp_path / "run"
    p = run_script(run)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = {r["case"]: ProbeRecord.from_json(r) for r in read_jsonl(run / "capacity/probe.jsonl")}
    assert list(recs) == list(probe.CASES)
    gpu = json.loads((run / "capacity/gpu.json").read_text())
    assert gpu["total"] == H200_TOTAL and gpu["cuda_visible_devices"] == "1"
    for name, r in recs.items():
        assert r.status == "ok", (name, r.reason)
        assert (run / "capacity" / r.log).is_file()
        m = r.memory
        # the DEBUG profile line was logged and parsed, and agrees with the INFO lines
        assert m["runner"] == "v2" and m["torch_peak_increase_gib"] is not None
        assert m["weights_memory_gib"] == pytest.approx(r.facts["weights_gib"], abs=0.011)
        assert m["available_kv_gib"] == r.facts["kv_cache_gib"]
        assert r.facts["kv_cache_tokens"] > 0 and r.memory_lines
        assert r.gpu_total_bytes == H200_TOTAL and r.knobs["max_model_len"] == 4096
    # rehearsed: the 4090's budget (0.92 x its CUDA total) and its serve / LLM defaults
    util = round(0.92 * capacity.GPUS["rtx4090"].total_gib * capacity.GIB / H200_TOTAL, 6)
    bf = recs["bf16-4090-serve"]
    assert bf.knobs == {"max_model_len": 4096, "gpu_memory_utilization": util,
                        "max_num_seqs": 256, "max_num_batched_tokens": 2048}
    assert ["--gpu-memory-utilization", str(util)] == bf.argv[
        bf.argv.index("--gpu-memory-utilization"):][:2]
    assert bf.memory["requested_gib"] == round(util * H200_TOTAL / capacity.GIB, 2)
    assert bf.memory["max_num_batched_tokens"] == 2048
    awq = recs["awq-4090-llm-080"]
    assert awq.knobs["max_num_batched_tokens"] == 8192 and awq.knobs["max_num_seqs"] == 256
    assert "LLM entry's defaults" in awq.note
    assert awq.config["quantization_config"]["quant_method"] == "awq"
    assert awq.memory["weights_memory_gib"] < 6 < bf.memory["weights_memory_gib"]
    # this GPU's own defaults: nothing but max_model_len passed; vLLM picks 8192 on an H200
    own = recs["bf16-h200-defaults"]
    assert own.knobs == {"max_model_len": 4096} and own.memory["max_num_batched_tokens"] == 8192
    assert recs["llama3-8b-h200-defaults"].config["vocab_size"] == 128256
    # nvidia-smi was asked about the visible GPU only (the other one runs another job)
    calls = (tmp_path / "nvidia-smi-calls.txt").read_text().splitlines()
    # (with -i, or listing index and uuid for the server to keep its own GPU's line)
    assert calls and all(c.endswith("-i 1") or "--query-gpu=index,uuid," in c for c in calls)
    assert server_starts() == len(probe.CASES)
    # a rerun resumes: nothing starts again
    again = run_script(run)
    assert again.returncode == 0 and "recorded, skipped" in again.stdout
    assert server_starts() == len(probe.CASES)
    assert "capacity_probe rc=0" in (run / "commands.log").read_text()


def test_budget_stops_before_a_case_that_cannot_finish(tmp_path: Path, probe_env: dict[str, str],
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       server_starts, capsys) -> None:
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "1.0")
    monkeypatch.setattr(probe, "CASE_S", 0.5)  # the first case's estimate
    ran = probe.run_probe(tmp_path, ["bf16-4090-serve", "bf16-h200-defaults"], budget_s=2.0,
                          vllm_cmd=["vllm"], python=str(FAKES / "fake_torch_python.py"))
    assert [r.case for r in ran] == ["bf16-4090-serve"]
    assert "not started: bf16-h200-defaults" in capsys.readouterr().out
    assert server_starts() == 1
    # nothing fits a budget shorter than one case
    assert probe.run_probe(tmp_path, ["bf16-h200-defaults"], budget_s=0.1, vllm_cmd=["vllm"],
                           python=str(FAKES / "fake_torch_python.py")) == []


def test_a_failed_start_is_recorded_with_its_reason(tmp_path: Path, probe_env: dict[str, str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_FAIL", "oom")
    ran = probe.run_probe(tmp_path, ["awq-4090-llm-094"], budget_s=200, vllm_cmd=["vllm"],
                          python=str(FAKES / "fake_torch_python.py"))
    assert ran[0].status == "failed" and ran[0].reason.startswith("CUDA out of memory")
    assert read_jsonl(tmp_path / "capacity/probe.jsonl")[0]["status"] == "failed"


def test_no_cuda_is_one_line_and_no_start(tmp_path: Path, probe_env: dict[str, str],
                                          monkeypatch: pytest.MonkeyPatch, server_starts) -> None:
    monkeypatch.setenv("FAKE_TORCH_FAIL", "1")
    p = run_script(tmp_path / "run", "bf16-4090-serve", FAKE_TORCH_FAIL="1")
    assert p.returncode == 1
    assert "error: cannot read the GPU's CUDA total with torch: RuntimeError: Found no NVIDIA" \
        in p.stdout
    assert server_starts() == 0


def test_unknown_case_is_refused(tmp_path: Path) -> None:
    assert probe.main([str(tmp_path), "bf16-5090"]) == 2
    assert not (tmp_path / "capacity").exists()


def test_tune_rehearses_a_4090_on_a_bigger_gpu(tmp_path: Path, fake_vllm: Path,
                                              fake_nvidia_smi: Path, dummy_model: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`--rehearse-gpu rtx4090`: the fake vLLM gets the scaled utilisation and the 4090's
    serve defaults; swept utilisations are the 4090's, scaled too."""
    monkeypatch.setenv("FAKE_VLLM_GPU_TOTAL_BYTES", str(H200_TOTAL))
    monkeypatch.setenv("FAKE_GPU", "NVIDIA H200,143771,143000,580")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"),
           "COURSE_UTILS_TORCH_PYTHON": str(FAKES / "fake_torch_python.py")}
    out = tmp_path / "o"
    p = subprocess.run(
        [sys.executable, "-m", "course_utils", "sweep", "--model", str(dummy_model), "--slo",
         "ttft:3000 tpot:500", "--out", str(out), "--no-progress", "--load-format", "dummy",
         "--rehearse-gpu", "rtx4090", "--knob", "gpu_memory_utilization", "--values", "0.8,0.9",
         "--num-prompts", "4", "--input-len", "16", "--output-len", "4", "--repeats", "0",
         "--warmup-share", "0.5", "--rate", "50"],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Rehearsing an RTX 4090" in p.stderr and "Not reproduced: speed" in p.stderr
    starts = [json.loads(x)["argv"] for x in (tmp_path / "starts.jsonl").read_text().splitlines()]
    assert len(starts) == 2
    for argv, util in zip(starts, (0.8, 0.9), strict=True):
        flags = dict(zip(argv[1::2], argv[2::2], strict=False)) | dict(
            zip(argv[2::2], argv[3::2], strict=False))
        assert flags["--gpu-memory-utilization"] == str(round(util * 23.64 * capacity.GIB
                                                               / H200_TOTAL, 6))
        assert flags["--max-num-seqs"] == "256" and flags["--max-num-batched-tokens"] == "2048"
    assert json.loads((out / "gpu.json").read_text())["total"] == H200_TOTAL
