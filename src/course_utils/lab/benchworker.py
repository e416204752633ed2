"""A persistent `vllm bench serve` worker: vLLM imported once, each call run in-process.

Each `vllm bench serve` process spends about 20 s importing vLLM before its first request
(labs/results/h200-2026-11-30: 19.6-31.1 s to vLLM's first log line, ``lab.cost``), and a
served point makes 2-3 calls. The worker is one Python process that imports vLLM's
benchmark entry once and then runs each call's argv through vLLM's own code path:

- ``vllm`` entry (the default): the parser the CLI builds for `vllm bench serve`
  (vllm/entrypoints/cli/main.py ``main``: a ``FlexibleArgumentParser``, the ``bench``
  subcommand, the ``serve`` subparser filled by vllm/benchmarks/serve.py ``add_cli_args``
  through vllm/entrypoints/cli/benchmark/serve.py ``BenchmarkServingSubcommand``), then its
  ``cmd`` (serve.py ``main`` -> ``main_async``), which writes the result JSON itself as the
  CLI does. Done once at start, as the CLI does for every `vllm bench` call: ``cli_env_setup``
  and the CPU platform when none is detected.
- ``FILE.py:FUNC`` or ``MODULE:FUNC``: ``FUNC(argv) -> int`` with argv after the executable
  (``["bench", "serve", ...]``); the tests drive tests/fakes/fake_vllm.py's ``main`` so.

Per call the worker points its file descriptors 1 and 2 at the call's log (so vLLM's prints,
its logger and anything below Python land there, as with the CLI), applies the call's
environment, and answers its exit status: 0, the SystemExit code (argparse errors: 2), or 1
with the traceback in the log for an exception, as the CLI process would exit. vLLM's
``main_async`` freezes the GC heap (vllm/utils/gc_utils.py ``freeze_gc_heap``); the worker
unfreezes it after each call so one call's objects do not outlive it.

The parent (``BenchWorker``, used by lab.bench.run_bench) talks JSON lines over the worker's
stdin/stdout. A sweep (tools/gpu/side_by_side.sh) starts one worker for all its combos
instead: ``--socket PATH`` imports vLLM while the first server starts and serves one client
at a time on that Unix socket; each combo's gridbench process attaches to it
(COURSE_UTILS_BENCH_WORKER_SOCKET) rather than importing vLLM once more (20-31 s per combo
on the H200 host, labs/results/h200-2026-12-01). A worker that dies during a call (EOF) is a crash: run_bench runs that call
again as the CLI subprocess; a call past its timeout stops the worker's process group.

    python -m course_utils.lab.benchworker --entry vllm     (started by BenchWorker)
    python -m course_utils.lab.benchworker --socket PATH    (a sweep's shared worker)
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from course_utils.core.cost import BenchPhases
from course_utils.core.vllm_logs import MAIN_RUN_LINE, RESULT_BANNER, one_line

__all__ = [
    "ENV_ENABLE",
    "ENV_ENTRY",
    "ENV_SOCKET",
    "BenchWorker",
    "WorkerCrash",
    "close_all",
    "load_entry",
    "prestart",
    "shared",
    "vllm_bench_entry",
    "worker_enabled",
]

ENV_ENABLE = "COURSE_UTILS_BENCH_WORKER"
ENV_ENTRY = "COURSE_UTILS_BENCH_WORKER_ENTRY"
ENV_SOCKET = "COURSE_UTILS_BENCH_WORKER_SOCKET"  # a running `--socket` worker to attach to
VLLM_ENTRY = "vllm"
MAX_CRASHES = 2  # then the CLI for the rest of this process


class WorkerCrash(RuntimeError):
    """The worker died, or could not start; ``.reason`` is one line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def worker_enabled(flag: bool | None = None) -> bool:
    """``flag`` when given, else COURSE_UTILS_BENCH_WORKER=1 (the CLI is the default)."""
    if flag is not None:
        return bool(flag)
    return os.environ.get(ENV_ENABLE, "").strip().lower() in ("1", "true", "yes")


# --------------------------------------------------------------------------------------
# the worker process
# --------------------------------------------------------------------------------------


def vllm_bench_entry() -> Callable[[list[str]], int]:
    """vLLM 0.26.0's `vllm bench serve` as a function of argv (``["bench", "serve", ...]``),
    the parser built like vllm/entrypoints/cli/main.py ``main`` builds it."""
    from vllm import platforms
    from vllm.entrypoints.cli.benchmark.serve import BenchmarkServingSubcommand
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()
    # main.py: "For 'vllm bench *': use CPU instead of UnspecifiedPlatform by default"
    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()

    def parser() -> Any:
        top = FlexibleArgumentParser(description="vLLM CLI")
        subparsers = top.add_subparsers(required=False, dest="subparser")
        bench = subparsers.add_parser("bench", usage="vllm bench <bench_type> [options]")
        bench_sub = bench.add_subparsers(required=True, dest="bench_type")
        serve = bench_sub.add_parser(
            BenchmarkServingSubcommand.name, usage="vllm bench serve [options]"
        )
        serve.set_defaults(dispatch_function=BenchmarkServingSubcommand.cmd)
        BenchmarkServingSubcommand.add_cli_args(serve)
        return top

    # a parser that cannot read a plain call fails the worker's start (the CLI takes over)
    probe = parser().parse_args(["bench", "serve", "--model", "m", "--num-prompts", "1"])
    if probe.dispatch_function is not BenchmarkServingSubcommand.cmd or probe.num_prompts != 1:
        raise RuntimeError("vllm bench serve parser mismatch")

    def run(argv: list[str]) -> int:
        if argv[:2] != ["bench", "serve"]:
            print(f"bench worker: only `bench serve` runs here, not {argv[:2]}", file=sys.stderr)
            return 2
        args = parser().parse_args(argv)
        args.dispatch_function(args)
        return 0

    return run


def load_entry(spec: str) -> Callable[[list[str]], int]:
    """``vllm``, ``MODULE:FUNC`` or ``FILE.py:FUNC`` -> the function a call runs."""
    if spec == VLLM_ENTRY:
        return vllm_bench_entry()
    target, sep, func = spec.rpartition(":")
    if not sep or not target or not func:
        raise ValueError(f"entry must be 'vllm', MODULE:FUNC or FILE.py:FUNC, not {spec!r}")
    if target.endswith(".py"):
        path = Path(target)
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        if mod_spec is None or mod_spec.loader is None:
            raise ImportError(f"cannot load {path}")
        mod = importlib.util.module_from_spec(mod_spec)
        sys.modules[path.stem] = mod
        mod_spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(target)
    fn = getattr(mod, func)
    if not callable(fn):
        raise TypeError(f"{spec} is not callable")
    return fn


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def _redirected(log_path: str) -> Any:
    """fd 1 and 2 (and so sys.stdout/sys.stderr and vLLM's logger) into the call's log."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Any:
    old = {k: os.environ.get(k) for k in env}
    os.environ.update({k: str(v) for k, v in env.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _PhaseClock:
    """sys.stdout during a call: writes through, and notes when vLLM prints the start of
    its main run and its result table (core.cost.BenchPhases)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.t0 = time.monotonic()
        self.main: float | None = None
        self.result: float | None = None

    def write(self, text: str) -> int:
        if self.main is None and MAIN_RUN_LINE in text:
            self.main = time.monotonic()
        elif self.result is None and self.main is not None and RESULT_BANNER in text:
            self.result = time.monotonic()
        return self._inner.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def phases(self) -> BenchPhases:
        end = time.monotonic()

        def span(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else round(b - a, 3)

        return BenchPhases(
            call_s=round(end - self.t0, 3),
            before_main_s=span(self.t0, self.main),
            main_s=span(self.main, self.result),
            after_s=span(self.result, end),
        )


def _call(entry: Callable[[list[str]], int], req: Mapping[str, Any]) -> int:
    with _redirected(str(req["log"])), _environ(req.get("env") or {}):
        clock = _PhaseClock(sys.stdout)
        sys.stdout = clock
        try:
            rc = entry(list(req["argv"]))
            rc = 0 if rc is None else int(rc)
        except SystemExit as exc:
            rc = _exit_code(exc)
        except BaseException:  # noqa: BLE001 - the CLI process would exit 1 with it
            traceback.print_exc()
            rc = 1
        finally:
            sys.stdout = clock._inner
        with contextlib.suppress(Exception):  # the timing is evidence, never the call's end
            sys.stderr.flush()  # a traceback first: the phases are the log's last line
            print(clock.phases().line(), flush=True)
    gc.unfreeze()
    gc.collect()
    return rc


def _hello(entry_spec: str) -> tuple[Callable[[list[str]], int] | None, dict[str, Any]]:
    """Import the entry once: (entry, the hello line) or (None, the error line)."""
    t0 = time.monotonic()
    try:
        entry = load_entry(entry_spec)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, one line
        return None, {"ready": False, "error": one_line(repr(exc))}
    return entry, {"ready": True, "pid": os.getpid(), "import_s": round(time.monotonic() - t0, 2)}


def _answer(entry: Callable[[list[str]], int], proto_in: IO[str], proto_out: IO[str]) -> None:
    for line in proto_in:
        if not line.strip():
            continue
        rc = _call(entry, json.loads(line))
        proto_out.write(json.dumps({"rc": rc}) + "\n")
        proto_out.flush()


def serve_forever(entry_spec: str, proto_in: IO[str], proto_out: IO[str]) -> int:
    """The worker's loop: import the entry, say ready, then one answer per request line."""
    entry, hello = _hello(entry_spec)
    proto_out.write(json.dumps(hello) + "\n")
    proto_out.flush()
    if entry is None:
        return 1
    _answer(entry, proto_in, proto_out)
    return 0


def serve_socket(entry_spec: str, path: str) -> int:
    """The shared worker of a whole sweep: import the entry once (while the first server
    starts), then serve one client at a time on the Unix socket ``path`` (each gridbench
    process of `vllm bench sweep serve` attaches instead of importing vLLM itself)."""
    entry, hello = _hello(entry_spec)
    if entry is None:
        print(json.dumps(hello), file=sys.stderr, flush=True)
        return 1
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    print(json.dumps({**hello, "socket": path}), flush=True)
    while True:
        conn, _ = srv.accept()
        with conn, conn.makefile("r") as rx, conn.makefile("w", buffering=1) as tx:
            tx.write(json.dumps(hello) + "\n")
            tx.flush()
            with contextlib.suppress(OSError, ValueError):
                _answer(entry, rx, tx)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course_utils.lab.benchworker")
    ap.add_argument("--entry", default=VLLM_ENTRY)
    ap.add_argument("--socket", help="serve every client on this Unix socket (a sweep's worker)")
    a = ap.parse_args(argv)
    if a.socket:
        return serve_socket(a.entry, a.socket)
    # the protocol keeps the original stdout; fd 1 itself goes to /dev/null between calls
    proto_out = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    return serve_forever(a.entry, sys.stdin, proto_out)


# --------------------------------------------------------------------------------------
# the parent's handle
# --------------------------------------------------------------------------------------


class BenchWorker:
    """One worker (started on the first call): its own process, or, with ``socket_path``
    naming a running ``--socket`` worker, that one (vLLM already imported). ``run`` returns
    (rc, timed_out) like lab.proc.run_logged, or raises WorkerCrash (the caller falls back to
    the CLI)."""

    def __init__(
        self,
        entry: str = VLLM_ENTRY,
        *,
        python: str | None = None,
        start_timeout_s: float = 300.0,
        socket_path: str | None = None,
    ) -> None:
        self.entry = entry
        self.python = python or sys.executable
        self.start_timeout_s = start_timeout_s
        self.socket_path = socket_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self._rx: IO[bytes] | None = None
        self._tx: IO[bytes] | None = None
        self._pid: int | None = None
        self.attached = False  # the last start attached to a shared socket worker
        self.import_s: float | None = None
        self.starts = 0
        self.crashes = 0
        self.calls = 0

    @property
    def usable(self) -> bool:
        return self.crashes < MAX_CRASHES

    @property
    def pid(self) -> int | None:
        return self._pid if self._rx is not None else None

    def _alive(self) -> bool:
        if self._rx is None:
            return False
        return self.sock is not None or (self.proc is not None and self.proc.poll() is None)

    def _read(self, timeout_s: float) -> dict[str, Any] | None:
        """One answer line; None on a timeout; WorkerCrash on EOF."""
        assert self._rx is not None
        end = time.monotonic() + timeout_s
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._rx], [], [], min(left, 1.0))
            if not ready:
                continue
            line = self._rx.readline()
            if not line:
                why = "closed its socket" if self.sock is not None else "exited"
                rc = self.proc.wait(timeout=10) if self.proc is not None else None
                self._drop()
                raise WorkerCrash(f"the bench worker {why}" + (f" (rc {rc})" if rc else ""))
            if line.strip():
                return dict(json.loads(line))

    def _attach(self) -> bool:
        """Connect to the shared socket worker; False when there is none to connect to."""
        if not self.socket_path or not os.path.exists(self.socket_path):
            return False
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            return False
        self.sock, self._rx, self._tx = sock, sock.makefile("rb"), sock.makefile("wb")
        return True

    def _spawn(self) -> None:
        src = str(Path(__file__).resolve().parents[2])  # course_utils importable there too
        path = os.environ.get("PYTHONPATH", "")
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": f"{src}:{path}" if path else src,
        }
        self.proc = subprocess.Popen(  # noqa: S603 - argv list
            [self.python, "-m", "course_utils.lab.benchworker", "--entry", self.entry],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        self._rx, self._tx = self.proc.stdout, self.proc.stdin

    def start(self) -> None:
        if self._alive():
            return
        self._drop()
        self.attached = self._attach()
        if not self.attached:
            self._spawn()
        self.starts += 1
        try:
            hello = self._read(self.start_timeout_s)
        except WorkerCrash:
            self.crashes = MAX_CRASHES  # it cannot even import: the CLI from now on
            raise
        if hello is None or not hello.get("ready"):
            self.close()
            self.crashes = MAX_CRASHES
            why = "no answer" if hello is None else hello.get("error")
            raise WorkerCrash(f"the bench worker did not start: {why}")
        self._pid = hello.get("pid")
        self.import_s = 0.0 if self.attached else hello.get("import_s")

    def run(
        self,
        argv: Sequence[str],
        log_path: str | Path,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
    ) -> tuple[int | None, bool]:
        """Run one call (argv after the executable) with its output appended to log_path."""
        self.start()
        assert self._tx is not None
        req = {"argv": [str(a) for a in argv], "log": str(log_path), "env": dict(env or {})}
        try:
            self._tx.write((json.dumps(req) + "\n").encode())
            self._tx.flush()
            ans = self._read(timeout_s)
        except WorkerCrash:
            self.crashes += 1
            raise
        except (BrokenPipeError, OSError) as exc:
            self.crashes += 1
            self.close(kill=True)
            raise WorkerCrash(f"the bench worker is gone ({exc})") from None
        except BaseException:
            self.close(kill=True)  # KeyboardInterrupt and the like: never leave it running
            raise
        self.calls += 1
        if ans is None:
            self.close(kill=True)
            return None, True
        return int(ans["rc"]), False

    def _drop(self) -> None:
        for f in (self._tx, self._rx):
            if f is not None:
                with contextlib.suppress(OSError, ValueError):
                    f.close()
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
        self._rx = self._tx = self.sock = None

    def close(self, kill: bool = False) -> None:
        """Let go of the worker. Its own process stops; a shared socket worker stays for the
        next client unless ``kill`` (a call that timed out or was interrupted: it may still
        be running, so it is stopped and later clients start their own)."""
        from course_utils.lab.proc import stop_group

        proc, self.proc = self.proc, None
        attached_pid = self._pid if self.sock is not None else None
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        self._drop()
        if attached_pid and kill:
            with contextlib.suppress(OSError):
                os.kill(attached_pid, signal.SIGKILL)
        if proc is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
        stop_group(proc, grace_s=2.0)


_SHARED: dict[tuple[str, str], BenchWorker] = {}


def shared(entry: str | None = None, python: str | None = None) -> BenchWorker:
    """The process's worker for ``entry`` (COURSE_UTILS_BENCH_WORKER_ENTRY, else vLLM),
    closed at exit."""
    spec = entry or os.environ.get(ENV_ENTRY) or VLLM_ENTRY
    key = (spec, python or sys.executable)
    if key not in _SHARED:
        _SHARED[key] = BenchWorker(spec, python=python, socket_path=os.environ.get(ENV_SOCKET))
    return _SHARED[key]


def prestart(entry: str | None = None) -> Callable[[], None]:
    """Start the process's shared worker in the background, so its vLLM import overlaps a
    server's start; the returned function waits for it (call it before the first bench). A
    worker that cannot start is left to run_bench, which falls back to the CLI."""
    w = shared(entry)
    if not w.usable or w._alive():
        return lambda: None

    def _start() -> None:
        with contextlib.suppress(WorkerCrash):
            w.start()

    t = threading.Thread(target=_start, name="bench-worker-prestart", daemon=True)
    t.start()
    return t.join


@atexit.register
def close_all() -> None:
    """Stop every shared worker (a later call starts a fresh one)."""
    for w in _SHARED.values():
        w.close()
    _SHARED.clear()


if __name__ == "__main__":
    sys.exit(main())
