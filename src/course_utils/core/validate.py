"""Bad input, said once: one line ``error: <what> → fix: <how>``, exit status 2
(``error_line``, ``BadInput``), and the ``type=`` rules every entry point judges values by."""

from __future__ import annotations

import argparse
import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from course_utils.core import knobs as knobs_mod
from course_utils.core.capacity import gpu_key

EXIT_BAD_INPUT = 2
FIX_MARK = "→ fix:"


class BadInput(ValueError):
    """Input that cannot be run: ``what`` went wrong and ``fix`` says how to put it right."""

    def __init__(self, what: str, fix: str = "") -> None:
        self.what, self.fix = _one(what), _one(fix)
        super().__init__(f"{self.what} {FIX_MARK} {self.fix}" if self.fix else self.what)

    def _render_traceback_(self) -> list[str]:  # IPython (a lab): this line, no traceback
        return [error_line(self)]


def _one(s: str) -> str:
    return " ".join(str(s).split())


def error_line(exc: BaseException | str, fix: str = "") -> str:
    """THE error line: ``error: <what> → fix: <how>`` (one line, whatever ``exc`` holds).
    A message that already carries its fix keeps it; else ``fix`` (or a generic one)."""
    text = _one(exc if isinstance(exc, str) else (str(exc) or type(exc).__name__))
    if text.startswith("error: "):
        text = text[len("error: ") :]
    if FIX_MARK not in text and "→ 修复" not in text:
        text += f" {FIX_MARK} {fix or 'correct the value named above and run again'}"
    return f"error: {text}"


class CourseArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose errors are ``BadInput`` (one line, no usage block)."""

    def error(self, message: str) -> NoReturn:
        raise BadInput(message, f"see `{self.prog} --help`")


def _arg(rule: Callable[[Any], Any], name: str) -> Callable[[str], Any]:
    """An argparse ``type=`` from a rule that raises ValueError: argparse names the flag."""

    def convert(text: str) -> Any:
        try:
            return rule(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(_one(str(exc))) from None

    convert.__name__ = name
    return convert


def _number(text: Any, kind: type) -> Any:
    s = str(text).strip()
    try:
        v = float(s) if kind is float else int(s)
    except ValueError:
        raise ValueError(
            f"{text!r} is not {'a number' if kind is float else 'an integer'}"
        ) from None
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{text!r} is not a finite number")
    return v


def _at_least(kind: type, low: float, strict: bool) -> Callable[[Any], Any]:
    def rule(text: Any) -> Any:
        v = _number(text, kind)
        if v < low or (strict and v == low):
            raise ValueError(f"must be {'>' if strict else '>='} {low:g}, got {text}")
        return v

    return rule


positive_int = _arg(_at_least(int, 1, False), "positive_int")
non_negative_int = _arg(_at_least(int, 0, False), "non_negative_int")
positive_float = _arg(_at_least(float, 0, True), "positive_float")
non_negative_float = _arg(_at_least(float, 0, False), "non_negative_float")


def _rate(text: Any) -> float:
    if str(text).strip().lower() == "inf":
        return math.inf
    return float(_at_least(float, 0, True)(text))


rate = _arg(_rate, "rate")


def _in(low: float, high: float, low_open: bool, high_open: bool = False) -> Callable[[Any], float]:
    def rule(text: Any) -> float:
        v = float(_number(text, float))
        if v > high or v < low or (low_open and v == low) or (high_open and v == high):
            span = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            raise ValueError(f"must be in {span}, got {text}")
        return v

    return rule


fraction = _arg(_in(0.0, 1.0, True), "fraction")  # (0, 1]
share = _arg(_in(0.0, 1.0, False), "share")  # [0, 1]
share_below_one = _arg(_in(0.0, 1.0, False, high_open=True), "share")  # [0, 1)


def _port(text: Any) -> int:
    v = _number(text, int)
    if not 1 <= v <= 65535:
        raise ValueError(f"a port is 1-65535, got {text}")
    return int(v)


port = _arg(_port, "port")


def knob_arg(name: str, *, auto: bool = True) -> Callable[[str], Any]:
    """A ``type=`` that reads a knob's value by the knob's own rule (``knobs.validate``):
    the same sizes (1k, 1K, 1t), ranges and types as ``vllm serve`` 0.26.0.
    ``auto=False`` refuses max_model_len -1/auto where a length is needed."""

    def rule(text: str) -> Any:
        v = knobs_mod.validate({name: text})[name]
        if not auto and v == -1:
            raise ValueError("needs a length here, not -1/auto")
        return v

    return _arg(rule, name)


gpu = _arg(gpu_key, "gpu")  # every --gpu / -p gpu / --rehearse-gpu: core.capacity's names


# ------------------------------------------------------------------------- values


def parse_value(s: str) -> Any:
    """One value as typed on a command line: true/false, none, an int, a float, else text."""
    t = s.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if t.lower() in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t


def parse_values(s: str, flag: str = "--values") -> list[Any]:
    """Comma-separated values; an empty item or an empty list is refused."""
    items = [x.strip() for x in str(s).split(",")]
    if "" in items:
        raise BadInput(
            f"{flag} {s!r}: an empty value", "write values separated by commas, e.g. 64,128"
        )
    return [parse_value(x) for x in items]


def parse_rates(s: str, flag: str = "--rates", example: str = "2,4,6,8") -> list[float]:
    """Comma-separated offered rates in req/s, each finite and > 0."""
    rates = parse_values(s, flag)
    bad = [r for r in rates if isinstance(r, bool) or not isinstance(r, int | float)]
    if bad or any(not (math.isfinite(r) and r > 0) for r in rates):
        raise BadInput(f"{flag} {s!r}: rates are finite req/s > 0", f"write e.g. {flag} {example}")
    return [float(r) for r in rates]


def parse_kv(item: str, flag: str, sep: str = "=") -> tuple[str, str]:
    """``NAME=VALUE`` -> (name, value); a missing name or value is refused."""
    name, found, value = str(item).partition(sep)
    if not found or not name.strip() or not value.strip():
        raise BadInput(
            f"{flag} {item!r}: expected NAME{sep}VALUE", f"write e.g. {flag} max_num_seqs{sep}128"
        )
    return name.strip(), value


def parse_assign(items: Sequence[str] | None, many: bool, flag: str = "--base") -> dict[str, Any]:
    """Repeated ``KNOB=VALUE`` (``many``: ``KNOB=V1,V2``) flags -> {knob: value(s)}."""
    out: dict[str, Any] = {}
    for item in items or []:
        k, v = parse_kv(item, flag)
        name = k.lstrip("-").replace("-", "_")
        if name in out:
            raise BadInput(f"{flag} {k} given twice", f"give each knob once in {flag}")
        out[name] = parse_values(v, f"{flag} {k}=") if many else parse_value(v)
    return out


def check_knobs(values: Mapping[str, Any], flag: str, **kw: Any) -> dict[str, Any]:
    """``knobs.validate`` with the flag named in the error."""
    try:
        return knobs_mod.validate(values, **kw)
    except knobs_mod.KnobError as exc:
        raise BadInput(
            f"{flag}: {exc}", "use a value vLLM 0.26.0 accepts (knobs --validate)"
        ) from None


# ------------------------------------------------------------------- command lines

# the flags every workload-taking command shares, named as Workload's fields but for --rate
WORKLOAD_FLAGS = "input_len output_len num_prompts rate prefix_len seed ignore_eos max_concurrency"


def workload_from_args(a: Any, base: Mapping[str, Any] | None = None) -> Any:
    """The workload of a command line: ``base`` (a preset's ``workload_kwargs()``), then
    every workload flag the command has and was given (None: not given)."""
    from course_utils.core.records import Workload

    kw = dict(base or {})
    for flag in WORKLOAD_FLAGS.split():
        value = getattr(a, flag, None)
        if value is not None:
            kw["request_rate" if flag == "rate" else flag] = value
    if kw.get("prefix_len") and kw.get("input_len") and kw["prefix_len"] > kw["input_len"]:
        raise BadInput(
            f"--prefix-len {kw['prefix_len']} is longer than --input-len {kw['input_len']}",
            "the shared prefix is part of the prompt: keep --prefix-len <= --input-len",
        )
    return Workload(**kw)


def process_kwargs(a: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``VllmServer`` and ``run_bench`` keyword arguments of the process flags
    (--vllm-cmd, --startup-timeout, --port, --load-format, --bench-timeout, --tokenizer):
    the server and its client run the same vllm."""
    try:
        vllm_cmd = shlex.split(a.vllm_cmd)
    except ValueError as exc:
        raise BadInput(f"--vllm-cmd {a.vllm_cmd!r}: {exc}", "quote it as a shell would") from None
    if not vllm_cmd:
        raise BadInput("--vllm-cmd is empty", "give the vllm executable, e.g. --vllm-cmd vllm")
    server: dict[str, Any] = {"vllm_cmd": vllm_cmd, "startup_timeout_s": a.startup_timeout}
    if a.port:
        server["port"] = a.port
    if a.load_format:
        server["load_format"] = a.load_format
    bench: dict[str, Any] = {"timeout_s": a.bench_timeout, "vllm_cmd": vllm_cmd}
    if a.tokenizer:
        bench["tokenizer"] = a.tokenizer
    return server, bench
