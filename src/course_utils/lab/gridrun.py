"""Running vLLM's grid (lab.grid): the sweep's inputs, this job's cleanup, and the CLI of
tools/gpu/side_by_side.sh and tools/gpu/grid_decode.sh.

    python -m course_utils.lab.gridrun prepare DIR --model M --port P (--preset NAME | --input-len
        N --output-len N --num-prompts N --rate R --slo S --grid SPEC) [--base K=V ...]
        [--part I/N] [--num-warmups N | --warmup-share S --bench-worker]
    python -m course_utils.lab.gridrun merge OUT PART_DIR [PART_DIR ...]
    python -m course_utils.lab.gridrun compare GRID_DIR TUNE_DIR [--json F] [--lang zh]
    python -m course_utils.lab.gridrun cleanup --port P
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.records import Workload
from course_utils.core.slo import SLO
from course_utils.lab.grid import (
    GRID_FILE,
    GridSpec,
    combo_label,
    grid_combos,
    merge_parts,
    parse_grid,
    read_grid_meta,
    reopen_rejected,
    split,
)
from course_utils.lab.sidebyside_evidence import SideBySideError

__all__ = ["cleanup_port", "gridbench_cmd", "main", "prepare", "servers_on_port"]


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
    from course_utils.core.validate import parse_assign, workload_from_args

    pre = presets.get(a.preset, a.gpu) if a.preset else None
    given = pre is not None or None not in (a.input_len, a.output_len, a.num_prompts, a.rate)
    if not given or not (a.slo or pre) or not (a.grid or pre):
        raise SystemExit(
            "give --preset, or --input-len --output-len --num-prompts --rate --slo --grid"
        )
    w = workload_from_args(a, pre.workload_kwargs() if pre else {"ignore_eos": True})
    slo = SLO.parse(a.slo or (pre.slo if pre else ""))
    base = {**(dict(pre.base) if pre else {}), **parse_assign(a.base, False)}
    # a preset's candidates are what the loop tries from vLLM's defaults: the defaults too
    spec = (
        parse_grid(a.grid)
        if a.grid
        else parse_grid(pre.grid_spec() if pre else "", with_defaults=True if pre else None)
    )
    return spec, w, slo, base


def _warmup_share(a: Any) -> float | None:
    """--warmup-share, else the preset's (None: lab.measure's default)."""
    from course_utils.core import presets

    if a.warmup_share is not None or not a.preset:
        return float(a.warmup_share) if a.warmup_share is not None else None
    return presets.get(a.preset, a.gpu).warmup_share


def _rehearsed(
    a: Any, spec: GridSpec, w: Workload, slo: SLO, base: dict[str, Any]
) -> tuple[GridSpec, Workload, SLO, dict[str, Any]]:
    """--rehearse-gpu (or the preset's): the target's budget and defaults in the base knobs
    and every gpu_memory_utilization scaled, as the loop's ``--rehearse-gpu`` does
    (lab.rehearsal); the rehearsal is saved next to the grid."""
    from course_utils.core import presets
    from course_utils.lab import rehearsal

    target = a.rehearse_gpu or (presets.get(a.preset, a.gpu).rehearse if a.preset else None)
    if not target:
        return spec, w, slo, base
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sweeps = {k: list(vals) for k, vals in spec.axes}
    r, base, scaled = rehearsal.apply(target, "serve", base, sweeps, cache=out / "gpu.json")
    rehearsal.save(r, out)
    a.gpu_memory_gib = r.target_total_gib
    axes = tuple((k, tuple(scaled[k])) for k, _ in spec.axes)
    return GridSpec(axes, spec.mode, spec.with_defaults), w, slo, base


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m course_utils.lab.gridrun", description=__doc__.split("\n\n")[0]
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
    p.add_argument(
        "--rehearse-gpu",
        help="run at this GPU's memory budget and serve defaults (default: the preset's)",
    )
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
    r = sub.add_parser(
        "reopen", help="move combos with no valid run aside, for --resume to measure again"
    )
    r.add_argument("out", help="the side-by-side folder (grid.json, vllm_sweep/)")
    k = sub.add_parser("cleanup", help="kill the servers left on this port (their groups)")
    k.add_argument("--port", type=int, required=True)
    a = ap.parse_args(argv)
    try:
        return _dispatch(a)
    except (ValueError, KeyError, SideBySideError, knobs_mod.KnobError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _reopen(out: str) -> int:
    """gridrun reopen: the combos the validity gate rejected go to OUT/rejected/."""
    d = Path(out)
    meta = read_grid_meta(d) or {}
    if not meta.get("slo") or not (d / "vllm_sweep").is_dir():
        print(f"reopen: {d}: nothing measured yet")
        return 0
    moved = reopen_rejected(d / "vllm_sweep", str(meta["slo"]), d / "rejected")
    for label in moved:
        print(f"reopen: {label} had no valid run: moved to {d / 'rejected'}, measured again")
    return 0


def _dispatch(a: Any) -> int:
    if a.cmd == "prepare":
        spec, w, slo, base = _rehearsed(a, *_from_args(a))
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
            warmup_share=_warmup_share(a),
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
    elif a.cmd == "reopen":
        return _reopen(a.out)
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
