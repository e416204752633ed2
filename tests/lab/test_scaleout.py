"""Lab 03 against the fake vLLM: one config per call, per-engine /metrics with DP, resume,
the time budget, and tools/gpu/run_scaleout.sh end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.core.metrics import GENERATION_TOKENS, engine_series, load_series
from course_utils.core.records import Workload, read_jsonl
from course_utils.core.scaleout import three_way
from course_utils.core.slo import SLO
from course_utils.lab.scaleout import load_config, run_config
from tests.conftest import install_fake_nvidia_smi, install_fake_vllm

ROOT = Path(__file__).resolve().parents[2]
H200X2 = "NVIDIA H200,143771,143000,580.95.05;NVIDIA H200,143771,143000,580.95.05"
SLO_ = SLO.parse("ttft:300 tpot:50")
WL = Workload(input_len=64, output_len=16, num_prompts=10, ignore_eos=True)


def _run(name: str, out: Path, rates: list[float], **kw) -> object:
    kw.setdefault("window_s", 1.5)
    kw.setdefault("startup_estimate_s", 0.0)
    kw.setdefault("rate_estimate_s", 1.0)
    return run_config(name, "fake-model", rates, workload=WL, slo=SLO_, out=out,
                      server_kwargs={"startup_timeout_s": 30, "stop_timeout_s": 5},
                      bench_kwargs={"timeout_s": 60}, progress=None, **kw)


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """one, tp2 and dp2, each run once into one folder (read by the tests below)."""
    base = tmp_path_factory.mktemp("scaleout")
    with pytest.MonkeyPatch.context() as mp:
        install_fake_vllm(base, mp)
        install_fake_nvidia_smi(base, mp)
        runs = {name: _run(name, base, rates)
                for name, rates in (("one", [6, 12]), ("tp2", [6]), ("dp2", [6, 12]))}
    return base, runs


def test_dp2_records_each_engine_and_its_startup(configs: tuple[Path, dict]) -> None:
    tmp_path, runs = configs
    run = runs["dp2"]
    assert run.status == "ok" and run.done_rates == ["6", "12"]
    assert run.devices == "0,1" and "--data-parallel-size 2" in run.serve_cmd
    # each engine logged its own KV pool, each engine's worker loaded the whole model (the
    # fake prints vLLM's process prefixes)
    assert sorted(run.processes) == ["EngineCore_DP0", "EngineCore_DP1", "Worker_DP0", "Worker_DP1"]
    assert [run.processes[f"EngineCore_DP{i}"]["kv_cache_tokens"] for i in (0, 1)] == [32768] * 2
    assert run.processes["Worker_DP1"]["weights_gib"] == pytest.approx(14.29)
    recs, last = load_config(tmp_path, "dp2")
    assert last is not None and last.status == "ok"
    for rec in recs:
        w = rec["windows"][0]
        assert sorted(w["engines"]) == ["0", "1"], "one diagnosis per engine"
        for e in w["engines"].values():
            assert e["diagnosis"]["constraint"] in ("none", "queue", "prefill", "decode", "kv")
    series = load_series(tmp_path / "dp2" / "knee" / "rate-12" / "metrics.jsonl")
    per = engine_series(series)
    assert sorted(per) == ["0", "1"]
    # the load was balanced: both engines generated tokens during the window
    for e in per.values():
        assert e[-1].counter(GENERATION_TOKENS) > (e[0].counter(GENERATION_TOKENS) or 0)
    # the server got the devices and the flag (dp2 ran last)
    starts = [json.loads(x) for x in (tmp_path / "starts.jsonl").read_text().splitlines()]
    assert starts[-1]["argv"][-2:] == ["--data-parallel-size", "2"]


def test_one_gpu_and_tp2_have_one_engine(configs: tuple[Path, dict]) -> None:
    tmp_path, runs = configs
    one, tp = runs["one"], runs["tp2"]
    assert one.devices == "0" and tp.devices == "0,1"
    assert list(one.processes) == ["EngineCore"]
    # TP: one engine core, the model loaded by two workers, each holding half the weights
    assert sorted(tp.processes) == ["EngineCore", "Worker_TP0", "Worker_TP1"]
    assert tp.processes["Worker_TP0"]["weights_gib"] == pytest.approx(
        one.processes["EngineCore"]["weights_gib"] / 2, rel=0.01)
    assert tp.processes["EngineCore"]["kv_cache_tokens"] == 2 * 32768
    for name in ("one", "tp2"):
        recs, _ = load_config(tmp_path, name)
        assert "engines" not in recs[0]["windows"][0]


def test_budget_stops_between_rates_and_the_next_call_resumes(
    tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, server_starts
) -> None:
    # no budget for a server start: nothing runs, nothing is lost
    run = _run("dp2", tmp_path, [6, 12], budget_s=5.0, startup_estimate_s=10.0)
    assert run.status == "partial" and run.done_rates == [] and "budget" in (run.reason or "")
    assert server_starts() == 0
    # room for one rate only (a rate is estimated at 1000 s after none measured: stop at once)
    run = _run("dp2", tmp_path, [6, 12], budget_s=20.0, rate_estimate_s=1000.0)
    assert run.done_rates == [] and server_starts() == 1
    run = _run("dp2", tmp_path, [6, 12], budget_s=120.0)
    assert run.status == "ok" and run.done_rates == ["6", "12"] and server_starts() == 2
    # everything on disk: no server, the same knee
    again = _run("dp2", tmp_path, [6, 12], budget_s=120.0)
    assert server_starts() == 2 and again.knee == run.knee
    assert len(read_jsonl(tmp_path / "dp2" / "scaleout.jsonl")) == 4


def test_three_way_reads_the_configs_on_disk(configs: tuple[Path, dict]) -> None:
    tmp_path, _ = configs
    tw = three_way({c: load_config(tmp_path, c)[0] for c in ("one", "dp2")})
    assert [(r.config, r.rate) for r in tw.rows] == [
        ("one", 6.0), ("one", 12.0), ("dp2", 6.0), ("dp2", 12.0)]
    dp_rows = [r for r in tw.rows if r.config == "dp2"]
    assert all(sorted(r.engines) == ["0", "1"] for r in dp_rows)
    assert dp_rows[0].goodput_per_gpu == pytest.approx(dp_rows[0].goodput / 2)
    assert set(tw.knees) == {"one", "dp2"}


@pytest.mark.parametrize("config", ["one", "dp2"])
def test_run_scaleout_script_end_to_end(tmp_path: Path, fake_vllm: Path, dummy_model: Path,
                                        config: str) -> None:
    """tools/gpu/run_scaleout.sh with the fake vllm and nvidia-smi on PATH, a small budget;
    a second call resumes (no new server) and the call cleans up only its own server."""
    smi = tmp_path / "smi"
    smi.mkdir()
    exe = smi / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" '
                   f'"{ROOT / "tests" / "fakes" / "fake_nvidia_smi.py"}" "$@"\n')
    exe.chmod(0o755)
    env = {**os.environ, "PATH": f"{smi}{os.pathsep}{os.environ['PATH']}", "FAKE_GPU": H200X2,
           "MODEL": str(dummy_model), "RATES": "5,10", "WINDOW_S": "1.5",
           "STARTUP_ESTIMATE_S": "1", "RATE_ESTIMATE_S": "1", "PY": sys.executable}
    env.pop("OUT", None)
    run = tmp_path / "run"
    cmd = ["bash", str(ROOT / "tools/gpu/run_scaleout.sh"), str(run), config, "--budget-s", "90"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    d = run / "scaleout" / config
    assert (d / "preflight.txt").read_text().count("preflight") == (2 if config == "dp2" else 1)
    recs, last = load_config(run / "scaleout", config)
    assert last is not None and last.status == "ok" and len(recs) == 2
    assert all(r["status"] == "ok" for r in recs)
    log = (run / "commands.log").read_text()
    assert f"CUDA_VISIBLE_DEVICES={'0,1' if config == 'dp2' else '0'} " in log
    assert f"scaleout/{config} rc=0" in log
    assert "goodput/GPU=" in p.stdout  # the three-way table printed at the end
    starts = (tmp_path / "starts.jsonl").read_text().splitlines()
    p2 = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p2.returncode == 0, p2.stderr[-3000:]
    assert (tmp_path / "starts.jsonl").read_text().splitlines() == starts  # resumed: no start
    bad = subprocess.run(["bash", str(ROOT / "tools/gpu/run_scaleout.sh"), str(run), "tp4"],
                         env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "config must be one, dp2 or tp2" in bad.stderr
