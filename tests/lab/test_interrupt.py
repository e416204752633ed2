"""Ctrl-C (or `timeout --signal=INT` around a GPU call) during `python -m course_utils tune`:
one line, exit 130, no server left, and the same command resumes from the finished points."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lines(p: Path) -> list[str]:
    return p.read_text().splitlines() if p.exists() else []


def _cmd(cmd: str, model: Path, out: Path) -> list[str]:
    common = ["--model", str(model), "--out", str(out), "--slo", "ttft:300 tpot:50", "--rate",
              "50", "--input-len", "16", "--output-len", "8", "--num-prompts", "12",
              "--load-format", "dummy", "--no-progress"]
    if cmd == "sweep":
        return [sys.executable, "-m", "course_utils", "sweep", *common, "--knob",
                "max_num_seqs", "--values", "2,4,8"]
    return [sys.executable, "-m", "course_utils", "tune", *common, "--candidate",
            "max_num_seqs=2,4"]


def _servers(starts: Path) -> list[int]:
    """pids of fake servers this test started that are still alive."""
    alive = []
    for line in _lines(starts):
        pid = int(json.loads(line).get("pid") or 0)
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            continue
        alive.append(pid)
    return alive


def _interrupt_when(p: subprocess.Popen[str], ready: Callable[[], bool]) -> str:
    t0 = time.monotonic()
    while not ready() and time.monotonic() - t0 < 120:
        assert p.poll() is None, p.communicate()
        time.sleep(0.1)
    assert ready(), "never got there"
    time.sleep(0.5)  # inside the server's start-up (FAKE_VLLM_STARTUP_S)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err, err
    return str(err.strip().splitlines()[-1])


@pytest.mark.parametrize("cmd", ["tune", "sweep"])
def test_sigint_is_one_line_leaves_no_server_and_resumes(
        cmd: str, tmp_path: Path, fake_vllm: Path, fake_nvidia_smi: Path,
        dummy_model: Path) -> None:
    out = tmp_path / "o"
    starts = Path(os.environ["FAKE_VLLM_STARTS"])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "FAKE_VLLM_STARTUP_S": "2"}
    p = subprocess.Popen(_cmd(cmd, dummy_model, out), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    # tune: during the baseline's start-up; sweep: during the second point's
    want = 1 if cmd == "tune" else 2
    last = _interrupt_when(p, lambda: len(_lines(starts)) >= want)
    assert last.startswith(f"interrupted: finished points stay in {out}/points.jsonl"), last
    assert _servers(starts) == []  # no server outlives the run
    done = [json.loads(x)["key"] for x in _lines(out / "points.jsonl")]
    assert len(done) == want - 1  # the point in progress is not recorded
    n_starts = len(_lines(starts))
    # the same command again: finished points are read back, not served again
    q = subprocess.run(_cmd(cmd, dummy_model, out), env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert q.returncode == 0, q.stderr
    if cmd == "tune":  # the JSON summary on stdout, its ending in one line on stderr
        assert json.loads(q.stdout)["outcome"]["outcome"] in ("meets_slo", "past_knee")
        assert q.stderr.strip().splitlines()[-1].startswith("outcome: ")
    keys = [json.loads(x)["key"] for x in _lines(out / "points.jsonl")]
    assert keys[: len(done)] == done and len(keys) == len(set(keys))
    assert len(_lines(starts)) - n_starts == len(keys) - len(done)
    assert _servers(starts) == []


@pytest.mark.parametrize(("argv", "kept"), [
    (["knee", "--model", "m", "--out", "{out}", "--slo", "ttft:300", "--rates", "2"], "knee.jsonl"),
    (["scaleout", "--config", "dp2", "--model", "m", "--out", "{out}", "--rates", "6"],
     "dp2/knee.jsonl"),
    (["preflight", "--model", "m", "--out", "{out}"], None),
])
def test_an_interrupt_names_the_file_that_keeps_the_finished_records(
        argv: list[str], kept: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from course_utils import __main__ as cli_main
    from course_utils.lab import cli, scaleout

    def interrupted(_a: object) -> int:
        raise KeyboardInterrupt

    for mod, name in ((cli, "_cmd_knee"), (scaleout, "_cmd_scaleout"), (cli, "_cmd_preflight")):
        monkeypatch.setattr(mod, name, interrupted)
    out = tmp_path / "o"
    assert cli_main.main([a.replace("{out}", str(out)) for a in argv]) == 130
    err = capsys.readouterr().err.strip()
    where = f" in {out}/{kept}" if kept else ""
    assert err.startswith(f"interrupted: finished points stay{where};"), err
