"""The persistent `vllm bench serve` worker (lab.benchworker) behind lab.bench.run_bench, on
the fake vLLM (tests/fakes/fake_vllm.py: its ``main(argv)`` in-process, the executable
otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from course_utils.core.cost import PointCost
from course_utils.core.records import PointPaths, ServedPoint, Workload
from course_utils.core.slo import SLO
from course_utils.lab import benchworker
from course_utils.lab.bench import BenchError, run_bench
from course_utils.lab.cost import table as cost_table
from course_utils.lab.server import VllmServer
from course_utils.lab.sweep import load_points, sweep

FAKES = Path(__file__).resolve().parents[1] / "fakes"
ENTRY = f"{FAKES / 'fake_vllm.py'}:main"
W = Workload(input_len=16, output_len=8, num_prompts=10, request_rate=300)
SLO_ = SLO.parse("ttft:2000 tpot:500")
# what differs between two runs of the same load (clock, timings)
TIMED = ("date", "duration", "ttfts", "itls", "start_times", "max_output_tokens_per_s")


@pytest.fixture(autouse=True)
def _fresh_workers() -> Iterator[None]:
    benchworker.close_all()
    yield
    benchworker.close_all()


@pytest.fixture
def server(tmp_path: Path, fake_vllm: Path) -> Iterator[VllmServer]:
    with VllmServer("fake-model", {"max_num_seqs": 8}, log_path=tmp_path / "serve.log",
                    startup_timeout_s=20) as srv:
        yield srv


def _imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Count imports of the fake from here on (the server started before: not counted)."""
    f = tmp_path / "imports.txt"
    monkeypatch.setenv("FAKE_VLLM_IMPORTS", str(f))
    return f


def _lines(f: Path) -> list[str]:
    return f.read_text().splitlines() if f.exists() else []


def _bench(srv: VllmServer, d: Path, name: str, calls: list, **kw: object) -> object:
    return run_bench(srv.base_url, "fake-model", W, SLO_, d, f"{name}.json", timeout_s=60,
                     calls=calls, **kw)


def test_three_calls_one_import(tmp_path: Path, server: VllmServer,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    imports = _imports(tmp_path, monkeypatch)
    calls: list[dict] = []
    for i in range(3):
        res = _bench(server, tmp_path, f"w{i}", calls, worker=True, worker_entry=ENTRY)
        assert res.completed == 10 and res.failed == 0  # type: ignore[attr-defined]
    assert [c["mode"] for c in calls] == ["worker"] * 3
    (pid,) = set(_lines(imports))  # one process imported the entry, once
    for i in range(3):
        log = (tmp_path / f"w{i}.log").read_text()
        assert log.startswith("$ ['vllm', 'bench', 'serve'")
        assert f"bench worker pid {pid}" in log and "Starting main benchmark run..." in log
        assert "Successful requests:" in log  # the call's own output went to its log
    # the CLI path: one import per call
    cli: list[dict] = []
    for i in range(3):
        _bench(server, tmp_path, f"c{i}", cli)
    assert [c["mode"] for c in cli] == ["cli"] * 3
    assert len(_lines(imports)) == 1 + 3


def test_results_identical_in_content_to_the_cli(tmp_path: Path, server: VllmServer,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    argv_log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_VLLM_BENCH_ARGV", str(argv_log))
    (tmp_path / "cli").mkdir()
    (tmp_path / "wrk").mkdir()
    _bench(server, tmp_path / "cli", "r", [])
    _bench(server, tmp_path / "wrk", "r", [], worker=True, worker_entry=ENTRY)
    a = json.loads((tmp_path / "cli" / "r.json").read_text())
    b = json.loads((tmp_path / "wrk" / "r.json").read_text())
    assert list(a) == list(b)  # the same keys in the same order
    lat = {k for k in a if k.endswith("_ms") or "throughput" in k or k == "request_goodput"}
    same = [k for k in a if k not in TIMED and k not in lat]
    assert {k: a[k] for k in same} == {k: b[k] for k in same}
    assert a["generated_texts"] == b["generated_texts"] and a["input_lens"] == b["input_lens"]
    # the same argv reached the bench (the worker got it without the executable)
    one, two = (json.loads(x) for x in argv_log.read_text().splitlines())
    assert [x.replace("/cli", "/wrk") for x in one] == two


def test_a_worker_crash_falls_back_to_the_cli(tmp_path: Path, server: VllmServer,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    imports = _imports(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_VLLM_CRASH_ONCE", str(tmp_path / "crashed"))
    calls: list[dict] = []
    res = _bench(server, tmp_path, "a", calls, worker=True, worker_entry=ENTRY)
    assert res.completed == 10  # type: ignore[attr-defined]
    log = (tmp_path / "a.log").read_text()
    assert "the bench worker exited (rc 3): this call runs again as a subprocess" in log
    assert log.count("Starting main benchmark run...") == 1  # only the CLI run got that far
    # the next call starts a fresh worker
    _bench(server, tmp_path, "b", calls, worker=True, worker_entry=ENTRY)
    assert [c["mode"] for c in calls] == ["cli-fallback", "worker"]
    assert len(_lines(imports)) == 3  # crashed worker, CLI, new worker


def test_a_worker_that_cannot_start_is_not_retried(tmp_path: Path, server: VllmServer) -> None:
    calls: list[dict] = []
    for name in ("a", "b"):
        _bench(server, tmp_path, name, calls, worker=True, worker_entry="no_such_module:main")
    assert [c["mode"] for c in calls] == ["cli-fallback", "cli-fallback"]
    assert "did not start: ModuleNotFoundError" in (tmp_path / "a.log").read_text()
    assert "bench worker" not in (tmp_path / "b.log").read_text()  # not tried again


def test_the_environment_variables_turn_it_on(tmp_path: Path, server: VllmServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURSE_UTILS_BENCH_WORKER", "1")
    monkeypatch.setenv("COURSE_UTILS_BENCH_WORKER_ENTRY", ENTRY)
    calls: list[dict] = []
    _bench(server, tmp_path, "a", calls)
    _bench(server, tmp_path, "b", calls, worker=False)  # an explicit False wins
    assert [c["mode"] for c in calls] == ["worker", "cli"]


def test_a_failing_call_fails_as_the_cli_does(tmp_path: Path, fake_vllm: Path) -> None:
    """An unknown flag: argparse exits 2 on both paths, with the same one-line reason."""
    reasons = []
    for worker in (False, True):
        d = tmp_path / str(worker)
        with pytest.raises(BenchError) as ei:
            run_bench("http://127.0.0.1:9", "m", Workload(input_len=4, output_len=2,
                      num_prompts=2), None, d, "r.json", timeout_s=30, worker=worker,
                      worker_entry=ENTRY, extra_args=["--no-such-flag"])
        reasons.append(ei.value.reason)
    assert reasons[0] == reasons[1] and "no-such-flag" in reasons[0]


def test_a_call_past_its_timeout_stops_the_worker(tmp_path: Path) -> None:
    slow = tmp_path / "slow.py"
    slow.write_text("import time\n\ndef main(argv):\n    time.sleep(60)\n    return 0\n")
    with pytest.raises(BenchError, match="did not finish within"):
        run_bench("http://127.0.0.1:9", "m", Workload(num_prompts=2), None, tmp_path, "r.json",
                  timeout_s=1.5, worker=True, worker_entry=f"{slow}:main")
    w = benchworker.shared(f"{slow}:main")
    assert w.proc is None and w.starts == 1 and w.usable  # stopped, may start again


def test_a_point_records_its_cost_and_bench_mode(tmp_path: Path, fake_vllm: Path) -> None:
    common = dict(workload=W, slo=SLO_, server_kwargs={"startup_timeout_s": 20},
                  bench_kwargs={"timeout_s": 60, "worker_entry": ENTRY}, warmup_prompts=10,
                  metrics_interval_s=0.05, gpu_memory_gib=24.0, progress=False)
    for mode in ("worker", "cli"):
        out = tmp_path / mode
        from course_utils.lab.measure import MeasureConfig
        from course_utils.lab.sweep import SweepConfig

        cfg = SweepConfig.make(out_dir=out, **{k: v for k, v in common.items()
                                               if k != "progress"})
        cfg.measure = MeasureConfig(**{**cfg.measure.__dict__,
                                       "bench_worker": mode == "worker"})
        sweep("fake-model", "max_num_seqs", [8], config=cfg, progress=False)
        (rec,) = load_points(out)
        p = ServedPoint.from_json(rec)
        c = p.cost
        # one call for the warm-up, one per window (a confounded window on a loaded host is
        # re-measured, so the count follows the windows, at least the two asked for)
        assert c is not None and c.bench_mode == mode
        assert len(p.windows) >= 2 and c.bench_calls == 1 + len(p.windows)
        assert c.total_s == p.elapsed_s and c.server_start_s == p.startup_s
        assert c.warmup_load_s is not None and c.warmup_load_s > 0
        assert c.other_s is not None and c.other_s >= 0
        # each call's start-up read from its log (the fake logs vLLM's first bench line);
        # vLLM's stamps are whole seconds, so a value reads up to 1 s low, never lower (kept
        # to 0.01 s, a value just under 1 s low reads -1.0)
        ups = c.bench_startup_s
        assert len(ups) == c.bench_calls and all(x is not None and x >= -1.0 for x in ups)
        paths = PointPaths.of(out, p.key)
        assert paths.warmup_log.is_file() and paths.bench_log(1).is_file()
        # the worker ends each call's log with its phases, and they add up to the call;
        # the CLI has no such line
        assert len(c.bench_phases) == c.bench_calls
        if mode == "cli":
            assert c.bench_phases == [None] * c.bench_calls
            continue
        for ph, w in zip(c.bench_phases[1:], p.windows, strict=True):
            assert ph is not None and None not in (ph.before_main_s, ph.main_s, ph.after_s)
            assert ph.before_main_s + ph.main_s + ph.after_s == pytest.approx(ph.call_s, abs=0.01)
            # vLLM's duration (first request to last response) lies inside the main run
            assert 0 < float(w.bench["duration"]) <= ph.main_s + 0.05
            assert ph.call_s <= float(w.elapsed_s)
        again = PointCost.from_json(json.loads(json.dumps(c.to_json())))
        assert again.bench_phases == c.bench_phases  # recorded and read back
        tbl = cost_table([(p, c)])
        assert "before / after vLLM's main run" in tbl
        w0 = c.bench_phases[0]  # the warm-up call's phases, first in the row
        assert w0 is not None and f"| {w0.before_main_s:.1f} / {w0.after_s:.1f}, " in tbl
    assert os.environ.get("COURSE_UTILS_BENCH_WORKER") is None


STUB = {
    "vllm/__init__.py": "",
    "vllm/platforms/__init__.py": "class _P:\n    def is_unspecified(self):\n        return True\n"
                                  "current_platform = _P()\n",
    "vllm/platforms/cpu.py": "class CpuPlatform:\n    def is_unspecified(self):\n"
                             "        return False\n",
    "vllm/utils/__init__.py": "",
    "vllm/utils/argparse_utils.py": "import argparse\n\n"
                                    "class FlexibleArgumentParser(argparse.ArgumentParser):\n"
                                    "    pass\n",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/serve/__init__.py": "",
    "vllm/entrypoints/serve/utils/__init__.py": "",
    "vllm/entrypoints/serve/utils/api_utils.py": "import os\n\ndef cli_env_setup():\n"
        "    os.environ.setdefault('VLLM_WORKER_MULTIPROC_METHOD', 'spawn')\n",
    "vllm/entrypoints/cli/__init__.py": "",
    "vllm/entrypoints/cli/benchmark/__init__.py": "",
    "vllm/entrypoints/cli/benchmark/serve.py": (
        "import json, os\n\n"
        "class BenchmarkServingSubcommand:\n"
        "    name = 'serve'\n"
        "    @classmethod\n"
        "    def add_cli_args(cls, parser):\n"
        "        parser.add_argument('--model')\n"
        "        parser.add_argument('--num-prompts', type=int, default=1000)\n"
        "        parser.add_argument('--result-filename')\n"
        "    @staticmethod\n"
        "    def cmd(args):\n"
        "        from vllm import platforms\n"
        "        print('stub bench', args.subparser, args.bench_type, args.num_prompts)\n"
        "        with open(args.result_filename, 'w') as fh:\n"
        "            json.dump({'num_prompts': args.num_prompts, 'platform':\n"
        "                       type(platforms.current_platform).__name__,\n"
        "                       'mp': os.environ.get('VLLM_WORKER_MULTIPROC_METHOD')}, fh)\n"),
}


def test_the_vllm_entry_builds_the_clis_parser(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm_bench_entry against a stub of the vLLM modules it uses (the real ones need a
    vLLM install): the CLI's namespace (subparser, bench_type), dispatch to the serve
    subcommand's cmd, the CPU platform and cli_env_setup as vllm/entrypoints/cli/main.py."""
    for rel, text in STUB.items():
        f = tmp_path / "stub" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'stub'}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    w = benchworker.BenchWorker("vllm")
    out = tmp_path / "r.json"
    try:
        rc, timed_out = w.run(["bench", "serve", "--model", "m", "--num-prompts", "7",
                               "--result-filename", str(out)], tmp_path / "r.log", 30)
        bad, _ = w.run(["bench", "latency"], tmp_path / "b.log", 30)
        usage, _ = w.run(["bench", "serve", "--nope"], tmp_path / "u.log", 30)
    finally:
        w.close()
    assert (rc, timed_out) == (0, False)
    assert json.loads(out.read_text()) == {"num_prompts": 7, "platform": "CpuPlatform",
                                           "mp": "spawn"}
    assert "stub bench bench serve 7" in (tmp_path / "r.log").read_text()
    assert bad == 2 and "only `bench serve` runs here" in (tmp_path / "b.log").read_text()
    assert usage == 2 and "unrecognized arguments: --nope" in (tmp_path / "u.log").read_text()


def test_gridbench_runs_a_call_again_as_the_cli_when_the_worker_fails(
        tmp_path: Path, server: VllmServer) -> None:
    from course_utils.lab import gridbench

    failing = tmp_path / "fail.py"
    failing.write_text("def main(argv):\n    print('broken entry')\n    return 1\n")
    os.environ["COURSE_UTILS_BENCH_WORKER_ENTRY"] = f"{failing}:main"
    try:
        from course_utils.lab.sidebyside import sweep_bench_cmd

        argv = sweep_bench_cmd("fake-model", W, SLO_, base_url=server.base_url) + [
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result", "--result-dir",
            str(tmp_path / "c"), "--result-filename", "run=0.json"]
        rc = gridbench.main(["--workload", json.dumps(W.to_dict()), "--bench-worker",
                             "--metrics-interval", "0.05", "--", *argv])
    finally:
        del os.environ["COURSE_UTILS_BENCH_WORKER_ENTRY"]
    assert rc == 0
    h = json.loads((tmp_path / "c" / "run=0.harness.json").read_text())
    assert h["warmup"]["mode"] == "cli" and h["run"]["mode"] == "cli-after-worker-failure"
    assert h["warmup"]["status"] == "ok" and json.loads(
        (tmp_path / "c" / "run=0.json").read_text())["completed"] == W.num_prompts
    assert "broken entry" in (tmp_path / "c" / "run=0.bench.log").read_text()


# ---------------------------------------------------------------------------- a sweep's worker


def _socket_worker(tmp_path: Path, entry: str) -> tuple[subprocess.Popen[str], str]:
    """`python -m course_utils.lab.benchworker --socket` as side_by_side.sh starts it."""
    sock = str(tmp_path / "w.sock")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    p = subprocess.Popen([sys.executable, "-m", "course_utils.lab.benchworker", "--entry",
                          entry, "--socket", sock], stdout=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    assert p.stdout is not None
    hello = json.loads(p.stdout.readline())  # printed once it listens
    assert hello["ready"] and hello["socket"] == sock and hello["pid"] == p.pid
    return p, sock


def test_gridbench_processes_attach_to_one_socket_worker(
        tmp_path: Path, server: VllmServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two clients in turn (two combos' gridbench processes): one import, before either."""
    imports = _imports(tmp_path, monkeypatch)
    p, sock = _socket_worker(tmp_path, ENTRY)
    try:
        assert len(_lines(imports)) == 1  # imported before any client came
        pids = set()
        for i in range(2):
            w = benchworker.BenchWorker(ENTRY, socket_path=sock)
            rc, timed_out = w.run(["bench", "serve", "--base-url", server.base_url, "--model",
                                   "fake-model", "--dataset-name", "random", "--num-prompts",
                                   "4", "--random-input-len", "16", "--random-output-len",
                                   "4"], tmp_path / f"a{i}.log", 60)
            assert (rc, timed_out) == (0, False), (tmp_path / f"a{i}.log").read_text()
            assert w.attached and w.import_s == 0.0 and w.pid == p.pid
            assert "Successful requests:" in (tmp_path / f"a{i}.log").read_text()
            pids.add(w.pid)
            w.close()  # the client goes; the shared worker stays
            assert p.poll() is None
        assert pids == {p.pid} and len(_lines(imports)) == 1
    finally:
        p.kill()
        p.wait()


def test_a_timed_out_call_stops_the_socket_worker_and_the_next_client_starts_its_own(
        tmp_path: Path) -> None:
    slow = tmp_path / "slow.py"
    slow.write_text("import time\n\ndef main(argv):\n    time.sleep(60)\n    return 0\n")
    p, sock = _socket_worker(tmp_path, f"{slow}:main")
    try:
        w = benchworker.BenchWorker(f"{slow}:main", socket_path=sock)
        assert w.run(["bench"], tmp_path / "x.log", 1.0) == (None, True)
        assert p.wait(timeout=10) != 0  # killed: it may still have been running the call
        w2 = benchworker.BenchWorker(f"{slow}:main", socket_path=sock)
        w2.start()  # nobody listens any more: its own process
        assert not w2.attached and w2.proc is not None and w2.pid == w2.proc.pid
        w2.close()
    finally:
        if p.poll() is None:
            p.kill()


def test_the_loops_worker_imports_vllm_while_the_first_server_starts(
        tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry that takes 3 s to import, a server that takes 4 s to start: the warm-up call
    does not wait for the import (it happened during the start)."""
    slow = tmp_path / "slow_import.py"
    slow.write_text(f"import time\ntime.sleep(3)\nfrom importlib import util\n"
                    f"_s = util.spec_from_file_location('fv', {str(FAKES / 'fake_vllm.py')!r})\n"
                    "_m = util.module_from_spec(_s)\n_s.loader.exec_module(_m)\nmain = _m.main\n")
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "4")
    from course_utils.lab.measure import MeasureConfig
    from course_utils.lab.sweep import SweepConfig

    cfg = SweepConfig.make(out_dir=tmp_path / "o", workload=W, slo=SLO_,
                           server_kwargs={"startup_timeout_s": 30},
                           bench_kwargs={"timeout_s": 60, "worker_entry": f"{slow}:main"},
                           warmup_prompts=4, metrics_interval_s=0.05, gpu_memory_gib=24.0)
    cfg.measure = MeasureConfig(**{**cfg.measure.__dict__, "bench_worker": True})
    sweep("fake-model", "max_num_seqs", [8], config=cfg, progress=False)
    (rec,) = load_points(tmp_path / "o")
    c = ServedPoint.from_json(rec).cost
    assert c is not None and c.bench_mode == "worker"
    assert c.server_start_s is not None and c.server_start_s >= 4
    assert c.warmup_s is not None and c.warmup_load_s is not None
    assert c.warmup_s - c.warmup_load_s < 2.0  # the 3 s import is not in the warm-up call
    assert benchworker.shared(f"{slow}:main").starts == 1


def test_a_call_that_raises_restores_stdout_and_still_logs_its_phases(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from course_utils.core.cost import BenchPhases

    # as in the worker process: sys.stdout/stderr write to fds 1 and 2, which the call points
    # at its log (pytest's own capture objects would not follow the fds)
    monkeypatch.setattr(sys, "stdout", open(1, "w", closefd=False))  # noqa: SIM115
    monkeypatch.setattr(sys, "stderr", open(2, "w", closefd=False))  # noqa: SIM115
    from course_utils.core.vllm_logs import MAIN_RUN_LINE

    def entry(argv: list[str]) -> int:
        print("parsing", argv)
        print(MAIN_RUN_LINE)
        raise RuntimeError("the server went away")

    before = sys.stdout
    log = tmp_path / "bench.log"
    rc = benchworker._call(entry, {"argv": ["--x"], "log": str(log)})
    assert rc == 1 and sys.stdout is before
    text = log.read_text()
    assert "RuntimeError: the server went away" in text
    ph = BenchPhases.in_log(text)
    assert ph is not None and ph.before_main_s is not None and ph.before_main_s >= 0
    assert ph.main_s is None and ph.after_s is None  # no result table was printed
    assert text.rstrip().splitlines()[-1].startswith("# bench phases: ")
