"""Preflight: what a GPU run needs, checked in about a second before any GPU time is spent.

Every GPU entry point calls it before it starts a server or an ``LLM``: ``python -m
course_utils sweep|tune|preflight`` (course_utils.lab.cli), both labs (the cell after their parameters) and the
tools/gpu scripts. Each check returns a :class:`Check` with one line of detail and one line
of fix, in English and Chinese. A failed check stops the run with one line per failure
(:class:`PreflightError`, a ValueError: the CLI exits 2; in a notebook it shows those lines
instead of a traceback). Nothing here imports vLLM (that takes ~20 s on the GPU host), and
``nvidia-smi`` runs once.
"""

from __future__ import annotations

import errno
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import socket
import sys
import tempfile
import threading
import time
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from course_utils import VLLM_VERSION
from course_utils.core import knobs as knobs_mod
from course_utils.lab.modelfolder import uncovered_ids
from course_utils.lab.server import GpuInfo, gpu_inventory

__all__ = [
    "Check", "PreflightError", "Report", "check_driver", "check_dummy_vocab",
    "check_gpu", "check_gpu_memory", "check_model", "check_output", "check_port",
    "check_vllm_cli", "check_vllm_package", "lab_check", "preflight",
    "requested_gmu",
]

Lang = Literal["en", "zh"]
Entry = Literal["serve", "llm"]
GIB = 1024**3
MIN_FREE_DISK_GIB = 1.0
# vLLM 0.26.0's wheel pins torch==2.11.0 (METADATA Requires-Dist) and its _C extension links
# libcudart.so.13; torch 2.11.0 on PyPI requires cuda-toolkit==13.0.2 (its Requires-Dist).
# CUDA 13.x runs on driver branch 580 or newer (CUDA 13.0 release notes: 13.0 GA needs
# >= 580.65.06 on Linux; minor-version compatibility covers 13.x from 580 on). The recorded
# H200 runs had torch 2.11.0+cu130 on driver 580.159.04 (labs/results/h200-*/environment).
MIN_DRIVER_MAJOR = 580
HUB_HOST = ("huggingface.co", 443)
PROBE_TIMEOUT_S = 1.0

LABELS: dict[str, dict[str, str]] = {
    "vllm_package": {"en": "vLLM package", "zh": "vLLM 包"},
    "vllm_cli": {"en": "vllm on PATH", "zh": "PATH 上的 vllm"},
    "gpu": {"en": "GPU", "zh": "GPU"},
    "driver": {"en": "NVIDIA driver", "zh": "NVIDIA 驱动"},
    "gpu_memory": {"en": "free GPU memory", "zh": "空闲显存"},
    "model": {"en": "model", "zh": "模型"},
    "dummy_vocab": {"en": "dummy tokenizer", "zh": "dummy 分词器"},
    "port": {"en": "port", "zh": "端口"},
    "output": {"en": "output folder", "zh": "输出目录"},
}
_FIX = {"en": "fix", "zh": "解决"}
_INSTALL = {"en": f"pip install -r requirements-gpu.txt (vllm=={VLLM_VERSION}) in the active venv",
            "zh": f"在当前 venv 里 pip install -r requirements-gpu.txt（装上 vllm=={VLLM_VERSION}）"}


def _t(en: str, zh: str) -> dict[str, str]:
    return {"en": en, "zh": zh}


@dataclass(frozen=True)
class Check:
    """One check: ``ok`` False stops the run; ``warn`` marks a pass worth a look."""

    name: str
    ok: bool
    detail: Mapping[str, str]
    fix: Mapping[str, str] = field(default_factory=dict)
    warn: bool = False

    @property
    def mark(self) -> str:
        return "✗" if not self.ok else ("!" if self.warn else "✓")

    def line(self, lang: Lang = "en") -> str:
        """``label: detail -> fix: ...`` on one line."""
        colon = "：" if lang == "zh" else ": "
        text = f"{LABELS[self.name][lang]}{colon}{_one_line(self.detail[lang])}"
        if self.fix:
            text += f" → {_FIX[lang]}{colon}{_one_line(self.fix[lang])}"
        return text


def _one_line(s: str) -> str:
    return " ".join(s.split())


def _cols(s: str) -> int:
    """Terminal columns of ``s`` (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in s)


class PreflightError(ValueError):
    """The failed checks, one line each (with the fix). IPython shows only these lines."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = [_one_line(x) for x in lines]
        super().__init__("\n".join(self.lines))

    def _render_traceback_(self) -> list[str]:
        return [f"✗ {x}" for x in self.lines]


@dataclass
class Report:
    checks: list[Check]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.ok and c.warn]

    def lines(self, lang: Lang = "en") -> list[str]:
        """One line per failed check, with its fix."""
        return [c.line(lang) for c in self.failures()]

    def table(self, lang: Lang = "en") -> str:
        """✓/!/✗, the check, its detail; the fix on the row below a failure or warning."""
        width = max(_cols(LABELS[c.name][lang]) for c in self.checks)
        head = {"en": f"preflight ({self.elapsed_s:.1f} s)", "zh": f"预检（{self.elapsed_s:.1f} 秒）"}
        rows = [head[lang]]
        for c in self.checks:
            label = LABELS[c.name][lang]
            pad = " " * (width - _cols(label))
            rows.append(f"{c.mark} {label}{pad}  {_one_line(c.detail[lang])}")
            if c.fix:
                colon = "：" if lang == "zh" else ": "
                rows.append(f"  {' ' * width}  → {_FIX[lang]}{colon}{_one_line(c.fix[lang])}")
        return "\n".join(rows)

    def raise_if_failed(self, lang: Lang = "en") -> None:
        if not self.ok:
            raise PreflightError(self.lines(lang))


# ------------------------------------------------------------------------------ vLLM


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
            return Check("vllm_package", True, _t(
                "not in this Python; the servers run the `vllm` on PATH",
                "不在这个 Python 里；服务由 PATH 上的 `vllm` 启动"))
        return Check("vllm_package", False, _t(
            f"vLLM is not installed in this Python ({sys.executable})",
            f"这个 Python（{sys.executable}）里没有安装 vLLM"), _INSTALL)
    version = _vllm_version(spec.origin)
    pin = _t(f"pip install vllm=={VLLM_VERSION} (flags, defaults and log lines differ "
             "between versions)", f"pip install vllm=={VLLM_VERSION}（不同版本的参数、默认值和日志都不一样）")
    if version is None:
        return Check("vllm_package", True, _t(
            f"vLLM at {Path(spec.origin or '').parent}, version unknown",
            f"vLLM 在 {Path(spec.origin or '').parent}，版本未知"), pin, warn=True)
    if version != VLLM_VERSION:
        return Check("vllm_package", True, _t(
            f"vLLM {version} installed; the course is written for {VLLM_VERSION}",
            f"装的是 vLLM {version}；本课程针对 {VLLM_VERSION}"), pin, warn=True)
    return Check("vllm_package", True, _t(f"vLLM {version}", f"vLLM {version}"))


def check_vllm_cli(vllm_cmd: Sequence[str] | str = ("vllm",)) -> Check:
    """The executable that runs ``vllm serve`` / ``vllm bench serve`` is on PATH."""
    cmd = shlex.split(vllm_cmd) if isinstance(vllm_cmd, str) else list(vllm_cmd)
    exe = cmd[0] if cmd else "vllm"
    path = shutil.which(exe)
    if path is None:
        return Check("vllm_cli", False, _t(
            f"`{exe}` is not on PATH, so `vllm serve` and `vllm bench serve` cannot start",
            f"PATH 上找不到 `{exe}`，`vllm serve` 和 `vllm bench serve` 都起不来"),
            _t(_INSTALL["en"] + ", or activate the venv that has it",
               _INSTALL["zh"] + "，或先激活装了它的 venv"))
    return Check("vllm_cli", True, _t(path, path))


# ------------------------------------------------------------------------------ GPU


def pick_gpu(gpus: Sequence[GpuInfo] | None, said: str = ""
             ) -> tuple[GpuInfo | None, dict[str, str]]:
    """The GPU vLLM will use (the first one CUDA_VISIBLE_DEVICES leaves), or why none.
    ``gpus``/``said``: server.gpu_inventory() (None: no nvidia-smi)."""
    if gpus is None:
        return None, _t("no nvidia-smi: no NVIDIA driver here", "没有 nvidia-smi：这里没有 NVIDIA 驱动")
    if not gpus:
        return None, _t(f"nvidia-smi lists none: {said}", f"nvidia-smi 没有列出 GPU：{said}")
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return gpus[0], {}
    first = cvd.split(",")[0].strip()
    for g in gpus:
        if first == str(g.index) or (first.startswith("GPU-") and g.uuid.startswith(first)):
            return g, {}
    return None, _t(f"CUDA_VISIBLE_DEVICES={cvd!r} hides all {len(gpus)} GPU(s)",
                    f"CUDA_VISIBLE_DEVICES={cvd!r} 把 {len(gpus)} 张 GPU 全部隐藏了")


def check_gpu(gpu: GpuInfo | None, why: Mapping[str, str] | None = None) -> Check:
    if gpu is None:
        why = why or _t("not found", "未找到")
        return Check("gpu", False, _t(f"no CUDA GPU visible ({why['en']})",
                                      f"看不到 CUDA GPU（{why['zh']}）"), _t(
            "run on a GPU instance (AutoDL: not in no-GPU mode); without a GPU, a lab can "
            "replay a recorded run: -p backend replay -p replay_dir labs/results/<run>/<lab>",
            "在有 GPU 的实例上运行（AutoDL 不要用无卡模式）；没有 GPU 时，lab 可以回放一次记录好的运行："
            "-p backend replay -p replay_dir labs/results/<run>/<lab>"))
    free, total = gpu.free_mib / 1024, gpu.total_mib / 1024
    return Check("gpu", True, _t(
        f"{gpu.name} (GPU {gpu.index}): {free:.1f} of {total:.1f} GiB free",
        f"{gpu.name}（GPU {gpu.index}）：{total:.1f} GiB 中空闲 {free:.1f} GiB"))


def check_driver(gpu: GpuInfo) -> Check:
    """Driver branch >= MIN_DRIVER_MAJOR (CUDA 13.0, which torch 2.11.0 is built for)."""
    try:
        major = int(gpu.driver.split(".")[0])
    except ValueError:
        return Check("driver", True, _t(f"driver {gpu.driver!r}: version not readable",
                                        f"驱动 {gpu.driver!r}：读不出版本"), warn=True)
    if major < MIN_DRIVER_MAJOR:
        return Check("driver", False, _t(
            f"driver {gpu.driver} is older than {MIN_DRIVER_MAJOR}: vLLM {VLLM_VERSION} runs on "
            "torch 2.11.0, built for CUDA 13.0",
            f"驱动 {gpu.driver} 低于 {MIN_DRIVER_MAJOR}：vLLM {VLLM_VERSION} 用的 torch 2.11.0 "
            "是为 CUDA 13.0 编译的"), _t(
            "rent a machine whose driver supports CUDA 13.0 or newer (AutoDL lists it per "
            "machine); the image's CUDA toolkit does not matter",
            "换一台驱动支持 CUDA 13.0 及以上的机器（AutoDL 每台机器都标了）；镜像里的 CUDA toolkit 无关紧要"))
    return Check("driver", True, _t(f"{gpu.driver} (CUDA 13 needs >= {MIN_DRIVER_MAJOR})",
                                    f"{gpu.driver}（CUDA 13 需要 >= {MIN_DRIVER_MAJOR}）"))


def check_gpu_memory(gpu: GpuInfo, gpu_memory_utilization: float) -> Check:
    """vLLM's own start-up check (v1/worker/utils.py request_memory): free memory must be at
    least gpu_memory_utilization x total, else "Free memory on device ... is less than
    desired GPU memory utilization" after the model config is loaded. nvidia-smi's total
    also counts the driver's reserved memory (143,771 MiB on the H200, torch sees 139.8 GiB),
    so this is up to ~0.5 % of the total stricter than vLLM's."""
    gmu = float(gpu_memory_utilization)
    need, free, total = gmu * gpu.total_mib / 1024, gpu.free_mib / 1024, gpu.total_mib / 1024
    if free >= need:
        return Check("gpu_memory", True, _t(
            f"{free:.1f} GiB free >= gpu_memory_utilization {gmu} x {total:.1f} GiB = {need:.1f} GiB",
            f"空闲 {free:.1f} GiB >= gpu_memory_utilization {gmu} x {total:.1f} GiB = {need:.1f} GiB"))
    fits = int(gpu.free_mib / gpu.total_mib * 100) / 100
    return Check("gpu_memory", False, _t(
        f"{free:.1f} GiB free < gpu_memory_utilization {gmu} x {total:.1f} GiB = {need:.1f} GiB "
        "(vLLM would stop at start-up: 'Free memory on device ... is less than desired GPU "
        "memory utilization')",
        f"空闲 {free:.1f} GiB < gpu_memory_utilization {gmu} x {total:.1f} GiB = {need:.1f} GiB"
        "（vLLM 启动时会因 'Free memory on device ... is less than desired GPU memory "
        "utilization' 退出）"), _t(
        f"stop the other processes on the GPU (nvidia-smi lists them), or lower "
        f"gpu_memory_utilization to <= {fits}",
        f"停掉占用这张 GPU 的其他进程（nvidia-smi 能看到），或把 gpu_memory_utilization 降到 {fits} 以下"))


# ------------------------------------------------------------------------------ model


def _is_hub_id(model: str) -> bool:
    """``org/name`` (or a bare legacy name) that is not a local path."""
    return (not model.startswith(("/", ".", "~"))
            and re.fullmatch(r"[\w.-]+(/[\w.-]+)?", model) is not None)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _hf_cached(model: str) -> bool:
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    root = Path(hub) if hub else Path(os.environ.get("HF_HOME") or "~/.cache/huggingface") / "hub"
    snaps = root.expanduser() / f"models--{model.replace('/', '--')}" / "snapshots"
    return snaps.is_dir() and any(snaps.iterdir())


def _reachable(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """A TCP connect within ``timeout_s`` (DNS included: run in a thread we stop waiting for)."""
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                result.append(True)
        except OSError:
            result.append(False)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout_s)
    return bool(result and result[0])


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "tiktoken.model")


def _tokenizer_file(folder: Path) -> str | None:
    if not (folder / "tokenizer_config.json").is_file():
        return None
    for name in _TOKENIZER_FILES:
        if (folder / name).is_file():
            return name
    tik = sorted(folder.glob("*.tiktoken"))
    return tik[0].name if tik else None


def _check_hub(model: str) -> Check:
    """A hub id downloads at start-up: ModelScope, the HF cache, a mirror or the network."""
    def ok(en: str, zh: str) -> Check:
        return Check("model", True, _t(f"{model} (hub id, {en})", f"{model}（仓库 id，{zh}）"))

    if os.environ.get("VLLM_USE_MODELSCOPE", "False").lower() == "true":  # vllm/envs.py
        if importlib.util.find_spec("modelscope") is not None:
            return ok("from ModelScope", "从 ModelScope 下载")
        return Check("model", False, _t(
            f"{model}: VLLM_USE_MODELSCOPE=True, but the modelscope package is missing",
            f"{model}：设了 VLLM_USE_MODELSCOPE=True，但没装 modelscope 包"),
            _t("pip install modelscope", "pip install modelscope"))
    if _hf_cached(model):
        return ok("in the HF cache", "已在 HF 缓存里")
    offline = os.environ.get("HF_HUB_OFFLINE")
    if _truthy(offline):
        return Check("model", False, _t(
            f"{model} is a hub id, but HF_HUB_OFFLINE={offline} forbids downloading it",
            f"{model} 是模型仓库 id，但 HF_HUB_OFFLINE={offline} 禁止下载"), _t(
            "download the model to a folder and pass the folder, or unset HF_HUB_OFFLINE",
            "先把模型下载到目录里再传目录，或取消 HF_HUB_OFFLINE"))
    endpoint = os.environ.get("HF_ENDPOINT")
    if endpoint:
        return ok(f"through the mirror {endpoint}", f"经镜像 {endpoint} 下载")
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if proxy:  # e.g. AutoDL's network_turbo; a direct connect says nothing then
        return ok(f"through the proxy {proxy}", f"经代理 {proxy} 下载")
    if _reachable(*HUB_HOST):
        return ok("huggingface.co reachable", "能连上 huggingface.co")
    return Check("model", False, _t(
        f"{model} is a hub id, and huggingface.co is not reachable from here (no HF_ENDPOINT "
        "mirror, no VLLM_USE_MODELSCOPE)", f"{model} 是模型仓库 id，这里连不上 huggingface.co（没设 "
        "HF_ENDPOINT 镜像，也没设 VLLM_USE_MODELSCOPE）"), _t(
        "export HF_ENDPOINT=https://hf-mirror.com, or VLLM_USE_MODELSCOPE=True (pip install "
        "modelscope), or download the model to a folder and pass the folder",
        "export HF_ENDPOINT=https://hf-mirror.com，或设 VLLM_USE_MODELSCOPE=True（pip install "
        "modelscope），或先把模型下载到目录里再传目录"))


def check_model(model: str, tokenizer: str | None = None) -> Check:
    """A local folder holds config.json and tokenizer files; a hub id can be downloaded."""
    path = Path(model).expanduser()
    if not path.exists():
        if _is_hub_id(model):
            return _check_hub(model)
        return Check("model", False, _t(f"model folder {model} does not exist",
                                        f"模型目录 {model} 不存在"), _t(
            "check the path (download the model first), or give a hub id such as "
            "Qwen/Qwen2.5-7B-Instruct", "检查路径（先下载模型），或者给一个仓库 id，比如 Qwen/Qwen2.5-7B-Instruct"))
    if path.is_file():
        return Check("model", False, _t(f"{path} is a file, not a model folder",
                                        f"{path} 是文件，不是模型目录"),
                     _t("pass the folder that holds config.json", "传包含 config.json 的那个目录"))
    if not (path / "config.json").is_file():
        return Check("model", False, _t(f"no config.json in {path}", f"{path} 里没有 config.json"), _t(
            "pass the folder that holds config.json (the download's root), or download it again",
            "传包含 config.json 的目录（下载的根目录），或重新下载"))
    tok_dir = Path(tokenizer).expanduser() if tokenizer else path
    if tokenizer and not tok_dir.is_dir():
        return Check("model", True, _t(f"{path} (config.json; tokenizer {tokenizer})",
                                       f"{path}（有 config.json；分词器 {tokenizer}）"))
    found = _tokenizer_file(tok_dir)
    if found is None:
        return Check("model", False, _t(
            f"{tok_dir} has no tokenizer (tokenizer.json or tokenizer.model/vocab files, plus "
            "tokenizer_config.json)", f"{tok_dir} 里没有分词器（tokenizer.json 或 tokenizer.model/"
            "vocab 文件，外加 tokenizer_config.json）"), _t(
            "download the tokenizer files into the folder too, or pass tokenizer=<folder>; for "
            "dummy weights: python -m course_utils.lab.modelfolder <new folder>",
            "把分词器文件也下载进这个目录，或传 tokenizer=<目录>；用随机权重时："
            "python -m course_utils.lab.modelfolder <新目录>"))
    return Check("model", True, _t(f"{path} (config.json, {found})", f"{path}（config.json、{found}）"))


def check_dummy_vocab(model: str, tokenizer: str | None = None) -> Check | None:
    """``load_format=dummy``: random logits may pick any id below config.json's vocab_size,
    so the tokenizer must decode all of them (see course_utils.lab.modelfolder). None when
    there is no local folder to read."""
    path = Path(model).expanduser()
    tok_dir = Path(tokenizer).expanduser() if tokenizer else path
    if not (path / "config.json").is_file() or not tok_dir.is_dir():
        return None
    gap = uncovered_ids(path, tok_dir)
    if gap is None:
        return Check("dummy_vocab", True, _t(
            f"no tokenizer.json in {tok_dir} to compare with config.json's vocab_size",
            f"{tok_dir} 里没有 tokenizer.json，无法和 config.json 的 vocab_size 对照"), warn=True)
    size, missing = gap
    if missing:
        return Check("dummy_vocab", False, _t(
            f"load_format=dummy: the tokenizer decodes {size - missing:,} of the {size:,} ids "
            "in config.json's vocab_size, and random weights can emit any of them",
            f"load_format=dummy：config.json 的 vocab_size 有 {size:,} 个 id，分词器只能解码 "
            f"{size - missing:,} 个，而随机权重可能生成其中任何一个"), _t(
            "make a folder whose tokenizer covers every id: python -m course_utils.lab.modelfolder "
            "<new folder>, then pass it as the model",
            "生成一个分词器覆盖全部 id 的目录：python -m course_utils.lab.modelfolder <新目录>，再把它作为 model 传入"))
    return Check("dummy_vocab", True, _t(f"covers all {size:,} ids", f"覆盖全部 {size:,} 个 id"))


# ------------------------------------------------------------------------------ port, disk


def check_port(port: int | None, host: str = "127.0.0.1") -> Check:
    """``port`` can be bound on ``host`` (None or 0: a free one is picked per server)."""
    if not port:
        return Check("port", True, _t("none given: a free port is picked for each server",
                                      "未指定：每个服务自动选一个空闲端口"))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            s.bind((host, int(port)))
        except OSError as exc:
            if exc.errno == errno.EACCES:
                return Check("port", False, _t(f"port {port} needs root on {host}",
                                               f"端口 {port} 在 {host} 上需要 root 权限"),
                             _t("use a port above 1024", "换一个大于 1024 的端口"))
            busy = exc.errno == errno.EADDRINUSE
            return Check("port", False, _t(
                f"port {port} on {host} is in use" if busy else f"port {port} on {host}: {exc.strerror}",
                f"{host} 上的端口 {port} 已被占用" if busy else f"{host} 上的端口 {port}：{exc.strerror}"), _t(
                f"choose another port (or none: a free one is picked), or stop what listens "
                f"there: ss -ltnp | grep :{port}",
                f"换一个端口（或不指定，自动选空闲端口），或停掉占用它的进程：ss -ltnp | grep :{port}"))
    return Check("port", True, _t(f"{host}:{port} is free", f"{host}:{port} 空闲"))


def check_output(output_dir: str | Path, min_free_gib: float = MIN_FREE_DISK_GIB) -> Check:
    """The folder (or its nearest existing parent) takes a file, with disk space left."""
    target = Path(output_dir).expanduser().absolute()
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    where_fix = _t("choose an output_dir you can write, e.g. on the data disk (/root/autodl-tmp "
                   "on AutoDL)", "换一个可写的 output_dir，比如数据盘上的目录（AutoDL 上是 /root/autodl-tmp）")
    if not probe.is_dir():
        return Check("output", False, _t(f"{probe} is a file, so {target} cannot be a folder",
                                         f"{probe} 是文件，{target} 无法成为目录"), where_fix)
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".preflight-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return Check("output", False, _t(f"cannot write in {probe}: {exc.strerror}",
                                         f"无法写入 {probe}：{exc.strerror}"), where_fix)
    free = shutil.disk_usage(probe).free / GIB
    if free < min_free_gib:
        return Check("output", False, _t(
            f"{free:.2f} GiB free on the disk of {probe}, less than {min_free_gib:g} GiB for the results",
            f"{probe} 所在磁盘只剩 {free:.2f} GiB，结果至少需要 {min_free_gib:g} GiB"), where_fix)
    return Check("output", True, _t(f"{target} ({free:.0f} GiB free)", f"{target}（剩余 {free:.0f} GiB）"))


# ------------------------------------------------------------------------------ all of it


def requested_gmu(base_knobs: Mapping[str, Any] | str | None = None,
                  candidates: Mapping[str, Any] | None = None) -> float | None:
    """The largest gpu_memory_utilization a run will ask for (base knobs and candidate
    values; papermill strings such as '[0.8, 0.9]' accepted), or None when it sets none."""

    def listish(v: Any) -> Any:
        return json.loads(v) if isinstance(v, str) and v.strip()[:1] in "[{" else v

    def is_gmu(name: str) -> bool:
        try:
            return knobs_mod.get(name).name == "gpu_memory_utilization"
        except knobs_mod.KnobError:
            return False

    asked: list[float] = []
    for k, v in (listish(base_knobs) or {}).items():
        if is_gmu(k) and v is not None:
            asked.append(float(v))
    for k, vs in (candidates or {}).items():
        if k and is_gmu(k):
            vs = listish(vs)
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
    gmu = (gpu_memory_utilization if gpu_memory_utilization is not None
           else knobs_mod.default("gpu_memory_utilization", entry=entry))
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
        checks.append(check_output(output_dir, min_free_disk_gib))
    return Report(checks, time.monotonic() - t0)


def lab_check(backend: str, *, lang: Lang = "en", root: str | Path | None = None,
              model: str, output_dir: str | Path | None = None, **kw: Any) -> Report | None:
    """A lab's preflight cell: print the table; stop the notebook on a failure (only the
    failure lines show, no traceback). ``backend`` other than "vllm" replays: skipped.
    Relative ``model``/``output_dir`` paths are read from ``root`` (the repo)."""
    if lang not in LABELS["gpu"]:
        raise PreflightError([f"lang must be 'en' or 'zh', not {lang!r}"])
    if backend != "vllm":
        print({"en": f"preflight skipped: backend={backend!r} replays a recorded run, no GPU work",
               "zh": f"跳过预检：backend={backend!r} 回放记录好的运行，不用 GPU"}[lang])
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
