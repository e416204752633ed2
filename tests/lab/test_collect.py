"""tools/gpu/collect.py and compress_results.py: a recorded run keeps its metric series and
long logs gzipped, byte for byte the same each time, and every reader still finds them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from course_utils.core.metrics import load_series
from course_utils.core.records import is_present, read_text

ROOT = Path(__file__).resolve().parents[2]
COLLECT = ROOT / "tools" / "gpu" / "collect.py"
COMPRESS = ROOT / "tools" / "gpu" / "compress_results.py"
SERIES = '{"t":1.0,"values":{"vllm:num_requests_running":2.0}}\n'


def _fetched(run: Path) -> Path:
    pt = run / "slo" / "points" / "abc"
    pt.mkdir(parents=True)
    (pt / "metrics.jsonl").write_text(SERIES * 50)
    (pt / "metrics-w1.jsonl").write_text(SERIES * 60)
    (pt / "serve.log").write_text("INFO engine line\n" * 6000)  # ~100 KB
    (pt / "bench.log").write_text("short\n")
    (pt / "bench.json").write_text('{"completed": 1}')
    (run / "commands.log").write_text("lab 01\n")
    for p in run.rglob("*"):
        if p.is_file():
            p.chmod(0o444)  # fetched files are read-only
    return run


def _collect(src: Path, dest: Path) -> dict[str, bytes]:
    subprocess.run([sys.executable, str(COLLECT), str(src), str(dest)], check=True,
                   capture_output=True, text=True)
    return {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()}


def test_collect_gzips_series_and_long_logs_the_same_way_each_time(tmp_path: Path) -> None:
    src = _fetched(tmp_path / "labrun")
    a = _collect(src, tmp_path / "a")
    assert sorted(a) == [
        "commands.log",
        "slo/points/abc/bench.json",
        "slo/points/abc/bench.log",
        "slo/points/abc/metrics-w1.jsonl.gz",
        "slo/points/abc/metrics.jsonl.gz",
        "slo/points/abc/serve.log.gz",
    ]
    assert all(v[:2] == b"\x1f\x8b" for k, v in a.items() if k.endswith(".gz"))
    assert _collect(src, tmp_path / "b") == a  # another folder, another time: same bytes
    assert _collect(src, tmp_path / "a") == a  # recorded again over itself
    pt = tmp_path / "a" / "slo" / "points" / "abc"
    assert len(load_series(pt / "metrics.jsonl")) == 50
    assert len(load_series(pt / "metrics-w1.jsonl")) == 60
    assert is_present(pt / "serve.log")
    assert read_text(pt / "serve.log") == (src / "slo/points/abc/serve.log").read_text()


def test_compress_results_leaves_small_logs_and_gzipped_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(SERIES)
    (run / "sweep-1.log").write_text("x" * 1000)
    subprocess.run([sys.executable, str(COMPRESS), str(run)], check=True, capture_output=True)
    first = (run / "metrics.jsonl.gz").read_bytes()
    out = subprocess.run([sys.executable, str(COMPRESS), str(run), "--min-log-kb", "0"],
                         check=True, capture_output=True, text=True).stdout
    assert "1 file(s) gzipped" in out  # only the log: the .gz is not gzipped again
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl.gz", "sweep-1.log.gz"]
    assert (run / "metrics.jsonl.gz").read_bytes() == first
    bad = subprocess.run([sys.executable, str(COMPRESS), str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "is not a folder" in bad.stderr


def test_recorded_runs_keep_series_and_long_logs_gzipped() -> None:
    sys.path.insert(0, str(COMPRESS.parent))
    from compress_results import to_compress

    folders = [*sorted((ROOT / "labs" / "results").iterdir()),
               ROOT / "src" / "course_utils" / "data" / "examples"]
    plain = [p.relative_to(ROOT) for d in folders if d.is_dir() for p in to_compress(d)]
    assert not plain, f"run tools/gpu/compress_results.py on these: {plain}"


def test_collect_skips_a_live_bench_workers_socket(tmp_path: Path) -> None:
    """A run folder collected while its sweep's bench worker still listens holds a Unix
    socket; the copy leaves it out and still compresses the logs."""
    import socket

    src = _fetched(tmp_path / "labrun")
    sock_path = tmp_path / "labrun" / "slo" / "bench-worker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(sock_path))
        s.listen(1)
        got = _collect(src, tmp_path / "a")
    assert "slo/bench-worker.sock" not in got
    assert not (tmp_path / "a" / "slo" / "bench-worker.sock").exists()
    assert "slo/points/abc/serve.log.gz" in got


def test_collect_shrinks_a_grid_combos_warm_up_result(tmp_path: Path) -> None:
    """gridbench saves the warm-up's `vllm bench serve` result as run=N.warmup.json, with
    --save-detailed's per-request lists: collected, the long lists are summarised."""
    import json

    combo = tmp_path / "labrun" / "grid" / "vllm_sweep" / "grid" / "SERVE--defaults"
    combo.mkdir(parents=True)
    long = [0.25] * 5000
    (combo / "run=0.warmup.json").write_text(json.dumps(
        {"completed": 5000, "ttfts": long, "p99_ttft_ms": 250.0}))
    _collect(tmp_path / "labrun", tmp_path / "a")
    got = json.loads((tmp_path / "a" / "grid" / "vllm_sweep" / "grid" / "SERVE--defaults"
                      / "run=0.warmup.json").read_text())
    assert got["p99_ttft_ms"] == 250.0 and got["completed"] == 5000
    assert got["ttfts"]["n"] == 5000 and got["ttfts"]["max"] == 0.25


def test_a_cut_sweep_log_keeps_what_decides_a_windows_validity(tmp_path: Path) -> None:
    """collect.py cuts the middle of a long `vllm bench sweep serve` log. Every line that
    parse_sweep_log reads survives, whole, so the cut log parses exactly as the raw one: a
    JIT compile logged during the warm-up is still read as the warm-up's, not as the
    measured window's (a cut "Starting main benchmark run..." once made a valid combo replay
    as invalid)."""
    from course_utils.core.vllm_logs import JIT_LINE, MAIN_RUN_LINE, parse_sweep_log
    from tests.tooling import tool

    ARGS_LINE = tool("gpu/capacity_probe.py").ARGS_LINE

    filler = "(APIServer pid=1) INFO: 127.0.0.1 - \"POST /v1/completions HTTP/1.1\" 200 OK\n"
    lines, t = [], 100.0

    def add(msg: str, n: int = 1) -> None:
        nonlocal t
        for _ in range(n):
            t += 0.01
            lines.append(f"{t:.6f} {msg.rstrip()}")

    for i, label in enumerate(("defaults", "max_num_seqs=256")):
        if i:  # a combo an earlier call finished: vLLM's --resume skips it, mid-log
            add("[BEGIN BENCHMARK]")
            add("[SKIPPED BENCHMARK]")
        add("[BEGIN SERVER]")
        add(f"Server overrides: {{'_benchmark_name': '{label}'}}")
        add(filler, 200)
        add(f"(APIServer pid=1) INFO [api_utils.py:273] {ARGS_LINE}{{'model_tag': 'm'}}")
        add(filler, 200)
        add("[BEGIN BENCHMARK]")
        add("gridbench: warm-up 600 prompts at 80 req/s")
        add(filler, 3000)
        add(f"(EngineCore pid=2) WARNING [jit_monitor.py:135] Triton kernel {JIT_LINE}: "
            "_topk_topp_kernel. This causes a latency spike")
        add("Warming up with 8 requests...")
        add(filler, 3000)
        add(MAIN_RUN_LINE)
        add(filler, 3000)
        add('gridbench: {"valid": true, "issues": []}')
        add("[END BENCHMARK]")
        add("[END SERVER]")
    run = tmp_path / "labrun" / "grid-knee"
    run.mkdir(parents=True)
    raw = "\n".join(lines) + "\n"
    (run / "sweep-1.log").write_text(raw)
    got = _collect(tmp_path / "labrun", tmp_path / "a")
    assert len(got["grid-knee/sweep-1.log.gz"]) < len(raw) // 10  # it was cut
    cut = read_text(tmp_path / "a" / "grid-knee" / "sweep-1.log")
    assert "bytes cut by collect.py" in cut
    want, have = parse_sweep_log(raw), parse_sweep_log(cut)
    assert have == want
    assert have["jit_in_warmup"] == 2 and have["jit_in_benchmark"] == 0
    assert [s["overrides"] for s in have["servers"]] == [
        "{'_benchmark_name': 'defaults'}", "{'_benchmark_name': 'max_num_seqs=256'}"]
    assert [s["warmups_logged"] for s in have["servers"]] == [[8], [8]]
    # each start's args line too: the capacity check splits a log of several starts at it
    assert cut.count(ARGS_LINE) == raw.count(ARGS_LINE) == 2
    assert cut.count("gridbench: ") == raw.count("gridbench: ") == 4
    # no line is split: every line of the cut log is a line of the raw one, or the cut note
    raw_lines = set(raw.splitlines())
    assert all(x in raw_lines or "bytes cut by collect.py" in x for x in cut.splitlines())


def test_a_cut_never_splits_a_line(tmp_path: Path) -> None:
    """The cut points move to line ends, whatever the lines' lengths."""
    run = tmp_path / "labrun"
    run.mkdir()
    raw = "".join(f"{i} " + "x" * (i % 97) + (" Avg prompt throughput" if i % 10 == 0 else "")
                  + "\n" for i in range(40000))
    (run / "serve.log").write_text(raw)
    _collect(run, tmp_path / "a")
    cut = read_text(tmp_path / "a" / "serve.log")
    raw_lines = set(raw.splitlines())
    assert "bytes cut by collect.py" in cut and len(cut) < len(raw) // 2
    assert all(x in raw_lines or "bytes cut by collect.py" in x for x in cut.splitlines())
