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
(`--ready-check-timeout-sec 0`: "Skipping endpoint ready check."). Our harness
(course_utils.lab.bench.warmup from sweep.run_point, `warmup_prompts=8`) sends 8 concurrent
completions of distinct ~input_len-token prompts with max_tokens 16. Close, not identical:
both leave sampling to the server (0.26.0's bench no longer sends temperature 0, serve.py
~line 2076), so both reach the same sampler kernels; vLLM's copies of request 0 also put
its prompt in the prefix cache (reset only after the run, sweep/server.py). Without any
warm-up the first measured requests pay one-time Triton JIT compiles, which vLLM logs as
"... JIT compilation during inference: <kernel>. This causes a latency spike; ..."
(vllm/utils/jit_monitor.py `_handle_jit_event`, once per kernel per process).

CLI (used by tools/gpu/side_by_side.sh):
    python -m course_utils.lab.sidebyside params --knob max_num_seqs --values 64,128 OUT.json
    python -m course_utils.lab.sidebyside bench-cmd --model M --base-url U --rate 45 ...
        [--num-warmups 8]
    python -m course_utils.lab.sidebyside timing LOG [--call-wall-s S --rc RC] TIMING.json
    python -m course_utils.lab.sidebyside compare VLLM_SWEEP_DIR TUNE_DIR --slo "ttft:300 tpot:50"
        [--timing TIMING.json] [--bench-cmd bench_cmd.txt] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.slo import SLO, BenchResult, BenchResultError, score
from course_utils.core.vllm_logs import JIT_LINE, engine_init_times, parse_sweep_log
from course_utils.core.vllm_logs import log_stamps as _stamps
from course_utils.lab.bench import Workload, bench_args

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
SWEEP_APPENDED_FLAGS = {"--percentile-metrics": True, "--save-result": False,
                        "--result-dir": True, "--result-filename": True}
RUN_FILE = re.compile(r"^run=(\d+)\.json$")
TIMING_FILE = "timing.json"
BENCH_CMD_FILE = "bench_cmd.txt"
SWEEP_LOG = re.compile(r"^sweep-(\d+)\.log$")


class SideBySideError(ValueError):
    """A folder that is not what compare() needs (one line)."""


# --------------------------------------------------------------------------------------
# inputs of `vllm bench sweep serve`
# --------------------------------------------------------------------------------------


def serve_params(knob: str, values: Sequence[Any], *, base: Mapping[str, Any] | None = None,
                 couple: bool = True, gpu_memory_gib: float = 24.0) -> list[dict[str, Any]]:
    """`--serve-params` records for a one-knob grid, coupled like `tune(couple=True)`:
    a max_num_seqs above the effective max_num_batched_tokens (set in `base`, or the 0.26.0
    default for this GPU size) brings max_num_batched_tokens = max_num_seqs along (and the
    other way round when max_num_batched_tokens is the swept knob). Keys use "_" (the
    spelling param_sweep.py prefers in JSON); `base` knobs belong in the serve command."""
    from course_utils.lab.sweep import couple_knobs

    name = knobs_mod.get(knob).name
    out = []
    for v in values:
        merged = knobs_mod.validate({**dict(base or {}), name: v}, entry="serve")
        if couple:
            merged, coupled = couple_knobs(merged, name, gpu_memory_gib)
        else:
            coupled = {}
        knobs_mod.validate(merged, gpu_memory_gib=gpu_memory_gib, entry="serve")
        out.append({name: merged[name], **coupled})
    return out


def sweep_bench_cmd(model: str, workload: Workload, slo: SLO | None, *, base_url: str,
                    tokenizer: str | None = None, vllm_cmd: Sequence[str] = ("vllm",),
                    num_warmups: int = 0) -> list[str]:
    """course_utils.lab.bench.bench_args without the flags the sweep appends itself."""
    argv = bench_args(base_url, model, workload, slo, tokenizer=tokenizer, vllm_cmd=vllm_cmd,
                      num_warmups=num_warmups)
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

    def shrink(d: dict[str, Any]) -> bool:
        changed = False
        for k, v in list(d.items()):
            if isinstance(v, list) and len(json.dumps(v)) > max_kb * 1024:
                nums = [float(x) for x in _flat(v)]
                d[k] = {"stripped_list": True, "n": len(v),
                        **({"min": min(nums), "max": max(nums),
                            "mean": sum(nums) / len(nums)} if nums else {})}
                changed = True
        return changed

    n = 0
    for f in sorted(Path(path).rglob("summary.csv")):  # the lists again, one cell each
        n += _drop_long_columns(f, max_kb * 1024)
    for f in sorted(Path(path).rglob("*.json")):
        if not (RUN_FILE.match(f.name) or f.name == "summary.json"):
            continue
        data = json.loads(f.read_text())
        items = data if isinstance(data, list) else [data]
        if any([shrink(x) for x in items if isinstance(x, dict)]):
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
    keep = [i for i in range(len(rows[0]))
            if all(len(r[i]) <= max_chars for r in rows[1:] if i < len(r))]
    if len(keep) == len(rows[0]):
        return False
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows([[r[i] for i in keep if i < len(r)] for r in rows])
    return True


def _flat(v: Any) -> list[Any]:
    if isinstance(v, list):
        return [x for e in v for x in _flat(e)]
    return [v] if isinstance(v, int | float) and not isinstance(v, bool) else []


# --------------------------------------------------------------------------------------
# reading both sides
# --------------------------------------------------------------------------------------


def _experiment_dir(path: Path) -> Path:
    """`-o DIR` or `DIR/EXPERIMENT`: the folder whose children are the SERVE-* combos."""
    if not path.is_dir():
        raise SideBySideError(f"{path}: no such folder")

    def has_combos(p: Path) -> bool:
        return any(c.is_dir() and c.name.startswith("SERVE-") for c in p.iterdir())

    if has_combos(path):
        return path
    exps = [c for c in sorted(path.iterdir()) if c.is_dir() and has_combos(c)]
    if len(exps) == 1:
        return exps[0]
    if len(exps) > 1:
        raise SideBySideError(f"{path}: several sweep experiments "
                              f"({', '.join(e.name for e in exps)}); pass one")
    raise SideBySideError(f"{path} is not a `vllm bench sweep serve` output: no "
                          "SERVE-*/run=N.json below it")


def _row(raw: Mapping[str, Any], slo: SLO, params: Mapping[str, Any], file: str
         ) -> dict[str, Any]:
    res = BenchResult.from_json(dict(raw))
    sc = score(res, slo)
    return {"params": dict(params), "file": file, "status": "ok",
            "request_goodput": sc.request_goodput, "gate_goodput": sc.gate_goodput,
            "meets_slo": sc.meets_slo, "violations": list(sc.violations),
            "request_throughput": sc.request_throughput,
            "p99_ttft_ms": res.percentile("ttft", 99), "p99_tpot_ms": res.percentile("tpot", 99),
            "completed": raw.get("completed"), "failed": raw.get("failed")}


def load_vllm_sweep(path: str | Path, slo: SLO) -> list[dict[str, Any]]:
    """One scored row per `run=N.json` of a `vllm bench sweep serve` output."""
    exp = _experiment_dir(Path(path))
    rows = []
    for combo in sorted(c for c in exp.iterdir() if c.is_dir() and c.name.startswith("SERVE-")):
        for f in sorted(combo.iterdir()):
            m = RUN_FILE.match(f.name)
            if not m:
                continue
            try:
                raw = json.loads(f.read_text())
                row = _row(raw, slo, {}, str(f.relative_to(exp.parent)))
            except (json.JSONDecodeError, BenchResultError) as exc:
                raise SideBySideError(f"{f}: not a vLLM bench result ({exc})") from None
            # the sweep merges the serve overrides into the result (serve.py _update_run_data)
            row["params"] = _combo_params(combo.name, raw)
            row["run_number"] = int(m.group(1))
            rows.append(row)
    if not rows:
        raise SideBySideError(f"{exp} is not a `vllm bench sweep serve` output: no "
                              "SERVE-*/run=N.json")
    return rows


def _combo_params(dirname: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    body = dirname.removeprefix("SERVE-").lstrip("-")
    body = body.split("-BENCH-")[0]
    params: dict[str, Any] = {}
    for part in re.split(r"-(?=[A-Za-z_][\w.-]*=)", body):
        k, sep, v = part.partition("=")
        if sep:
            params[k] = raw.get(k, v)
    return params


def load_tune_dir(path: str | Path, slo: SLO) -> dict[str, Any]:
    """Our side: points.jsonl (each point = one server start; startup_s, elapsed_s) and the
    summary of tune.jsonl. Points are re-scored from their bench.json when present, else
    from the scores recorded in the point. Also the warm-up count and the JIT compiles
    logged while measuring (serve.log / bench.log of each point, when present)."""
    from course_utils.lab.sweep import POINTS_FILE, load_points
    from course_utils.lab.tune import TUNE_FILE

    d = Path(path)
    if not (d / POINTS_FILE).is_file() or not (d / TUNE_FILE).is_file():
        raise SideBySideError(f"{d} is not a tune() output: needs {POINTS_FILE} and {TUNE_FILE}")
    points = load_points(d)
    steps = [json.loads(x) for x in (d / TUNE_FILE).read_text().splitlines() if x.strip()]
    summary = next((s for s in reversed(steps) if s.get("kind") == "summary"), None)
    rows = []
    for p in points:
        row: dict[str, Any] = {"params": p.get("knobs", {}), "status": p.get("status"),
                               "reason": p.get("reason"), "startup_s": p.get("startup_s"),
                               "elapsed_s": p.get("elapsed_s"), "valid": p.get("valid")}
        bj = _local_file(d, (p.get("files") or {}).get("bench_json"), p.get("key"))
        if p.get("status") == "ok" and bj is not None:
            try:
                row.update({k: v for k, v in _row(json.loads(bj.read_text()), slo, {},
                                                 str(bj)).items() if k != "params"})
                row["status"] = p.get("status")
            except (json.JSONDecodeError, BenchResultError):
                bj = None
        if p.get("status") == "ok" and bj is None:
            s = p.get("score") or {}
            row.update(request_goodput=s.get("request_goodput"),
                       gate_goodput=s.get("gate_goodput"), meets_slo=s.get("meets_slo"),
                       request_throughput=s.get("request_throughput"))
        rows.append(row)
    elapsed = [float(p.get("elapsed_s") or 0.0) for p in points]
    logs = [f for p in points
            if (f := _local_file(d, (p.get("files") or {}).get("server_log"), p.get("key"),
                                 "serve.log")) is not None]
    return {"rows": rows, "summary": summary, "server_starts": len(points),
            "wall_s": round(sum(elapsed), 2), "gpu_minutes": round(sum(elapsed) / 60.0, 2),
            "warmups": _our_warmups(d, points), "jit": _our_jit(d, points),
            "engine_init": engine_init(logs) if logs else None}


def engine_init(logs: Sequence[str | Path]) -> dict[str, Any]:
    """Engine start-ups logged in `logs` (vLLM's "init engine ... took X s (compilation:
    Y s)"): how many, and their seconds summed. Part of each side's GPU minutes that depends
    on the torch.compile cache (cold or warm), not on the tool."""
    times = [t for f in logs for t in engine_init_times(Path(f).read_text(errors="replace"))]
    return {"starts": len(times), "init_s": round(sum(t for t, _ in times), 2),
            "compile_s": round(sum(c or 0.0 for _, c in times), 2),
            "per_start": [{"init_s": t, "compile_s": c} for t, c in times]}


def _local_file(d: Path, recorded: str | None, key: str | None, name: str = "bench.json"
                ) -> Path | None:
    """A point's file: points/<key>/<name> under `d` (a run fetched from the GPU host lives
    in another folder than the one it recorded), else the recorded path."""
    for cand in ([d / "points" / key / name] if key else []) + (
            [Path(recorded)] if recorded else []):
        if cand.is_file():
            return cand
    return None


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


def _find_timing(vdir: Path, timing: str | Path | None
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


def bench_cmd_warmups(cmd: str | Sequence[str]) -> int:
    """`--num-warmups` of a `vllm bench serve` command (0, its default in
    vllm/benchmarks/serve.py, when the flag is absent)."""
    argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    n = 0
    for i, a in enumerate(argv):
        if a == "--num-warmups" and i + 1 < len(argv):
            n = int(argv[i + 1])
        elif a.startswith("--num-warmups="):
            n = int(a.partition("=")[2])
    return n


def _search_dirs(vdir: Path, timing_path: Path | None) -> list[Path]:
    """Where side_by_side.sh leaves bench_cmd.txt and sweep-N.log: next to the `-o` folder
    (or in the folder of timing.json)."""
    exp = _experiment_dir(vdir)
    cands = ([timing_path.parent] if timing_path else []) + [vdir, vdir.parent, exp.parent,
                                                              exp.parent.parent]
    out: list[Path] = []
    for c in cands:
        if c not in out:
            out.append(c)
    return out


def _vllm_warmups(dirs: Sequence[Path], bench_cmd: str | Path | None) -> dict[str, Any]:
    if bench_cmd is not None:
        f: Path | None = Path(bench_cmd)
        if not f.is_file():
            raise SideBySideError(f"{bench_cmd}: no such bench command file")
    else:
        f = next((d / BENCH_CMD_FILE for d in dirs if (d / BENCH_CMD_FILE).is_file()), None)
    if f is None:
        return {"value": None, "source": f"no {BENCH_CMD_FILE} found"}
    try:
        n = bench_cmd_warmups(f.read_text().strip())
    except ValueError as exc:
        raise SideBySideError(f"{f}: unreadable --num-warmups ({exc})") from None
    return {"value": n, "source": str(f)}


def _combo_label(overrides: str | None) -> str:
    try:
        d = ast.literal_eval(overrides or "")
    except (ValueError, SyntaxError):
        return str(overrides)
    return ", ".join(f"{k}={v}" for k, v in d.items()) if isinstance(d, dict) else str(d)


def sweep_log_evidence(logs: Sequence[str | Path]) -> dict[str, Any]:
    """Per combo, over all calls' logs: JIT compile lines inside measured windows, warm-up
    counts printed by `vllm bench serve` and benchmarks finished (parse_sweep_log)."""
    per: dict[str, dict[str, Any]] = {}
    total = outside = warm = 0
    for f in logs:
        t = parse_sweep_log(Path(f).read_text(errors="replace"))
        total += t["jit_in_benchmark"]
        warm += t["jit_in_warmup"]
        outside += t["jit_outside_benchmark"]
        for s in t["servers"]:
            c = per.setdefault(_combo_label(s["overrides"]),
                               {"jit_in_benchmark": 0, "jit_in_warmup": 0,
                                "warmups_logged": [], "benchmarks_done": 0})
            c["jit_in_benchmark"] += s["jit_in_benchmark"]
            c["jit_in_warmup"] += s["jit_in_warmup"]
            c["warmups_logged"] += s["warmups_logged"]
            c["benchmarks_done"] += s["benchmarks_done"]
    return {"logs": [str(f) for f in logs], "jit_in_benchmark": total,
            "jit_in_warmup": warm, "jit_outside_benchmark": outside, "per_combo": per}


def _find_sweep_logs(dirs: Sequence[Path]) -> list[Path]:
    """side_by_side.sh's sweep-<call>.log files of the first folder that has any, by call."""
    for d in dirs:
        logs = {int(m.group(1)): f for f in d.iterdir()
                if f.is_file() and (m := SWEEP_LOG.match(f.name))}
        if logs:
            return [logs[k] for k in sorted(logs)]
    return []


def our_warmup_default() -> int:
    """Our harness's warm-up count (course_utils.lab.bench.WARMUP_PROMPTS: the `warmup_prompts`
    default of sweep/tune; run_point calls course_utils.lab.bench.warmup with it)."""
    from course_utils.lab.bench import WARMUP_PROMPTS

    return WARMUP_PROMPTS


def _our_warmups(d: Path, points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """warmup_prompts as recorded by the run (params.json, else every point), else the
    default of course_utils.lab.sweep.tune, labelled as such."""
    pj = d / "params.json"
    if pj.is_file():
        try:
            params = json.loads(pj.read_text())
        except json.JSONDecodeError:
            params = {}
        if isinstance(params, dict) and params.get("warmup_prompts") is not None:
            return {"value": int(params["warmup_prompts"]), "source": str(pj)}
    vals = {p.get("warmup_prompts") for p in points}
    if points and len(vals) == 1 and None not in vals:
        return {"value": int(vals.pop()), "source": str(d / "points.jsonl")}
    return {"value": our_warmup_default(),
            "source": "course_utils default (not recorded in the run)"}




def _our_jit(d: Path, points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """JIT compile lines in each ok point's serve.log stamped at or after its bench.log's
    first vLLM log stamp (the measured run; vLLM's stamps have 1 s resolution, so a compile
    in the same second counts as inside); the earlier ones were absorbed by the harness's
    warm-up (`jit_in_warmup`). None when no point has both logs."""
    per: dict[str, int] = {}
    warm = 0
    for p in points:
        if p.get("status") != "ok":
            continue
        files = p.get("files") or {}
        key = p.get("key")
        serve = _local_file(d, files.get("server_log"), key, "serve.log")
        bench = _local_file(d, files.get("bench_log"), key, "bench.log")
        if serve is None or bench is None:
            continue
        start = _stamps(bench.read_text(errors="replace"))
        if not start:
            continue
        # "MM-DD HH:MM:SS" sorts as text (within one year)
        jit = [line for line in serve.read_text(errors="replace").splitlines()
               if JIT_LINE in line]
        per[str(key)] = sum(1 for line in jit if any(st >= start[0] for st in _stamps(line)))
        warm += len(jit) - per[str(key)]
    return {"jit_in_benchmark": sum(per.values()) if per else None,
            "jit_in_warmup": warm if per else None, "per_point": per}


def _like_for_like(vw: Mapping[str, Any], vjit: Mapping[str, Any] | None,
                   ow: Mapping[str, Any], ojit: Mapping[str, Any]) -> dict[str, Any]:
    confounds: list[str] = []
    unknown: list[str] = []
    if vw["value"] is None:
        unknown.append(f"vLLM's warm-up: {vw['source']}")
    elif vw["value"] == 0:
        confounds.append(f"vLLM's bench command has no --num-warmups (0 warm-up requests), "
                         f"ours sends {ow['value']} before each measured run")
    if vjit is None:
        unknown.append("JIT compiles in vLLM's runs: no sweep-N.log found")
    else:
        if vjit["jit_in_benchmark"]:
            per = ", ".join(f"{k}: {c['jit_in_benchmark']}" for k, c in
                            vjit["per_combo"].items() if c["jit_in_benchmark"])
            confounds.append(f"vLLM logged {vjit['jit_in_benchmark']} one-time JIT "
                             f"compile(s) inside its measured runs ({per})")
        if vw["value"]:
            cold = [k for k, c in vjit["per_combo"].items()
                    if c["benchmarks_done"] and not c["warmups_logged"]]
            if cold:
                confounds.append(f"no 'Warming up with N requests' line in the measured "
                                 f"window of {', '.join(cold)} although the bench command "
                                 f"asks for {vw['value']}")
    if ojit["jit_in_benchmark"]:
        confounds.append(f"our side logged {ojit['jit_in_benchmark']} JIT compile(s) inside "
                         "its measured runs")
    like = False if confounds else (None if unknown else True)
    return {"like_for_like": like, "confounds": confounds, "unknown": unknown}


def compare(vllm_sweep_dir: str | Path, tune_dir: str | Path, slo: SLO | str, *,
            timing: str | Path | None = None,
            bench_cmd: str | Path | None = None) -> dict[str, Any]:
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
            "best_request_goodput": _ratio(g(o_side, "request_goodput"),
                                           g(v_side, "request_goodput")),
            "best_gate_goodput": _ratio(g(o_side, "gate_goodput"), g(v_side, "gate_goodput")),
        },
    }


def _fmt(v: Any, nd: int = 2) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.{nd}f}"
    return str(v)


def _ratio_cell(ratio: Any, ours: Any, theirs: Any) -> str:
    if ratio is None and ours is not None and theirs is not None and float(theirs) == 0:
        return "n/a (both 0.00)" if float(ours) == 0 else "n/a (vLLM 0.00)"
    return _fmt(ratio)


def _cfg(best: Mapping[str, Any] | None) -> str:
    if not best:
        return "none"
    return ", ".join(f"{k}={v}" for k, v in best["params"].items()
                     if k in ("max_num_seqs", "max_num_batched_tokens") or k in knobs_mod.KNOBS)


def _warm_cell(w: Mapping[str, Any], vllm: bool) -> str:
    if w["value"] is None:
        return f"unknown ({w['source']})"
    if vllm:
        how = "`--num-warmups`" if w["value"] else "no `--num-warmups`"
        return f"{w['value']} ({BENCH_CMD_FILE}: {how})"
    if w["source"].startswith("course_utils default"):
        return f"{w['value']} (course_utils default)"
    return str(w["value"])


def _init_cell(e: Mapping[str, Any] | None) -> str:
    if not e or not e.get("starts"):
        return "n/a (no logs)"
    return f"{_fmt(e['init_s'], 1)} ({_fmt(e['compile_s'], 1)}) over {e['starts']}"


def _jit_cell(j: Mapping[str, Any] | None, vllm: bool) -> str:
    if j is None or j.get("jit_in_benchmark") is None:
        return "n/a (no logs)"
    n = j["jit_in_benchmark"]
    cell = str(n)
    if vllm and n:
        per = "; ".join(f"{k}: {c['jit_in_benchmark']}" for k, c in j["per_combo"].items()
                        if c["benchmarks_done"] or c["jit_in_benchmark"])
        cell = f"{n} ({per})"
    if j.get("jit_in_warmup"):
        cell += f"; {j['jit_in_warmup']} during the warm-up"
    return cell


def table_markdown(cmp: Mapping[str, Any]) -> str:
    """The side-by-side table (Markdown) of compare()'s result, with a caveat under it
    when the goodputs are not like for like."""
    v, o, r = cmp["vllm"], cmp["ours"], cmp["ratios_ours_over_vllm"]

    def best(side: Mapping[str, Any], k: str) -> str:
        b = side[f"best_{k}"]
        return "none" if b is None else f"{_fmt(b[k])} ({_cfg(b)})"

    def val(side: Mapping[str, Any], k: str) -> Any:
        b = side[f"best_{k}"]
        return None if b is None else b[k]

    def rcell(k: str) -> str:
        return _ratio_cell(r[f"best_{k}"], val(o, k), val(v, k))

    lines = [
        f"SLO {cmp['slo']} (p99, ms); both tools on the same grid and workload.",
        "",
        "| | vLLM `bench sweep serve` | our `tune()` | ours / vLLM |",
        "|---|---|---|---|",
        f"| server restarts | {v['server_starts']} | {o['server_starts']} | "
        f"{_fmt(r['server_starts'])} |",
        f"| GPU minutes (wall) | {_fmt(v['gpu_minutes'])} | {_fmt(o['gpu_minutes'])} | "
        f"{_fmt(r['gpu_minutes'])} |",
        f"| engine init, summed over starts (of which compilation), s | "
        f"{_init_cell(v.get('engine_init'))} | {_init_cell(o.get('engine_init'))} | |",
        f"| warm-up requests before each measured run | {_warm_cell(v['warmups'], True)} | "
        f"{_warm_cell(o['warmups'], False)} | |",
        f"| JIT compiles logged inside a measured run | {_jit_cell(v['jit'], True)} | "
        f"{_jit_cell(o['jit'], False)} | |",
        f"| best vLLM request goodput (req/s) | {best(v, 'request_goodput')} | "
        f"{best(o, 'request_goodput')} | {rcell('request_goodput')} |",
        f"| best p99-gate goodput (req/s) | {best(v, 'gate_goodput')} | "
        f"{best(o, 'gate_goodput')} | {rcell('gate_goodput')} |",
    ]
    if cmp.get("like_for_like") is False:
        lines += ["", "**Not like for like:** " + "; ".join(cmp["confounds"]) + ". The "
                  "goodput rows and their ratios include one-time start-up costs on one "
                  "side only, so they do not compare the tools; rerun side_by_side.sh with "
                  "warm-up (WARMUPS, default 8) before reading them."]
    elif cmp.get("like_for_like") is None:
        lines += ["", "Like for like not established: " + "; ".join(cmp["unknown"]) + "."]
    if o.get("kept_knobs") is not None:
        lines += ["", f"tune() kept {o['kept_knobs']} (request goodput "
                      f"{_fmt(o.get('kept_request_goodput'))}); stop: {o.get('stop_reason')}"]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def _values(s: str) -> list[Any]:
    from course_utils.lab.cli import parse_values

    return parse_values(s)


def _non_negative(s: str) -> int:
    n = int(s)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course_utils.lab.sidebyside",
                                 description=__doc__.split("\n\n")[0])
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
    b.add_argument("--num-warmups", type=_non_negative, default=None,
                   help="warm-up requests of `vllm bench serve` before each measured run "
                        "(default: our harness's warmup_prompts, 8; 0 leaves the flag out)")
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
    c.add_argument("--bench-cmd", help="the sweep's --bench-cmd file (default: bench_cmd.txt "
                                       "next to VLLM_SWEEP_DIR)")
    c.add_argument("--json", help="also write compare()'s dict here")
    a = ap.parse_args(argv)
    if a.cmd == "params":
        recs = serve_params(a.knob, _values(a.values), couple=not a.no_couple,
                            gpu_memory_gib=a.gpu_memory_gib)
        Path(a.out).write_text(json.dumps(recs, indent=1))
        print(json.dumps(recs))
    elif a.cmd == "bench-cmd":
        if a.num_warmups is None:
            a.num_warmups = our_warmup_default()
        w = Workload(input_len=a.input_len, output_len=a.output_len, num_prompts=a.num_prompts,
                     request_rate=a.rate, seed=a.seed, ignore_eos=True)
        print(shlex.join(sweep_bench_cmd(a.model, w, SLO.parse(a.slo), base_url=a.base_url,
                                         tokenizer=a.tokenizer,
                                         vllm_cmd=shlex.split(a.vllm_cmd),
                                         num_warmups=a.num_warmups)))
    elif a.cmd == "timing":
        log = Path(a.log).read_text(errors="replace") if Path(a.log).exists() else ""
        tim = _add_call(Path(a.out), log, a.call_wall_s, a.rc)
        print(f"timing: {tim['server_starts']} server start(s), {tim['wall_s']:.0f} s wall "
              f"over {len(tim['calls'])} call(s)")
    elif a.cmd == "shrink":
        print(f"{shrink_results(a.dir, a.max_kb)} result file(s) shrunk in {a.dir}")
    else:
        cmp = compare(a.vllm_sweep_dir, a.tune_dir, a.slo, timing=a.timing,
                      bench_cmd=a.bench_cmd)
        print(table_markdown(cmp))
        if a.json:
            Path(a.json).write_text(json.dumps(cmp, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
