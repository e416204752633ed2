"""Replay of a recorded lab 03 run: each config's knee and the verdicts re-derived from the
recorded windows, the per-engine diagnoses re-derived from the recorded /metrics series.

``RUN_DIR`` (``core.scaleout.RUN_DIR``, re-exported here) is the ONE place that names the
recorded run the book pages, lab 03's replay, the quiz and CI read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.core.diagnose import diagnose_engines
from course_utils.core.keep import pick_knee
from course_utils.core.metrics import load_series
from course_utils.core.records import PointPaths, ServedPoint, is_present, read_jsonl
from course_utils.core.scaleout import (
    CONFIGS,
    RUN_DIR,
    RUN_FILE,
    ScaleoutRun,
    ThreeWay,
    three_way,
)
from course_utils.core.slo import SLO, BenchResult
from course_utils.lab.replay import recheck, repo_root
from course_utils.lab.scaleout import load_config

__all__ = [
    "RUN_DIR",
    "ConfigReplay",
    "EngineCheck",
    "ScaleoutReplay",
    "describe_run",
    "device_minutes",
    "replay_scaleout",
    "run_dir",
]


def run_dir(path: str | Path | None = None) -> Path:
    """The scale-out folder of a run (``<run>/scaleout``; ``RUN_DIR`` by default)."""
    p = Path(path if path is not None else RUN_DIR)
    if not p.is_absolute():
        p = (repo_root() or Path.cwd()) / p
    return p / "scaleout" if (p / "scaleout").is_dir() else p


def _root_of(folder: Path) -> Path:
    return folder.parent if folder.name == "scaleout" else folder


def describe_run(path: str | Path | None = None, lang: str = "en") -> str:
    """One line naming the run a page shows: a GPU run by its folder (``h200x2-2026-11-30``),
    the fake fixture as what it is."""
    root = _root_of(run_dir(path))
    if root.parent.name == "fixtures":
        return (
            "假 vLLM（tests/fakes）跑出的测试数据：只演示代码路径，不代表任何 GPU"
            if lang == "zh"
            else "a run of the fake vLLM (tests/fakes): code paths only, no GPU"
        )
    return root.name


def device_minutes(path: str | Path | None = None) -> float:
    """The run's device minutes for lab 03: the wall time of each ``scaleout/<config>`` call
    in its ``commands.log`` (tools/gpu/run_scaleout.sh), else the calls' own elapsed time."""
    folder = run_dir(path)
    log = _root_of(folder) / "commands.log"
    walls = (
        [
            float(m.group(1))
            for m in re.finditer(r" scaleout/\w+ rc=-?\d+ wall=(\d+(?:\.\d+)?)s", log.read_text())
        ]
        if log.is_file()
        else []
    )
    if walls:
        return sum(walls) / 60.0
    runs = [ScaleoutRun.from_json(r) for n in CONFIGS for r in read_jsonl(folder / n / RUN_FILE)]
    return sum(r.elapsed_s or 0.0 for r in runs) / 60.0


@dataclass(frozen=True)
class EngineCheck:
    """One engine of one window: the diagnosis the GPU run recorded and the one re-derived
    from the recorded series."""

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
        """The re-derived knee range is the one the run recorded (None: no run record)."""
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
    for rec in recs:
        p = ServedPoint.from_json(rec)
        if p.status != "ok" or not p.slo:
            continue
        paths = PointPaths(folder / name / "knee" / f"rate-{p.rate_key}")
        slo = SLO.parse(p.slo)
        for w in p.windows:
            series, bench = paths.metrics(w.index), paths.bench_json(w.index)
            if not (w.ok and w.engines and is_present(series) and bench.is_file()):
                continue
            ev = w.diagnosis.get("evidence") or {}
            mns, mnbt = ev.get("max_num_seqs"), ev.get("max_num_batched_tokens")
            again = diagnose_engines(
                load_series(series),
                BenchResult.from_json(bench),
                slo,
                max_num_seqs=None if mns is None else int(mns),
                max_num_batched_tokens=None if mnbt is None else int(mnbt),
            )
            for e, ew in w.engines.items():
                d = again.get(e)
                out.append(
                    EngineCheck(
                        name,
                        str(p.rate_key),
                        w.index,
                        e,
                        ew.diagnosis.get("constraint"),
                        d.constraint if d else None,
                    )
                )
    return out


REPEATS = "repeats"  # <run>/repeats/<name>/scaleout/<config>/: a repeat run on fresh servers


def _replay_configs(folder: Path) -> dict[str, ConfigReplay]:
    configs: dict[str, ConfigReplay] = {}
    for name in CONFIGS:
        recs, run = load_config(folder, name)
        if not recs:
            continue
        checked = [recheck(r, folder / name / "knee" / f"rate-{r.get('rate_key')}") for r in recs]
        configs[name] = ConfigReplay(
            name, checked, run, pick_knee(checked), _engine_checks(name, checked, folder)
        )
    return configs


def replay_scaleout(path: str | Path | None = None) -> ScaleoutReplay:
    """Every config recorded under ``path`` (default ``RUN_DIR``): records re-checked,
    knees, per-engine diagnoses and the three-way verdicts re-derived. Repeat runs under
    ``<run>/repeats/<name>/`` are replayed the same way, and their windows join the knees."""
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
