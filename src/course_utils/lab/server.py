"""Start and stop one `vllm serve` process (an argv list, never a shell string) and say in
one line why it failed. The server runs in its own process group, so the API server and its
EngineCore child stop together (SIGINT, SIGTERM, SIGKILL), then a bounded wait until
`nvidia-smi` lists none of the group's pids. vLLM 0.26.0: `GET /health` answers 200 once
the engine is up.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_utils.core.vllm_logs import classify_failure

__all__ = [
    "GpuInfo",
    "ServerStartError",
    "VllmServer",
    "classify_failure",
    "free_port",
    "gpu_gib",
    "gpu_inventory",
    "gpu_memory_gib",
    "group_pids",
    "gpu_pids",
    "is_device",
    "visible_devices",
]


class ServerStartError(RuntimeError):
    """`vllm serve` did not become healthy. `.reason` is one line (see classify_failure)."""

    def __init__(self, reason: str, *, log_path: Path | None = None, returncode: int | None = None):
        super().__init__(reason)
        self.reason, self.log_path, self.returncode = reason, log_path, returncode


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on `host` (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is `pgid` (Linux /proc; [] elsewhere)."""
    pids: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, 0)
            return [pgid]
        return []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ... ; comm may contain spaces/parens
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) >= 3 and rest[0] != "Z" and int(rest[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def _nvidia_smi_run(
    query: str, timeout_s: float, visible_only: bool = False
) -> subprocess.CompletedProcess[str] | None:
    """`nvidia-smi QUERY --format=csv,noheader,nounits`, or None without a runnable one.
    ``visible_only``: only the GPUs CUDA_VISIBLE_DEVICES names (``-i``)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    ids = (visible_devices() or []) if visible_only else []
    try:
        return subprocess.run(
            [exe, query, "--format=csv,noheader,nounits", *(["-i", ",".join(ids)] if ids else [])],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def _nvidia_smi(query: str, timeout_s: float = 10.0, visible_only: bool = True) -> list[str] | None:
    """The whitespace-split output of ``_nvidia_smi_run`` (visible GPUs), or None."""
    done = _nvidia_smi_run(query, timeout_s, visible_only)
    return None if done is None else done.stdout.split()


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as `nvidia-smi --query-gpu` lists it (memory in MiB)."""

    index: int
    uuid: str
    name: str
    total_mib: float
    free_mib: float
    driver: str


_GPU_FIELDS = "index,uuid,name,memory.total,memory.free,driver_version"


def gpu_inventory(timeout_s: float = 10.0) -> tuple[list[GpuInfo] | None, str]:
    """Every GPU from ONE `nvidia-smi` call (None: no runnable nvidia-smi) and, when it
    lists none, the first line nvidia-smi printed."""
    done = _nvidia_smi_run(f"--query-gpu={_GPU_FIELDS}", timeout_s)
    if done is None:
        return None, ""
    gpus: list[GpuInfo] = []
    for line in done.stdout.splitlines():
        p = [x.strip() for x in line.split(",")]
        with contextlib.suppress(ValueError, IndexError):
            gpus.append(GpuInfo(int(p[0]), p[1], p[2], float(p[3]), float(p[4]), p[5]))
    if gpus:
        return gpus, ""
    said = (done.stdout + done.stderr).strip().splitlines()
    return [], said[0].strip() if said else f"exit status {done.returncode}"


def gpu_pids(timeout_s: float = 10.0) -> set[int] | None:
    """Pids with a CUDA context on the visible GPUs per `nvidia-smi`, or None without it."""
    out = _nvidia_smi("--query-compute-apps=pid", timeout_s)
    return None if out is None else {int(tok) for tok in out if tok.isdigit()}


def visible_devices(env: Mapping[str, str] | None = None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES of ``env`` over this process's environment; None: unset (all)."""
    cvd = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if cvd is None:
        return None
    return [t.strip() for t in cvd.split(",") if t.strip()]


def is_device(token: str, index: int, uuid: str) -> bool:
    """Whether a CUDA_VISIBLE_DEVICES entry (an index, a UUID or its prefix) names this GPU."""
    token = token.strip()
    return token == str(index) or (token.startswith(("GPU-", "MIG-")) and uuid.startswith(token))


def gpu_memory_used_mib(devices: Sequence[str] | None = None) -> float | None:
    """Memory in use (MiB) on ``devices`` (CUDA_VISIBLE_DEVICES entries; None: every GPU) per
    `nvidia-smi`, or None: a stop's fallback where a container hides the pids."""
    if devices is None:
        out = _nvidia_smi("--query-gpu=memory.used")
        try:
            return sum(float(x) for x in out) if out else None
        except ValueError:
            return None
    done = _nvidia_smi_run("--query-gpu=index,uuid,memory.used", 10.0)
    if done is None:
        return None
    used: list[float] = []
    for line in done.stdout.splitlines():
        p = [x.strip() for x in line.split(",")]
        with contextlib.suppress(ValueError, IndexError):
            if any(is_device(t, int(p[0]), p[1]) for t in devices):
                used.append(float(p[2]))
    return sum(used) if used else None


def gpu_memory_gib(index: int = 0) -> float | None:
    """Total memory of visible GPU `index` in GiB per `nvidia-smi`, or None without a GPU."""
    out = _nvidia_smi("--query-gpu=memory.total")
    try:
        return float(out[index]) / 1024.0 if out else None
    except (ValueError, IndexError):
        return None


def gpu_gib(given: float | None = None) -> float:
    """A GPU's memory (GiB): as given, else this host's first visible GPU, else 24 GiB."""
    return float(given) if given is not None else gpu_memory_gib() or 24.0


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """prctl(PR_SET_PDEATHSIG, SIGTERM): the child dies with this Python (a killed kernel)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


_LIVE: weakref.WeakSet[VllmServer] = weakref.WeakSet()


def _cleanup_all() -> None:
    for srv in list(_LIVE):
        with contextlib.suppress(Exception):
            srv.stop(grace_s=2.0, gpu_release_timeout_s=5.0)


atexit.register(_cleanup_all)


class VllmServer:
    """`vllm serve MODEL` as a context manager.

    >>> with VllmServer("Qwen/Qwen2.5-7B-Instruct", {"max_num_seqs": 128},
    ...                 load_format="dummy", log_path="serve.log") as srv:
    ...     srv.base_url  # http://127.0.0.1:<free port>
    """

    def __init__(
        self,
        model: str,
        knobs: Mapping[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        load_format: str | None = None,
        seed: int | None = 0,
        extra_args: Sequence[str] = (),
        vllm_cmd: Sequence[str] = ("vllm",),
        log_path: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        startup_timeout_s: float = 900.0,
        poll_interval_s: float = 0.5,
        stop_timeout_s: float = 30.0,
        gpu_release_timeout_s: float = 60.0,
        check_knobs: bool = True,
    ) -> None:
        if isinstance(extra_args, str):
            raise TypeError("extra_args must be a list of strings, not one shell string")
        self.model, self.knobs, self.host = model, dict(knobs or {}), host
        self.check_knobs = check_knobs  # False: vLLM judges the knob combination itself
        self.port = int(port) if port is not None else free_port(host)
        self.load_format, self.seed = load_format, seed
        self.extra_args = [str(a) for a in extra_args]
        self.vllm_cmd = [str(c) for c in vllm_cmd]
        self.log_path = Path(log_path) if log_path else Path(f"vllm-serve-{self.port}.log")
        self.env = dict(env) if env is not None else None
        self.startup_timeout_s, self.poll_interval_s = startup_timeout_s, poll_interval_s
        self.stop_timeout_s, self.gpu_release_timeout_s = stop_timeout_s, gpu_release_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self._seen_pids: set[int] = set()
        self._log_fh: Any = None
        self._old_sigterm: Any = None
        self._gpu_used_before: float | None = None

    def ship_argv(self) -> list[str]:
        """The command to deploy these knobs (no host/port/load-format/seed of the lab)."""
        from course_utils.core.knobs import to_cli_args

        knobs = to_cli_args(self.knobs, check=self.check_knobs) if self.knobs else []
        return [*self.vllm_cmd, "serve", self.model, *(str(a) for a in knobs)]

    @property
    def argv(self) -> list[str]:
        """The exact argv started (a list; never a shell string)."""
        argv = [*self.ship_argv(), "--host", self.host, "--port", str(self.port)]
        if self.load_format:
            argv += ["--load-format", self.load_format]
        if self.seed is not None:
            argv += ["--seed", str(self.seed)]
        return argv + self.extra_args

    @property
    def devices(self) -> list[str] | None:
        """The GPUs this server may use (CUDA_VISIBLE_DEVICES of its env; None: all)."""
        return visible_devices(self.env)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None  # start_new_session

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def failure_reason(self) -> str:
        rc = self.proc.returncode if self.proc is not None else None
        return classify_failure(self.log_text(), rc)

    def healthy(self, timeout_s: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=timeout_s) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def start(self) -> VllmServer:
        if self.proc is not None:
            raise RuntimeError("server already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_fh.write(f"$ {self.argv}\n".encode())
        self._log_fh.flush()
        env = None if self.env is None else {**os.environ, **self.env}
        # PDEATHSIG fires when the forking *thread* exits: only from the main thread
        main = threading.current_thread() is threading.main_thread()
        linux_main = sys.platform.startswith("linux") and main
        self._gpu_used_before = gpu_memory_used_mib(self.devices)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            preexec_fn=_die_with_parent if linux_main else None,
        )
        _LIVE.add(self)
        try:
            self._wait_healthy(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _wait_healthy(self, t0: float) -> None:
        assert self.proc is not None
        while True:
            self._remember_pids()
            if self.proc.poll() is not None:
                raise ServerStartError(
                    self.failure_reason(), log_path=self.log_path, returncode=self.proc.returncode
                )
            if self.healthy(timeout_s=min(2.0, self.startup_timeout_s)):
                return
            if time.monotonic() - t0 > self.startup_timeout_s:
                last = classify_failure(self.log_text())
                raise ServerStartError(
                    f"not healthy after {self.startup_timeout_s:.0f} s (last log: {last})",
                    log_path=self.log_path,
                )
            time.sleep(self.poll_interval_s)

    def _remember_pids(self) -> None:
        if self.pgid is not None:
            self._seen_pids.update(group_pids(self.pgid))

    def stop(
        self, *, grace_s: float | None = None, gpu_release_timeout_s: float | None = None
    ) -> None:
        """SIGINT -> SIGTERM -> SIGKILL to the whole group, then wait for the GPU to free."""
        if self.proc is None:
            return
        grace = self.stop_timeout_s if grace_s is None else grace_s
        pgid = self.pgid
        assert pgid is not None
        self._remember_pids()
        for sig, wait_s in (
            (signal.SIGINT, grace),
            (signal.SIGTERM, grace / 2),
            (signal.SIGKILL, 10),
        ):
            if not group_pids(pgid) and self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=0.1)
                if self.proc.poll() is not None and not group_pids(pgid):
                    break
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        release = gpu_release_timeout_s
        self._wait_gpu_released(self.gpu_release_timeout_s if release is None else release)
        if self._log_fh is not None:
            with contextlib.suppress(OSError):
                self._log_fh.close()
            self._log_fh = None
        _LIVE.discard(self)

    def _wait_gpu_released(self, timeout_s: float, margin_mib: float = 1024.0) -> None:
        """Until nvidia-smi lists none of our pids and our GPUs' memory use is back."""
        deadline = time.monotonic() + timeout_s
        while True:
            on_gpu = gpu_pids()
            ours = on_gpu is not None and bool(on_gpu & self._seen_pids)
            used = gpu_memory_used_mib(self.devices) if on_gpu is not None else None
            before = self._gpu_used_before
            high = used is not None and before is not None and used > before + margin_mib
            if not ours and (not high or time.monotonic() > deadline):
                return
            if time.monotonic() > deadline:
                for pid in sorted((on_gpu or set()) & self._seen_pids):  # our own pids only
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.5)

    def __enter__(self) -> VllmServer:
        self._install_sigterm()
        try:
            return self.start()
        except BaseException:
            self._restore_sigterm()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self._restore_sigterm()

    def _install_sigterm(self) -> None:
        """SIGTERM to this Python process raises SystemExit so __exit__ stops the server."""
        if threading.current_thread() is not threading.main_thread():
            return
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                self._old_sigterm = signal.signal(signal.SIGTERM, _raise_system_exit)

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None


def _raise_system_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)
