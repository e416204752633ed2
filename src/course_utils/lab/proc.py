"""Run a command in its own process group with its output in a log, and never leave the
group behind (timeout, KeyboardInterrupt or any error stops every process in it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGINT, then SIGTERM, then SIGKILL to the process group of ``proc``."""
    for sig, wait in (
        (signal.SIGINT, grace_s),
        (signal.SIGTERM, grace_s / 2),
        (signal.SIGKILL, 10.0),
    ):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
    # children in the same group (an engine core) may outlive the leader
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_logged(
    argv: Sequence[str],
    log_path: str | Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    grace_s: float = 20.0,
) -> tuple[int | None, bool]:
    """Run ``argv`` (a list, never a shell string), its output appended to ``log_path``;
    returns (return code, False) or (None, True) on a timeout. The group is always stopped."""
    full_env = None if env is None else {**os.environ, **env}
    with open(log_path, "ab") as log:
        log.write(f"$ {list(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(  # noqa: S603 - argv list
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=full_env,
        )
        try:
            return proc.wait(timeout=timeout_s), False
        except subprocess.TimeoutExpired:
            return None, True
        finally:
            stop_group(proc, grace_s)
