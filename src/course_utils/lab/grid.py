"""vLLM's own grid (`vllm bench sweep serve`, 0.26.0) on any workload over one or two knobs,
and the loop (lab.tune) against it.

vLLM 0.26.0 facts (vllm/benchmarks/sweep/):
- param_sweep.py ``ParameterSweep.read_json``: ``--serve-params`` is a JSON list of dicts,
  one per server configuration, run in that order (or a dict of named dicts). The sweep does
  NOT take a product of the keys inside it: a two-knob grid is the list of every pair, which
  ``grid_combos`` writes. Only ``--serve-params`` x ``--bench-params`` is a product.
- A dict's ``_benchmark_name`` names its folder and is not a flag; every other key becomes a
  flag of the serve command (``apply_to_cmd``: replaced if present, else appended; "_" keys
  written "--a-b"; a bool as ``--k`` / ``--no-k``). The folder is ``SERVE--`` + the name, or
  + ``k=v`` pairs joined by "-" (serve.py ``_get_comb_base_path``). vLLM's defaults are the
  dict ``{"_benchmark_name": "defaults"}``: the serve command unchanged, in
  ``SERVE--defaults``.
- A combo whose ``summary.json`` exists starts no server on ``--resume`` (serve.py
  ``_comb_needs_server``); a ``run=N.json`` that exists is not run again.

The grid's bench command is lab.gridbench (lab.measure's warm-up at the load's rate before
the sweep's own `vllm bench serve` run, the validity gate in ``run=N.harness.json``), or,
with ``num_warmups``, plain `vllm bench serve --num-warmups N` (vLLM's own warm-up: N copies
of the first request at once, which does not reach a load's batch sizes).

CLI (tools/gpu/side_by_side.sh, tools/gpu/grid_decode.sh):
    python -m course_utils.lab.grid params --grid SPEC [--base K=V ...] [--part I/N] DIR
    python -m course_utils.lab.grid commands --model M --port P --preset NAME | --input-len ...
    python -m course_utils.lab.grid merge OUT PART_DIR [PART_DIR ...]
    python -m course_utils.lab.grid compare GRID_DIR TUNE_DIR [--json F] [--lang zh]
    python -m course_utils.lab.grid cleanup --port P
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.records import Scores, ServedPoint, Window, Workload, bench_summary
from course_utils.core.slo import SLO, BenchResult, score
from course_utils.lab.gridbench import harness_path
from course_utils.lab.sidebyside_evidence import RUN_FILE, SideBySideError, _experiment_dir

__all__ = [
    "DEFAULTS_NAME",
    "GRID_FILE",
    "GridSpec",
    "combo_label",
    "grid_combos",
    "grid_points",
    "merge_parts",
    "parse_grid",
    "read_grid_meta",
]

DEFAULTS_NAME = "defaults"
GRID_FILE = "grid.json"  # what the grid was: spec, base knobs, combos, workload, SLO


@dataclass(frozen=True)
class GridSpec:
    """One or two knobs with their values. ``mode`` "product": every pair; "one-at-a-time":
    each value of each knob from the base knobs (vLLM's defaults first, as the loop starts)."""

    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    mode: str = "product"
    with_defaults: bool = False


def parse_grid(spec: str, *, with_defaults: bool | None = None) -> GridSpec:
    """``K=V1,V2`` (one knob), ``K1=... x K2=...`` (every pair) or ``K1=... + K2=...`` (one
    knob at a time from the base, vLLM's defaults included). Knob names are checked."""
    from course_utils.lab.cli import parse_values

    text = spec.strip()
    if " x " in text and " + " in text:
        raise ValueError(f"grid {spec!r}: use ' x ' or ' + ', not both")
    mode = "one-at-a-time" if " + " in text else "product"
    parts = [p.strip() for p in re.split(r" [x+] ", text) if p.strip()]
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"grid {spec!r}: one or two knobs (K=V1,V2 x K2=V3,V4)")
    axes = []
    for p in parts:
        k, sep, v = p.partition("=")
        if not sep or not v.strip():
            raise ValueError(f"grid {spec!r}: expected KNOB=V1,V2,..., got {p!r}")
        name = knobs_mod.get(k.strip().lstrip("-").replace("-", "_")).name
        axes.append((name, tuple(parse_values(v))))
    if len({a[0] for a in axes}) != len(axes):
        raise ValueError(f"grid {spec!r}: a knob appears twice")
    wd = (mode == "one-at-a-time") if with_defaults is None else with_defaults
    return GridSpec(axes=tuple(axes), mode=mode, with_defaults=wd)


def combo_label(combo: Mapping[str, Any]) -> str:
    """ "defaults" or "k=v, k2=v2" (the `_benchmark_name` key is a name, not a knob)."""
    if combo.get("_benchmark_name") == DEFAULTS_NAME:
        return DEFAULTS_NAME
    return ", ".join(f"{k}={v}" for k, v in combo.items() if k != "_benchmark_name")


def grid_combos(
    spec: GridSpec,
    base: Mapping[str, Any] | None = None,
    *,
    gpu_memory_gib: float = 24.0,
    couple: bool = True,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``--serve-params`` records and the combos left out (one line each).

    Every combo is validated with the base knobs (core.knobs, this GPU size's defaults)
    before any server starts, because a server vLLM rejects aborts its whole sweep.
    One-at-a-time combos are coupled like ``tune(couple=True)`` (lab.sweep.couple_knobs);
    a product combo vLLM would reject is left out (both values were chosen)."""
    from course_utils.lab.sweep import _validate_each, couple_knobs

    base_ = knobs_mod.validate(dict(base or {}), entry="serve")
    raw: list[tuple[dict[str, Any], str | None]] = []
    if spec.with_defaults:
        raw.append(({}, None))
    if spec.mode == "product":
        names = [a[0] for a in spec.axes]
        one = names[0] if len(names) == 1 else None  # one knob: coupled like tune()
        raw += [
            (dict(zip(names, vs, strict=True)), one)
            for vs in itertools.product(*(a[1] for a in spec.axes))
        ]
    else:
        raw += [({k: v}, k) for k, vals in spec.axes for v in vals]
    out: list[dict[str, Any]] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for over, swept in raw:
        merged = {**base_, **over}
        try:
            checked = _validate_each(merged)  # each knob alone; the pair after coupling
            coupled: dict[str, Any] = {}
            if couple and swept is not None:
                checked, coupled = couple_knobs(checked, swept, gpu_memory_gib)
            knobs_mod.validate(checked, gpu_memory_gib=gpu_memory_gib, entry="serve")
        except knobs_mod.KnobError as exc:
            skipped.append(f"{combo_label(over) or DEFAULTS_NAME}: {exc}")
            continue
        combo = {k: checked[k] for k in over} | coupled if over else {}
        if not combo:
            combo = {"_benchmark_name": DEFAULTS_NAME}
        key = json.dumps(combo, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(combo)
    return out, skipped


def split(combos: Sequence[Mapping[str, Any]], part: int, parts: int) -> list[dict[str, Any]]:
    """Part ``part`` (0-based) of ``parts``: every parts-th combo, for one GPU each."""
    if not 0 <= part < parts:
        raise ValueError(f"part {part} of {parts}: give 0 <= part < parts")
    return [dict(c) for c in combos[part::parts]]


# --------------------------------------------------------------------------------------
# reading a grid's results as served points (one per combo, one window per run)
# --------------------------------------------------------------------------------------


def read_grid_meta(grid_dir: str | Path) -> dict[str, Any] | None:
    """grid.json in the grid's folder or up to two folders above it."""
    d = Path(grid_dir)
    for c in (d, d.parent, d.parent.parent):
        f = c / GRID_FILE
        if f.is_file():
            return dict(json.loads(f.read_text()))
    return None


def _params(dirname: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    if raw.get("_benchmark_name") == DEFAULTS_NAME or dirname == f"SERVE--{DEFAULTS_NAME}":
        return {}
    body = dirname.removeprefix("SERVE-").lstrip("-").split("-BENCH-")[0]
    params: dict[str, Any] = {}
    for part in re.split(r"-(?=[A-Za-z_][\w.-]*=)", body):
        k, sep, v = part.partition("=")
        if sep:
            params[k] = raw.get(k, v)
    return params


def _window(run: Path, raw: dict[str, Any], slo: SLO, index: int) -> Window:
    res = BenchResult.from_json(dict(raw))
    sc = score(res, slo)
    h = harness_path(run)
    harness = json.loads(h.read_text()) if h.is_file() else None
    issues = list(harness["validity_issues"]) if harness else []
    return Window(
        index=index,
        purpose="measure" if index == 0 else "repeat",
        seed=int((harness or {}).get("workload", {}).get("seed", 0)),
        status="ok",
        valid=not issues,
        validity_issues=issues,
        prefix_cache_hit_rate=(harness or {}).get("run", {}).get("prefix_cache_hit_rate"),
        score=Scores(
            gate_goodput=sc.gate_goodput,
            request_goodput=sc.request_goodput,
            request_throughput=sc.request_throughput,
            meets_slo=sc.meets_slo,
            violations=list(sc.violations),
        ),
        bench=bench_summary(raw),
        load={
            "harness": harness is not None,
            "running_max": (harness or {}).get("run", {}).get("running_max"),
        },
        elapsed_s=(harness or {}).get("run", {}).get("wall_s"),
    )


def grid_points(grid_dir: str | Path, slo: SLO | str) -> list[ServedPoint]:
    """One ServedPoint per combo of a `vllm bench sweep serve` output (tag "grid", knob the
    combo's label, knobs its overrides merged into grid.json's base knobs when found), its
    runs as windows scored under ``slo``; a run's validity is gridbench's harness.json
    (a run without one is taken as valid: ``load["harness"]`` is False). In grid.json's
    combo order when known, else by folder."""
    slo_ = SLO.parse(slo) if isinstance(slo, str) else slo
    exp = _experiment_dir(Path(grid_dir))
    meta = read_grid_meta(exp) or {}
    base = dict(meta.get("base") or {})
    order = [combo_label(c) for c in meta.get("combos") or []]
    points = []
    for combo in sorted(c for c in exp.iterdir() if c.is_dir() and c.name.startswith("SERVE-")):
        runs = sorted(
            (f for f in combo.iterdir() if RUN_FILE.match(f.name)),
            key=lambda f: int(RUN_FILE.match(f.name).group(1)),  # type: ignore[union-attr]
        )
        if not runs:
            continue
        windows, params = [], {}
        for f in runs:
            try:
                raw = json.loads(f.read_text())
                params = _params(combo.name, raw)
                windows.append(_window(f, raw, slo_, int(RUN_FILE.match(f.name).group(1))))  # type: ignore[union-attr]
            except (json.JSONDecodeError, ValueError, KeyError) as exc:
                raise SideBySideError(f"{f}: not a vLLM bench result ({exc})") from None
        label = combo_label(params) or DEFAULTS_NAME
        p = ServedPoint(
            key=combo.name,
            knob=label,
            value=None,
            knobs={**base, **params},
            workload=dict(meta.get("workload") or {}),
            slo=str(slo_),
            status="ok",
            tag="grid",
            base_knobs=base,
        )
        p.windows = windows
        points.append(p)
    if not points:
        raise SideBySideError(f"{exp}: no SERVE-*/run=N.json")
    rank = {lab: i for i, lab in enumerate(order)}
    points.sort(key=lambda p: (rank.get(p.knob, len(rank)), p.key))
    return points


# --------------------------------------------------------------------------------------
# two GPUs: halves of one grid, merged
# --------------------------------------------------------------------------------------


def merge_parts(out: str | Path, parts: Sequence[str | Path], experiment: str = "grid") -> Path:
    """One grid folder from parts run side by side (each a side_by_side.sh folder with
    vllm_sweep/<experiment>/SERVE-*, timing.json, sweep-N.log, grid.json): the combos
    copied, the sweep logs renumbered, timing.json's calls joined (GPU minutes add up over
    GPUs; ``wall_clock_s`` is the longest part). Returns the merged experiment folder."""
    o = Path(out)
    exp_out = o / "vllm_sweep" / experiment
    exp_out.mkdir(parents=True, exist_ok=True)
    calls: list[dict[str, Any]] = []
    part_walls: list[float] = []
    n_log = 0
    meta: dict[str, Any] | None = None
    for i, p in enumerate(Path(x) for x in parts):
        exp = p / "vllm_sweep" / experiment
        if not exp.is_dir():
            raise SideBySideError(f"{p}: no vllm_sweep/{experiment} (part not run?)")
        for combo in sorted(c for c in exp.iterdir() if c.name.startswith("SERVE-")):
            shutil.copytree(combo, exp_out / combo.name, dirs_exist_ok=True)
        for log in sorted(p.glob("sweep-*.log"), key=lambda f: int(re.sub(r"\D", "", f.name))):
            n_log += 1
            shutil.copy2(log, o / f"sweep-{n_log}.log")
        t = p / "timing.json"
        if t.is_file():
            tim = json.loads(t.read_text())
            calls += [{**c, "part": i, "dir": str(p)} for c in tim.get("calls", [])]
            part_walls.append(float(tim.get("wall_s") or 0.0))
        if meta is None:
            meta = read_grid_meta(p)
        for name in ("bench_cmd.txt", "serve_cmd.txt"):
            if (p / name).is_file() and not (o / name).exists():
                shutil.copy2(p / name, o / name)
    wall = round(sum(float(c.get("wall_s") or 0.0) for c in calls), 2)
    timing = {
        "calls": calls,
        "wall_s": wall,
        "gpu_minutes": round(wall / 60.0, 2),
        "server_starts": sum(int(c.get("server_starts") or 0) for c in calls),
        "wall_clock_s": round(max(part_walls), 2) if part_walls else None,
        "parts": len(parts),
    }
    (o / "timing.json").write_text(json.dumps(timing, indent=1))
    if meta is not None:  # every part's grid.json lists all combos; its own are "part_combos"
        meta = {k: v for k, v in meta.items() if k not in ("part", "part_combos")}
        (o / GRID_FILE).write_text(json.dumps(meta, indent=1))
    return exp_out


# --------------------------------------------------------------------------------------
# the sweep's inputs: serve-params, serve and bench commands, grid.json
# --------------------------------------------------------------------------------------


def gridbench_cmd(
    bench_argv: Sequence[str],
    workload: Workload,
    *,
    python: str = "python3",
    warmup_share: float | None = None,
    bench_worker: bool | None = None,
) -> list[str]:
    """The ``--bench-cmd`` argv: lab.gridbench (measure()'s warm-up) around ``bench_argv``."""
    cmd = [
        python,
        "-m",
        "course_utils.lab.gridbench",
        "--workload",
        json.dumps(workload.to_dict(), sort_keys=True),
    ]
    if warmup_share is not None:
        cmd += ["--warmup-share", f"{warmup_share:g}"]
    if bench_worker:
        cmd.append("--bench-worker")
    return [*cmd, "--", *bench_argv]


def prepare(
    out: str | Path,
    *,
    model: str,
    port: int,
    spec: GridSpec,
    workload: Workload,
    slo: SLO,
    base: Mapping[str, Any] | None = None,
    gpu_memory_gib: float = 24.0,
    part: tuple[int, int] = (0, 1),
    load_format: str | None = None,
    vllm_cmd: Sequence[str] = ("vllm",),
    serve_vllm: Sequence[str] = ("vllm",),
    python: str = "python3",
    num_warmups: int | None = None,
    warmup_share: float | None = None,
    bench_worker: bool | None = None,
    tokenizer: str | None = None,
) -> dict[str, Any]:
    """Write serve_params.json (this part's combos), serve_cmd.txt, bench_cmd.txt and
    grid.json into ``out``; return grid.json's content. ``num_warmups`` (vLLM's own warm-up)
    replaces lab.gridbench with plain `vllm bench serve --num-warmups N`."""
    from course_utils.lab.server import VllmServer
    from course_utils.lab.sidebyside import sweep_bench_cmd

    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    base_ = knobs_mod.validate(dict(base or {}), entry="serve")
    combos, skipped = grid_combos(spec, base_, gpu_memory_gib=gpu_memory_gib)
    mine = split(combos, *part)
    srv = VllmServer(model, base_, port=port, load_format=load_format, vllm_cmd=serve_vllm)
    bench = sweep_bench_cmd(
        model,
        workload,
        slo,
        base_url=srv.base_url,
        tokenizer=tokenizer,
        vllm_cmd=vllm_cmd,
        num_warmups=num_warmups or 0,
    )
    if num_warmups is None:
        bench = gridbench_cmd(
            bench, workload, python=python, warmup_share=warmup_share, bench_worker=bench_worker
        )
    import shlex

    meta: dict[str, Any] = {
        "spec": {
            "axes": [[k, list(v)] for k, v in spec.axes],
            "mode": spec.mode,
            "with_defaults": spec.with_defaults,
        },
        "base": base_,
        "combos": combos,
        "part": list(part),
        "part_combos": mine,
        "skipped": skipped,
        "workload": workload.to_dict(),
        "slo": str(slo),
        "model": model,
        "warmup": {"kind": "vllm --num-warmups", "n": num_warmups}
        if num_warmups is not None
        else {
            "kind": "gridbench (lab.measure's warm-up)",
            "share": warmup_share if warmup_share is not None else MEASURE_WARMUP_SHARE,
        },
        "serve_cmd": shlex.join(srv.argv),
        "bench_cmd": shlex.join(bench),
    }
    (o / "serve_params.json").write_text(json.dumps(mine, indent=1))
    (o / "serve_cmd.txt").write_text(meta["serve_cmd"] + "\n")
    (o / "bench_cmd.txt").write_text(meta["bench_cmd"] + "\n")
    (o / GRID_FILE).write_text(json.dumps(meta, indent=1))
    return meta


def _measure_share() -> float:
    from course_utils.lab.measure import MeasureConfig

    return MeasureConfig.warmup_share


MEASURE_WARMUP_SHARE = _measure_share()


def servers_on_port(port: int, proc_root: str | Path = "/proc") -> list[int]:
    """PIDs of `... serve ... --port PORT` processes (this job's servers, whatever started
    them: vLLM's sweep kills its server's group itself, unless it was killed first)."""
    out = []
    for d in Path(proc_root).iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "serve" in argv and any(
            a == "--port" and i + 1 < len(argv) and argv[i + 1] == str(port)
            for i, a in enumerate(argv)
        ):
            out.append(int(d.name))
    return sorted(out)


def cleanup_port(port: int) -> list[int]:
    """SIGKILL the process group of every server on ``port``; return the groups killed."""
    import contextlib
    import os
    import signal

    groups = set()
    for pid in servers_on_port(port):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            groups.add(os.getpgid(pid))
    for g in sorted(groups):
        if g == os.getpgid(0):
            continue  # never our own group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(g, signal.SIGKILL)
    return sorted(groups)


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def _workload_args(p: Any) -> None:
    p.add_argument("--preset", help="core.presets name (workload, SLO, base, grid)")
    p.add_argument("--gpu", default="h200", help="the preset's size: 4090 or h200")
    p.add_argument("--input-len", type=int)
    p.add_argument("--output-len", type=int)
    p.add_argument("--prefix-len", type=int)
    p.add_argument("--num-prompts", type=int)
    p.add_argument("--rate", type=float)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slo")
    p.add_argument("--grid", help="K=V1,V2 | K=.. x K2=.. | K=.. + K2=..")
    p.add_argument("--base", action="append", metavar="K=V")


def _from_args(a: Any) -> tuple[GridSpec, Workload, SLO, dict[str, Any]]:
    """Explicit flags over the preset's values."""
    from course_utils.core import presets
    from course_utils.lab.cli import _parse_assign

    pre = presets.get(a.preset, a.gpu) if a.preset else None
    wk = pre.workload_kwargs() if pre else {"ignore_eos": True}
    for k, f in (
        ("input_len", a.input_len),
        ("output_len", a.output_len),
        ("prefix_len", a.prefix_len),
        ("num_prompts", a.num_prompts),
        ("request_rate", a.rate),
    ):
        if f is not None:
            wk[k] = f
    missing = [k for k in ("input_len", "output_len", "num_prompts", "request_rate") if k not in wk]
    if missing or not (a.slo or pre) or not (a.grid or pre):
        raise SystemExit(
            "give --preset, or --input-len --output-len --num-prompts --rate --slo --grid"
        )
    w = Workload(**wk, seed=a.seed)
    slo = SLO.parse(a.slo or (pre.slo if pre else ""))
    base = {**(dict(pre.base) if pre else {}), **_parse_assign(a.base, False)}
    spec = parse_grid(a.grid or (pre.grid_spec() if pre else ""))
    return spec, w, slo, base


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m course_utils.lab.grid", description=__doc__.split("\n\n")[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="serve_params.json, serve/bench commands, grid.json")
    p.add_argument("out")
    p.add_argument("--model", required=True)
    p.add_argument("--port", type=int, required=True)
    _workload_args(p)
    p.add_argument("--part", default="0/1", help="I/N: this GPU's share of the combos")
    p.add_argument("--gpu-memory-gib", type=float, default=140.0)
    p.add_argument("--load-format")
    p.add_argument("--tokenizer")
    p.add_argument("--vllm-cmd", default="vllm")
    p.add_argument("--serve-vllm", default="vllm")
    p.add_argument("--python", default="python3")
    p.add_argument(
        "--num-warmups",
        type=int,
        default=None,
        help="vLLM's own warm-up instead of lab.measure's (gridbench)",
    )
    p.add_argument("--warmup-share", type=float, default=None)
    p.add_argument("--bench-worker", action="store_true")
    m = sub.add_parser("merge", help="one grid folder from parts run on several GPUs")
    m.add_argument("out")
    m.add_argument("parts", nargs="+")
    c = sub.add_parser("compare", help="the loop's final goodput against the grid's best")
    c.add_argument("grid_dir")
    c.add_argument("tune_dir")
    c.add_argument("--slo", help="default: grid.json's")
    c.add_argument("--plateau", type=float, default=0.02)
    c.add_argument("--objective", default="request_goodput")
    c.add_argument("--lang", choices=("en", "zh"), default="en")
    c.add_argument("--json")
    k = sub.add_parser("cleanup", help="kill the servers left on this port (their groups)")
    k.add_argument("--port", type=int, required=True)
    a = ap.parse_args(argv)
    try:
        return _dispatch(a)
    except (ValueError, KeyError, SideBySideError, knobs_mod.KnobError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _dispatch(a: Any) -> int:
    import shlex

    if a.cmd == "prepare":
        spec, w, slo, base = _from_args(a)
        i, _, n = a.part.partition("/")
        meta = prepare(
            a.out,
            model=a.model,
            port=a.port,
            spec=spec,
            workload=w,
            slo=slo,
            base=base,
            gpu_memory_gib=a.gpu_memory_gib,
            part=(int(i), int(n or 1)),
            load_format=a.load_format,
            vllm_cmd=shlex.split(a.vllm_cmd),
            serve_vllm=shlex.split(a.serve_vllm),
            python=a.python,
            num_warmups=a.num_warmups,
            warmup_share=a.warmup_share,
            bench_worker=a.bench_worker or None,
            tokenizer=a.tokenizer,
        )
        print(
            f"{len(meta['part_combos'])} of {len(meta['combos'])} combo(s) in this part: "
            + "; ".join(combo_label(c) for c in meta["part_combos"])
        )
        for s in meta["skipped"]:
            print(f"left out: {s}")
    elif a.cmd == "merge":
        print(merge_parts(a.out, a.parts))
    elif a.cmd == "compare":
        from course_utils.lab.gridcompare import compare, table

        meta = read_grid_meta(a.grid_dir) or {}
        slo_text = a.slo or meta.get("slo")
        if not slo_text:
            raise ValueError("no --slo and no grid.json with one")
        cmp = compare(
            a.grid_dir, a.tune_dir, str(slo_text), plateau=a.plateau, objective=a.objective
        )
        print(table(cmp, a.lang))
        if a.json:
            Path(a.json).write_text(json.dumps(cmp, indent=1, default=str))
    else:
        print(f"killed process group(s): {cleanup_port(a.port) or 'none'}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
