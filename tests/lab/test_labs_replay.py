"""Both labs through papermill: GPU mode against fakes, resume, and replay.

Two kinds of data:
- FAKE (always runs, CPU only): results produced here, in a tmp dir, by running the labs
  with backend="vllm" against the fake `vllm` CLI (tests/fakes/fake_vllm.py, lab 02) and a
  fake `vllm` Python package (FAKE_VLLM_PY below, lab 01). They test the notebooks' code
  paths, resume and replay; they are never committed and are not course data.
- REAL: labs/results/h200-2026-11-29/ (the first H200 run of lab 02: gate rule, replayed
  knee prompts), labs/results/h200-2026-11-29c/slo (lab 02 with one seed per knee rate and
  vLLM's request goodput: a kept improvement and a stop), labs/results/h200-2026-11-29b/knobs
  and h200-2026-11-29c/knobs (lab 01: KV cache idle, then binding). Replay must choose what
  the run chose (under the rule the run used), flag the prefix-cache-inflated knee rates and
  show the diagnoses the run measured. These tests FAIL (never skip) when those folders are
  missing.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import papermill as pm  # noqa: E402
import pytest

from course_utils.core import keep, vllm_logs
from course_utils.core.records import read_jsonl
from course_utils.lab import offline as llm_point
from course_utils.lab import replay as labtools
from tests.served import served

ROOT = Path(__file__).resolve().parents[2]
LAB01 = ROOT / "labs" / "01_knob_sweep.ipynb"
LAB02 = ROOT / "labs" / "02_slo_loop.ipynb"
FAKES = ROOT / "tests" / "fakes"
EVAL = ROOT / "labs" / "data" / "small_eval.jsonl"

FAKE_VLLM_PY = '''\
"""A fake `vllm` Python package for lab 01 tests: LLM + SamplingParams, no GPU.

Prints the start-up lines lab 01 parses, in vLLM 0.26.0's wording; fails like vLLM when
gpu_memory_utilization leaves no KV memory; answers eval questions from FAKE_EVAL_ANSWERS.
"""
import json
import math
import os
import sys
import time

__version__ = "0.26.0"
GIB = 1024**3


class SamplingParams:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Metrics:
    def __init__(self, queued, first, last):
        self.queued_ts, self.first_token_ts, self.last_token_ts = queued, first, last
        self.scheduled_ts = queued


class _Completion:
    def __init__(self, text, n):
        self.text, self.token_ids = text, list(range(n))


class _Output:
    def __init__(self, text, n, metrics, prompt_len):
        self.outputs, self.metrics = [_Completion(text, n)], metrics
        self.prompt_token_ids = list(range(prompt_len))  # vllm/outputs.py RequestOutput


class LLM:
    def __init__(self, model, **kw):
        starts = os.environ.get("FAKE_LLM_STARTS")
        if starts:
            with open(starts, "a") as fh:
                fh.write(json.dumps({"model": model, **{k: str(v) for k, v in kw.items()}}) + "\\n")
        gmu = float(kw.get("gpu_memory_utilization", 0.92))
        self.max_model_len = int(kw.get("max_model_len") or 4096)
        total = int(os.environ.get("FAKE_VLLM_GPU_TOTAL_BYTES") or 23.99 * GIB) / GIB
        kv_gib = round(gmu * total - 5.2 - 1.9, 2)
        print(f"INFO 11-29 10:00:01 [gpu_model_runner.py:1] Model loading took 5.2 GiB "
              "memory and 3.100000 seconds", file=sys.stderr, flush=True)
        if kv_gib <= 0:
            raise ValueError("No available memory for the cache blocks. Try increasing "
                             "`gpu_memory_utilization` when initializing the engine.")
        print(f"INFO 11-29 10:00:02 [gpu_worker.py:1] Available KV cache memory: {kv_gib} GiB",
              file=sys.stderr, flush=True)
        page = 2 * 16 * 4 * 128 * 2  # K and V, block 16, 4 KV heads x 128, bf16
        blocks = int(kv_gib * GIB) // page // 28
        self.kv_tokens = blocks * 16
        print(f"INFO 11-29 10:00:03 [kv_cache_utils.py:1] GPU KV cache size: "
              f"{self.kv_tokens:,} tokens", file=sys.stderr, flush=True)
        conc = blocks / math.ceil(self.max_model_len / 16)
        print(f"INFO 11-29 10:00:03 [kv_cache_utils.py:1] Maximum concurrency for "
              f"{self.max_model_len:,} tokens per request: {conc:.2f}x", file=sys.stderr, flush=True)
        path = os.environ.get("FAKE_EVAL_ANSWERS")
        self.answers = {}
        if path:
            for line in open(path, encoding="utf-8"):
                if line.strip():
                    it = json.loads(line)
                    self.answers[it["question"]] = it["answer"]

    def chat(self, convos, sp, use_tqdm=False):
        outs = []
        t0 = time.monotonic()
        # a bigger KV pool runs more requests at once: faster per batch, up to a point
        width = min(len(convos), max(1, self.kv_tokens // 20000))
        per_token = 0.0004
        for i, msgs in enumerate(convos):
            q = msgs[-1]["content"]
            text = self.answers.get(q, "I do not know")
            if i % 10 == 9:
                text = "I do not know"  # the fake is right 90 % of the time
            n = sp.max_tokens if getattr(sp, "ignore_eos", False) else min(4, sp.max_tokens)
            wave = i // width
            first = t0 + 0.01 * (wave + 1)
            last = first + per_token * n * (wave + 1)
            plen = sum(len(m["content"].encode()) for m in msgs) // 2  # tokens < bytes
            outs.append(_Output(text, n, _Metrics(t0, first, last), plen))
        time.sleep(0.01 * (len(convos) // width + 1))
        return outs
'''


def _run(nb: Path, out_dir: Path, params: dict) -> dict:
    out_nb = out_dir.parent / f"{out_dir.name}-{nb.name}"
    pm.execute_notebook(str(nb), str(out_nb), parameters={"output_dir": str(out_dir), **params},
                        kernel_name="python3", cwd=str(ROOT), progress_bar=False)
    return json.loads(out_nb.read_text())


def _text(nb: dict) -> str:
    parts = []
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            parts.append("".join(o.get("text", "")))
    return "\n".join(parts)


# ----------------------------------------------------------------------------- lab 02


SLO_PARAMS = {
    "model": "fake/qwen2.5-7b-instruct", "slo": "ttft:800 tpot:100", "knee_rates": [10, 60], "rate": 25,
    "num_prompts": 50, "input_len": 128, "output_len": 64, "batch1_prompts": 4, "base_knobs": {"max_num_seqs": 2},
    "candidates": [2, 8, 32], "second_candidates": [2048, 4096], "gpu": "h200",
    "startup_timeout_s": 30,
}


@pytest.fixture(scope="module")
def fake_env(tmp_path_factory: pytest.TempPathFactory):
    """PATH with the fake `vllm` CLI and `nvidia-smi` (an RTX 4090: the labs' preflight
    passes), PYTHONPATH with the fake `vllm` package, a hub mirror for the fake model ids."""
    base = tmp_path_factory.mktemp("fakes")
    bindir = base / "bin"
    bindir.mkdir()
    for name, script in (("vllm", "fake_vllm.py"), ("nvidia-smi", "fake_nvidia_smi.py")):
        exe = bindir / name
        exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / script}" "$@"\n')
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    pkg = base / "py" / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_VLLM_PY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
        mp.setenv("PYTHONPATH", os.pathsep.join(
            p for p in (str(base / "py"), os.environ.get("PYTHONPATH", "")) if p))
        mp.setenv("FAKE_VLLM_STARTS", str(base / "serve-starts.jsonl"))
        mp.setenv("FAKE_LLM_STARTS", str(base / "llm-starts.jsonl"))
        mp.setenv("FAKE_EVAL_ANSWERS", str(EVAL))
        mp.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the fake ids are never downloaded
        for var in ("FAKE_VLLM_FAIL", "FAKE_VLLM_DIE_AFTER", "FAKE_VLLM_STARTUP_S", "FAKE_GPU",
                    "FAKE_NVIDIA_SMI_FAIL", "HF_HUB_OFFLINE", "VLLM_USE_MODELSCOPE",
                    "CUDA_VISIBLE_DEVICES"):
            mp.delenv(var, raising=False)
        yield base


def _count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(scope="module")
def slo_run(fake_env: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("slo") / "recorded"
    _run(LAB02, out, {"backend": "vllm", **SLO_PARAMS})
    return out


def test_slo_lab_records_the_loop(slo_run: Path) -> None:
    knee = labtools.load_knee(slo_run)  # the last record of each rate
    assert [k["rate"] for k in knee] == ["10", "60"]
    # the rates that bracket the knee were measured again with fresh prompts; a window the
    # validity rule rejected was measured once more (on a busy machine the fake's 60 req/s
    # can outrun its warm-up: then that rate is ignored, and 10 req/s alone brackets)
    kn = keep.pick_knee(knee)
    bracket = {f"{r:g}" for r in (kn["knee_rate"], kn["overloaded_rate"]) if r is not None}
    assert bracket and all(
        len(k["windows"]) == 1 + (k["rate"] in bracket) + (not k["windows"][0]["valid"])
        for k in knee)
    assert all(k["valid"] or f'{float(k["rate"]):g}' not in bracket for k in knee)
    (b1,) = read_jsonl(slo_run / labtools.BATCH1_FILE)
    assert b1["status"] == "ok" and b1["median_tpot_ms"] > 0 and b1["completed"] == 4
    assert all(k["status"] == "ok" and k["diagnosis"]["constraint"] for k in knee)
    # one server, one seed per rate: no prompt was replayed into the prefix cache
    assert [k["workload"]["seed"] for k in knee] == [0, 1]
    assert all(k["prefix_cache_hit_rate"] < 0.1 for k in knee)
    assert not [i for k in knee for i in k.get("validity_issues", []) if "prefix cache" in i]
    steps = read_jsonl(slo_run / "tune.jsonl")
    assert steps[0]["kind"] == "baseline"
    assert steps[0]["diagnosis"]["constraint"] == "queue"  # max_num_seqs 2 at 25 req/s
    summary = labtools.tune_summary(slo_run)
    assert summary is not None and summary["serve_command"].startswith("vllm serve fake/qwen2.5-7b-instruct")
    assert summary["knobs"]["max_num_seqs"] > 2  # the loop kept a wider batch
    assert json.loads((slo_run / "params.json").read_text())["rate"] == 25
    for png in ("knee.png", "series-baseline.png", "goodput-max_num_seqs.png",
                "latency-max_num_seqs.png"):
        assert (slo_run / png).stat().st_size > 1000, png


def test_slo_lab_resumes_without_repeating_points(slo_run: Path, fake_env: Path) -> None:
    starts = fake_env / "serve-starts.jsonl"
    before = _count(starts)
    n_points = len(read_jsonl(slo_run / "points.jsonl"))
    _run(LAB02, slo_run, {"backend": "vllm", **SLO_PARAMS})
    assert _count(starts) == before  # knee rates and every point came from the files
    assert len(read_jsonl(slo_run / "points.jsonl")) == n_points


def test_slo_lab_replay_chooses_what_the_run_chose(slo_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay"
    nb = _run(LAB02, out, {"backend": "replay", "replay_dir": str(slo_run)})
    chosen = json.loads((out / "chosen.json").read_text())
    assert chosen["knobs"] == labtools.tune_summary(slo_run)["knobs"]
    assert "replaying with the recorded parameters" in _text(nb)
    assert "x the floor" in _text(nb)  # batch-1 TPOT against the roofline
    for png in ("knee.png", "series-baseline.png", "goodput-max_num_seqs.png",
                "latency-max_num_seqs.png"):
        assert (out / png).is_file(), png
    assert not (out / "points.jsonl").exists()  # replay never measures


def test_replay_tune_detects_a_wrong_record(slo_run: Path, tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(slo_run, bad)
    lines = (bad / "tune.jsonl").read_text().splitlines()
    summary = json.loads(lines[-1])
    summary["knobs"] = {**summary["knobs"], "max_num_seqs": 999}
    (bad / "tune.jsonl").write_text("\n".join([*lines[:-1], json.dumps(summary)]) + "\n")
    with pytest.raises(pm.PapermillExecutionError, match="AssertionError"):
        _run(LAB02, tmp_path / "out", {"backend": "replay", "replay_dir": str(bad)})


def test_slo_lab_budget_stop_before_the_baseline_is_a_normal_end(fake_env: Path,
                                                                 tmp_path: Path) -> None:
    """lab02d.log of the H200 run: the budget stopped tune before its baseline and the
    notebook died on StopIteration (rc=1). A stop on the budget is a normal end."""
    out = tmp_path / "budget"
    nb = _run(LAB02, out, {"backend": "vllm", **SLO_PARAMS, "knee_rates": [60], "batch1_prompts": 0,
                           "budget_gpu_minutes": 0.01})
    text = _text(nb)
    assert "the loop stopped before a baseline was measured: GPU budget: 0.0 min left" in text
    summary = labtools.tune_summary(out)
    assert summary["stopped_on_budget"] is True and summary["steps"] == 0
    assert read_jsonl(out / "knee.jsonl")  # step 0 ran; its results are kept


# ----------------------------------------------------------------------------- lab 01


KNOB_PARAMS = {"model": "fake/qwen2.5-7b-instruct-awq", "values": [0.1, 0.5, 0.8],
               "baseline": 0.5, "load_prompts": 40, "gpu": "rtx4090", "point_timeout_s": 60}


@pytest.fixture(scope="module")
def knob_run(fake_env: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("knobs") / "recorded"
    _run(LAB01, out, {"backend": "vllm", **KNOB_PARAMS})
    return out


def test_knob_lab_records_the_triple_and_the_fault(knob_run: Path) -> None:
    recs = {r["value"]: r for r in read_jsonl(knob_run / "results.jsonl")}
    assert set(recs) == {0.1, 0.5, 0.8}
    assert recs[0.1]["status"] == "failed"
    assert "No available memory for the cache blocks" in recs[0.1]["reason"]
    for v in (0.5, 0.8):
        r = recs[v]
        assert r["status"] == "ok", r.get("reason")
        assert r["accuracy"] == pytest.approx(47 / 52)  # the fake misses every 10th
        assert r["output_tok_s"] > 0 and r["latency_p99_s"] >= r["latency_p50_s"] > 0
        assert r["kv_cache_tokens"] > 0 and r["kv_cache_gib"] > 0
    assert recs[0.8]["kv_cache_tokens"] > recs[0.5]["kv_cache_tokens"]
    for name in ("results.csv", "triple.png", "verdict.json", "params.json"):
        assert (knob_run / name).is_file(), name


def test_knob_lab_resumes_after_an_interruption(knob_run: Path, fake_env: Path) -> None:
    # an interruption during the last point: its line never reached results.jsonl
    res = knob_run / "results.jsonl"
    lines = res.read_text().splitlines()
    res.write_text("\n".join(lines[:-1]) + "\n")
    starts = fake_env / "llm-starts.jsonl"
    before = _count(starts)
    _run(LAB01, knob_run, {"backend": "vllm", **KNOB_PARAMS})
    assert _count(starts) == before + 1  # only the lost point ran again
    assert len(read_jsonl(res)) == 3


def test_knob_lab_replay_gives_the_recorded_verdict(knob_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay"
    nb = _run(LAB01, out, {"backend": "replay", "replay_dir": str(knob_run)})
    assert json.loads((out / "verdict.json").read_text()) == json.loads(
        (knob_run / "verdict.json").read_text())
    assert (out / "triple.png").stat().st_size > 1000
    assert "FAILED" in _text(nb) and "90.4%" in _text(nb)


def test_dummy_weights_show_accuracy_as_na(fake_env: Path, tmp_path: Path) -> None:
    rec = llm_point.run_point({"gpu_memory_utilization": 0.8}, model="fake", out_dir=tmp_path,
                              eval_set=EVAL, load_format="dummy", load_prompts=8, timeout_s=60)
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["accuracy"] is None and "dummy" in rec["accuracy_note"]
    assert llm_point.fmt_accuracy(rec) == "n/a"


# ----------------------------------------------------------------------------- llm_point units


def test_parse_startup_log_reads_vllm_0_26_lines() -> None:
    log = (
        "(EngineCore pid=1) INFO 11-29 [gpu_model_runner.py:5348] Model loading took 14.29 GiB "
        "memory and 3.5 seconds\n"
        "(EngineCore pid=1) INFO 11-29 [gpu_worker.py:561] Available KV cache memory: 110.18 GiB\n"
        "(EngineCore pid=1) INFO 11-29 [kv_cache_utils.py:2177] GPU KV cache size: 2,063,088 tokens\n"
        "(EngineCore pid=1) INFO 11-29 [kv_cache_utils.py:2178] Maximum concurrency for 4,096 "
        "tokens per request: 503.68x\n"
        "(EngineCore pid=1) INFO 11-29 [monitor.py:53] torch.compile took 22.54 s in total\n"
    )
    assert vllm_logs.startup_facts(log).as_dict() == {
        "kv_cache_tokens": 2063088, "max_concurrency": 503.68, "concurrency_len": 4096,
        "kv_cache_gib": 110.18, "weights_gib": 14.29, "torch_compile_s": 22.54,
    }
    assert vllm_logs.startup_facts("nothing").as_dict() == {
        "kv_cache_tokens": None, "max_concurrency": None, "concurrency_len": None,
        "kv_cache_gib": None, "weights_gib": None, "torch_compile_s": None,
    }


def _rec(value: float, tok_s: float, p99: float, acc: float | None = 0.9) -> dict:
    return {"value": value, "status": "ok", "output_tok_s": tok_s, "latency_p99_s": p99,
            "accuracy": acc}


def test_verdict_keeps_only_a_worthwhile_gain_inside_the_slo() -> None:
    recs = [_rec(0.8, 1000, 5), _rec(0.9, 1200, 6), _rec(0.94, 1500, 50)]
    v = keep.verdict(recs, baseline=0.8, p99_latency_slo_s=10)
    assert (v["decision"], v["value"]) == ("keep", 0.9)  # 0.94 breaks the SLO
    v = keep.verdict(recs, baseline=0.8, p99_latency_slo_s=10, min_gain=0.3)
    assert (v["decision"], v["value"]) == ("revert", 0.8)
    worse_quality = [_rec(0.8, 1000, 5), _rec(0.9, 1500, 5, acc=0.5)]
    assert keep.verdict(worse_quality, baseline=0.8)["decision"] == "revert"
    failed_base = [{"value": 0.8, "status": "failed"}, _rec(0.9, 1500, 5)]
    assert keep.verdict(failed_base, baseline=0.8)["decision"] == "none"


def _kvrec(value: float, tok_s: float, kv_tokens: int, **kw: object) -> dict:
    return {**_rec(value, tok_s, 5), "kv_cache_tokens": kv_tokens, "load_prompts": 256,
            "max_tokens": 128, "load_max_tokens": 1024, **kw}


def test_kv_check_binds_only_when_the_pass_needs_more_than_the_pool() -> None:
    # 256 requests x ceil((200 + 1024) / 16) * 16 = 256 x 1232 = 315,392 tokens
    recs = [_kvrec(0.8, 1000, 226_608, prompt_tokens_max=200), _kvrec(0.94, 1300, 289_488)]
    kv = keep.kv_check(recs, baseline=0.8)
    assert kv["per_request_tokens"] == 1232 and kv["demand_tokens"] == 315_392
    assert kv["binding"] is True and kv["prompt_exact"] is True
    assert kv["kv_concurrency"] == 226_608 // 1232
    # max_num_seqs 128 caps what runs at once: 128 x 1232 = 157,696 < 226,608
    assert keep.kv_check(recs, baseline=0.8, max_num_seqs=128)["binding"] is False
    # no recorded prompt length: the bound is used, and said to be one
    old = [_kvrec(0.8, 1000, 226_608)]
    assert keep.kv_check(old, baseline=0.8) is None
    kv = keep.kv_check(old, baseline=0.8, prompt_tokens_bound=209)
    assert kv["prompt_exact"] is False and kv["per_request_tokens"] == 1248
    # a run made before load_max_tokens existed: the pass generated max_tokens
    legacy = [{**_kvrec(0.8, 1000, 1_782_064), "load_max_tokens": None, "load_prompts": 1024}]
    assert keep.kv_check(legacy, baseline=0.8, prompt_tokens_bound=209)[
        "demand_tokens"] == 1024 * 352


def test_kv_demand_rounds_each_request_up_to_whole_blocks() -> None:
    assert keep.kv_demand(256, 209, 1024) == {
        "per_request_tokens": 1248, "at_once": 256, "demand_tokens": 319_488}
    assert keep.kv_demand(256, 200, 1024, max_num_seqs=100)["demand_tokens"] == 100 * 1232
    assert keep.kv_demand(4, 1, 15)["per_request_tokens"] == 16  # exactly one block
    assert keep.kv_demand(4, 1, 16)["per_request_tokens"] == 32


def test_verdict_turns_a_keep_into_recheck_when_kv_did_not_bind() -> None:
    recs = [_kvrec(0.8, 1000, 1_782_064, prompt_tokens_max=100),
            _kvrec(0.9, 1300, 2_044_928, prompt_tokens_max=100)]
    free = keep.kv_check(recs, baseline=0.8)
    assert free["binding"] is False
    v = keep.verdict(recs, baseline=0.8, kv=free)
    assert (v["decision"], v["value"], v["candidate"]) == ("recheck", 0.8, 0.9)
    assert "did not bind" in v["why"] and f"{free['demand_tokens']:,}" in v["why"]
    tight = [_kvrec(0.8, 1000, 200_000, prompt_tokens_max=100),
             _kvrec(0.9, 1300, 260_000, prompt_tokens_max=100)]
    v = keep.verdict(tight, baseline=0.8, kv=keep.kv_check(tight, baseline=0.8))
    assert (v["decision"], v["value"]) == ("keep", 0.9)
    # a revert stays a revert whatever the KV check says
    flat = [_kvrec(0.8, 1000, 1_782_064, prompt_tokens_max=100), _kvrec(0.9, 1010, 2_044_928)]
    assert keep.verdict(flat, baseline=0.8, kv=free)["decision"] == "revert"


STATS = ("INFO {stamp} [loggers.py:310] Engine 000: Avg prompt throughput: {p} tokens/s, Avg "
         "generation throughput: {g} tokens/s, Running: {r} reqs, Waiting: {w} reqs, {pre}GPU "
         "KV cache usage: {kv}%, Prefix cache hit rate: 51.7%")


def _stats_log(rows: list[tuple]) -> str:
    return "\n".join(STATS.format(stamp=f"11-29 13:{m:02d}:{s:02d}", p=p, g=g, r=r, w=w, kv=kv,
                                   pre=f"Preemptions: {pre}, " if pre else "")
                     for m, s, p, g, r, w, pre, kv in rows)


def test_engine_stats_and_kv_timeline_read_vllm_0_26_lines() -> None:
    log = _stats_log([(59, 55, 3000.0, 20000.0, 1024, 0, 0, 14.8),
                      (0, 5, 0.0, 24000.0, 1024, 0, 0, 60.0),
                      (0, 15, 0.0, 22000.0, 900, 124, 7, 99.9),
                      (0, 25, 0.0, 18000.0, 700, 300, 0, 100.0)]).replace("13:00", "14:00")
    st = vllm_logs.engine_stats("noise\n" + log)
    assert [s.t_s for s in st] == [0, 10, 20, 30]  # across the hour
    assert (st[2].t_s, st[2].prompt_tok_s, st[2].gen_tok_s, st[2].running, st[2].waiting,
            st[2].preemptions, st[2].kv_usage) == (20, 0.0, 22000.0, 900, 124, 7, 0.999)
    t = keep.kv_timeline(st)
    # full at the 99.9 % line; before it only the line without prompt work counts
    assert (t["kv_full_at_s"], t["gen_tok_s_before_full"]) == (20, 24000.0)
    assert (t["waiting_max"], t["running_max"], t["lines"]) == (300, 1024, 4)
    assert keep.kv_timeline(st[:2])["kv_full_at_s"] is None
    wrap = _stats_log([(59, 55, 0.0, 1.0, 1, 0, 0, 1.0)] * 2).replace("11-29 13:59:55", "12-31 23:59:55", 1)
    wrap = wrap.replace("11-29 13:59:55", "01-01 00:00:05")  # the log crosses new year
    assert [s.t_s for s in vllm_logs.engine_stats(wrap)] == [0, 10]
    assert keep.kv_timeline([])["gen_tok_s_before_full"] is None


def test_same_batch_gap_turns_a_keep_into_recheck(tmp_path: Path) -> None:
    rows = {0.8: 20000.0, 0.94: 23000.0}  # 0.94 +15 % before either cache filled
    recs = []
    for i, (v, g) in enumerate(rows.items()):
        d = tmp_path / "points" / f"k{i}"
        d.mkdir(parents=True)
        (d / "llm.log").write_text(_stats_log([(0, 0, 0.0, g, 1024, 0, 0, 50.0),
                                               (0, 10, 0.0, g, 1024, 0, 0, 99.5)]))
        recs.append({"status": "ok", "value": v, "key": f"k{i}", "output_tok_s": g,
                     "latency_p99_s": 5.0, "log": "/elsewhere/llm.log"})
    spread = keep.same_batch_gap(tmp_path, recs, baseline=0.8)
    assert round(spread["gaps"][0.94], 3) == 0.15 and round(spread["max_abs_gap"], 3) == 0.15
    v = keep.verdict(recs, baseline=0.8, spread=spread)
    assert (v["decision"], v["value"], v["candidate"]) == ("recheck", 0.8, 0.94)
    assert "before its KV cache filled" in v["why"]
    assert keep.verdict(recs, baseline=0.8)["decision"] == "keep"  # without the check
    assert keep.verdict(recs, baseline=0.8, spread={"gaps": {0.94: 0.01}})[
        "decision"] == "keep"
    (tmp_path / "points" / "k0" / "llm.log").write_text("no stats lines")
    assert keep.same_batch_gap(tmp_path, recs, baseline=0.8) is None


def test_verdict_says_when_no_point_meets_the_slo() -> None:
    recs = [{"status": "ok", "value": 0.8, "output_tok_s": 100.0, "latency_p99_s": 137.0},
            {"status": "ok", "value": 0.94, "output_tok_s": 90.0, "latency_p99_s": 159.0}]
    v = keep.verdict(recs, baseline=0.8, p99_latency_slo_s=30)
    assert (v["decision"], v["value"], v["slo_met_by"]) == ("revert", 0.8, [])
    assert v["why"].startswith("no setting meets the SLO, the baseline included (p99 latency "
                               "137.0 s > 30 s)")
    v = keep.verdict(recs, baseline=0.8)
    assert v["slo_met_by"] == [0.8, 0.94] and v["why"].startswith("the baseline is the fastest")


def test_engine_init_times_reads_the_three_forms() -> None:
    pre = "(EngineCore pid=1) INFO 11-29 13:17:11 [core.py:341] "
    log = "\n".join([
        pre + "init engine (profile, create kv cache, warmup model) took 46.26 s (compilation: "
              "25.15 s)",
        pre + "init engine (profile, create kv cache, warmup model) took 7.85 s",
        pre + "init engine (profile, create kv cache, warmup model) took 9.00 s (compilation: "
              "3.00 s — language_model: 2.00 s, encoder: 1.00 s)"])
    assert vllm_logs.engine_init_times(log) == [(46.26, 25.15), (7.85, None), (9.0, 3.0)]


def test_prompt_tokens_bound_covers_the_longest_chat_prompt() -> None:
    from course_utils.core import evalset

    items = evalset.load_items(EVAL)
    longest = max(sum(len(m["content"].encode()) for m in evalset.messages(it)) for it in items)
    assert evalset.prompt_tokens_bound(items) == longest + evalset.CHAT_OVERHEAD_TOKENS
    with pytest.raises(ValueError):
        evalset.prompt_tokens_bound([])


def test_device_calls_reads_each_lab_call_of_the_recorded_runs() -> None:
    calls = labtools.device_calls(KNOBS_RUN.parent)  # faults and side-by-side are not lab calls
    assert calls == [{"lab": "knobs", "rc": 0, "wall_s": 244.0},
                     {"lab": "knobs", "rc": 0, "wall_s": 172.0}]
    slo = labtools.device_calls(ROOT / "labs" / "results" / "h200-2026-11-29")
    assert [c["lab"] for c in slo] == ["slo"] * 5 and slo[0]["rc"] == 124
    assert labtools.measured_minutes(KNOBS_RUN.parent)["knobs"] == pytest.approx(416 / 60)
    assert labtools.device_calls(KNOBS_RUN) == []  # no commands.log there


def test_model_shape_falls_back_to_the_config_the_run_saved(tmp_path: Path) -> None:
    from course_utils.core import capacity

    folder = tmp_path / "model-x"
    folder.mkdir()
    cfg = capacity.config_dir("qwen2.5-7b-instruct") / "config.json"
    (folder / "config.json").write_bytes(cfg.read_bytes())
    res = tmp_path / "res"
    shape = labtools.model_shape(str(folder), res, save=True)  # a GPU run saves it
    assert (res / labtools.MODEL_CONFIG_FILE).read_bytes() == cfg.read_bytes()
    # replay elsewhere: the folder is gone, the saved config gives the same shape
    again = labtools.model_shape("/tmp/no-such-model-x", res)
    assert again.kv_bytes_per_token() == shape.kv_bytes_per_token()
    assert labtools.model_shape("Qwen/Qwen2.5-7B-Instruct-AWQ").weight_gib() < shape.weight_gib()
    with pytest.raises(ValueError, match="no local folder"):
        labtools.model_shape("/tmp/no-such-model-x", tmp_path / "empty")


def test_estimate_uses_measured_points_when_there_are_some() -> None:
    assert llm_point.estimate_minutes(2) == pytest.approx(
        2 * (llm_point.LLM_STARTUP_S_H200 + llm_point.RUN_S_GUESS) / 60)
    done = [{"status": "ok", "wall_s": 60}, {"status": "ok", "wall_s": 180},
            {"status": "failed", "wall_s": 5}]
    assert llm_point.estimate_minutes(3, done) == pytest.approx(6.0)


def test_pick_knee() -> None:
    def k(rate: str, done: float, meets: bool, **kw) -> dict:
        return served(rate=rate, score={"request_throughput": done, "meets_slo": meets}, **kw)

    recs = [k("10", 9.8, True), k("20", 19.0, True), k("40", 25.0, False), k("inf", 26, False)]
    assert keep.pick_knee(recs)["knee_rate"] == 20
    assert keep.pick_knee(recs)["overloaded_rate"] == 40
    assert keep.pick_knee([k("10", 3.0, False)])["knee_rate"] is None
    # a short run completes under the offered rate; without a queue it still kept up
    short = k("10", 7.0, True, diagnosis={"constraint": "none"})
    assert keep.pick_knee([short])["knee_rate"] == 10
    queued = k("10", 7.0, True, diagnosis={"constraint": "queue"})
    assert keep.pick_knee([queued])["knee_rate"] is None
    # an invalid rate (prompts replayed into the prefix cache) is no evidence either way
    issues = ["prefix cache hit rate 97% on a workload without ..."]
    replayed = k("60", 59.0, True, valid=False, issues=issues)
    kn = keep.pick_knee([k("40", 39.0, True), replayed])
    assert kn["knee_rate"] == 40 and kn["overloaded_rate"] is None
    assert kn["invalid"] == [{"rate": 60.0, "issues": issues}]

    # the loop's points at the test rate bound the knee when every one broke the SLO
    def pt(value: int, meets: bool, rate: float = 55.0, valid: bool = True) -> dict:
        return served("max_num_seqs", value, valid=valid, workload={"request_rate": rate},
                      score={"meets_slo": meets})

    kn = keep.pick_knee([k("40", 39.0, True), replayed], points=[pt(64, False),
                                                                      pt(1024, False)])
    assert (kn["knee_rate"], kn["overloaded_rate"], kn["overloaded_by"]) == (40, 55, "loop points")
    assert "55 req/s: all 2 valid loop point(s) (max_num_seqs=64, max_num_seqs=1024" in kn["why"]
    # one config met the SLO at 55: not overloaded for every config; invalid points ignored
    assert keep.pick_knee([k("40", 39.0, True)], points=[pt(64, False), pt(1024, True)]
                              )["overloaded_rate"] is None
    assert keep.pick_knee([k("40", 39.0, True)], points=[pt(64, False, valid=False)]
                              )["overloaded_rate"] is None


def test_measured_minutes_reads_the_device_commands(tmp_path: Path) -> None:
    run = tmp_path / "h200-2026-11-29"
    run.mkdir()
    (run / "commands.log").write_text(
        "2026-11-29T10:00:00Z $ python3 -m papermill labs/01_knob_sweep.ipynb a\n"
        "2026-11-29T10:05:00Z rc=0 wall=300s\n"
        "2026-11-29T10:06:00Z $ python3 -m papermill labs/02_slo_loop.ipynb b\n"
        "2026-11-29T10:10:00Z rc=124 wall=240s\n"
        "2026-11-29T10:11:00Z $ python3 -m papermill labs/02_slo_loop.ipynb b\n"
        "2026-11-29T10:15:00Z rc=0 wall=120s\n")
    assert labtools.measured_minutes(run) == {"knobs": 5.0, "slo": 6.0}
    assert labtools.run_label(run) == "H200, 2026-11-29"


# ----------------------------------------------------------------------------- real data

H200_RUN = ROOT / "labs" / "results" / "h200-2026-11-29"


def _h200_slo() -> Path:
    rec = H200_RUN / "slo"
    if not (rec / "tune.jsonl").is_file():
        pytest.fail(f"the recorded H200 run is missing: {rec}/tune.jsonl (labs/results/)")
    return rec


@pytest.fixture(scope="module")
def h200_replay(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    rec = _h200_slo()
    out = tmp_path_factory.mktemp("h200") / "replay"
    nb = _run(LAB02, out, {"backend": "replay", "replay_dir": str(rec)})
    return rec, out, _text(nb)


def test_real_slo_replay_flags_the_replayed_knee_rates(h200_replay: tuple[Path, Path, str]
                                                       ) -> None:
    rec, _, text = h200_replay
    knee = {r["rate"]: r for r in labtools.load_knee(rec)}
    assert knee["40"]["valid"] is True and knee["40"]["prefix_cache_hit_rate"] < 0.01
    for rate in ("60", "75", "90"):
        assert knee[rate]["valid"] is False
        assert knee[rate]["validity_issues"] == [
            "window 0: prefix cache hit rate 97% on a workload without a shared prefix: "
            "prompts were replayed, results are inflated"]
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln[:6].strip() in knee}
    assert lines["40"].rstrip().endswith("none")  # valid, no INVALID mark
    assert all(lines[r].rstrip().endswith("INVALID") for r in ("60", "75", "90"))
    assert ("knee between 40 req/s (the highest valid rate that met the SLO) and 55 req/s "
            "(loop points); 55 req/s: all 4 valid loop point(s)") in text
    assert "ignored invalid rate(s) 60, 75, 90 (prefix cache hit rate 97%" in text


def test_real_slo_baseline_is_a_queue_and_rate_40_is_not(h200_replay: tuple[Path, Path, str]
                                                         ) -> None:
    from course_utils.core import metrics

    rec, _, text = h200_replay
    points = {p["key"]: p for p in labtools.load_points_checked(rec)}
    steps = read_jsonl(rec / "tune.jsonl")
    base = points[steps[0]["point"]]
    assert (base["diagnosis"]["constraint"], base["diagnosis"]["leaf"]) == ("queue", "queue_cap")
    series = metrics.load_series(labtools.point_files(rec, base)["metrics"])
    assert max(s.gauge(metrics.WAITING) or 0 for s in series) > 0
    assert base["valid"] is True  # a fresh server: 0.5 % prefix hits
    (k40,) = labtools.load_knee(rec, [40])
    assert k40["diagnosis"]["constraint"] != "queue" and k40["meets_slo"] is True
    assert "diagnosis: queue: the batch-width cap binds" in text


def test_real_slo_run_replays_to_the_recorded_choice(h200_replay: tuple[Path, Path, str]) -> None:
    rec, out, text = h200_replay
    summary = labtools.tune_summary(rec)
    chosen = json.loads((out / "chosen.json").read_text())
    assert chosen["objective"] == "gate"  # the run predates `objective`: the p99 gate
    assert chosen["knobs"] == summary["knobs"] == {"max_model_len": 4096, "max_num_seqs": 64}
    assert "replay under the recorded rule = the run's choice: OK" in text
    # the same points under vLLM's per-request goodput, clearly not a GPU-run choice
    again = json.loads((out / "rederived.json").read_text())
    assert again["objective"] == "request_goodput"
    assert again["knobs"]["max_num_seqs"] == 1024
    assert [round(r["score"], 2) for r in again["steps"][1]["results"]] == [10.10, 28.16, 35.92]
    assert again["diagnosis"]["constraint"] == "prefill"
    assert again["next_knob"] == {"knob": "max_num_batched_tokens", "move": "raise",
                                  "has_candidates": None}
    assert "[re-derived here, objective 'request_goodput', same points; not run on the GPU]" in text
    assert "next knob the diagnosis names: max_num_batched_tokens (raise) - to be measured" in text
    for png in ("knee.png", "series-baseline.png", "series-rate-40.png",
                "goodput-max_num_seqs.png", "latency-max_num_seqs.png"):
        assert (out / png).stat().st_size > 1000, png
    assert not (out / "points.jsonl").exists()  # replay never measures


KNOBS_RUN = ROOT / "labs" / "results" / "h200-2026-11-29b" / "knobs"


def test_real_knob_run_replays_to_the_recorded_verdict(tmp_path: Path) -> None:
    """Lab 01 on the H200 (dummy weights): the recorded rule kept 0.9 for +34.4 % tok/s."""
    assert (KNOBS_RUN / "results.jsonl").is_file(), f"{KNOBS_RUN} is missing"
    out = tmp_path / "replay"
    nb = _run(LAB01, out, {"backend": "replay", "replay_dir": str(KNOBS_RUN),
                           "capacity_check": False})
    assert json.loads((out / "verdict.json").read_text()) == json.loads(
        (KNOBS_RUN / "verdict.json").read_text())
    assert (out / "triple.png").stat().st_size > 1000
    text = _text(nb)
    assert "accuracy" in text and "n/a" in text  # dummy weights: never a number
    # vLLM's logged KV tokens and the capacity prediction from the same GiB (H200 run)
    assert "logged 1,782,064 tokens from 95.17 GiB; predicted 1,782,016 (-0.00%)" in text


def test_real_knob_run_gain_is_not_a_capacity_effect(tmp_path: Path) -> None:
    """The same records with the capacity check: the KV cache never bound at the baseline
    (1024 requests x <= 352 tokens = 360,448 <= 1,782,064 logged), so the keep is a recheck."""
    out = tmp_path / "replay"
    nb = _run(LAB01, out, {"backend": "replay", "replay_dir": str(KNOBS_RUN)})
    v = json.loads((out / "verdict.json").read_text())
    assert v["decision"] == "recheck" and v["value"] == 0.8 and v["candidate"] == 0.9
    assert v["kv"]["demand_tokens"] == 360448 and v["kv"]["kv_tokens"] == 1782064
    assert v["kv"]["binding"] is False and v["kv"]["prompt_exact"] is False
    assert "RECHECK: gpu_memory_utilization=0.8" in _text(nb)
    assert "recorded run chose: keep 0.9" in _text(nb)


# ------------------------------------------------- the 2026-11-29c run: the loop to its end

RUN_C = ROOT / "labs" / "results" / "h200-2026-11-29c"


@pytest.fixture(scope="module")
def c_replay(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    rec = RUN_C / "slo"
    if not (rec / "tune.jsonl").is_file():
        pytest.fail(f"the recorded H200 run is missing: {rec}/tune.jsonl")
    out = tmp_path_factory.mktemp("h200c") / "replay"
    nb = _run(LAB02, out, {"backend": "replay", "replay_dir": str(rec)})
    return rec, out, _text(nb)


def test_real_slo_loop_keeps_an_improvement_and_stops(c_replay: tuple[Path, Path, str]) -> None:
    """Rate 45, start max_num_seqs 64: queue at the cap -> raise -> 256 kept (5.03 -> 42.69
    req/s of vLLM request goodput) -> nothing binds inside the SLO -> stop; replay agrees."""
    from course_utils.core import metrics

    rec, out, text = c_replay
    steps = read_jsonl(rec / "tune.jsonl")
    base, sweep_step, summary = steps[0], steps[1], steps[-1]
    assert base["kind"] == "baseline" and base["diagnosis"]["leaf"] == "queue_cap"
    points = {p["key"]: p for p in labtools.load_points_checked(rec)}
    series = metrics.load_series(labtools.point_files(rec, points[base["point"]])["metrics"])
    assert max(s.gauge(metrics.WAITING) or 0 for s in series) > 0  # the queue, live
    assert sweep_step["kind"] == "sweep" and sweep_step["knob"] == "max_num_seqs"
    assert sweep_step["move"] == "raise" and sweep_step["values_tried"] == [256, 1024]
    assert sweep_step["kept"] is True and sweep_step["best_value"] == 256
    assert round(sweep_step["request_goodput_before"], 2) == 5.03
    assert round(sweep_step["request_goodput_best"], 2) == 42.69
    assert sweep_step["diagnosis_after"]["constraint"] == "none"
    assert summary["kind"] == "summary" and summary["stopped_on_budget"] is False
    assert summary["stop_reason"] == "diagnosis 'none' (none) names no engine knob: at the limit"
    assert summary["serve_command"].endswith("--max-model-len 4096 --max-num-seqs 256")
    chosen = json.loads((out / "chosen.json").read_text())
    assert chosen["objective"] == "request_goodput" and chosen["knobs"] == summary["knobs"]
    assert "replay under the recorded rule = the run's choice: OK" in text
    assert "KEPT 256 (rule: request_goodput)" in text


def test_real_slo_knee_with_fresh_prompts_per_rate(c_replay: tuple[Path, Path, str]) -> None:
    """One bench seed per rate: no prefix-cache inflation (< 2 % hits), every rate valid;
    40/45/50 met the SLO with nothing queued, 55 broke p99 TTFT without a queue (prefill)."""
    rec, _, text = c_replay
    knee = {r["rate"]: r for r in labtools.load_knee(rec)}
    assert sorted(knee, key=float) == ["40", "45", "50", "55"]
    assert all(r["valid"] and r["prefix_cache_hit_rate"] < 0.02 for r in knee.values())
    for rate in ("40", "45", "50"):
        assert knee[rate]["meets_slo"] and knee[rate]["diagnosis"]["constraint"] == "none"
    assert knee["55"]["meets_slo"] is False
    assert knee["55"]["diagnosis"]["constraint"] == "prefill"
    assert knee["55"]["load"]["waiting_max"] == 0
    assert "knee between 50 req/s (the highest valid rate that met the SLO) and 55 req/s" in text


KNOBS_RUN_C = RUN_C / "knobs"


def test_real_knob_run_with_a_binding_kv_cache(tmp_path: Path) -> None:
    """Lab 01 with 1024 x 2560 generated tokens: the speed pass needs 2,719,744 KV tokens
    (prompt lengths exact, from vLLM) > 1,782,064 at 0.80, so the knob can matter; 0.94 was
    not faster (16,389 vs 19,034 tok/s), so the verdict is the baseline, like the run's."""
    out = tmp_path / "replay"
    nb = _run(LAB01, out, {"backend": "replay", "replay_dir": str(KNOBS_RUN_C)})
    v = json.loads((out / "verdict.json").read_text())
    recorded = json.loads((KNOBS_RUN_C / "verdict.json").read_text())
    assert (v["decision"], v["value"]) == (recorded["decision"], recorded["value"]) == (
        "revert", 0.8)
    # the run's 30 s p99 limit (params.json) fit neither point: p99 137 and 159 s
    assert v["slo_met_by"] == [] and v["why"].startswith("no setting meets the SLO, the "
                                                          "baseline included (p99 latency")
    text = _text(nb)
    assert ("the speed pass needs <= 2,719,744 tokens (1024 requests x 2656; prompt exact, "
            "from vLLM); vLLM logged 1,782,064: binds") in text
    # vLLM's 10 s engine stats: over the same seconds before either cache filled, 0.94 ran
    # the same batch 21.6 % slower (24.6 % when each point is averaged over its own window)
    assert ("gpu_memory_utilization=0.8: KV cache full after ~70 s; 24,420 gen tok/s before "
            "that; waiting max 332") in text
    assert ("gpu_memory_utilization=0.94: KV cache full after ~111 s; 18,415 gen tok/s before "
            "that (-21.6% vs the baseline over the same seconds 10-60); waiting max 159") in text
    assert "run-to-run spread, not the knob" in text
    assert "logged 2,149,632 tokens from 114.8 GiB; predicted 2,149,568 (-0.00%)" in text
    assert "vLLM logged 1,782,064: binds" in text
