"""Lab 03's replay: the recorded run (``core.scaleout.RUN_DIR``, the ONE place that names it:
the fake fixture until the 2-GPU run is collected, then labs/results/h200x2-...) must replay
to what it recorded; lab 03 runs through papermill in replay mode on it and in GPU mode
against the fake vLLM. Nothing here skips: a missing run folder fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import papermill as pm
import pytest

from course_utils.core.scaleout import CONFIGS, RUN_DIR
from course_utils.lab import scaleout as lab03

ROOT = Path(__file__).resolve().parents[2]
LAB03 = ROOT / "labs" / "03_scale_out.ipynb"
RUN = ROOT / RUN_DIR  # the recorded run the book and lab 03 read
FIXTURE = ROOT / "tests" / "fixtures" / "scaleout_fake"  # made by tests/fakes/make_scaleout_fixture.py


def _text(nb: dict) -> str:
    out = []
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            t = o.get("text", "")
            out.append(t if isinstance(t, str) else "".join(t))
    return "\n".join(out)


def _run(params: dict, out: Path) -> str:
    nb = pm.execute_notebook(str(LAB03), str(out / "03.ipynb"), parameters=params,
                             cwd=str(ROOT), progress_bar=False, kernel_name="python3")
    return _text(nb)


def test_the_recorded_run_replays_to_what_it_recorded() -> None:
    assert (RUN / "scaleout").is_dir(), f"{RUN}: the recorded lab 03 run is missing"
    r = lab03.replay_scaleout(RUN)
    assert set(r.configs) == set(CONFIGS), "one, dp2 and tp2 are all recorded"
    assert r.problems() == []
    for c in r.configs.values():
        assert c.knee_agrees is True, c.config
        assert c.run is not None and c.run.status == "ok"
        assert c.knee["knee_rate"] is not None, f"{c.config}: no rate met the SLO"
    # with DP every window has both engines, each re-diagnosed from its own series
    dp = r.configs["dp2"]
    assert {e.engine for e in dp.engines} == {"0", "1"}
    assert len(dp.engines) == 2 * sum(
        1 for rec in dp.records for w in rec["windows"] if w.get("engines"))
    assert sorted(p for p in dp.run.processes if p.startswith("EngineCore")) == [
        "EngineCore_DP0", "EngineCore_DP1"]
    tp = r.configs["tp2"]
    assert {"Worker_TP0", "Worker_TP1"} <= set(tp.run.processes)
    # the three-way verdicts are all derived
    assert {"dp_vs_prediction", "dp_vs_tp", "tpot"} <= set(r.three_way.verdicts)
    assert r.three_way.predicted_dp2 is not None


def test_replay_catches_a_record_that_disagrees_with_its_series(tmp_path: Path) -> None:
    bad = tmp_path / "run"
    shutil.copytree(FIXTURE, bad)
    knee = bad / "scaleout" / "dp2" / "knee.jsonl"
    recs = [json.loads(x) for x in knee.read_text().splitlines()]
    recs[0]["windows"][0]["engines"]["1"]["diagnosis"]["constraint"] = "kv"
    knee.write_text("".join(json.dumps(r) + "\n" for r in recs))
    run = bad / "scaleout" / "one" / "scaleout.jsonl"
    last = json.loads(run.read_text().splitlines()[-1])
    last["knee"]["knee_rate"] = 999.0
    run.write_text(json.dumps(last) + "\n")
    problems = lab03.replay_scaleout(bad).problems()
    assert any("dp2 rate 16 window 0 engine 1: recorded kv, replayed" in p for p in problems)
    assert any(p.startswith("one: knee") for p in problems)
    with pytest.raises(FileNotFoundError, match="no recorded lab 03 run"):
        lab03.replay_scaleout(tmp_path / "nothing")


def test_lab03_replays_the_recorded_run(tmp_path: Path) -> None:
    text = _run({"backend": "replay", "output_dir": str(tmp_path / "o")}, tmp_path)
    assert "replay re-derives what the run recorded: OK" in text
    assert "2 replicas (DP=2)" in text and "1 model on 2 GPUs (TP=2)" in text
    assert "is the safe end" in text or "both ends agree" in text
    assert "predicted" in text and "EngineCore_DP1" in text
    assert not (tmp_path / "o").exists()  # replay never measures


def test_lab03_in_gpu_mode_against_the_fake(tmp_path: Path, fake_vllm: Path,
                                            fake_nvidia_smi: Path, dummy_model: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    h200 = "NVIDIA H200,143771,143000,580.95.05"
    monkeypatch.setenv("FAKE_GPU", f"{h200};{h200}")
    out = tmp_path / "scaleout"
    params = {"backend": "vllm", "model": str(dummy_model), "load_format": "dummy",
              "output_dir": str(out), "configs": ["one", "dp2"], "input_len": 64,
              "output_len": 16, "rates": {"one": [4, 8], "dp2": [8, 16]}, "window_s": 2,
              "target_rate": 20}
    text = _run(params, tmp_path)
    assert "one: ok" in text and "dp2: ok" in text
    assert "replay re-derives what the run recorded: OK" in text
    assert (out / "dp2" / "knee.jsonl").is_file()
    # and the recorded folder replays
    text = _run({"backend": "replay", "replay_dir": str(out), "output_dir": str(tmp_path / "r")},
                tmp_path)
    assert "replay re-derives what the run recorded: OK" in text


def test_the_h200x2_run_supports_these_verdicts() -> None:
    """The 2026-11-30 run on two H200s (dummy weights, lab 02's workload and SLO), decisions
    re-derived from its windows: each knee as a range, a rate the repeats disagree on called
    undecided, the replica prediction held against the DP=2 knee, DP=2 against TP=2."""
    r = lab03.replay_scaleout(ROOT / "labs/results/h200x2-2026-11-30")
    k = r.three_way.knees
    assert (k["one"]["knee_rate"], k["one"]["overloaded_rate"]) == (55.0, 60.0)
    assert (k["dp2"]["knee_rate"], k["dp2"]["overloaded_rate"]) == (100.0, 130.0)
    assert k["dp2"]["undecided"] == [120.0]  # met on one server, missed on the repeat
    assert (k["tp2"]["knee_rate"], k["tp2"]["overloaded_rate"]) == (80.0, 100.0)
    assert r.three_way.predicted_dp2 == (110.0, 120.0)  # 2 x one GPU's 55-60
    v = r.three_way.verdicts
    assert v["dp_vs_prediction"]["key"] == "agrees"
    assert v["dp_vs_tp"]["key"] == "dp"
    assert v["tpot"]["key"] == "tp" and v["tpot"]["rate"] == "80"  # light load: TP is faster
    # the warm-up coverage rule re-measured these windows on the warm server
    remeasured = {
        (run, c.config, rec["rate_key"])
        for run, cfgs in [("", r.configs), *r.repeats.items()]
        for c in cfgs.values()
        for rec in c.records
        if any(w["purpose"] == "remeasure" for w in rec["windows"])
    }
    assert remeasured == {("", "dp2", "130"), ("", "dp2", "140"),
                          ("beside-capacity-probes", "one", "60"), ("dp2-bracket", "dp2", "130")}
    assert set(r.repeats) == {"beside-capacity-probes", "dp2-bracket"}
    assert r.problems() == []
