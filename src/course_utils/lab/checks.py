"""Preflight's building blocks (``Check``, ``Report``, ``PreflightError``) and the checks of
the model, the port and the output folder; ``lab.preflight`` adds vLLM's and the GPU's."""

from __future__ import annotations

import errno
import importlib.util
import os
import re
import shutil
import socket
import tempfile
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from course_utils import VLLM_VERSION
from course_utils.lab.modelfolder import uncovered_ids

Lang = Literal["en", "zh"]
GIB = 1024**3
MIN_FREE_DISK_GIB = 1.0
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


INSTALL_HINTS = {
    "en": f"pip install -r requirements-gpu.txt (vllm=={VLLM_VERSION}) in the active venv",
    "zh": f"在当前 venv 里 pip install -r requirements-gpu.txt（装上 vllm=={VLLM_VERSION}）",
}


def en_zh(en: str, zh: str) -> dict[str, str]:
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
        """``label: detail → fix: ...`` on one line."""
        text = f"{LABELS[self.name][lang]}{_colon(lang)}{_one_line(self.detail[lang])}"
        return f"{text} {self.fix_text(lang)}" if self.fix else text

    def fix_text(self, lang: Lang) -> str:
        """``→ fix: ...``."""
        return f"→ {'解决' if lang == 'zh' else 'fix'}{_colon(lang)}{_one_line(self.fix[lang])}"


def passed(
    name: str, en: str, zh: str, *, warn: bool = False, fix: Mapping[str, str] | None = None
) -> Check:
    return Check(name, True, en_zh(en, zh), fix or {}, warn)


def failed(name: str, en: str, zh: str, fix_en: str, fix_zh: str) -> Check:
    return Check(name, False, en_zh(en, zh), en_zh(fix_en, fix_zh))


def _colon(lang: Lang) -> str:
    return "：" if lang == "zh" else ": "


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
        t = self.elapsed_s
        rows = [f"预检（{t:.1f} 秒）" if lang == "zh" else f"preflight ({t:.1f} s)"]
        for c in self.checks:
            label = LABELS[c.name][lang]
            pad = " " * (width - _cols(label))
            rows.append(f"{c.mark} {label}{pad}  {_one_line(c.detail[lang])}")
            if c.fix:
                rows.append(f"  {' ' * width}  {c.fix_text(lang)}")
        return "\n".join(rows)

    def raise_if_failed(self, lang: Lang = "en") -> None:
        if not self.ok:
            raise PreflightError(self.lines(lang))


def _is_hub_id(model: str) -> bool:
    """``org/name`` (or a bare legacy name) that is not a local path."""
    return (
        not model.startswith(("/", ".", "~"))
        and re.fullmatch(r"[\w.-]+(/[\w.-]+)?", model) is not None
    )


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


_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "tiktoken.model",
)


def _tokenizer_file(folder: Path) -> str | None:
    if not (folder / "tokenizer_config.json").is_file():
        return None
    for name in _TOKENIZER_FILES:
        if (folder / name).is_file():
            return name
    tik = sorted(folder.glob("*.tiktoken"))
    return tik[0].name if tik else None


_FETCH_FIX = ("download the model to a folder and pass the folder", "先把模型下载到目录里再传目录")
_MODELFOLDER = "python -m course_utils modelfolder"


def _check_hub(model: str) -> Check:
    """A hub id downloads at start-up: ModelScope, the HF cache, a mirror or the network."""

    def ok(en: str, zh: str) -> Check:
        return passed("model", f"{model} (hub id, {en})", f"{model}（仓库 id，{zh}）")

    if os.environ.get("VLLM_USE_MODELSCOPE", "False").lower() == "true":  # vllm/envs.py
        if importlib.util.find_spec("modelscope") is not None:
            return ok("from ModelScope", "从 ModelScope 下载")
        return failed(
            "model",
            f"{model}: VLLM_USE_MODELSCOPE=True, but the modelscope package is missing",
            f"{model}：设了 VLLM_USE_MODELSCOPE=True，但没装 modelscope 包",
            "pip install modelscope",
            "pip install modelscope",
        )
    if _hf_cached(model):
        return ok("in the HF cache", "已在 HF 缓存里")
    offline = os.environ.get("HF_HUB_OFFLINE")
    if _truthy(offline):
        return failed(
            "model",
            f"{model} is a hub id, but HF_HUB_OFFLINE={offline} forbids downloading it",
            f"{model} 是模型仓库 id，但 HF_HUB_OFFLINE={offline} 禁止下载",
            f"{_FETCH_FIX[0]}, or unset HF_HUB_OFFLINE",
            f"{_FETCH_FIX[1]}，或取消 HF_HUB_OFFLINE",
        )
    endpoint = os.environ.get("HF_ENDPOINT")
    if endpoint:
        return ok(f"through the mirror {endpoint}", f"经镜像 {endpoint} 下载")
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if proxy:  # e.g. AutoDL's network_turbo; a direct connect says nothing then
        return ok(f"through the proxy {proxy}", f"经代理 {proxy} 下载")
    if _reachable(*HUB_HOST):
        return ok("huggingface.co reachable", "能连上 huggingface.co")
    return failed(
        "model",
        f"{model} is a hub id, and huggingface.co is not reachable from here (no HF_ENDPOINT "
        "mirror, no VLLM_USE_MODELSCOPE)",
        f"{model} 是模型仓库 id，这里连不上 huggingface.co（没设 "
        "HF_ENDPOINT 镜像，也没设 VLLM_USE_MODELSCOPE）",
        "export HF_ENDPOINT=https://hf-mirror.com, or VLLM_USE_MODELSCOPE=True (pip install "
        f"modelscope), or {_FETCH_FIX[0]}",
        "export HF_ENDPOINT=https://hf-mirror.com，或设 VLLM_USE_MODELSCOPE=True（pip install "
        f"modelscope），或{_FETCH_FIX[1]}",
    )


def check_model(model: str, tokenizer: str | None = None) -> Check:
    """A local folder holds config.json and tokenizer files; a hub id can be downloaded."""
    path = Path(model).expanduser()
    if not path.exists():
        if _is_hub_id(model):
            return _check_hub(model)
        return failed(
            "model",
            f"model folder {model} does not exist",
            f"模型目录 {model} 不存在",
            "check the path (download the model first), or give a hub id such as "
            "Qwen/Qwen2.5-7B-Instruct",
            "检查路径（先下载模型），或者给一个仓库 id，比如 Qwen/Qwen2.5-7B-Instruct",
        )
    if path.is_file():
        return failed(
            "model",
            f"{path} is a file, not a model folder",
            f"{path} 是文件，不是模型目录",
            "pass the folder that holds config.json",
            "传包含 config.json 的那个目录",
        )
    if not (path / "config.json").is_file():
        return failed(
            "model",
            f"no config.json in {path}",
            f"{path} 里没有 config.json",
            "pass the folder that holds config.json (the download's root), or download it again",
            "传包含 config.json 的目录（下载的根目录），或重新下载",
        )
    tok_dir = Path(tokenizer).expanduser() if tokenizer else path
    if tokenizer and not tok_dir.is_dir():
        en, zh = (
            f"{path} (config.json; tokenizer {tokenizer})",
            f"{path}（有 config.json；分词器 {tokenizer}）",
        )
        return passed("model", en, zh)
    found = _tokenizer_file(tok_dir)
    if found is None:
        return failed(
            "model",
            f"{tok_dir} has no tokenizer (tokenizer.json or tokenizer.model/vocab files, plus "
            "tokenizer_config.json)",
            f"{tok_dir} 里没有分词器（tokenizer.json 或 tokenizer.model/"
            "vocab 文件，外加 tokenizer_config.json）",
            "download the tokenizer files into the folder too, or pass tokenizer=<folder>; for "
            f"dummy weights: {_MODELFOLDER} <new folder>",
            f"把分词器文件也下载进这个目录，或传 tokenizer=<目录>；用随机权重时：{_MODELFOLDER} <新目录>",
        )
    return passed("model", f"{path} (config.json, {found})", f"{path}（config.json、{found}）")


def check_dummy_vocab(model: str, tokenizer: str | None = None) -> Check | None:
    """``load_format=dummy``: the tokenizer must decode every id below config.json's
    vocab_size (random logits may pick any). None when there is no local folder to read."""
    path = Path(model).expanduser()
    tok_dir = Path(tokenizer).expanduser() if tokenizer else path
    if not (path / "config.json").is_file() or not tok_dir.is_dir():
        return None
    gap = uncovered_ids(path, tok_dir)
    if gap is None:
        return passed(
            "dummy_vocab",
            f"no tokenizer.json in {tok_dir} to compare with config.json's vocab_size",
            f"{tok_dir} 里没有 tokenizer.json，无法和 config.json 的 vocab_size 对照",
            warn=True,
        )
    size, missing = gap
    if missing:
        return failed(
            "dummy_vocab",
            f"load_format=dummy: the tokenizer decodes {size - missing:,} of the {size:,} ids "
            "in config.json's vocab_size, and random weights can emit any of them",
            f"load_format=dummy：config.json 的 vocab_size 有 {size:,} 个 id，分词器只能解码 "
            f"{size - missing:,} 个，而随机权重可能生成其中任何一个",
            f"make a folder whose tokenizer covers every id: {_MODELFOLDER} <new folder>, then "
            "pass it as the model",
            f"生成一个分词器覆盖全部 id 的目录：{_MODELFOLDER} <新目录>，再把它作为 model 传入",
        )
    return passed("dummy_vocab", f"covers all {size:,} ids", f"覆盖全部 {size:,} 个 id")


def check_port(port: int | None, host: str = "127.0.0.1") -> Check:
    """``port`` can be bound on ``host`` (None or 0: a free one is picked per server)."""
    if not port:
        en, zh = (
            "none given: a free port is picked for each server",
            "未指定：每个服务自动选一个空闲端口",
        )
        return passed("port", en, zh)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            s.bind((host, int(port)))
        except OSError as exc:
            if exc.errno == errno.EACCES:
                en, zh = (
                    f"port {port} needs root on {host}",
                    f"端口 {port} 在 {host} 上需要 root 权限",
                )
                return failed("port", en, zh, "use a port above 1024", "换一个大于 1024 的端口")
            busy = exc.errno == errno.EADDRINUSE
            en, zh = (
                (" is in use", " 已被占用") if busy else (f": {exc.strerror}", f"：{exc.strerror}")
            )
            return failed(
                "port",
                f"port {port} on {host}{en}",
                f"{host} 上的端口 {port}{zh}",
                f"choose another port (or none: a free one is picked), or stop what listens "
                f"there: ss -ltnp | grep :{port}",
                f"换一个端口（或不指定，自动选空闲端口），或停掉占用它的进程：ss -ltnp | grep :{port}",
            )
    return passed("port", f"{host}:{port} is free", f"{host}:{port} 空闲")


_WRITABLE_FIX = (
    "choose an output_dir you can write, e.g. on the data disk (/root/autodl-tmp on AutoDL)",
    "换一个可写的 output_dir，比如数据盘上的目录（AutoDL 上是 /root/autodl-tmp）",
)


def check_output(output_dir: str | Path, min_free_gib: float = MIN_FREE_DISK_GIB) -> Check:
    """The folder (or its nearest existing parent) takes a file, with disk space left."""
    target = Path(output_dir).expanduser().absolute()
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        en, zh = (
            f"{probe} is a file, so {target} cannot be a folder",
            f"{probe} 是文件，{target} 无法成为目录",
        )
        return failed("output", en, zh, *_WRITABLE_FIX)
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".preflight-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        en, zh = f"cannot write in {probe}: {exc.strerror}", f"无法写入 {probe}：{exc.strerror}"
        return failed("output", en, zh, *_WRITABLE_FIX)
    free = shutil.disk_usage(probe).free / GIB
    if free < min_free_gib:
        return failed(
            "output",
            f"{free:.2f} GiB free on the disk of {probe}, less than {min_free_gib:g} GiB for the results",
            f"{probe} 所在磁盘只剩 {free:.2f} GiB，结果至少需要 {min_free_gib:g} GiB",
            *_WRITABLE_FIX,
        )
    return passed("output", f"{target} ({free:.0f} GiB free)", f"{target}（剩余 {free:.0f} GiB）")
