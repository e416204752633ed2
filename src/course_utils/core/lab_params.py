"""The three labs' parameters, checked by the command line's rules before a notebook touches
the machine: a bad ``-p name value`` stops the lab with one ``BadInput`` line naming it.
papermill passes lists and mappings as JSON text (``'[0.8, 0.9]'``): read as JSON here."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.capacity import GPUS, gpu_key
from course_utils.core.validate import BadInput

LABS = ("01", "02", "03")
_FIX = "see the parameters cell of the lab for what each one takes"


def _bad(name: str, value: Any, rule: str) -> BadInput:
    return BadInput(f"-p {name} {value!r}: {rule}", _FIX)


def listish(v: Any, name: str) -> Any:
    """A ``-p`` value, with papermill's JSON text for a list or mapping read as JSON."""
    if isinstance(v, str) and v.strip()[:1] in "[{":
        try:
            return json.loads(v)
        except json.JSONDecodeError as exc:
            raise _bad(name, v, f"not JSON ({exc.msg}): write a JSON list or mapping") from None
    return v


def _num(name: str, v: Any, low: float, strict: bool = False, whole: bool = False) -> None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or (whole and not float(v).is_integer()):
        raise _bad(name, v, "an integer" if whole else "a number")
    if v < low or (strict and v == low):
        raise _bad(name, v, f"must be {'>' if strict else '>='} {low:g}")


def _nums(
    p: Mapping[str, Any],
    names: Iterable[str],
    low: float,
    *,
    strict: bool = False,
    whole: bool = False,
    optional: bool = False,
) -> None:
    """``_num`` for each named parameter; ``optional`` ones may be None."""
    for name in names:
        if not optional or p.get(name) is not None:
            _num(name, p[name], low, strict, whole)


def _choice(p: Mapping[str, Any], name: str, allowed: tuple[Any, ...]) -> None:
    if p[name] not in allowed:
        raise _bad(name, p[name], f"one of {', '.join(map(str, allowed))}")


def _knob_values(
    p: Mapping[str, Any], knob_name: str, values_name: str, base: dict[str, Any]
) -> list[Any]:
    try:
        knob = knobs_mod.get(str(p[knob_name])).name
    except knobs_mod.KnobError as exc:
        raise _bad(knob_name, p[knob_name], str(exc)) from None
    vals = listish(p[values_name], values_name)
    if not isinstance(vals, list):
        raise _bad(values_name, vals, "a list of values, e.g. [64, 128]")
    for x in vals:
        _valid(values_name, x, {**base, knob: x})
    return vals


def _base(p: Mapping[str, Any]) -> dict[str, Any]:
    base = listish(p.get("base_knobs") or {}, "base_knobs")
    if not isinstance(base, dict):
        raise _bad("base_knobs", base, 'a mapping of knob to value, e.g. {"max_num_seqs": 64}')
    return _valid("base_knobs", base, base)


def _valid(name: str, value: Any, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """``knobs.validate``, refused with ``-p name value``."""
    try:
        return knobs_mod.validate(knobs)
    except knobs_mod.KnobError as exc:
        raise _bad(name, value, str(exc)) from None


def _slo(p: Mapping[str, Any]) -> None:
    from course_utils.core.slo import SLO, SLOError

    try:
        SLO.parse(p["slo"])
    except SLOError as exc:
        raise _bad("slo", p["slo"], str(exc)) from None


def _common(p: Mapping[str, Any]) -> None:
    if not isinstance(p.get("model"), str) or not p["model"].strip():
        raise _bad("model", p.get("model"), "a model folder or hub id")
    mml = p["max_model_len"]
    if _valid("max_model_len", mml, {"max_model_len": mml})["max_model_len"] == -1:
        raise _bad("max_model_len", mml, "the lab needs a length, not -1/auto")
    for name in ("gpu", "rehearse_gpu"):
        if p.get(name) is not None:
            try:
                gpu_key(p[name])
            except ValueError:
                raise _bad(name, p[name], f"one of {', '.join(sorted(GPUS))}") from None
    if "startup_timeout_s" in p:
        _num("startup_timeout_s", p["startup_timeout_s"], 0, strict=True)


def _lab01(p: Mapping[str, Any]) -> None:
    vals = _knob_values(p, "knob", "values", _base(p))
    if not vals:
        raise _bad("values", p["values"], "at least one value")
    if p.get("baseline") is not None and p["baseline"] not in vals:
        raise _bad("baseline", p["baseline"], f"one of values {vals} (or None)")
    _nums(p, ("max_tokens", "load_prompts", "load_max_tokens"), 1, whole=True)
    _nums(p, ("temperature", "min_gain"), 0)
    _nums(p, ("seed",), 0, whole=True)
    _nums(p, ("p99_latency_slo_s", "point_timeout_s"), 0, strict=True, optional=True)


def _lab02(p: Mapping[str, Any]) -> None:
    from course_utils.core import presets
    from course_utils.core.keep import OBJECTIVES

    if p.get("preset") is not None and p["preset"] not in presets.names():
        raise _bad("preset", p["preset"], f"one of {', '.join(presets.names())}")
    _slo(p)
    _nums(p, ("rate",), 0, strict=True, optional=True)
    rates = listish(p["knee_rates"], "knee_rates")
    if not isinstance(rates, list) or not rates:
        raise _bad("knee_rates", rates, "a non-empty list of req/s")
    for r in rates:
        _num("knee_rates", r, 0, strict=True)
    _nums(p, ("knee_fraction",), 0, strict=True)
    _nums(p, ("input_len", "output_len", "num_prompts", "max_steps"), 1, whole=True)
    _nums(p, ("prefix_len", "batch1_prompts"), 0, whole=True)
    if p["prefix_len"] > p["input_len"]:
        raise _bad("prefix_len", p["prefix_len"], f"must be <= input_len ({p['input_len']})")
    base = _base(p)
    _knob_values(p, "knob", "candidates", base)
    _knob_values(p, "second_knob", "second_candidates", base)
    _choice(p, "objective", tuple(OBJECTIVES))
    _nums(p, ("plateau",), 0)
    _nums(p, ("budget_gpu_minutes",), 0, strict=True, optional=True)


def _lab03(p: Mapping[str, Any]) -> None:
    from course_utils.core.scaleout import CONFIGS

    _slo(p)
    _nums(p, ("input_len", "output_len"), 1, whole=True)
    configs = listish(p["configs"], "configs")
    if not isinstance(configs, list) or not configs or any(c not in CONFIGS for c in configs):
        raise _bad("configs", configs, f"a non-empty list among {', '.join(CONFIGS)}")
    rates = listish(p["rates"], "rates")
    if not isinstance(rates, dict):
        raise _bad("rates", rates, "a mapping of configuration to a list of req/s")
    for c in configs:
        rs = rates.get(c)
        if not isinstance(rs, list) or not rs:
            raise _bad("rates", rates, f"no list of req/s for {c!r}")
        for r in rs:
            _num(f"rates[{c}]", r, 0, strict=True)
    _nums(p, ("window_s", "target_rate"), 0, strict=True)
    _nums(p, ("headroom",), 0)
    if p["headroom"] >= 1:
        raise _bad("headroom", p["headroom"], "a share below 1")
    _nums(p, ("budget_s",), 0, strict=True, optional=True)


# what each lab's recorded folder holds
_HOLDS = {"01": ("results.jsonl",), "02": ("points.jsonl", "knee.jsonl", "tune.jsonl")}


def _recorded_lab(lab: str, rd: Any, where: Path) -> None:
    """A replay folder of the right lab: lab 01 reads results.jsonl, lab 02 the loop's files."""
    if lab not in _HOLDS:
        return
    from course_utils.core.store import is_present

    if any(is_present(where / f) for f in _HOLDS[lab]):
        return
    other = next((k for k, fs in _HOLDS.items() if any(is_present(where / f) for f in fs)), None)
    what = f"a lab {other} folder" if other else "no recorded run"
    raise _bad("replay_dir", rd, f"{what}: lab {lab} reads {' or '.join(_HOLDS[lab])}")


def check_lab_params(lab: str, params: Mapping[str, Any], root: str | Path | None = None) -> None:
    """Raise BadInput (one line naming the ``-p`` parameter) for the first bad parameter of
    lab ``lab`` ("01", "02", "03"); ``params`` holds the notebook's globals. A replay checks
    only what it reads (the recorded run brings its own parameters)."""
    if lab not in LABS:
        raise BadInput(f"lab {lab!r} not known", f"one of {', '.join(LABS)}")
    p = dict(params)
    _choice(p, "backend", ("vllm", "replay"))
    _choice(p, "lang", ("en", "zh"))
    if not isinstance(p.get("output_dir"), str | Path) or not str(p["output_dir"]).strip():
        raise _bad("output_dir", p.get("output_dir"), "a folder path")
    if p["backend"] == "replay":
        rd = p.get("replay_dir")
        if rd is None:
            if lab == "03":
                return
            raise _bad("replay_dir", rd, "backend replay needs a recorded folder")
        where = Path(rd) if Path(rd).is_absolute() or root is None else Path(root) / rd
        if not where.is_dir():
            raise _bad("replay_dir", rd, f"no folder at {where}")
        _recorded_lab(lab, rd, where)
        return
    _common(p)
    {"01": _lab01, "02": _lab02, "03": _lab03}[lab](p)
