"""Workload presets (core.presets) used by lab 02, `python -m course_utils tune|sweep
--preset` and the GPU scripts (tests/lab/test_grid.py runs those)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from course_utils.core import presets
from course_utils.core.validate import BadInput
from course_utils.lab import cli
from tests.tooling import tool

ROOT = Path(__file__).resolve().parents[2]


def _parse(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    cli.add_cli(ap.add_subparsers(dest="cmd"))
    return ap.parse_args(list(argv))


def test_tune_preset_fills_what_was_not_given() -> None:
    a = _parse("tune", "--model", "m", "--out", "o", "--preset", "decode", "--gpu", "h200",
               "--rate", "6", "--base", "max_num_seqs=512")
    cli._apply_preset(a, tune=True)
    assert (a.input_len, a.output_len, a.num_prompts, a.prefix_len) == (3072, 256, 150, 0)
    assert a.rate == 6 and a.slo == "ttft:2000 tpot:15" and a.ignore_eos
    # base: the preset's, then the explicit one (which wins on a clash)
    assert cli.parse_assign(a.base, False) == {"max_model_len": 4096, "max_num_seqs": 512}
    assert cli.parse_assign(a.candidate, True) == {
        "max_num_batched_tokens": [2048, 4096], "max_num_seqs": [128, 256]}
    # the recorded decode run's command line, from the preset alone
    kw = cli._kwargs_from(a)
    assert kw["workload"].request_rate == 6 and str(kw["slo"]) == "ttft:2000 tpot:15 @ 6 req/s"


def test_without_a_preset_the_old_defaults_hold_and_slo_is_required() -> None:
    a = _parse("sweep", "--model", "m", "--out", "o", "--knob", "max_num_seqs", "--values", "8",
               "--slo", "ttft:300")
    cli._apply_preset(a, tune=False)
    assert (a.input_len, a.output_len, a.num_prompts, a.prefix_len) == (512, 128, 200, 0)
    assert a.rate == float("inf")
    b = _parse("tune", "--model", "m", "--out", "o", "--candidate", "max_num_seqs=8")
    with pytest.raises(BadInput, match="give --slo"):
        cli._apply_preset(b, tune=True)
    c = _parse("tune", "--model", "m", "--out", "o", "--preset", "nope")
    with pytest.raises(BadInput, match="no preset 'nope'"):
        cli._apply_preset(c, tune=True)


@pytest.mark.parametrize("name", presets.names())
def test_lab02_params_of_every_preset(name: str) -> None:
    for gpu in presets.GPUS:
        p = presets.get(name, gpu)
        lp = presets.lab02_params(p)
        assert lp["knob"] != lp["second_knob"]
        tried = {lp["knob"]: lp["candidates"], lp["second_knob"]: lp["second_candidates"]}
        assert {k: tuple(v) for k, v in tried.items() if v} == dict(p.candidates)
        assert {"max_model_len": lp["max_model_len"], **lp["base_knobs"]} == dict(p.base)
        assert lp.get("rehearse_gpu") == p.rehearse


def test_every_preset_starts_from_vllms_defaults() -> None:
    """No preset hands the loop a handicap: its base holds only max_model_len (a smaller
    GPU is rehearsed with that GPU's own defaults)."""
    for p in presets.PRESETS.values():
        assert set(p.base) <= {"max_model_len"}, (p.name, p.gpu, dict(p.base))


def _cells() -> list[str]:
    nb = json.loads((ROOT / "labs" / "02_slo_loop.ipynb").read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def untouched_default(params: str, name: str) -> Any:
    ns: dict[str, Any] = {}
    exec(params, ns)  # noqa: S102 - the notebook's own parameters cell
    return ns[name]


def test_lab02_preset_cell_sets_the_parameters() -> None:
    """The preflight cell (right after the parameters) applies the preset first, so the
    preflight checks the preset's knobs."""
    params, preflight = _cells()[:2]
    assert "preset = None" in params and "if preset:" in preflight
    start = preflight.index("if preset:")
    assert start < preflight.index("preflight.lab_check(")
    preset_cell = preflight[start:preflight.index("_preflight = ")]
    ns: dict[str, Any] = {}
    exec(params, ns)  # noqa: S102 - the notebook's own cells
    ns.update(preset="kv", gpu="h200")
    exec(preset_cell, ns)  # noqa: S102
    kv = presets.get("kv", "h200")
    assert (ns["input_len"], ns["output_len"], ns["rate"]) == (512, 1024, float(kv.rate))
    assert ns["num_prompts"] == kv.num_prompts != untouched_default(params, "num_prompts")
    # vLLM's 4090 defaults rehearsed on the H200, not a pool shrunk for the exercise
    assert ns["base_knobs"] == {} and ns["rehearse_gpu"] == "rtx4090"
    assert ns["knob"] == "gpu_memory_utilization" and ns["second_knob"] == "kv_cache_dtype"
    untouched: dict[str, Any] = {}
    exec(params, untouched)  # noqa: S102
    before = dict(untouched)
    exec(preset_cell, untouched)  # noqa: S102 - preset None: nothing changes
    assert {k: untouched[k] for k in before if k != "__builtins__"} == {
        k: v for k, v in before.items() if k != "__builtins__"}


def test_a_presets_warm_up_share_reaches_the_loop_and_its_grid(tmp_path: Path) -> None:
    """The loop and vLLM's grid warm up alike: the preset's share (the whole load on the
    H200 presets) unless --warmup-share says otherwise; measure()'s 0.5 without one."""
    gridrun = tool("gpu/gridrun.py")
    a = _parse("tune", "--model", "m", "--out", "o", "--preset", "knee", "--gpu", "h200")
    cli._apply_preset(a, tune=True)
    assert a.warmup_share == 1.0
    assert cli._kwargs_from(a)["warmup_share"] == 1.0
    b = _parse("tune", "--model", "m", "--out", "o", "--preset", "knee", "--gpu", "h200",
               "--warmup-share", "0.3")
    cli._apply_preset(b, tune=True)
    assert b.warmup_share == 0.3
    c = _parse("tune", "--model", "m", "--out", "o", "--preset", "knee")  # the 4090's
    cli._apply_preset(c, tune=True)
    assert presets.get("knee", "4090").warmup_share is None and c.warmup_share == 0.5
    for args, share in (([], 1.0), (["--warmup-share", "0.5"], 0.5)):
        out = tmp_path / f"grid{share}"
        assert gridrun.main(["prepare", str(out), "--model", "m", "--port", "1", "--preset",
                             "knee", "--gpu", "h200", *args]) == 0
        bench = (out / "bench_cmd.txt").read_text()
        assert f"--warmup-share {share:g} " in bench
        assert json.loads((out / "grid.json").read_text())["warmup"]["share"] == share
