"""Shared helpers of the vLLM log parsers: stamps, one-line reasons."""

from __future__ import annotations

import re
from datetime import datetime

MAX_REASON = 300
# "INFO 11-29 10:15:37 [file.py:N]" (vllm/logger.py: datefmt "%m-%d %H:%M:%S")
LOG_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) \[")
STAMP_PARTS = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def one_line(text: str, limit: int = MAX_REASON) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def log_stamps(text: str) -> list[str]:
    """Every "MM-DD HH:MM:SS" stamp of vLLM's logger in ``text``, in order."""
    return [m.group(1) for m in LOG_STAMP.finditer(text)]


def stamp_datetime(stamp: str, year: int) -> datetime:
    """A vLLM stamp ("11-29 11:45:29") as a naive local datetime of ``year``."""
    m = STAMP_PARTS.fullmatch(stamp.strip())
    if m is None:
        raise ValueError(f"not a vLLM log stamp: {stamp!r}")
    mo, d, h, mi, s = (int(x) for x in m.groups())
    return datetime(year, mo, d, h, mi, s)


def last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - the last one wins
        pass
    return found
