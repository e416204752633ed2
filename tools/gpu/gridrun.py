#!/usr/bin/env python3
"""vLLM's grid on the GPU host (tools/gpu/side_by_side.sh, grid_decode.sh, case.sh): the
sweep's inputs, its bench command, the combos to measure again, and the loop against the
grid. Reading and comparing the results is course_utils.lab.grid.

    python tools/gpu/gridrun.py prepare DIR --model M --port P (--preset NAME | --input-len N
        --output-len N --num-prompts N --rate R --slo S --grid SPEC) [--base K=V ...]
        [--part I/N] [--num-warmups N | --warmup-share S]
    python tools/gpu/gridrun.py bench --workload JSON [--warmup-share S] -- vllm bench serve ...
    python tools/gpu/gridrun.py reopen DIR
    python tools/gpu/gridrun.py compare GRID_DIR TUNE_DIR [--json F] [--lang zh]

vLLM 0.26.0 (vllm/benchmarks/sweep/): ``--serve-params`` is a JSON list of dicts, one server
each, in order; ``_benchmark_name`` names a combo's folder, every other key is a serve flag.
``run_benchmark`` appends ``--percentile-metrics ... --save-result --result-dir D
--result-filename run=N.json`` to the bench command; ``--resume`` starts no server for a
combo that has a summary.json.

``bench`` is the grid's bench command: lab.measure's warm-up (the load's shape and rate, a
share of its prompts, its own seed) as ``D/<run>.warmup.json``, then the sweep's own argv,
its output streamed to the sweep's log and kept in ``D/<run>.bench.log``, then
``D/<run>.harness.json``: both calls' walls and engine peaks (/metrics), the prefix-cache hit
rate and lab.measure's validity gate. vLLM's own ``--num-warmups N`` (N copies of the first
request at once) never reaches a load's batch sizes; ``prepare --num-warmups`` keeps it as
an option.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core import presets
from course_utils.core.metrics import MetricsSampler, summarize
from course_utils.core.records import Workload
from course_utils.core.slo import SLO
from course_utils.core.texts import loop_vs_grid
from course_utils.core.validate import (
    CourseArgumentParser,
    error_line,
    parse_assign,
    parse_values,
    workload_from_args,
)
from course_utils.core.validity import prefix_cache_hit_rate, validity_issues, warmup_issue
from course_utils.lab import rehearsal
from course_utils.lab.bench import BenchError, bench_args, run_bench
from course_utils.lab.grid import (
    DEFAULTS_NAME,
    GRID_FILE,
    GridError,
    combo_label,
    compare,
    experiment_dir,
    grid_points,
    harness_path,
    read_grid_meta,
)
from course_utils.lab.measure import MeasureConfig
from course_utils.lab.proc import run_logged
from course_utils.lab.server import VllmServer
from course_utils.lab.sweep import couple_knobs, validate_each

# --------------------------------------------------------------------------------------
# the grid: knobs and values, and the combos vLLM will serve
# --------------------------------------------------------------------------------------


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


def grid_combos(
    spec: GridSpec,
    base: Mapping[str, Any] | None = None,
    *,
    gpu_memory_gib: float = 24.0,
    couple: bool = True,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``--serve-params`` records and the combos left out (one line each).

    Every combo is validated with the base knobs (this GPU size's defaults) before any
    server starts: a server vLLM rejects aborts its whole sweep. A swept knob is coupled
    like ``tune(couple=True)`` (lab.sweep.couple_knobs); a product combo vLLM would reject
    is left out (both values were chosen)."""
    base_ = knobs_mod.validate(dict(base or {}), entry="serve")
    raw: list[tuple[dict[str, Any], str | None]] = [({}, None)] if spec.with_defaults else []
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
    for over, swept in raw:
        try:
            checked = validate_each({**base_, **over})  # each alone; the pair after coupling
            coupled: dict[str, Any] = {}
            if couple and swept is not None:
                checked, coupled = couple_knobs(checked, swept, gpu_memory_gib)
            knobs_mod.validate(checked, gpu_memory_gib=gpu_memory_gib, entry="serve")
        except knobs_mod.KnobError as exc:
            skipped.append(f"{combo_label(over) or DEFAULTS_NAME}: {exc}")
            continue
        combo = {k: checked[k] for k in over} | coupled if over else {}
        combo = combo or {"_benchmark_name": DEFAULTS_NAME}
        if combo not in out:
            out.append(combo)
    return out, skipped


# flags vllm/benchmarks/sweep/serve.py run_benchmark appends itself (value-taking, or not)
SWEEP_APPENDED_FLAGS = {
    "--percentile-metrics": True,
    "--save-result": False,
    "--result-dir": True,
    "--result-filename": True,
}


# --------------------------------------------------------------------------------------
# the sweep's inputs: serve-params, serve and bench commands, grid.json
# --------------------------------------------------------------------------------------


def sweep_bench_cmd(
    model: str, workload: Workload, slo: SLO | None, *, num_warmups: int = 0, **kw: Any
) -> list[str]:
    """lab.bench.bench_args without the flags the sweep appends itself."""
    out: list[str] = []
    skip = False
    for a in bench_args(kw.pop("base_url"), model, workload, slo, num_warmups=num_warmups, **kw):
        if skip:
            skip = False
        elif a in SWEEP_APPENDED_FLAGS:
            skip = SWEEP_APPENDED_FLAGS[a]
        else:
            out.append(a)
    return out


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
    tokenizer: str | None = None,
) -> dict[str, Any]:
    """Write serve_params.json (this part's combos: every ``part[1]``-th from ``part[0]``),
    serve_cmd.txt, bench_cmd.txt and grid.json into ``out``; return grid.json's content.
    ``num_warmups`` (vLLM's own warm-up) replaces ``bench`` with plain `vllm bench serve`."""
    if not 0 <= part[0] < part[1]:
        raise ValueError(f"part {part[0]} of {part[1]}: give 0 <= part < parts")
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    base_ = knobs_mod.validate(dict(base or {}), entry="serve")
    combos, skipped = grid_combos(spec, base_, gpu_memory_gib=gpu_memory_gib)
    mine = [dict(c) for c in combos[part[0] :: part[1]]]
    srv = VllmServer(model, base_, port=port, load_format=load_format, vllm_cmd=serve_vllm)
    cmd = sweep_bench_cmd(
        model,
        workload,
        slo,
        base_url=srv.base_url,
        tokenizer=tokenizer,
        vllm_cmd=vllm_cmd,
        num_warmups=num_warmups or 0,
    )
    share = MeasureConfig.warmup_share if warmup_share is None else warmup_share
    if num_warmups is None:
        w = json.dumps(workload.to_dict(), sort_keys=True)
        opts = [] if warmup_share is None else ["--warmup-share", f"{warmup_share:g}"]
        cmd = [
            python,
            str(Path(__file__).resolve()),
            "bench",
            "--workload",
            w,
            *opts,
            "--",
            *cmd,
        ]
    meta: dict[str, Any] = {
        "spec": {
            "axes": [[k, list(v)] for k, v in spec.axes],
            "mode": spec.mode,
            "with_defaults": spec.with_defaults,
        },
        "base": base_,
        "gpu_memory_gib": gpu_memory_gib,  # whose defaults a combo that leaves a knob gets
        "combos": combos,
        "part": list(part),
        "part_combos": mine,
        "skipped": skipped,
        "workload": workload.to_dict(),
        "slo": str(slo),
        "model": model,
        "warmup": {"kind": "vllm --num-warmups", "n": num_warmups}
        if num_warmups is not None
        else {"kind": "gridbench (lab.measure's warm-up)", "share": share},
        "serve_cmd": shlex.join(srv.argv),
        "bench_cmd": shlex.join(cmd),
    }
    (o / "serve_params.json").write_text(json.dumps(mine, indent=1))
    (o / "serve_cmd.txt").write_text(meta["serve_cmd"] + "\n")
    (o / "bench_cmd.txt").write_text(meta["bench_cmd"] + "\n")
    (o / GRID_FILE).write_text(json.dumps(meta, indent=1))
    return meta


# --------------------------------------------------------------------------------------
# the bench command: lab.measure's warm-up, the sweep's run, the validity gate
# --------------------------------------------------------------------------------------


def _flag(argv: Sequence[str], name: str) -> str | None:
    """The value of the last ``--name V`` / ``--name=V`` in argv."""
    val = None
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            val = argv[i + 1]
        elif a.startswith(name + "="):
            val = a.partition("=")[2]
    return val


def _follow(path: Path, stop: threading.Event) -> None:
    """Copy what is appended to ``path`` to stdout, line by line, until ``stop``."""
    pos = 0
    while True:
        done = stop.is_set()
        try:
            with open(path, "rb") as fh:
                fh.seek(pos)
                chunk = fh.read()
        except OSError:
            chunk = b""
        cut = len(chunk) if done else chunk.rfind(b"\n") + 1
        if cut:
            sys.stdout.write(chunk[:cut].decode("utf-8", errors="replace"))
            sys.stdout.flush()
            pos += cut
        if done:
            return
        stop.wait(0.05)


def _peak(sampler: MetricsSampler) -> float | None:
    return summarize(sampler.samples).running_max if sampler.samples else None


def _warm_up(
    argv: Sequence[str], w: Workload, cfg: MeasureConfig, d: Path, stem: str, timeout: float
) -> dict[str, Any]:
    ww = cfg.warmup_workload(w)
    if ww is None:
        return {"status": "none"}
    base_url, model = _flag(argv, "--base-url"), _flag(argv, "--model")
    if base_url is None or model is None:
        raise SystemExit("gridrun.py bench: the bench command needs --base-url and --model")
    sampler = MetricsSampler(base_url + "/metrics", interval_s=cfg.metrics_interval_s)
    t0 = time.monotonic()
    print(f"gridbench: warm-up {ww.num_prompts} prompts at {ww.request_rate:g} req/s", flush=True)
    try:
        with sampler:
            res = run_bench(
                base_url,
                model,
                ww,
                None,
                d,
                f"{stem}.warmup.json",
                tokenizer=_flag(argv, "--tokenizer"),
                vllm_cmd=argv[: argv.index("bench")],
                timeout_s=timeout,
            )
    except BenchError as exc:
        return {"status": "failed", "reason": exc.reason, "num_prompts": ww.num_prompts}
    out = {
        "status": "ok",
        "num_prompts": ww.num_prompts,
        "seed": ww.seed,
        "running_max": _peak(sampler),
        "wall_s": round(time.monotonic() - t0, 2),
        "load_s": res.raw.get("duration"),
    }
    print(f"gridbench: warm-up done: {json.dumps(out)}", flush=True)
    return out


def bench(argv: Sequence[str]) -> int:
    """``bench [--workload JSON ...] -- vllm bench serve ...``: exit status the run's (124
    past ``--timeout``)."""
    args = list(argv)
    if "--" not in args or "bench" not in args[args.index("--") + 1 :]:
        print("error: no `vllm bench serve ...` after -- → fix: give it after --", file=sys.stderr)
        return 2
    cut = args.index("--")
    ap = argparse.ArgumentParser(prog="python tools/gpu/gridrun.py bench")
    ap.add_argument("--workload", required=True, help="core.records.Workload as JSON")
    ap.add_argument("--warmup-share", type=float, default=MeasureConfig.warmup_share)
    ap.add_argument("--warmup-min-prompts", type=int, default=MeasureConfig.warmup_min_prompts)
    ap.add_argument("--metrics-interval", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=1800.0)
    a = ap.parse_args(args[:cut])
    cmd = args[cut + 1 :]
    w = Workload.from_dict(json.loads(a.workload))
    cfg = MeasureConfig(
        warmup_share=a.warmup_share,
        warmup_min_prompts=a.warmup_min_prompts,
        metrics_interval_s=a.metrics_interval,
    )
    d = Path(_flag(cmd, "--result-dir") or ".")
    name = _flag(cmd, "--result-filename") or "bench.json"
    stem = Path(name).stem
    d.mkdir(parents=True, exist_ok=True)
    warm = _warm_up(cmd, w, cfg, d, stem, a.timeout)
    log = d / f"{stem}.bench.log"
    sampler = MetricsSampler((_flag(cmd, "--base-url") or "") + "/metrics", a.metrics_interval)
    stop = threading.Event()
    follower = threading.Thread(target=_follow, args=(log, stop), daemon=True)
    follower.start()
    t0 = time.monotonic()
    try:
        with sampler:
            rc, timed_out = run_logged(cmd, log, a.timeout, grace_s=5.0)
    finally:
        stop.set()
        follower.join(timeout=5)
    run = {"rc": rc, "wall_s": round(time.monotonic() - t0, 2)}
    _record(d / name, w, warm, run, sampler)
    return 124 if timed_out else int(rc or 0)


def _record(
    result: Path, w: Workload, warm: dict[str, Any], run: dict[str, Any], sampler: MetricsSampler
) -> None:
    """harness.json: the two calls and the validity gate of lab.measure on the run."""
    hit = prefix_cache_hit_rate(sampler.samples)
    run.update(running_max=_peak(sampler), prefix_cache_hit_rate=hit)
    issues: list[str] = []
    if result.is_file():
        raw = json.loads(result.read_text())
        run["load_s"] = raw.get("duration")
        issues += validity_issues(raw, w, prefix_cache_hit_rate=hit)
    else:
        issues.append("the run wrote no result")
    if not sampler.samples:
        issues.append("no /metrics sample was taken during the bench")
    cover = warmup_issue(warm.get("running_max"), run["running_max"])
    if cover:
        issues.append(cover)
    out = {"workload": w.to_dict(), "warmup": warm, "run": run, "valid": not issues}
    out["validity_issues"] = issues
    harness_path(result).write_text(json.dumps(out, indent=1))
    print(f"gridbench: {json.dumps({'valid': not issues, 'issues': issues})}", flush=True)


# --------------------------------------------------------------------------------------
# after a call: rejected combos, timing, parts merged, copies shrunk, servers killed
# --------------------------------------------------------------------------------------


def reopen_rejected(grid_dir: str | Path, slo: SLO | str, rejected: str | Path) -> list[str]:
    """Move each combo with no valid run into ``rejected/<folder>-<n>``, so that vLLM's
    ``--resume`` serves and measures it again (the rejected runs stay as evidence). Returns
    the moved combos' labels."""
    try:
        exp = experiment_dir(Path(grid_dir))
        points = grid_points(grid_dir, slo)
    except GridError:  # no combo finished a run yet: nothing was judged
        return []
    moved = []
    for p in (p for p in points if not p.valid):
        n = 1
        while (Path(rejected) / f"{p.key}-{n}").exists():
            n += 1
        Path(rejected).mkdir(parents=True, exist_ok=True)
        shutil.move(str(exp / p.key), str(Path(rejected) / f"{p.key}-{n}"))
        moved.append(p.knob)
    return moved


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def _from_args(a: argparse.Namespace) -> tuple[GridSpec, Workload, SLO, dict[str, Any]]:
    """Explicit flags over the preset's values; a preset's grid starts, like the loop, from
    vLLM's defaults."""
    pre = presets.get(a.preset, a.gpu) if a.preset else None
    given = pre is not None or None not in (a.input_len, a.output_len, a.num_prompts, a.rate)
    if not given or not (a.slo or pre) or not (a.grid or pre):
        raise ValueError(
            "no workload → fix: give --preset, or --input-len --output-len --num-prompts "
            "--rate --slo --grid"
        )
    w = workload_from_args(a, pre.workload_kwargs() if pre else {"ignore_eos": True})
    slo = SLO.parse(a.slo or (pre.slo if pre else ""))
    base = {**(dict(pre.base) if pre else {}), **parse_assign(a.base, False)}
    spec = (
        parse_grid(a.grid) if a.grid or not pre else parse_grid(pre.grid_spec(), with_defaults=True)
    )
    if a.warmup_share is None and pre is not None:
        a.warmup_share = pre.warmup_share
    target = a.rehearse_gpu or (pre.rehearse if pre else None)
    if not target:
        return spec, w, slo, base
    # the target's budget and defaults in the base knobs, every gpu_memory_utilization
    # scaled, as the loop's --rehearse-gpu does (lab.rehearsal); saved next to the grid
    Path(a.out).mkdir(parents=True, exist_ok=True)
    sweeps = {k: list(vals) for k, vals in spec.axes}
    r, base, scaled = rehearsal.apply(target, "serve", base, sweeps, cache=Path(a.out) / "gpu.json")
    rehearsal.save(r, Path(a.out))
    a.gpu_memory_gib = r.target_total_gib
    axes = tuple((k, tuple(scaled[k])) for k, _ in spec.axes)
    return GridSpec(axes, spec.mode, spec.with_defaults), w, slo, base


def _parser() -> argparse.ArgumentParser:
    ap = CourseArgumentParser(
        prog="python tools/gpu/gridrun.py", description=__doc__.split("\n\n")[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="serve_params.json, serve/bench commands, grid.json")
    p.add_argument("out")
    p.add_argument("--model", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--preset", help="core.presets name (workload, SLO, base, grid)")
    p.add_argument("--gpu", default="h200", help="the preset's size: 4090 or h200")
    for f, typ in (("input-len", int), ("output-len", int), ("prefix-len", int),
                   ("num-prompts", int), ("rate", float)):  # fmt: skip
        p.add_argument(f"--{f}", type=typ)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slo")
    p.add_argument("--grid", help="K=V1,V2 | K=.. x K2=.. | K=.. + K2=..")
    p.add_argument("--base", action="append", metavar="K=V")
    p.add_argument("--part", default="0/1", help="I/N: this GPU's share of the combos")
    p.add_argument("--gpu-memory-gib", type=float, default=140.0)
    p.add_argument("--load-format")
    p.add_argument("--tokenizer")
    for f in ("--vllm-cmd", "--serve-vllm"):
        p.add_argument(f, default="vllm")
    p.add_argument("--python", default="python3")
    p.add_argument("--num-warmups", type=int, help="vLLM's own warm-up, not lab.measure's")
    p.add_argument("--warmup-share", type=float, default=None)
    p.add_argument("--rehearse-gpu", help="this GPU's budget and defaults (default: preset's)")
    c = sub.add_parser("compare", help="the loop's final goodput against the grid's best")
    c.add_argument("grid_dir")
    c.add_argument("tune_dir")
    c.add_argument("--slo", help="default: grid.json's")
    c.add_argument("--plateau", type=float, default=0.02)
    c.add_argument("--objective", default="request_goodput")
    c.add_argument("--lang", choices=("en", "zh"), default="en")
    c.add_argument("--json")
    r = sub.add_parser("reopen", help="combos with no valid run aside, for --resume")
    r.add_argument("out", help="the side-by-side folder (grid.json, vllm_sweep/)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["bench"]:
        return bench(args[1:])
    try:
        return _dispatch(_parser().parse_args(args))
    except (OSError, ValueError, KeyError, TypeError, knobs_mod.KnobError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(error_line(msg, "check the command's arguments"), file=sys.stderr)
        return 2


def _dispatch(a: argparse.Namespace) -> int:
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
            tokenizer=a.tokenizer,
        )
        labels = "; ".join(combo_label(c) for c in meta["part_combos"])
        print(
            f"{len(meta['part_combos'])} of {len(meta['combos'])} combo(s) in this part: {labels}"
        )
        for s in meta["skipped"]:
            print(f"left out: {s}")
    elif a.cmd == "reopen":
        d = Path(a.out)
        meta = read_grid_meta(d) or {}
        if not meta.get("slo") or not (d / "vllm_sweep").is_dir():
            print(f"reopen: {d}: nothing measured yet")
            return 0
        for label in reopen_rejected(d / "vllm_sweep", str(meta["slo"]), d / "rejected"):
            print(f"reopen: {label} had no valid run: moved to {d / 'rejected'}, measured again")
    elif a.cmd == "compare":
        slo_text = a.slo or (read_grid_meta(a.grid_dir) or {}).get("slo")
        if not slo_text:
            raise ValueError("no SLO → fix: give --slo, or a grid folder with its grid.json")
        cmp = compare(
            a.grid_dir, a.tune_dir, str(slo_text), plateau=a.plateau, objective=a.objective
        )
        print(loop_vs_grid(cmp, a.lang))
        if a.json:
            Path(a.json).write_text(json.dumps(cmp, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
