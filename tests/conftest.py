"""Shared test set-up: GPU marker handling, the fake `vllm` and `nvidia-smi` on PATH.

`@pytest.mark.gpu` tests are deselected (not skipped, not passed) unless `--run-gpu`.
With COURSE_UTILS_NO_SKIPS=1 (tools/run_pytest.sh) a run with any skipped test fails.

Under pytest-xdist (`--dist loadgroup`) the tests that share a module-scoped fixture (or a
module-level cache: SHARED_MODULES) run on one worker, so that state is built once; the
other tests spread over the workers one by one.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parent / "fakes"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-gpu", action="store_true", default=False,
                     help="also run @pytest.mark.gpu tests (needs a CUDA GPU and vLLM 0.26.0)")


# modules whose tests share a module-level cache, or views of one costly module fixture
# (test_browser's book_run: one Chromium run, built once only if its views run together)
SHARED_MODULES = {"tests/book/test_lab_pages.py", "tests/book/test_browser.py"}
# modules whose module-scoped fixture is cheap to build per worker and whose tests are long
SPREAD_MODULES = {"tests/book/test_nbval_lessons.py"}


def _group(item: pytest.Item) -> str | None:
    """The xdist group of a test that shares state with others: its module, and the
    module-scoped fixtures it uses (tests of one module that share none can run apart)."""
    module = item.nodeid.split("::", 1)[0]
    if module in SHARED_MODULES or module in SPREAD_MODULES:
        return module if module in SHARED_MODULES else None
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.items() if info is not None else ()
    shared = sorted(name for name, ds in defs
                    if any(d.scope in ("module", "package", "class") for d in ds))
    return f"{module}::{'+'.join(shared)}" if shared else None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    off = [name for name, opt in (("gpu", "--run-gpu"),) if not config.getoption(opt)]
    keep, drop = [], []
    for item in items:
        (drop if any(item.get_closest_marker(m) for m in off) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    for item in items:
        group = _group(item)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("COURSE_UTILS_NO_SKIPS") != "1" or hasattr(session.config, "workerinput"):
        return  # xdist workers report to the controller, which counts
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and exitstatus == 0:
        for rep in skipped:
            print(f"\nno-skips: {rep.nodeid} was skipped: {rep.longrepr}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


FAKE_VLLM_VARS = ("FAKE_VLLM_FAIL", "FAKE_VLLM_DIE_AFTER", "FAKE_VLLM_STARTUP_S",
                  "FAKE_VLLM_STUBBORN", "FAKE_VLLM_KV_TOKENS", "FAKE_VLLM_JIT_AT",
                  "FAKE_VLLM_JIT_STALL_S", "FAKE_VLLM_GPU_TOTAL_BYTES", "FAKE_VLLM_IMPORTS",
                  "FAKE_VLLM_CRASH_ONCE")


def install_fake_vllm(base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`vllm` (tests/fakes/fake_vllm.py) first on PATH, its starts counted in
    `<base>/starts.jsonl`; returns its folder."""
    bindir = base / "bin"
    bindir.mkdir()
    exe = bindir / "vllm"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_vllm.py"}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_VLLM_STARTS", str(base / "starts.jsonl"))
    for var in FAKE_VLLM_VARS:
        monkeypatch.delenv(var, raising=False)
    return bindir


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a `vllm` executable (tests/fakes/fake_vllm.py) first on PATH; return its folder.

    Server starts are counted in `<tmp>/starts.jsonl` (FAKE_VLLM_STARTS).
    """
    return install_fake_vllm(tmp_path, monkeypatch)


@pytest.fixture
def server_starts(tmp_path: Path, fake_vllm: Path):
    """A callable: how many times the fake `vllm serve` started so far in this test."""

    def count() -> int:
        p = tmp_path / "starts.jsonl"
        return len(p.read_text().splitlines()) if p.exists() else 0

    return count


def _on_path(bindir: Path, name: str, script: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir.mkdir(exist_ok=True)
    exe = bindir / name
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    return exe


def install_fake_nvidia_smi(base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`nvidia-smi` (tests/fakes/fake_nvidia_smi.py: one RTX 4090, driver 580) first on PATH;
    returns its path. FAKE_GPU / FAKE_NVIDIA_SMI_FAIL change what it reports."""
    for var in ("FAKE_GPU", "FAKE_GPU_FILE", "FAKE_NVIDIA_SMI_FAIL", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_CALLS", str(base / "nvidia-smi-calls.txt"))
    return _on_path(base / "smi-bin", "nvidia-smi", FAKES / "fake_nvidia_smi.py", monkeypatch)


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put an `nvidia-smi` (tests/fakes/fake_nvidia_smi.py: one RTX 4090, driver 580) first
    on PATH; return its path. FAKE_GPU / FAKE_NVIDIA_SMI_FAIL change what it reports."""
    return install_fake_nvidia_smi(tmp_path, monkeypatch)


@pytest.fixture(scope="session")
def dummy_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small load_format=dummy model folder (course_utils.lab.modelfolder, 700 ids)."""
    from course_utils.lab.modelfolder import make_dummy_model_folder, stdlib_corpus

    return make_dummy_model_folder(tmp_path_factory.mktemp("model") / "dummy", vocab_size=700,
                                   corpus=stdlib_corpus(200_000))
