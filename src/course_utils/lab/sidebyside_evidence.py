"""The side-by-side's evidence that a comparison is like for like: warm-up requests on each
side, vLLM JIT compiles inside measured windows (from the sweep's logs and our server logs),
and the markdown table of ``compare()``."""

from __future__ import annotations

import ast
import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.records import GZ, is_present
from course_utils.core.records import read_text as read_recorded
from course_utils.core.slo import SLO, BenchResult, BenchResultError, score
from course_utils.core.store import POINTS_FILE
from course_utils.core.vllm_logs import JIT_LINE, engine_init_times, parse_sweep_log
from course_utils.core.vllm_logs import log_stamps as _stamps

BENCH_CMD_FILE = "bench_cmd.txt"
SWEEP_LOG = re.compile(r"^sweep-(\d+)\.log(?:\.gz)?$")  # a recorded copy gzips long logs


class SideBySideError(ValueError):
    """A folder that is not what compare() needs (one line)."""


def experiment_dir(path: Path) -> Path:
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
        raise SideBySideError(
            f"{path}: several sweep experiments ({', '.join(e.name for e in exps)}); pass one"
        )
    raise SideBySideError(
        f"{path} is not a `vllm bench sweep serve` output: no SERVE-*/run=N.json below it"
    )


def _local_file(
    d: Path, recorded: str | None, key: str | None, name: str = "bench.json"
) -> Path | None:
    """A point's file: points/<key>/<name> under `d` (a run fetched from the GPU host lives
    in another folder than the one it recorded), else the recorded path."""
    for cand in ([d / "points" / key / name] if key else []) + (
        [Path(recorded)] if recorded else []
    ):
        if is_present(cand):
            return cand
    return None


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
    exp = experiment_dir(vdir)
    cands = ([timing_path.parent] if timing_path else []) + [
        vdir,
        vdir.parent,
        exp.parent,
        exp.parent.parent,
    ]
    out: list[Path] = []
    for c in cands:
        if c not in out:
            out.append(c)
    return out


def _vllm_warmups(dirs: Sequence[Path], bench_cmd: str | Path | None) -> dict[str, Any]:
    if bench_cmd is not None:
        f: Path | None = Path(bench_cmd)
        if f is None or not f.is_file():
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
        t = parse_sweep_log(read_recorded(f, errors="replace"))
        total += t["jit_in_benchmark"]
        warm += t["jit_in_warmup"]
        outside += t["jit_outside_benchmark"]
        for s in t["servers"]:
            c = per.setdefault(
                _combo_label(s["overrides"]),
                {
                    "jit_in_benchmark": 0,
                    "jit_in_warmup": 0,
                    "warmups_logged": [],
                    "benchmarks_done": 0,
                },
            )
            c["jit_in_benchmark"] += s["jit_in_benchmark"]
            c["jit_in_warmup"] += s["jit_in_warmup"]
            c["warmups_logged"] += s["warmups_logged"]
            c["benchmarks_done"] += s["benchmarks_done"]
    return {
        "logs": [str(f) for f in logs],
        "jit_in_benchmark": total,
        "jit_in_warmup": warm,
        "jit_outside_benchmark": outside,
        "per_combo": per,
    }


def _find_sweep_logs(dirs: Sequence[Path]) -> list[Path]:
    """side_by_side.sh's sweep-<call>.log files of the first folder that has any, by call."""
    for d in dirs:
        logs = {
            int(m.group(1)): f.with_name(f.name.removesuffix(GZ))
            for f in d.iterdir()
            if f.is_file() and (m := SWEEP_LOG.match(f.name))
        }
        if logs:
            return [logs[k] for k in sorted(logs)]
    return []


def our_warmup_default() -> int:
    """Our harness's warm-up count (course_utils.lab.bench.WARMUP_PROMPTS: the `warmup_prompts`
    default of sweep/tune when the 2026-11-29 runs were recorded)."""
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
        return {"value": int(vals.pop() or 0), "source": str(d / POINTS_FILE)}
    return {
        "value": our_warmup_default(),
        "source": "course_utils default (not recorded in the run)",
    }


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
        start = _stamps(read_recorded(bench, errors="replace"))
        if not start:
            continue
        # "MM-DD HH:MM:SS" sorts as text (within one year)
        jit = [
            line for line in read_recorded(serve, errors="replace").splitlines() if JIT_LINE in line
        ]
        per[str(key)] = sum(1 for line in jit if any(st >= start[0] for st in _stamps(line)))
        warm += len(jit) - per[str(key)]
    return {
        "jit_in_benchmark": sum(per.values()) if per else None,
        "jit_in_warmup": warm if per else None,
        "per_point": per,
    }


def _like_for_like(
    vw: Mapping[str, Any],
    vjit: Mapping[str, Any] | None,
    ow: Mapping[str, Any],
    ojit: Mapping[str, Any],
) -> dict[str, Any]:
    confounds: list[str] = []
    unknown: list[str] = []
    if vw["value"] is None:
        unknown.append(f"vLLM's warm-up: {vw['source']}")
    elif vw["value"] == 0:
        confounds.append(
            f"vLLM's bench command has no --num-warmups (0 warm-up requests), "
            f"ours sends {ow['value']} before each measured run"
        )
    if vjit is None:
        unknown.append("JIT compiles in vLLM's runs: no sweep-N.log found")
    else:
        if vjit["jit_in_benchmark"]:
            per = ", ".join(
                f"{k}: {c['jit_in_benchmark']}"
                for k, c in vjit["per_combo"].items()
                if c["jit_in_benchmark"]
            )
            confounds.append(
                f"vLLM logged {vjit['jit_in_benchmark']} one-time JIT "
                f"compile(s) inside its measured runs ({per})"
            )
        if vw["value"]:
            cold = [
                k
                for k, c in vjit["per_combo"].items()
                if c["benchmarks_done"] and not c["warmups_logged"]
            ]
            if cold:
                confounds.append(
                    f"no 'Warming up with N requests' line in the measured "
                    f"window of {', '.join(cold)} although the bench command "
                    f"asks for {vw['value']}"
                )
    if ojit["jit_in_benchmark"]:
        confounds.append(
            f"our side logged {ojit['jit_in_benchmark']} JIT compile(s) inside its measured runs"
        )
    like = False if confounds else (None if unknown else True)
    return {"like_for_like": like, "confounds": confounds, "unknown": unknown}


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
    return ", ".join(
        f"{k}={v}"
        for k, v in best["params"].items()
        if k in ("max_num_seqs", "max_num_batched_tokens") or k in knobs_mod.KNOBS
    )


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
        per = "; ".join(
            f"{k}: {c['jit_in_benchmark']}"
            for k, c in j["per_combo"].items()
            if c["benchmarks_done"] or c["jit_in_benchmark"]
        )
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
        lines += [
            "",
            "**Not like for like:** " + "; ".join(cmp["confounds"]) + ". The "
            "goodput rows and their ratios include one-time start-up costs on one "
            "side only, so they do not compare the tools; rerun side_by_side.sh with "
            "warm-up (WARMUPS, default 8) before reading them.",
        ]
    elif cmp.get("like_for_like") is None:
        lines += ["", "Like for like not established: " + "; ".join(cmp["unknown"]) + "."]
    if o.get("kept_knobs") is not None:
        lines += [
            "",
            f"tune() kept {o['kept_knobs']} (request goodput "
            f"{_fmt(o.get('kept_request_goodput'))}); stop: {o.get('stop_reason')}",
        ]
    return "\n".join(lines)


RUN_FILE = re.compile(r"^run=(\d+)\.json$")


def _row(raw: Mapping[str, Any], slo: SLO, params: Mapping[str, Any], file: str) -> dict[str, Any]:
    res = BenchResult.from_json(dict(raw))
    sc = score(res, slo)
    return {
        "params": dict(params),
        "file": file,
        "status": "ok",
        "request_goodput": sc.request_goodput,
        "gate_goodput": sc.gate_goodput,
        "meets_slo": sc.meets_slo,
        "violations": list(sc.violations),
        "request_throughput": sc.request_throughput,
        "p99_ttft_ms": res.percentile("ttft", 99),
        "p99_tpot_ms": res.percentile("tpot", 99),
        "completed": raw.get("completed"),
        "failed": raw.get("failed"),
    }


def load_vllm_sweep(path: str | Path, slo: SLO) -> list[dict[str, Any]]:
    """One scored row per `run=N.json` of a `vllm bench sweep serve` output."""
    exp = experiment_dir(Path(path))
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
            row["params"] = combo_params(combo.name, raw)
            row["run_number"] = int(m.group(1))
            rows.append(row)
    if not rows:
        raise SideBySideError(
            f"{exp} is not a `vllm bench sweep serve` output: no SERVE-*/run=N.json"
        )
    return rows


def combo_params(dirname: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """A combo's serve parameters from its `vllm bench sweep serve` folder name
    (``SERVE--k=v-k2=v2``), typed as its result JSON has them."""
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
    from course_utils.core.store import TUNE_FILE, last_summary, read_jsonl
    from course_utils.lab.sweep import load_points

    d = Path(path)
    if not (d / POINTS_FILE).is_file() or not (d / TUNE_FILE).is_file():
        raise SideBySideError(f"{d} is not a tune() output: needs {POINTS_FILE} and {TUNE_FILE}")
    points = load_points(d)
    steps = read_jsonl(d / TUNE_FILE)
    summary = last_summary(steps)
    rows = []
    for p in points:
        row: dict[str, Any] = {
            "params": p.get("knobs", {}),
            "status": p.get("status"),
            "reason": p.get("reason"),
            "startup_s": p.get("startup_s"),
            "elapsed_s": p.get("elapsed_s"),
            "valid": p.get("valid"),
        }
        bj = _local_file(d, (p.get("files") or {}).get("bench_json"), p.get("key"))
        if p.get("status") == "ok" and bj is not None:
            try:
                row.update(
                    {
                        k: v
                        for k, v in _row(json.loads(bj.read_text()), slo, {}, str(bj)).items()
                        if k != "params"
                    }
                )
                row["status"] = p.get("status")
            except (json.JSONDecodeError, BenchResultError):
                bj = None
        if p.get("status") == "ok" and bj is None:
            s = p.get("score") or {}
            row.update(
                request_goodput=s.get("request_goodput"),
                gate_goodput=s.get("gate_goodput"),
                meets_slo=s.get("meets_slo"),
                request_throughput=s.get("request_throughput"),
            )
        rows.append(row)
    elapsed = [float(p.get("elapsed_s") or 0.0) for p in points]
    logs = [
        f
        for p in points
        if (
            f := _local_file(d, (p.get("files") or {}).get("server_log"), p.get("key"), "serve.log")
        )
        is not None
    ]
    return {
        "rows": rows,
        "summary": summary,
        "server_starts": len(points),
        "wall_s": round(sum(elapsed), 2),
        "gpu_minutes": round(sum(elapsed) / 60.0, 2),
        "warmups": _our_warmups(d, points),
        "jit": _our_jit(d, points),
        "engine_init": engine_init(logs) if logs else None,
    }


def engine_init(logs: Sequence[str | Path]) -> dict[str, Any]:
    """Engine start-ups logged in `logs` (vLLM's "init engine ... took X s (compilation:
    Y s)"): how many, and their seconds summed. Part of each side's GPU minutes that depends
    on the torch.compile cache (cold or warm), not on the tool."""
    times = [t for f in logs for t in engine_init_times(read_recorded(f, errors="replace"))]
    return {
        "starts": len(times),
        "init_s": round(sum(t for t, _ in times), 2),
        "compile_s": round(sum(c or 0.0 for _, c in times), 2),
        "per_start": [{"init_s": t, "compile_s": c} for t, c in times],
    }
