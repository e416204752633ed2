"""Preflight: what a GPU run needs, checked in about a second before any GPU time is spent.
Each check has one line of detail and one of fix, in English and Chinese; a failure stops the
run with those lines (``PreflightError``). Nothing here imports vLLM; nvidia-smi runs once.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from course_utils import VLLM_VERSION
from course_utils.core import knobs as knobs_mod
from course_utils.core.lab_params import check_lab_params, listish
from course_utils.lab.checks import (
    INSTALL_HINTS,
    LABELS,
    MIN_FREE_DISK_GIB,
    Check,
    Lang,
    PreflightError,
    Report,
    check_dummy_vocab,
    check_model,
    check_output,
    check_port,
    en_zh,
    failed,
    passed,
)
from course_utils.lab.server import GpuInfo, gpu_inventory, is_device

Entry = Literal["serve", "llm"]
check_params = check_lab_params  # a lab's parameters, checked before its preflight
# vLLM 0.26.0 pins torch 2.11.0, built for CUDA 13.0, which needs driver branch 580 or newer
MIN_DRIVER_MAJOR = 580


def _vllm_version(origin: str | None) -> str | None:
    """The installed vLLM's version from its package metadata (else its _version.py), read
    next to the package that ``import vllm`` would load; never imports it."""
    if not origin:
        return None
    pkg = Path(origin).parent
    for dist in importlib.metadata.distributions(name="vllm", path=[str(pkg.parent)]):
        return str(dist.version)
    for name in ("_version.py", "__init__.py"):
        try:
            text = (pkg / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = re.search(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", text, re.M)
        if m:
            return m.group(1)
    return None


def check_vllm_package(entry: Entry = "serve") -> Check:
    """``import vllm`` would work here, at the pinned version (a different one warns)."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        if entry == "serve":
            return passed(
                "vllm_package",
                "not in this Python; the servers run the `vllm` on PATH",
                "不在这个 Python 里；服务由 PATH 上的 `vllm` 启动",
            )
        en, zh = (
            f"vLLM is not installed in this Python ({sys.executable})",
            f"这个 Python（{sys.executable}）里没有安装 vLLM",
        )
        return failed("vllm_package", en, zh, INSTALL_HINTS["en"], INSTALL_HINTS["zh"])
    version = _vllm_version(spec.origin)
    pin = en_zh(
        f"pip install vllm=={VLLM_VERSION} (flags, defaults and log lines differ between versions)",
        f"pip install vllm=={VLLM_VERSION}（不同版本的参数、默认值和日志都不一样）",
    )
    where = Path(spec.origin or "").parent
    if version is None:
        en, zh = f"vLLM at {where}, version unknown", f"vLLM 在 {where}，版本未知"
        return passed("vllm_package", en, zh, warn=True, fix=pin)
    if version != VLLM_VERSION:
        en, zh = (
            f"vLLM {version} installed; the course is written for {VLLM_VERSION}",
            f"装的是 vLLM {version}；本课程针对 {VLLM_VERSION}",
        )
        return passed("vllm_package", en, zh, warn=True, fix=pin)
    return passed("vllm_package", f"vLLM {version}", f"vLLM {version}")


def check_vllm_cli(vllm_cmd: Sequence[str] | str = ("vllm",)) -> Check:
    """The executable that runs ``vllm serve`` / ``vllm bench serve`` is on PATH."""
    cmd = shlex.split(vllm_cmd) if isinstance(vllm_cmd, str) else list(vllm_cmd)
    exe = cmd[0] if cmd else "vllm"
    path = shutil.which(exe)
    if path is None:
        return failed(
            "vllm_cli",
            f"`{exe}` is not on PATH, so `vllm serve` and `vllm bench serve` cannot start",
            f"PATH 上找不到 `{exe}`，`vllm serve` 和 `vllm bench serve` 都起不来",
            INSTALL_HINTS["en"] + ", or activate the venv that has it",
            INSTALL_HINTS["zh"] + "，或先激活装了它的 venv",
        )
    return passed("vllm_cli", path, path)


def pick_gpu(
    gpus: Sequence[GpuInfo] | None, said: str = ""
) -> tuple[GpuInfo | None, dict[str, str]]:
    """The GPU vLLM will use (the first one CUDA_VISIBLE_DEVICES leaves), or why none.
    ``gpus``/``said``: server.gpu_inventory() (None: no nvidia-smi)."""
    if gpus is None:
        return None, en_zh(
            "no nvidia-smi: no NVIDIA driver here", "没有 nvidia-smi：这里没有 NVIDIA 驱动"
        )
    if not gpus:
        return None, en_zh(f"nvidia-smi lists none: {said}", f"nvidia-smi 没有列出 GPU：{said}")
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return gpus[0], {}
    first = cvd.split(",")[0].strip()
    for g in gpus:
        if is_device(first, g.index, g.uuid):
            return g, {}
    return None, en_zh(
        f"CUDA_VISIBLE_DEVICES={cvd!r} hides all {len(gpus)} GPU(s)",
        f"CUDA_VISIBLE_DEVICES={cvd!r} 把 {len(gpus)} 张 GPU 全部隐藏了",
    )


def check_gpu(gpu: GpuInfo | None, why: Mapping[str, str] | None = None) -> Check:
    if gpu is None:
        why = why or en_zh("not found", "未找到")
        return failed(
            "gpu",
            f"no CUDA GPU visible ({why['en']})",
            f"看不到 CUDA GPU（{why['zh']}）",
            "run on a GPU instance (AutoDL: not in no-GPU mode); without a GPU, a lab can "
            "replay a recorded run: -p backend replay -p replay_dir labs/results/<run>/<lab>",
            "在有 GPU 的实例上运行（AutoDL 不要用无卡模式）；没有 GPU 时，lab 可以回放一次记录好的运行："
            "-p backend replay -p replay_dir labs/results/<run>/<lab>",
        )
    free, total = gpu.free_mib / 1024, gpu.total_mib / 1024
    return passed(
        "gpu",
        f"{gpu.name} (GPU {gpu.index}): {free:.1f} of {total:.1f} GiB free",
        f"{gpu.name}（GPU {gpu.index}）：{total:.1f} GiB 中空闲 {free:.1f} GiB",
    )


def check_driver(gpu: GpuInfo) -> Check:
    """Driver branch >= MIN_DRIVER_MAJOR (CUDA 13.0, which torch 2.11.0 is built for)."""
    try:
        major = int(gpu.driver.split(".")[0])
    except ValueError:
        en, zh = f"driver {gpu.driver!r}: version not readable", f"驱动 {gpu.driver!r}：读不出版本"
        return passed("driver", en, zh, warn=True)
    if major < MIN_DRIVER_MAJOR:
        return failed(
            "driver",
            f"driver {gpu.driver} is older than {MIN_DRIVER_MAJOR}: vLLM {VLLM_VERSION} runs on "
            "torch 2.11.0, built for CUDA 13.0",
            f"驱动 {gpu.driver} 低于 {MIN_DRIVER_MAJOR}：vLLM {VLLM_VERSION} 用的 torch 2.11.0 "
            "是为 CUDA 13.0 编译的",
            "rent a machine whose driver supports CUDA 13.0 or newer (AutoDL lists it per "
            "machine); the image's CUDA toolkit does not matter",
            "换一台驱动支持 CUDA 13.0 及以上的机器（AutoDL 每台机器都标了）；镜像里的 CUDA toolkit 无关紧要",
        )
    en, zh = (
        f"{gpu.driver} (CUDA 13 needs >= {MIN_DRIVER_MAJOR})",
        f"{gpu.driver}（CUDA 13 需要 >= {MIN_DRIVER_MAJOR}）",
    )
    return passed("driver", en, zh)


def check_gpu_memory(gpu: GpuInfo, gpu_memory_utilization: float) -> Check:
    """vLLM's own start-up check (v1/worker/utils.py request_memory): free memory must be at
    least gpu_memory_utilization x total (nvidia-smi's total, slightly above torch's)."""
    gmu = float(gpu_memory_utilization)
    need, free, total = gmu * gpu.total_mib / 1024, gpu.free_mib / 1024, gpu.total_mib / 1024
    ask = f"gpu_memory_utilization {gmu} x {total:.1f} GiB = {need:.1f} GiB"
    if free >= need:
        return passed(
            "gpu_memory", f"{free:.1f} GiB free >= {ask}", f"空闲 {free:.1f} GiB >= {ask}"
        )
    fits = int(gpu.free_mib / gpu.total_mib * 100) / 100
    return failed(
        "gpu_memory",
        f"{free:.1f} GiB free < {ask} (vLLM would stop at start-up: 'Free memory on device ... "
        "is less than desired GPU memory utilization')",
        f"空闲 {free:.1f} GiB < {ask}（vLLM 启动时会因 'Free memory on device ... is less than "
        "desired GPU memory utilization' 退出）",
        f"stop the other processes on the GPU (nvidia-smi lists them), or lower "
        f"gpu_memory_utilization to <= {fits}",
        f"停掉占用这张 GPU 的其他进程（nvidia-smi 能看到），或把 gpu_memory_utilization 降到 {fits} 以下",
    )


def requested_gmu(
    base_knobs: Mapping[str, Any] | str | None = None, candidates: Mapping[str, Any] | None = None
) -> float | None:
    """The largest gpu_memory_utilization a run will ask for (base knobs and candidate
    values; papermill strings such as '[0.8, 0.9]' accepted), or None when it sets none."""

    def is_gmu(name: str) -> bool:
        try:
            return knobs_mod.get(name).name == "gpu_memory_utilization"
        except knobs_mod.KnobError:
            return False

    asked: list[float] = []
    for k, v in (listish(base_knobs, "base_knobs") or {}).items():
        if is_gmu(k) and v is not None:
            asked.append(float(v))
    for k, vs in (candidates or {}).items():
        if k and is_gmu(k):
            vs = listish(vs, k)
            asked += [float(v) for v in (vs if isinstance(vs, list | tuple) else [vs])]
    return max(asked) if asked else None


def preflight(
    model: str,
    *,
    entry: Entry = "serve",
    output_dir: str | Path | None = None,
    port: int | None = None,
    host: str = "127.0.0.1",
    load_format: str | None = None,
    tokenizer: str | None = None,
    gpu_memory_utilization: float | None = None,
    vllm_cmd: Sequence[str] | str = ("vllm",),
    min_free_disk_gib: float = MIN_FREE_DISK_GIB,
) -> Report:
    """Every check for one run. ``entry``: "serve" (vllm serve subprocesses: CLI on PATH,
    port) or "llm" (``LLM(...)`` in this Python: the package must import)."""
    t0 = time.monotonic()
    gmu = gpu_memory_utilization
    if gmu is None:
        gmu = knobs_mod.default("gpu_memory_utilization", entry=entry)
    checks = [check_vllm_package(entry)]
    if entry == "serve":
        checks.append(check_vllm_cli(vllm_cmd))
    gpu, why = pick_gpu(*gpu_inventory(timeout_s=5.0))
    checks.append(check_gpu(gpu, why))
    if gpu is not None:
        checks += [check_driver(gpu), check_gpu_memory(gpu, gmu)]
    checks.append(check_model(model, tokenizer))
    if load_format == "dummy" and checks[-1].ok:
        dummy = check_dummy_vocab(model, tokenizer)
        if dummy is not None:
            checks.append(dummy)
    if entry == "serve":
        checks.append(check_port(port, host))
    if output_dir is not None:
        out_check = check_output(output_dir, min_free_disk_gib)
        if out_check.ok:  # a folder that takes a file: and what it holds can be resumed
            recorded = check_recorded(output_dir)
            out_check = out_check if recorded.ok else recorded
        checks.append(out_check)
    return Report(checks, time.monotonic() - t0)


def check_recorded(output_dir: str | Path) -> Check:
    """What the output folder already holds can be resumed: each recorded file a file of
    whole records (core.store.check_run_folder), so a run never writes past a damaged one."""
    from course_utils.core.store import check_run_folder
    from course_utils.core.validate import BadInput

    try:
        check_run_folder(output_dir)
    except BadInput as exc:
        return failed("output", exc.what, exc.what, exc.fix, exc.fix)
    return passed("output", "recorded files readable", "已记录的文件可读")


def lab_check(
    backend: str,
    *,
    lang: Lang = "en",
    root: str | Path | None = None,
    model: str,
    output_dir: str | Path | None = None,
    **kw: Any,
) -> Report | None:
    """A lab's preflight cell: print the table; stop the notebook on a failure (only the
    failure lines show, no traceback). ``backend`` other than "vllm" replays: skipped.
    Relative ``model``/``output_dir`` paths are read from ``root`` (the repo)."""
    if lang not in LABELS["gpu"]:
        raise PreflightError([f"lang must be 'en' or 'zh', not {lang!r}"])
    if backend != "vllm":
        print(
            {
                "en": f"preflight skipped: backend={backend!r} replays a recorded run, no GPU work",
                "zh": f"跳过预检：backend={backend!r} 回放记录好的运行，不用 GPU",
            }[lang]
        )
        return None
    base = Path(root) if root is not None else Path.cwd()

    def local(p: str) -> str:  # as the labs read paths: relative to the repo when there
        return str(base / p) if not Path(p).is_absolute() and (base / p).exists() else p

    if kw.get("tokenizer"):
        kw["tokenizer"] = local(kw["tokenizer"])
    if output_dir is not None and not Path(output_dir).is_absolute():
        output_dir = base / output_dir
    report = preflight(local(model), output_dir=output_dir, **kw)
    print(report.table(lang))
    report.raise_if_failed(lang)
    return report
