"""sweep/tune with the fake vllm: JSONL points, failed points, resume, validation, early stop."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from course_utils.core import keep, knobs
from course_utils.core.keep import best_point, choose, objective_value
from course_utils.core.keep import early_stop_reason as _early_stop
from course_utils.core.records import PointPaths
from course_utils.core.slo import SLO
from course_utils.core.validate import BadInput
from course_utils.lab import knee, replay
from course_utils.lab.bench import Workload
from course_utils.lab.cli import add_cli
from course_utils.lab.server import group_pids
from course_utils.lab.sweep import couple_knobs, load_points, sweep
from course_utils.lab.tune import tune
from tests.served import served

SLO_LOOSE = SLO.parse("ttft:5000 tpot:1000")
W = Workload(input_len=16, output_len=8, num_prompts=12, request_rate=400)
FAST = dict(server_kwargs={"startup_timeout_s": 20, "stop_timeout_s": 5},
            bench_kwargs={"timeout_s": 60}, warmup_prompts=2, metrics_interval_s=0.05,
            gpu_memory_gib=24.0, progress=False)


def _starts(tmp_path: Path) -> list[dict]:
    p = tmp_path / "starts.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def test_sweep_writes_one_scored_point_per_value(tmp_path: Path, fake_vllm: Path) -> None:
    out = tmp_path / "out"
    recs = sweep("fake-model", "max_num_seqs", [2, 8], workload=W, slo=SLO_LOOSE, out_dir=out,
                 base_knobs={"enable_prefix_caching": True}, early_stop=False, **FAST)
    assert [r["value"] for r in recs] == [2, 8]
    lines = load_points(out)
    assert [r["key"] for r in lines] == [r["key"] for r in recs]
    for r in lines:
        assert r["status"] == "ok", r.get("reason")
        assert r["knobs"]["max_num_seqs"] == r["value"]
        assert r["knobs"]["enable_prefix_caching"] is True
        assert r["score"]["meets_slo"] is True and r["score"]["gate_goodput"] > 0
        assert r["valid"] is True, r["validity_issues"]
        assert r["diagnosis"]["constraint"] in ("queue", "prefill", "decode", "kv", "none")
        assert r["diagnosis"]["why_en"]
        assert r["bench"]["completed"] == W.num_prompts
        assert PointPaths.of(out, r["key"]).metrics(0).read_text().count("\n") >= 1
        assert r["serve_cmd"].startswith("vllm serve fake-model --enable-prefix-caching "
                                         f"--max-num-seqs {r['value']} --host 127.0.0.1")
    assert len(_starts(tmp_path)) == 2
    assert best_point(recs).value in (2, 8)


def test_failed_points_are_recorded_and_the_sweep_goes_on(tmp_path: Path, fake_vllm: Path,
                                                          ) -> None:
    recs = sweep("fake-model", "gpu_memory_utilization", [0.1, 0.99, 0.9], workload=W,
                 slo=SLO_LOOSE, out_dir=tmp_path / "o", early_stop=False, **FAST)
    assert [r["status"] for r in recs] == ["failed", "failed", "ok"]
    assert recs[0]["reason"].startswith("weights do not fit")
    assert recs[1]["reason"].startswith("CUDA out of memory")
    recs = sweep("fake-model", "max_model_len", [65536], workload=W, slo=SLO_LOOSE,
                 out_dir=tmp_path / "o", **FAST)
    assert recs[0]["reason"].startswith("not enough KV cache memory for max_model_len 65536")
    assert len(load_points(tmp_path / "o")) == 4
    for s in _starts(tmp_path):
        assert group_pids(s["pid"]) == []


def test_server_dying_mid_bench_is_a_failed_point(tmp_path: Path, fake_vllm: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_DIE_AFTER", "5")  # 2 warm-up + 3 measured requests
    recs = sweep("fake-model", "max_num_seqs", [4], workload=W, slo=SLO_LOOSE,
                 out_dir=tmp_path / "o", **FAST)
    assert recs[0]["status"] == "failed"
    assert recs[0]["reason"].startswith("server died during the bench: ")
    assert "EngineDeadError" in recs[0]["reason"]


def test_bad_values_are_rejected_before_any_server_starts(tmp_path: Path, fake_vllm: Path
                                                          ) -> None:
    with pytest.raises(knobs.KnobError, match=r"^max_num_seqs=-1: "):
        sweep("fake-model", "max_num_seqs", [8, -1], workload=W, slo=SLO_LOOSE,
              out_dir=tmp_path / "o", **FAST)
    # 0.26.0 default max_num_batched_tokens on a 24 GiB GPU is 2048 < 4096
    with pytest.raises(knobs.KnobError, match="couple=True"):
        sweep("fake-model", "max_num_seqs", [64, 4096], workload=W, slo=SLO_LOOSE,
              out_dir=tmp_path / "o", **FAST)
    with pytest.raises(knobs.KnobError):
        sweep("fake-model", "no_such_knob", [1], workload=W, slo=SLO_LOOSE,
              out_dir=tmp_path / "o", **FAST)
    assert _starts(tmp_path) == []
    assert not (tmp_path / "o" / "points.jsonl").exists()


def test_couple_raises_max_num_batched_tokens(tmp_path: Path, fake_vllm: Path) -> None:
    assert couple_knobs({"max_num_seqs": 4096}, "max_num_seqs", 24.0) == (
        {"max_num_seqs": 4096, "max_num_batched_tokens": 4096}, {"max_num_batched_tokens": 4096})
    assert couple_knobs({"max_num_seqs": 512}, "max_num_seqs", 141.0)[1] == {}  # H200: 8192
    assert couple_knobs({"max_num_batched_tokens": 128}, "max_num_batched_tokens", 24.0)[1] == {
        "max_num_seqs": 128}
    recs = sweep("fake-model", "max_num_seqs", [4096], workload=W, slo=SLO_LOOSE,
                 out_dir=tmp_path / "o", couple=True, **FAST)
    assert recs[0]["status"] == "ok", recs[0].get("reason")
    assert recs[0]["coupled"] == {"max_num_batched_tokens": 4096}
    assert "--max-num-batched-tokens 4096" in recs[0]["serve_cmd"]


def test_interrupted_sweep_resumes_without_loss_or_repeat(tmp_path: Path, fake_vllm: Path
                                                          ) -> None:
    out = tmp_path / "o"
    seen: list[int] = []

    def interrupt_after_two(rec: dict) -> None:
        seen.append(rec["value"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    values = [1, 2, 4, 8]
    with pytest.raises(KeyboardInterrupt):
        sweep("fake-model", "max_num_seqs", values, workload=W, slo=SLO_LOOSE, out_dir=out,
              early_stop=False, on_point=interrupt_after_two, **FAST)
    assert len(_starts(tmp_path)) == 2
    assert [r["value"] for r in load_points(out)] == [1, 2]
    with open(out / "points.jsonl", "a") as fh:  # a writer killed mid-line
        fh.write('{"key": "torn')
    recs = sweep("fake-model", "max_num_seqs", values, workload=W, slo=SLO_LOOSE, out_dir=out,
                 early_stop=False, **FAST)
    assert [r["value"] for r in recs] == values
    assert len(_starts(tmp_path)) == 4  # 2 before + 2 new: nothing repeated
    keys = [r["key"] for r in load_points(out)]
    assert len(keys) == len(set(keys)) == 4
    for s in _starts(tmp_path):
        assert group_pids(s["pid"]) == []
    # a third run with everything done starts nothing
    sweep("fake-model", "max_num_seqs", values, workload=W, slo=SLO_LOOSE, out_dir=out, **FAST)
    assert len(_starts(tmp_path)) == 4
    # resume=False would measure finished points again: refused, nothing started
    with pytest.raises(BadInput, match="--no-resume"):
        sweep("fake-model", "max_num_seqs", [1], workload=W, slo=SLO_LOOSE, out_dir=out,
              resume=False, **FAST)
    assert len(_starts(tmp_path)) == 4


def _rec(value: int, goodput: float, meets: bool = True, status: str = "ok",
         request_goodput: float | None = None, valid: bool = True) -> dict:
    return served("max_num_seqs", value, status=status, valid=valid,
                  knobs={"max_num_seqs": value},
                  score={"gate_goodput": goodput if meets else 0.0, "meets_slo": meets,
                         "request_goodput": goodput if request_goodput is None else request_goodput,
                         "violations": [] if meets else ["p99 TPOT 60.0 ms > 50 ms"]})


def test_early_stop_rules() -> None:
    gate = {"objective": "gate"}
    assert _early_stop([_rec(1, 5), _rec(2, 6), _rec(3, 7)], 2, 0, **gate) is None
    assert "gate goodput stopped improving" in _early_stop(
        [_rec(1, 5), _rec(2, 4), _rec(3, 5)], 2, 0, **gate)
    assert _early_stop([_rec(1, 5), _rec(2, 4)], 2, 0, **gate) is None
    assert "stopped improving" in _early_stop([_rec(1, 5), _rec(2, 5.1)], 1, 0.05, **gate)
    broke = _early_stop([_rec(1, 0, meets=False), _rec(2, 5), _rec(3, 0, meets=False)], 9, 0,
                        **gate)
    assert broke.startswith("SLO broke at max_num_seqs=3 (p99 TPOT")
    # nothing met the SLO yet: keep going
    assert _early_stop([_rec(1, 0, meets=False), _rec(2, 0, meets=False)], 1, 0, **gate) is None
    # request goodput: the gate is 0 everywhere (H200, 55 req/s) yet the score climbs
    climb = [_rec(64, 0, False, request_goodput=4.13), _rec(128, 0, False, request_goodput=10.1),
             _rec(256, 0, False, request_goodput=28.16)]
    assert _early_stop(climb, 1, 0.02) is None
    assert "request goodput stopped improving for 1 point(s) (best 28.16)" == _early_stop(
        [*climb, _rec(1024, 0, False, request_goodput=28.2)], 1, 0.02)
    # under request goodput a point that breaks the p99 SLO does not stop the sweep by itself
    assert _early_stop([_rec(1, 5), _rec(2, 0, meets=False, request_goodput=6)], 9, 0) is None


def test_keep_rule_by_objective_on_the_h200_numbers() -> None:
    """labs/results/h200-2026-11-29: max_num_seqs at 55 req/s, every p99 TTFT over 300 ms."""
    recs = [_rec(128, 0, False, request_goodput=10.10), _rec(256, 0, False, request_goodput=28.16),
            _rec(1024, 0, False, request_goodput=35.92)]
    best, gain, kept = choose(recs, 4.13, objective="request_goodput", plateau=0.02)
    assert kept and best is not None and best.value == 1024 and gain == pytest.approx(35.92 / 4.13 - 1)
    assert choose(recs, 0.0, objective="gate", plateau=0.02) == (None, None, False)
    assert objective_value(recs[0], "gate") == 0.0
    assert objective_value(recs[0], "request_goodput") == 10.10
    # the plateau: a further move must beat the nearer one by more than the plateau
    assert best_point(recs, plateau=0.30).value == 256  # 35.92 / 28.16 = +27.6 %
    assert best_point(recs, plateau=0.02).value == 1024
    # only valid points count; a gain of exactly the plateau is not "more than"
    invalid = _rec(1024, 0, False, request_goodput=35.92, valid=False)
    assert best_point([*recs[:2], invalid]).value == 256
    assert choose([_rec(8, 0, False, request_goodput=10.0)], 8.0, plateau=0.25)[2] is False
    assert choose([_rec(8, 0, False, request_goodput=10.5)], 8.0, plateau=0.25)[2] is True
    with pytest.raises(ValueError, match="objective"):
        best_point(recs, objective="throughput")


def test_early_stop_in_a_sweep(tmp_path: Path, fake_vllm: Path) -> None:
    recs = sweep("fake-model", "max_num_seqs", [4, 5, 6, 7], workload=W, slo=SLO_LOOSE,
                 out_dir=tmp_path / "o", patience=1, min_gain=10.0, **FAST)
    assert len(recs) == 2  # the 2nd point cannot gain 1000 %: stop
    assert len(_starts(tmp_path)) == 2


def test_tune_keeps_a_value_that_lifts_goodput(tmp_path: Path, fake_vllm: Path) -> None:
    # one slot and 16 requests at once: TTFT p99 queues far past 300 ms -> gate goodput 0
    w = Workload(input_len=16, output_len=24, num_prompts=16)
    slo = SLO.parse("ttft:300 tpot:200")
    summary = tune("fake-model", {"max_num_seqs": [1, 16]}, workload=w, slo=slo,
                   out_dir=tmp_path / "t", base_knobs={"max_num_seqs": 1}, max_steps=2, **FAST)
    steps = [json.loads(x) for x in (tmp_path / "t" / "tune.jsonl").read_text().splitlines()]
    assert steps[0]["kind"] == "baseline" and steps[0]["gate_goodput"] == 0.0
    assert steps[0]["diagnosis"]["constraint"] == "queue"
    assert "max_num_seqs" in steps[0]["diagnosis"]["knobs"]
    assert steps[1]["kind"] == "sweep" and steps[1]["knob"] == "max_num_seqs"
    assert steps[1]["values_tried"] == [16]
    assert steps[1]["kept"] is True and steps[1]["best_value"] == 16
    assert steps[-1]["kind"] == "summary"
    assert summary["knobs"]["max_num_seqs"] == 16
    assert summary["serve_command"] == "vllm serve fake-model --max-num-seqs 16"
    assert summary["stop_reason"]
    assert summary["gate_goodput"] and summary["gate_goodput"] > 0
    n = len(_starts(tmp_path))
    # the same tune again replays every point from points.jsonl: no server starts
    again = tune("fake-model", {"max_num_seqs": [1, 16]}, workload=w, slo=slo,
                 out_dir=tmp_path / "t", base_knobs={"max_num_seqs": 1}, max_steps=2, **FAST)
    assert len(_starts(tmp_path)) == n
    assert again["serve_command"] == summary["serve_command"]


def test_tune_request_goodput_keeps_a_value_while_the_gate_stays_zero(
        tmp_path: Path, fake_vllm: Path) -> None:
    # 16 requests at once, ~90 ms each at batch 1: TTFT 150 ms lets ~2 requests through with
    # one slot, ~8 with four; p99 TTFT breaks 150 ms either way: the gate reads 0 for both
    w = Workload(input_len=16, output_len=40, num_prompts=16)
    slo = SLO.parse("ttft:150 tpot:1000")
    out = tmp_path / "t"
    summary = tune("fake-model", {"max_num_seqs": [1, 4]}, workload=w, slo=slo, out_dir=out,
                   base_knobs={"max_num_seqs": 1}, max_steps=1, **FAST)
    steps = [json.loads(x) for x in (out / "tune.jsonl").read_text().splitlines()]
    base, step = steps[0], steps[1]
    assert base["objective"] == "request_goodput" and base["gate_goodput"] == 0.0
    assert base["diagnosis"]["leaf"] == "queue_cap"
    (r4,) = step["results"]
    assert r4["value"] == 4 and r4["gate_goodput"] == 0.0 and r4["meets_slo"] is False
    assert r4["request_goodput"] > 1.5 * base["request_goodput"] > 0
    assert step["kept"] is True and step["best_value"] == 4
    assert step["score_before"] == base["request_goodput"]  # both scores in every step
    assert step["decision"] == "keep" and step["margin"] >= 0.02
    assert summary["knobs"]["max_num_seqs"] == 4 and summary["objective"] == "request_goodput"
    assert summary["gate_goodput"] == 0.0 and summary["request_goodput"] == r4["request_goodput"]
    # the same points under lesson 000's gate: nothing to keep (all resumed, no new server)
    n = len(_starts(tmp_path))
    gate = tune("fake-model", {"max_num_seqs": [1, 4]}, workload=w, slo=slo, out_dir=out,
                base_knobs={"max_num_seqs": 1}, max_steps=1, objective="gate", **FAST)
    assert len(_starts(tmp_path)) == n
    assert gate["knobs"]["max_num_seqs"] == 1
    assert json.loads((out / "tune.jsonl").read_text().splitlines()[1])["reverted"] is True


def test_a_budget_stop_is_a_normal_end_and_resumed_points_are_free(
        tmp_path: Path, fake_vllm: Path) -> None:
    """lab02d.log of the H200 run: budget 2.4 min < 2.5 min per point (estimated from the
    recorded points) stopped tune before its baseline although every point was recorded."""
    w = Workload(input_len=16, output_len=40, num_prompts=12)  # ~0.6 s of queueing on 2 slots
    out = tmp_path / "t"
    first = tune("fake-model", {"max_num_seqs": [2, 4]}, workload=w, slo=SLO_LOOSE, out_dir=out,
                 base_knobs={"max_num_seqs": 2}, max_steps=2, **FAST)
    assert first["diagnosis"] is not None
    n = len(_starts(tmp_path))
    pts = load_points(out)
    for p in pts:  # pretend each point took 2.5 min on the GPU
        p["elapsed_s"] = 150.0
    (out / "points.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pts))
    again = tune("fake-model", {"max_num_seqs": [2, 4]}, workload=w, slo=SLO_LOOSE, out_dir=out,
                 base_knobs={"max_num_seqs": 2}, max_steps=2, gpu_minutes=2.4, **FAST)
    assert len(_starts(tmp_path)) == n  # nothing new had to run
    assert again["knobs"] == first["knobs"] and not again["stopped_on_budget"]
    # a new point that does not fit: a normal stop, recorded in the summary
    more = tune("fake-model", {"max_num_seqs": [2, 4, 8]}, workload=w, slo=SLO_LOOSE,
                out_dir=out, base_knobs={"max_num_seqs": 2}, max_steps=2, gpu_minutes=2.4,
                **FAST)
    assert len(_starts(tmp_path)) == n
    assert more["stop_reason"].startswith("GPU budget: 2.4 min left"), more["stop_reason"]
    assert more["stopped_on_budget"] is True
    assert json.loads((out / "tune.jsonl").read_text().splitlines()[-1])["kind"] == "summary"


def test_tune_respects_the_gpu_budget(tmp_path: Path, fake_vllm: Path) -> None:
    summary = tune("fake-model", {"max_num_seqs": [8]}, workload=W, slo=SLO_LOOSE,
                   out_dir=tmp_path / "t", gpu_minutes=0.5, est_point_minutes=1.0, **FAST)
    assert summary["stop_reason"].startswith("GPU budget")
    assert _starts(tmp_path) == []


def test_tune_rejects_bad_candidates_first(tmp_path: Path, fake_vllm: Path) -> None:
    with pytest.raises(knobs.KnobError):
        tune("fake-model", {"max_num_seqs": [0]}, workload=W, slo=SLO_LOOSE,
             out_dir=tmp_path / "t", **FAST)
    assert _starts(tmp_path) == []


def test_cli_sweep(tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path,
                   capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args([
        "sweep", "--model", str(dummy_model), "--knob", "max_num_seqs", "--values", "2,4",
        "--slo", "ttft:5000 tpot:1000", "--rate", "400", "--out", str(tmp_path / "o"),
        "--load-format", "dummy", "--input-len", "16", "--output-len", "8",
        "--num-prompts", "10", "--no-progress", "--startup-timeout", "20",
        "--gpu-memory-gib", "24",
    ])
    assert args.func(args) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["value"] for r in rows] == [2, 4]
    assert all(r["status"] == "ok" for r in rows)
    assert all("--load-format" in s["argv"] for s in _starts(tmp_path))
    targs = parser.parse_args(["tune", "--model", "m", "--slo", "ttft:300", "--out", "o",
                               "--candidate", "max_num_seqs=64,128", "--gpu-minutes", "20"])
    assert targs.candidate == ["max_num_seqs=64,128"] and targs.gpu_minutes == 20


# ---------------------------------------------------------------- real vLLM 0.26.0 (GPU host)


@pytest.mark.gpu
def test_real_vllm_sweep_point(tmp_path: Path) -> None:
    """The real path: `vllm serve` + `vllm bench serve` on a GPU, dummy weights.

    COURSE_GPU_MODEL: a model folder (course_utils.lab.modelfolder) or HF id available offline.
    """
    import os

    from course_utils.lab.server import gpu_memory_used_mib

    model = os.environ.get("COURSE_GPU_MODEL")
    assert model, "set COURSE_GPU_MODEL to a model folder for the GPU tests"
    out = tmp_path / "real"
    recs = sweep(model, "max_num_seqs", [128], workload=Workload(num_prompts=100,
                                                                 request_rate=20),
                 slo=SLO.parse("ttft:300 tpot:50"), out_dir=out,
                 base_knobs={"max_model_len": 4096},
                 server_kwargs={"load_format": "dummy", "startup_timeout_s": 480},
                 bench_kwargs={"timeout_s": 300}, progress=False)
    r = recs[0]
    assert r["status"] == "ok", r.get("reason")
    assert r["valid"], r["validity_issues"]
    assert r["bench"]["completed"] == 100
    assert r["load"]["n_under_load"] > 0
    assert r["diagnosis"]["constraint"] in ("queue", "prefill", "decode", "kv", "none")
    used = gpu_memory_used_mib()
    assert used is None or used < 4096, f"GPU memory still in use after stop: {used} MiB"


@pytest.mark.gpu
def test_real_vllm_failed_start_is_classified(tmp_path: Path) -> None:
    """0.05 x 140 GiB is less than the 14.3 GiB of bf16 7B weights: a failed point, one line."""
    import os

    model = os.environ.get("COURSE_GPU_MODEL")
    assert model, "set COURSE_GPU_MODEL to a model folder for the GPU tests"
    recs = sweep(model, "gpu_memory_utilization", [0.05], workload=Workload(num_prompts=10),
                 slo=SLO.parse("ttft:300 tpot:50"), out_dir=tmp_path / "fail",
                 base_knobs={"max_model_len": 4096},
                 server_kwargs={"load_format": "dummy", "startup_timeout_s": 300},
                 progress=False)
    r = recs[0]
    assert r["status"] == "failed"
    print("real failure reason:", r["reason"])
    assert r["reason"].startswith(("weights do not fit", "CUDA out of memory",
                                   "not enough KV cache memory")), r["reason"]


# ---------------------------------------------------------------- knee scan: seeds, replay check

KNEE_W = Workload(input_len=64, output_len=4, num_prompts=20, seed=7)
KNEE_FAST = dict(server_kwargs={"startup_timeout_s": 20, "stop_timeout_s": 5},
                 bench_kwargs={"timeout_s": 60}, warmup_prompts=2, metrics_interval_s=0.05,
                 gpu_memory_gib=24.0, progress=None)


def _bench_argvs(path: Path) -> list[list[str]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_knee_scan_sends_fresh_prompts_at_every_rate(tmp_path: Path, fake_vllm: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from course_utils.lab import replay as labtools

    log = tmp_path / "bench-argv.jsonl"
    monkeypatch.setenv("FAKE_VLLM_BENCH_ARGV", str(log))
    recs = knee.knee_scan("fake-model", [50, 100, 200], workload=KNEE_W, slo=SLO_LOOSE,
                          out_dir=tmp_path / "k", batch1_prompts=2, **KNEE_FAST)
    argvs = _bench_argvs(log)
    assert len(_starts(tmp_path)) == 1  # one server for every rate
    seeds = [_flag(a, "--seed") for a in argvs]
    assert len(seeds) == len(set(seeds))  # no prompt set is ever sent twice to the server
    # each rate: a warm-up at that rate, then its window 0 with the rate's own seed; a window
    # the gate rejects on a loaded CPU is measured once more on fresh prompts (seed + 1000 i)
    pairs = [(_flag(a, "--request-rate"), _flag(a, "--seed")) for a in argvs]
    assert [r for r, _ in pairs if r != "inf"] == sorted(
        (r for r, _ in pairs if r != "inf"), key=float)  # the rates in order
    for rate, seed in (("50", 7), ("100", 8), ("200", 9)):
        mine = [s for r, s in pairs if r == rate]
        assert mine[:2] == [str(100000 + seed), str(seed)], rate
        assert all(int(s) % 1000 == seed for s in mine[2:]), rate
    # every rate met the SLO: the knee is above 200, so 200 is measured again, then batch 1
    assert ("200", "1009") in pairs and pairs[-1] == ("inf", "10")
    assert [r["workload"]["seed"] for r in recs] == [7, 8, 9]
    assert [w["valid"] for w in recs[2]["windows"]].count(True) == 2
    for r in recs:
        assert r["status"] == "ok" and r["valid"] is True, r.get("validity_issues")
        assert r["prefix_cache_hit_rate"] is not None and r["prefix_cache_hit_rate"] < 0.1
        assert r["warmup"]["status"] == "ok" and r["warmup"]["seed"] == r["workload"]["seed"] + 100000
    assert all(r["valid"] for r in labtools.load_knee(tmp_path / "k"))
    kn = keep.pick_knee(recs)
    assert kn["knee_rate"] == 200 and kn["windows"]["200"] == 2


def test_a_replayed_knee_rate_is_remeasured_on_fresh_prompts(
        tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The H200 bug, reproduced: one seed for every rate on one server. The gate flags the
    replayed window and measures the rate again with fresh prompts."""
    from course_utils.lab import replay as labtools

    monkeypatch.setattr(knee, "knee_seed", lambda seed, rates, rate: seed)
    out = tmp_path / "k"
    first, second = knee.knee_scan("fake-model", [50, 100], workload=KNEE_W, slo=SLO_LOOSE,
                                   out_dir=out, bracket_repeats=0, **KNEE_FAST)
    assert first["valid"] is True  # (a loaded CPU may have re-measured it: timing, not prompts)
    w0, w1 = second["windows"][:2]
    assert (w0["seed"], w0["purpose"], w0["valid"]) == (7, "measure", False)
    pct = f"{w0['prefix_cache_hit_rate']:.0%}"
    assert (
        f"prefix cache hit rate {pct} on a workload without a shared prefix: prompts were "
        "replayed, results are inflated") in w0["validity_issues"]
    assert (w1["seed"], w1["purpose"], w1["valid"]) == (1007, "remeasure", True)
    assert second["valid"] is True and second["invalid_windows"] == [0]
    assert second["prefix_cache_hit_rate"] == w1["prefix_cache_hit_rate"] < 0.1
    # replay re-derives window 0's verdict from its recorded series, even when stripped
    lines = [json.loads(x) for x in (out / "knee.jsonl").read_text().splitlines()]
    for r in lines:
        for w in r["windows"]:
            w.pop("prefix_cache_hit_rate")
            w.update(valid=True, validity_issues=[])
    (out / "knee.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    again = labtools.load_knee(out)
    assert [w["valid"] for w in again[1]["windows"]] == [False, True]
    assert [i for i in w0["validity_issues"] if i.startswith("prefix cache")] == [
        i for i in again[1]["windows"][0]["validity_issues"] if i.startswith("prefix cache")]
    assert keep.pick_knee(again)["knee_rate"] == 100


def test_prefix_cache_check_needs_no_shared_prefix(tmp_path: Path) -> None:
    from course_utils.core.metrics import Snapshot
    from course_utils.core.validity import (
        prefix_cache_hit_rate,
        prefix_cache_issue,
        validity_issues,
    )

    def snap(t: float, q: float, h: float) -> Snapshot:
        return Snapshot(t=t, values={"vllm:prefix_cache_queries": q, "vllm:prefix_cache_hits": h})

    # the H200 knee rate 60: 297600 of 307200 prompt tokens hit during the load
    series = [snap(0, 311296, 1488), snap(1, 500000, 150000), snap(2, 618496, 299088)]
    assert prefix_cache_hit_rate(series) == pytest.approx(0.96875)
    w = Workload(input_len=512, output_len=128, num_prompts=600, request_rate=60)
    assert prefix_cache_issue(0.96875, w) == (
        "prefix cache hit rate 97% on a workload without a shared prefix: prompts were "
        "replayed, results are inflated")
    assert prefix_cache_issue(0.005, w) is None and prefix_cache_issue(None, w) is None
    shared = Workload(input_len=512, output_len=128, num_prompts=600, prefix_len=448)
    assert prefix_cache_issue(0.9, shared) is None  # a shared prefix is meant to hit
    raw = {"completed": 600, "failed": 0, "total_output_tokens": 600 * 128}
    assert validity_issues(raw, w, prefix_cache_hit_rate=0.96875)[-1].startswith(
        "prefix cache hit rate 97%")
    assert prefix_cache_hit_rate(series[:1]) is None
    assert prefix_cache_hit_rate([Snapshot(t=0), Snapshot(t=1)]) is None  # caching off


def test_tune_that_no_knob_rescues_says_the_rate_is_past_the_knee(
    tmp_path: Path, fake_vllm: Path
) -> None:
    # a TPOT target the fake cannot meet at any batch width: the loop tries the knob the
    # diagnosis names, keeps nothing, and concludes "past the knee", not "done"
    w = Workload(input_len=16, output_len=24, num_prompts=16)
    slo = SLO.parse("ttft:5000 tpot:0.001")
    summary = tune("fake-model", {"max_num_seqs": [2, 16]}, workload=w, slo=slo,
                   out_dir=tmp_path / "t", base_knobs={"max_num_seqs": 4}, max_steps=3, **FAST)
    assert summary["meets_slo"] is False
    assert summary["stop_reason"].startswith("plateau"), summary["stop_reason"]
    o = summary["outcome"]
    assert o["outcome"] == "past_knee" and o["tried"] == ["max_num_seqs"]
    assert "past the server's knee" in o["why"] and "not tried" not in o["why"]
    # the replay re-derives the same conclusion from the records
    assert replay.replay_tune(tmp_path / "t")["outcome"]["outcome"] == "past_knee"


def test_tune_that_meets_the_slo_says_so(tmp_path: Path, fake_vllm: Path) -> None:
    w = Workload(input_len=16, output_len=24, num_prompts=16)
    summary = tune("fake-model", {"max_num_seqs": [1, 16]}, workload=w,
                   slo=SLO.parse("ttft:300 tpot:200"), out_dir=tmp_path / "t",
                   base_knobs={"max_num_seqs": 1}, max_steps=2, **FAST)
    assert summary["meets_slo"] is True and summary["outcome"]["outcome"] == "meets_slo"


def test_a_resumed_scan_warms_a_new_server_before_its_repeat(
        tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repeat of a bracket rate on the next call's new server gets its warm-up first (the
    H200's cold repeat JIT-compiled a kernel inside its window); on the scan's own server,
    warm from the rates before it, it does not."""
    out, log = tmp_path / "k", tmp_path / "bench-argv.jsonl"
    monkeypatch.setenv("FAKE_VLLM_BENCH_ARGV", str(log))
    knee.knee_scan("fake-model", [50, 100], workload=KNEE_W, slo=SLO_LOOSE, out_dir=out,
                   bracket_repeats=0, batch1_prompts=2, **KNEE_FAST)
    n = len(_bench_argvs(log))
    recs = knee.knee_scan("fake-model", [50, 100], workload=KNEE_W, slo=SLO_LOOSE, out_dir=out,
                          bracket_repeats=1, batch1_prompts=2, **KNEE_FAST)
    again = [(_flag(a, "--request-rate"), _flag(a, "--seed")) for a in _bench_argvs(log)[n:]]
    assert len(_starts(tmp_path)) == 2
    assert again[0] == ("100", str(100000 + 8)), again  # the warm-up at the repeated rate
    assert again[1][0] == "100" and int(again[1][1]) % 1000 == 8 and again[1][1] != "8"
    assert len([r for r, s in again if int(s) >= 100000]) == 1  # one warm-up, then warm
    assert [w["valid"] for w in recs[1]["windows"]].count(True) >= 2
