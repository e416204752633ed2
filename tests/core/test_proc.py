import os
import sys
import time

from course_utils.lab.proc import run_logged


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_timeout_stops_the_whole_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    # the leader starts a child that ignores SIGINT, then both sleep
    code = ("import os, signal, subprocess, sys, time;"
            "c = subprocess.Popen([sys.executable, '-c', "
            "'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)']);"
            f"open({str(pidfile)!r}, 'w').write(str(c.pid)); time.sleep(60)")
    t0 = time.monotonic()
    rc, timed_out = run_logged([sys.executable, "-c", code], tmp_path / "log", timeout_s=2,
                               grace_s=1)
    assert timed_out and rc is None and time.monotonic() - t0 < 20
    child = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)
    assert (tmp_path / "log").read_text().startswith("$ [")


def test_return_code_and_log(tmp_path):
    rc, timed_out = run_logged([sys.executable, "-c", "print('hi'); raise SystemExit(3)"],
                               tmp_path / "log", timeout_s=30)
    assert (rc, timed_out) == (3, False)
    assert "hi" in (tmp_path / "log").read_text()
