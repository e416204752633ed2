"""Side by side: vLLM 0.26.0's own `vllm bench sweep serve` vs our `tune()`.

Same model, knob grid and workload on both sides; per tool: server restarts, GPU minutes
(wall), the best config and its goodput under both scores (vLLM's per-request
`request_goodput` and the p99 gate, course_utils.core.slo), and the ratios ours/vLLM.

vLLM 0.26.0 facts (vllm/benchmarks/sweep/):
- serve.py: `vllm bench sweep serve --serve-cmd STR --bench-cmd STR --serve-params JSON
  -o DIR -e NAME --num-runs N [--resume] [--server-ready-timeout S] [--show-stdout]
  [--after-bench-cmd STR]`; results go to `DIR/NAME/SERVE--<params>/run=<i>.json` (the
  bench result JSON plus the serve overrides and `run_number`), `summary.json` per combo
  (written after its runs) and `DIR/NAME/summary.csv` (pandas) at the end. A combo whose
  `summary.json` exists starts no server on `--resume`. Printed markers: `[BEGIN SERVER]`,
  `[END SERVER]`, `[BEGIN BENCHMARK]`, `[SKIPPED BENCHMARK]`, `[END BENCHMARK]`.
- serve.py `run_benchmark` appends `--percentile-metrics ttft,tpot,itl,e2el --save-result
  --result-dir D --result-filename F` to the bench command itself: `sweep_bench_cmd` leaves
  them out of ours.
- param_sweep.py: `--serve-params` is a list of dicts (or a dict of named dicts); a key may be
  spelled `max_num_seqs` or `max-num-seqs` (JSON prefers "_", the flag written is
  `--max-num-seqs`); the combo's folder name is `k=v` pairs joined by "-".
- server.py: the server starts with `VLLM_SERVER_DEV_MODE=1`, is ready on GET /health 200
  (`--server-ready-timeout`, default 300 s; a crashed or late server aborts the whole sweep),
  is stopped with SIGKILL of its process group, and after every bench run the caches are
  reset (POST /reset_prefix_cache, /reset_mm_cache, /reset_encoder_cache) when the serve
  command's executable ends with "vllm", else `--after-bench-cmd` runs.
- serve.py `SweepServeArgs.from_cli_args` shlex-splits `--bench-cmd` and `run_benchmark`
  only applies `--bench-params` overrides (none here) and appends the flags above, so a
  `--num-warmups N` in our bench command reaches `vllm bench serve` once, unchanged.

Warm-up (why compare() reports it): vllm/benchmarks/serve.py `benchmark()` sends, when
`--num-warmups N` > 0 (default 0), N copies of the first dataset request (same prompt,
its output_len, the same sampling params) concurrently after "Warming up with N
requests..." and before `benchmark_start_time`; the ready check is off by default
(`--ready-check-timeout-sec 0`: "Skipping endpoint ready check."). N copies of one request
at once never reach the batch sizes of a load at a rate; lab.measure warms up with `vllm
bench serve` at the load's rate instead, and tools/gpu/side_by_side.sh now gives the sweep
that warm-up (lab.gridbench; `WARMUP=num:N` keeps vLLM's). Without any warm-up the first
measured requests pay one-time Triton JIT compiles, which vLLM logs as "... JIT compilation
during inference: <kernel>. This causes a latency spike; ..." (vllm/utils/jit_monitor.py
`_handle_jit_event`, once per kernel per process).

This module compares a sweep with `--num-warmups` against tune() (the 2026-11-29 runs);
lab.grid / lab.gridcompare run vLLM's grid on any workload and compare the loop with it.

CLI:
    python -m course_utils.lab.sidebyside params --knob max_num_seqs --values 64,128 OUT.json
    python -m course_utils.lab.sidebyside bench-cmd --model M --base-url U --rate 45 ...
        [--num-warmups 8]
    python -m course_utils.lab.sidebyside timing LOG [--call-wall-s S --rc RC] TIMING.json
    python -m course_utils.lab.sidebyside compare VLLM_SWEEP_DIR TUNE_DIR --slo "ttft:300 tpot:50"
        [--timing TIMING.json] [--bench-cmd bench_cmd.txt] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.records import is_present, read_text
from course_utils.core.slo import SLO
from course_utils.core.store import summarise_long_lists
from course_utils.core.vllm_logs import parse_sweep_log
from course_utils.lab.bench import Workload, bench_args
from course_utils.lab.sidebyside_evidence import (
    RUN_FILE,
    SideBySideError,
    _find_sweep_logs,
    _like_for_like,
    _search_dirs,
    _vllm_warmups,
    bench_cmd_warmups,
    engine_init,
    load_tune_dir,
    load_vllm_sweep,
    our_warmup_default,
    sweep_log_evidence,
    table_markdown,
)

__all__ = [
    "SideBySideError",
    "SWEEP_APPENDED_FLAGS",
    "bench_cmd_warmups",
    "compare",
    "load_tune_dir",
    "load_vllm_sweep",
    "our_warmup_default",
    "serve_params",
    "shrink_results",
    "sweep_bench_cmd",
    "sweep_log_evidence",
    "table_markdown",
]

# flags vllm/benchmarks/sweep/serve.py run_benchmark appends itself (value-taking, or not)
SWEEP_APPENDED_FLAGS = {
    "--percentile-metrics": True,
    "--save-result": False,
    "--result-dir": True,
    "--result-filename": True,
}
TIMING_FILE = "timing.json"


# --------------------------------------------------------------------------------------
# inputs of `vllm bench sweep serve`
# --------------------------------------------------------------------------------------


def serve_params(
    knob: str,
    values: Sequence[Any],
    *,
    base: Mapping[str, Any] | None = None,
    couple: bool = True,
    gpu_memory_gib: float = 24.0,
) -> list[dict[str, Any]]:
    """`--serve-params` records for a one-knob grid, coupled like `tune(couple=True)`:
    a max_num_seqs above the effective max_num_batched_tokens (set in `base`, or the 0.26.0
    default for this GPU size) brings max_num_batched_tokens = max_num_seqs along (and the
    other way round when max_num_batched_tokens is the swept knob). Keys use "_" (the
    spelling param_sweep.py prefers in JSON); `base` knobs belong in the serve command."""
    from course_utils.lab.grid import GridSpec, grid_combos

    name = knobs_mod.get(knob).name
    spec = GridSpec(axes=((name, tuple(values)),))
    combos, skipped = grid_combos(spec, base, gpu_memory_gib=gpu_memory_gib, couple=couple)
    if skipped:
        raise knobs_mod.KnobError(skipped[0])
    return combos


def sweep_bench_cmd(
    model: str,
    workload: Workload,
    slo: SLO | None,
    *,
    base_url: str,
    tokenizer: str | None = None,
    vllm_cmd: Sequence[str] = ("vllm",),
    num_warmups: int = 0,
) -> list[str]:
    """course_utils.lab.bench.bench_args without the flags the sweep appends itself."""
    argv = bench_args(
        base_url,
        model,
        workload,
        slo,
        tokenizer=tokenizer,
        vllm_cmd=vllm_cmd,
        num_warmups=num_warmups,
    )
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in SWEEP_APPENDED_FLAGS:
            skip = SWEEP_APPENDED_FLAGS[a]
            continue
        out.append(a)
    return out


# --------------------------------------------------------------------------------------
# timing from the sweep's own output (timestamped by side_by_side.sh)
# --------------------------------------------------------------------------------------


def _add_call(timing_path: Path, log_text: str, call_wall_s: float, rc: int) -> dict[str, Any]:
    """Append one device call's numbers to timing.json (a --resume call adds a second)."""
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else {"calls": []}
    call = {"wall_s": round(call_wall_s, 2), "rc": rc, **parse_sweep_log(log_text)}
    timing["calls"].append(call)
    timing["wall_s"] = round(sum(c["wall_s"] for c in timing["calls"]), 2)
    timing["server_starts"] = sum(c["server_starts"] for c in timing["calls"])
    timing["gpu_minutes"] = round(timing["wall_s"] / 60.0, 2)
    timing["jit_in_benchmark"] = sum(c.get("jit_in_benchmark", 0) for c in timing["calls"])
    timing["jit_in_warmup"] = sum(c.get("jit_in_warmup", 0) for c in timing["calls"])
    timing_path.write_text(json.dumps(timing, indent=1))
    return timing


def shrink_results(path: str | Path, max_kb: int = 16) -> int:
    """Replace per-request lists (--save-detailed) over `max_kb` in every run=N.json and
    summary.json below `path` by {stripped_list, n, min, max, mean} (like
    tools/gpu/collect.py does for bench.json) and drop their columns from summary.csv;
    return how many files changed. For copies only: vLLM's --resume rereads the originals."""

    n = 0
    for f in sorted(Path(path).rglob("summary.csv")):  # the lists again, one cell each
        n += _drop_long_columns(f, max_kb * 1024)
    for f in sorted(Path(path).rglob("*.json")):
        if not (RUN_FILE.match(f.name) or f.name == "summary.json"):
            continue
        data = json.loads(f.read_text())
        items = data if isinstance(data, list) else [data]
        if any([summarise_long_lists(x, max_kb * 1024) for x in items if isinstance(x, dict)]):
            f.write_text(json.dumps(data, indent=1))
            n += 1
    return n


def _drop_long_columns(path: Path, max_chars: int) -> bool:
    """Drop the columns of a CSV with a cell longer than `max_chars`; True if any."""
    import csv

    csv.field_size_limit(sys.maxsize)
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return False
    keep = [
        i
        for i in range(len(rows[0]))
        if all(len(r[i]) <= max_chars for r in rows[1:] if i < len(r))
    ]
    if len(keep) == len(rows[0]):
        return False
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows([[r[i] for i in keep if i < len(r)] for r in rows])
    return True


# --------------------------------------------------------------------------------------
# reading both sides
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------------------


def _best(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any] | None:
    ok = [r for r in rows if r.get("status") == "ok" and r.get(key) is not None]
    return dict(max(ok, key=lambda r: float(r[key]))) if ok else None


def _ratio(ours: Any, theirs: Any) -> float | None:
    """ours / theirs; None when either is missing or theirs is 0 (the table says why)."""
    if ours is None or theirs is None:
        return None
    o, t = float(ours), float(theirs)
    if t == 0:
        return None
    return round(o / t, 3)


def _find_timing(
    vdir: Path, timing: str | Path | None
) -> tuple[dict[str, Any] | None, Path | None]:
    cands = [Path(timing)] if timing else [vdir / TIMING_FILE, vdir.parent / TIMING_FILE]
    for c in cands:
        if c.is_file():
            return json.loads(c.read_text()), c
    if timing:
        raise SideBySideError(f"{timing}: no such timing file")
    return None, None


# --------------------------------------------------------------------------------------
# like for like: warm-up and JIT compiles inside measured runs, from the files on disk
# --------------------------------------------------------------------------------------


def compare(
    vllm_sweep_dir: str | Path,
    tune_dir: str | Path,
    slo: SLO | str,
    *,
    timing: str | Path | None = None,
    bench_cmd: str | Path | None = None,
) -> dict[str, Any]:
    """Both tools on one grid and workload: restarts, GPU minutes, best goodputs, ratios,
    and whether the goodputs are like for like (warm-up, JIT compiles while measuring).

    `vllm_sweep_dir`: the `-o` folder of `vllm bench sweep serve` (or its experiment
    folder); its timing.json, bench_cmd.txt and sweep-N.log (side_by_side.sh) sit in it or
    next to it, else pass `timing=` / `bench_cmd=` (the logs are looked for next to the
    timing file too). Without timing, restarts = combos with results and GPU minutes are
    None. `tune_dir`: the folder of tune() (points.jsonl + tune.jsonl)."""
    slo_ = SLO.parse(slo) if isinstance(slo, str) else slo
    vdir = Path(vllm_sweep_dir)
    vrows = load_vllm_sweep(vdir, slo_)
    tim, tim_path = _find_timing(vdir, timing)
    dirs = _search_dirs(vdir, tim_path)
    v_warm = _vllm_warmups(dirs, bench_cmd)
    logs = _find_sweep_logs(dirs)
    v_jit = sweep_log_evidence(logs) if logs else None
    ours = load_tune_dir(tune_dir, slo_)
    v_side = {
        "tool": "vllm bench sweep serve (0.26.0)",
        "dir": str(vdir),
        "server_starts": tim["server_starts"] if tim else len({str(r["params"]) for r in vrows}),
        "wall_s": tim["wall_s"] if tim else None,
        "gpu_minutes": tim["gpu_minutes"] if tim else None,
        "device_calls": len(tim["calls"]) if tim else None,
        "warmups": v_warm,
        "jit": v_jit,
        "engine_init": engine_init(logs) if logs else None,
        "runs": vrows,
        "best_request_goodput": _best(vrows, "request_goodput"),
        "best_gate_goodput": _best(vrows, "gate_goodput"),
    }
    summ = ours["summary"] or {}
    o_side = {
        "tool": "course_utils tune()",
        "dir": str(tune_dir),
        "server_starts": ours["server_starts"],
        "wall_s": ours["wall_s"],
        "gpu_minutes": ours["gpu_minutes"],
        "warmups": ours["warmups"],
        "jit": ours["jit"],
        "engine_init": ours["engine_init"],
        "runs": ours["rows"],
        "best_request_goodput": _best(ours["rows"], "request_goodput"),
        "best_gate_goodput": _best(ours["rows"], "gate_goodput"),
        "kept_knobs": summ.get("knobs"),
        "kept_request_goodput": summ.get("request_goodput"),
        "kept_gate_goodput": summ.get("gate_goodput"),
        "stop_reason": summ.get("stop_reason"),
        "serve_command": summ.get("serve_command"),
    }

    def g(side: dict[str, Any], k: str) -> Any:
        b = side[f"best_{k}"]
        return None if b is None else b[k]

    return {
        "slo": str(slo_),
        "vllm": v_side,
        "ours": o_side,
        **_like_for_like(v_warm, v_jit, ours["warmups"], ours["jit"]),
        "ratios_ours_over_vllm": {
            "server_starts": _ratio(o_side["server_starts"], v_side["server_starts"]),
            "gpu_minutes": _ratio(o_side["gpu_minutes"], v_side["gpu_minutes"]),
            "best_request_goodput": _ratio(
                g(o_side, "request_goodput"), g(v_side, "request_goodput")
            ),
            "best_gate_goodput": _ratio(g(o_side, "gate_goodput"), g(v_side, "gate_goodput")),
        },
    }


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def _values(s: str) -> list[Any]:
    from course_utils.core.validate import parse_values

    return parse_values(s)


def _non_negative(s: str) -> int:
    n = int(s)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m course_utils.lab.sidebyside", description=__doc__.split("\n\n")[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("params", help="write --serve-params JSON for a one-knob grid")
    p.add_argument("--knob", required=True)
    p.add_argument("--values", required=True)
    p.add_argument("--gpu-memory-gib", type=float, default=24.0)
    p.add_argument("--no-couple", action="store_true")
    p.add_argument("out")
    b = sub.add_parser("bench-cmd", help="print the --bench-cmd string")
    b.add_argument("--model", required=True)
    b.add_argument("--base-url", required=True)
    b.add_argument("--tokenizer")
    b.add_argument("--vllm-cmd", default="vllm")
    b.add_argument("--rate", type=float, required=True)
    b.add_argument("--num-prompts", type=int, required=True)
    b.add_argument("--input-len", type=int, default=512)
    b.add_argument("--output-len", type=int, default=128)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--slo", required=True)
    b.add_argument(
        "--num-warmups",
        type=_non_negative,
        default=None,
        help="warm-up requests of `vllm bench serve` before each measured run "
        "(default: our harness's warmup_prompts, 8; 0 leaves the flag out)",
    )
    t = sub.add_parser("timing", help="add one call's timing to timing.json")
    t.add_argument("log")
    t.add_argument("out")
    t.add_argument("--call-wall-s", type=float, required=True)
    t.add_argument("--rc", type=int, default=0)
    r = sub.add_parser("shrink", help="summarise per-request lists in a copy of the results")
    r.add_argument("dir")
    r.add_argument("--max-kb", type=int, default=16)
    c = sub.add_parser("compare", help="print the side-by-side table (and --json)")
    c.add_argument("vllm_sweep_dir")
    c.add_argument("tune_dir")
    c.add_argument("--slo", required=True)
    c.add_argument("--timing")
    c.add_argument(
        "--bench-cmd",
        help="the sweep's --bench-cmd file (default: bench_cmd.txt next to VLLM_SWEEP_DIR)",
    )
    c.add_argument("--json", help="also write compare()'s dict here")
    return ap


def _print_bench_cmd(a: argparse.Namespace) -> None:
    if a.num_warmups is None:
        a.num_warmups = our_warmup_default()
    from course_utils.core.validate import workload_from_args

    w = workload_from_args(a, {"ignore_eos": True})
    print(
        shlex.join(
            sweep_bench_cmd(
                a.model,
                w,
                SLO.parse(a.slo),
                base_url=a.base_url,
                tokenizer=a.tokenizer,
                vllm_cmd=shlex.split(a.vllm_cmd),
                num_warmups=a.num_warmups,
            )
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if a.cmd == "params":
        recs = serve_params(
            a.knob, _values(a.values), couple=not a.no_couple, gpu_memory_gib=a.gpu_memory_gib
        )
        Path(a.out).write_text(json.dumps(recs, indent=1))
        print(json.dumps(recs))
    elif a.cmd == "bench-cmd":
        _print_bench_cmd(a)
    elif a.cmd == "timing":
        log = read_text(a.log, errors="replace") if is_present(a.log) else ""
        tim = _add_call(Path(a.out), log, a.call_wall_s, a.rc)
        print(
            f"timing: {tim['server_starts']} server start(s), {tim['wall_s']:.0f} s wall "
            f"over {len(tim['calls'])} call(s)"
        )
    elif a.cmd == "shrink":
        print(f"{shrink_results(a.dir, a.max_kb)} result file(s) shrunk in {a.dir}")
    else:
        cmp = compare(a.vllm_sweep_dir, a.tune_dir, a.slo, timing=a.timing, bench_cmd=a.bench_cmd)
        print(table_markdown(cmp))
        if a.json:
            Path(a.json).write_text(json.dumps(cmp, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
