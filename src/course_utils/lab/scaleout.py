"""Lab 03: one GPU, two replicas (``vllm serve --data-parallel-size 2``) or one model split
over two GPUs (``--tensor-parallel-size 2``), each as a short offered-rate scan, and the replay
of such a run from its recorded windows.

vLLM does the scaling (DP: two engines behind one endpoint, balanced by vLLM's DP client; TP:
one engine, every layer split over two workers); no router is written here. One config per
call: ``knee_scan`` (lab 02's ``measure()`` and validity gate) on ``RUN/scaleout/<config>/``:
``knee.jsonl``, ``knee/rate-<r>/`` (per-window bench results and /metrics series, per engine),
``knee/serve.log`` and ``scaleout.jsonl`` (one ``ScaleoutRun`` per call). Finished rates are
skipped, so a call cut by its time budget resumes.

    python -m course_utils scaleout --config dp2 --model M --out RUN/scaleout \\
        --rates 80,100,120 --budget-s 420 --load-format dummy
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.core import validate as v
from course_utils.core.diagnose import diagnose_engines
from course_utils.core.keep import pick_knee
from course_utils.core.metrics import load_series
from course_utils.core.records import (
    PointPaths,
    ServedPoint,
    Workload,
    append_jsonl,
    is_present,
    read_jsonl,
)
from course_utils.core.scaleout import (
    CONFIGS,
    RUN_FILE,
    ScaleoutRun,
    ThreeWay,
    config,
    config_records,
    three_way,
)
from course_utils.core.slo import SLO, BenchResult
from course_utils.core.validate import parse_rates, process_kwargs
from course_utils.core.vllm_logs import startup_by_process
from course_utils.lab.knee import KNEE_FILE, knee_scan, latest_by_rate, rate_key
from course_utils.lab.measure import MeasureConfig
from course_utils.lab.replay import load_knee, repo_root

__all__ = [
    "DEFAULT_WINDOW_S",
    "add_cli",
    "ConfigReplay",
    "EngineCheck",
    "ScaleoutReplay",
    "device_minutes",
    "load_config",
    "replay_scaleout",
    "run_config",
    "run_dir",
]

# each rate's window: ~10 s of arrivals (ceil(rate x 10) prompts), the same in every config
DEFAULT_WINDOW_S = 10.0
# a server start the budget must leave room for before the first rate
STARTUP_ESTIMATE_S = 150.0
# a rate's cost before one is measured (warm-up + window + drain; then the longest measured)
RATE_ESTIMATE_S = 90.0


def load_config(out: str | Path, name: str) -> tuple[list[dict[str, Any]], ScaleoutRun | None]:
    """A config's knee records (the last per rate) and its last ``ScaleoutRun`` on disk."""
    runs = read_jsonl(Path(out) / config(name).name / RUN_FILE)
    return config_records(out, name), ScaleoutRun.from_json(runs[-1]) if runs else None


def run_config(
    name: str,
    model: str,
    rates: Sequence[float],
    *,
    workload: Workload,
    slo: SLO,
    out: str | Path,
    budget_s: float | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    devices: str | None = None,
    base_knobs: Mapping[str, Any] | None = None,
    server_kwargs: Mapping[str, Any] | None = None,
    bench_kwargs: Mapping[str, Any] | None = None,
    warmup_share: float = 0.5,
    startup_estimate_s: float = STARTUP_ESTIMATE_S,
    rate_estimate_s: float = RATE_ESTIMATE_S,
    progress: Callable[[str], None] | None = print,
) -> ScaleoutRun:
    """Scan ``rates`` with config ``name`` (one | dp2 | tp2) on one fresh server, inside
    ``budget_s`` seconds from now; returns (and appends) this call's ``ScaleoutRun``.
    ``devices``: CUDA_VISIBLE_DEVICES (default: the config's, GPU 0 or GPUs 0,1)."""
    cfg = config(name)
    t0 = time.monotonic()
    cdir = Path(out) / cfg.name
    cdir.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _m: None)
    dev = devices if devices is not None else cfg.devices
    skw = dict(server_kwargs or {})
    skw["env"] = {**dict(skw.get("env") or {}), "CUDA_VISIBLE_DEVICES": dev}
    skw["extra_args"] = [*list(skw.get("extra_args") or []), *cfg.serve_args]
    deadline = None if budget_s is None else t0 + budget_s
    todo = [r for r in rates if rate_key(r) not in latest_by_rate(read_jsonl(cdir / KNEE_FILE))]
    reason = None
    if todo and budget_s is not None and budget_s < startup_estimate_s:
        reason = f"budget {budget_s:.0f} s < a server start (~{startup_estimate_s:.0f} s)"
        say(f"{name}: {reason}; nothing started")
    elif todo:
        say(f"{name}: CUDA_VISIBLE_DEVICES={dev} vllm serve ... {' '.join(cfg.serve_args)}")
        knee_scan(
            model,
            rates,
            workload=workload,
            slo=slo,
            out_dir=cdir,
            base_knobs=base_knobs,
            server_kwargs=skw,
            bench_kwargs=bench_kwargs,
            measure_config=MeasureConfig(
                repeats=0, warmup_share=warmup_share, bench_kwargs=dict(bench_kwargs or {})
            ),
            bracket_repeats=0,
            progress=say,
            deadline=deadline,
            rate_estimate_s=rate_estimate_s,
            window_s=window_s,
        )
    return _record(cfg.name, model, rates, cdir, reason, time.monotonic() - t0, skw)


def _record(
    name: str,
    model: str,
    rates: Sequence[float],
    cdir: Path,
    reason: str | None,
    elapsed: float,
    skw: Mapping[str, Any],
) -> ScaleoutRun:
    cfg = CONFIGS[name]
    recs = latest_by_rate(read_jsonl(cdir / KNEE_FILE))
    mine = [recs[rate_key(r)] for r in rates if rate_key(r) in recs]
    ok = [r for r in mine if r.get("status") == "ok"]
    failed = next((r.get("reason") for r in mine if r.get("status") != "ok"), None)
    status = "ok" if len(ok) == len(rates) else "failed" if not ok and failed else "partial"
    log = cdir / "knee" / "serve.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    starts = [float(r["startup_s"]) for r in mine if r.get("startup_s")]
    cmd = next((str(r.get("serve_cmd")) for r in reversed(mine) if r.get("serve_cmd")), "")
    run = ScaleoutRun(
        config=name,
        gpus=cfg.gpus,
        devices=str((skw.get("env") or {}).get("CUDA_VISIBLE_DEVICES", cfg.devices)),
        serve_cmd=cmd or shlex.join(["vllm", "serve", model, *cfg.serve_args]),
        rates=[float(r) for r in rates],
        done_rates=[rate_key(r) for r in rates if rate_key(r) in recs],
        status=status,
        reason=reason or (failed if status == "failed" else None),
        startup_s=starts[-1] if starts else None,
        processes={k: v.as_dict() for k, v in startup_by_process(text).items()},
        knee=pick_knee(mine),
        elapsed_s=round(elapsed, 2),
    )
    append_jsonl(cdir / RUN_FILE, run)
    return run


# ------------------------------------------------------------------- replay of a recorded run

REPEATS = "repeats"  # <run>/repeats/<name>/scaleout/<config>/: a repeat run on fresh servers


def run_dir(path: str | Path) -> Path:
    """The scale-out folder of a run (``<path>/scaleout`` if present; relative to the repo)."""
    p = Path(path)
    if not p.is_absolute():
        p = (repo_root() or Path.cwd()) / p
    return p / "scaleout" if (p / "scaleout").is_dir() else p


def _root_of(folder: Path) -> Path:
    return folder.parent if folder.name == "scaleout" else folder


def device_minutes(path: str | Path) -> float:
    """Device minutes of a run: the walls of its ``scaleout/<config>`` calls in
    ``commands.log`` (tools/gpu/run_scaleout.sh), else the calls' recorded elapsed time."""
    folder = run_dir(path)
    log = _root_of(folder) / "commands.log"
    text = log.read_text() if log.is_file() else ""
    walls = re.findall(r" scaleout/\w+ rc=-?\d+ wall=(\d+(?:\.\d+)?)s", text)
    if walls:
        return sum(map(float, walls)) / 60.0
    runs = [ScaleoutRun.from_json(r) for n in CONFIGS for r in read_jsonl(folder / n / RUN_FILE)]
    return sum(r.elapsed_s or 0.0 for r in runs) / 60.0


@dataclass(frozen=True)
class EngineCheck:
    """One engine of one window: the diagnosis recorded and the one re-derived."""

    config: str
    rate: str
    window: int
    engine: str
    recorded: str | None
    replayed: str | None

    @property
    def agrees(self) -> bool:
        return self.recorded == self.replayed


@dataclass
class ConfigReplay:
    config: str
    records: list[dict[str, Any]]  # knee records, validity re-checked
    run: ScaleoutRun | None  # the last call's record
    knee: dict[str, Any]  # pick_knee on the re-checked records
    engines: list[EngineCheck] = field(default_factory=list)

    @property
    def knee_agrees(self) -> bool | None:
        """The re-derived knee range is the recorded one (None: no run record)."""
        if self.run is None or not self.run.knee:
            return None
        keys = ("knee_rate", "overloaded_rate")
        return all(self.run.knee.get(k) == self.knee.get(k) for k in keys)


@dataclass
class ScaleoutReplay:
    folder: Path
    configs: dict[str, ConfigReplay]
    three_way: ThreeWay  # knees over the main run and its repeats together
    repeats: dict[str, dict[str, ConfigReplay]] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """Where the replay disagrees with the run (empty: it re-derives what the run saw)."""
        out = []
        every = [*self.configs.values(), *(c for r in self.repeats.values() for c in r.values())]
        for c in every:
            if c.knee_agrees is False:
                assert c.run is not None
                out.append(f"{c.config}: knee {c.knee['why']} != recorded {c.run.knee.get('why')}")
            out += [
                f"{e.config} rate {e.rate} window {e.window} engine {e.engine}: recorded "
                f"{e.recorded}, replayed {e.replayed}"
                for e in c.engines
                if not e.agrees
            ]
        return out


def _engine_checks(name: str, recs: Sequence[dict[str, Any]], folder: Path) -> list[EngineCheck]:
    out = []
    for p in map(ServedPoint.from_json, recs):
        if p.status != "ok" or not p.slo:
            continue
        paths = PointPaths(folder / name / "knee" / f"rate-{p.rate_key}")
        for w in p.windows:
            series, bench = paths.metrics(w.index), paths.bench_json(w.index)
            if not (w.ok and w.engines and is_present(series) and bench.is_file()):
                continue
            ev = w.diagnosis.get("evidence") or {}
            mns, mnbt = ev.get("max_num_seqs"), ev.get("max_num_batched_tokens")
            again = diagnose_engines(
                load_series(series),
                BenchResult.from_json(bench),
                SLO.parse(p.slo),
                max_num_seqs=None if mns is None else int(mns),
                max_num_batched_tokens=None if mnbt is None else int(mnbt),
            )
            out += [
                EngineCheck(
                    name,
                    str(p.rate_key),
                    w.index,
                    e,
                    ew.diagnosis.get("constraint"),
                    again[e].constraint if e in again else None,
                )
                for e, ew in w.engines.items()
            ]
    return out


def _replay_configs(folder: Path) -> dict[str, ConfigReplay]:
    configs: dict[str, ConfigReplay] = {}
    for name in CONFIGS:
        checked = load_knee(folder / name)  # validity re-checked from the recorded series
        if checked:
            run = load_config(folder, name)[1]
            engines = _engine_checks(name, checked, folder)
            configs[name] = ConfigReplay(name, checked, run, pick_knee(checked), engines)
    return configs


def replay_scaleout(path: str | Path) -> ScaleoutReplay:
    """Every config recorded in a run folder (``<run>`` or ``<run>/scaleout``): records
    re-checked, knees, per-engine diagnoses and the three-way verdicts re-derived. Repeat runs
    under ``<run>/repeats/<name>/`` are replayed the same way and their windows join the knees."""
    folder = run_dir(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no recorded lab 03 run (scaleout/<config>/)")
    configs = _replay_configs(folder)
    if not configs:
        raise FileNotFoundError(f"{folder}: no config recorded (one/, dp2/, tp2/)")
    reps_dir = _root_of(folder) / REPEATS
    repeats = {
        d.name: _replay_configs(d / "scaleout")
        for d in (sorted(reps_dir.iterdir()) if reps_dir.is_dir() else [])
        if (d / "scaleout").is_dir()
    }
    tw = three_way(
        {n: c.records for n, c in configs.items()},
        {run: {n: c.records for n, c in cfgs.items()} for run, cfgs in repeats.items()},
    )
    return ScaleoutReplay(folder, configs, tw, repeats)


# ------------------------------------------------------------------------------ CLI


def add_cli(subparsers: Any) -> None:
    """Register `scaleout`: one config's offered-rate scan (tools/gpu/run_scaleout.sh)."""
    p = subparsers.add_parser("scaleout", help="one lab 03 config's offered-rate scan")
    p.add_argument("--config", required=True, choices=sorted(CONFIGS))
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True, help="the scale-out folder (one sub-folder a config)")
    p.add_argument("--rates", required=True, help="offered rates, req/s, e.g. 80,100,120")
    p.add_argument("--slo", default="ttft:300 tpot:50")
    p.add_argument("--input-len", type=v.positive_int, default=512)
    p.add_argument("--output-len", type=v.positive_int, default=128)
    p.add_argument("--window-s", type=v.positive_float, default=DEFAULT_WINDOW_S)
    p.add_argument("--seed", type=v.non_negative_int, default=0)
    p.add_argument(
        "--budget-s", type=v.positive_float, default=None, help="seconds this call may take"
    )
    p.add_argument("--devices", default=None, help="CUDA_VISIBLE_DEVICES (default: the config's)")
    p.add_argument(
        "--startup-estimate-s",
        type=v.non_negative_float,
        default=STARTUP_ESTIMATE_S,
        help="no server starts with less budget left than this",
    )
    p.add_argument(
        "--rate-estimate-s",
        type=v.non_negative_float,
        default=RATE_ESTIMATE_S,
        help="a rate's cost before the first is measured (no rate starts that would not fit)",
    )
    p.add_argument("--max-model-len", type=v.positive_int, default=4096)
    p.add_argument("--load-format", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--port", type=v.port, default=None)
    p.add_argument("--startup-timeout", type=v.positive_float, default=420.0)
    p.add_argument("--bench-timeout", type=v.positive_float, default=300.0)
    p.add_argument("--vllm-cmd", default="vllm")
    p.set_defaults(func=_cmd_scaleout)


def _cmd_scaleout(a: argparse.Namespace) -> int:
    rates = parse_rates(a.rates, example="6,12")
    slo = SLO.parse(a.slo)
    n = max(1, math.ceil(max(rates) * a.window_s))
    wl = Workload(a.input_len, a.output_len, num_prompts=n, seed=a.seed, ignore_eos=True)
    skw, bkw = process_kwargs(a)
    run = run_config(
        a.config,
        a.model,
        rates,
        workload=wl,
        slo=slo,
        out=a.out,
        budget_s=a.budget_s,
        window_s=a.window_s,
        devices=a.devices,
        startup_estimate_s=a.startup_estimate_s,
        rate_estimate_s=a.rate_estimate_s,
        base_knobs={"max_model_len": a.max_model_len},
        server_kwargs=skw,
        bench_kwargs=bkw,
    )
    print(
        f"{run.config}: {run.status}; rates done {run.done_rates} of "
        f"{[rate_key(r) for r in run.rates]}; start-up {run.startup_s} s; "
        f"knee: {run.knee.get('why')}" + (f"; {run.reason}" if run.reason else "")
    )
    return 0 if run.status != "failed" else 1
