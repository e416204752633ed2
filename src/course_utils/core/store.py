"""The one JSONL store and the rule for reading recorded files.

``append_jsonl`` is the one writer (append + fsync; a killed writer's torn line never glues
onto the next record; non-finite floats become strings) and ``read_jsonl`` the one reader (torn
or blank lines skipped); ``read_records`` reads strictly (a bad line names file and line).
A recorded run keeps long files gzipped (``gzip_file``); every reader follows
``resolve_path``: the path, or its ``.gz`` twin when only that exists.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

GZ = ".gz"


def resolve_path(path: str | Path) -> Path:
    """The path, or its ``.gz`` twin when only that exists (the plain file wins); the
    path itself when neither exists, so a caller's "missing" handling is unchanged."""
    p = Path(path)
    if p.suffix == GZ or p.is_file():
        return p
    twin = p.with_name(p.name + GZ)
    return twin if twin.is_file() else p


def is_present(path: str | Path) -> bool:
    """Whether the file or its ``.gz`` twin exists."""
    return resolve_path(path).is_file()


def read_text(path: str | Path, errors: str = "strict") -> str:
    """The UTF-8 text of the file or of its gzipped twin; FileNotFoundError when neither."""
    p = resolve_path(path)
    if p.suffix == GZ:
        return gzip.decompress(p.read_bytes()).decode("utf-8", errors=errors)
    return p.read_text(encoding="utf-8", errors=errors)


def gzip_file(path: str | Path) -> Path:
    """Replace ``path`` by ``path.gz``: deterministic bytes (mtime 0, no file name in the
    header, OS byte "unknown"), so recording a run twice gives identical files."""
    p = Path(path)
    data = gzip.compress(p.read_bytes(), compresslevel=9, mtime=0)
    # byte 9 of the header names the OS; fix it so the bytes do not depend on the platform
    data = data[:9] + b"\xff" + data[10:]
    out = p.with_name(p.name + GZ)
    out.write_bytes(data)
    p.unlink()
    return out


def jsonable(v: Any) -> Any:
    """``v`` with non-finite floats as "inf"/"-inf"/"nan" and mappings/sequences walked."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    if hasattr(v, "to_json"):
        return jsonable(v.to_json())
    return v


def append_jsonl(path: str | Path, record: Any) -> None:
    """Append one record (a mapping or a record with ``to_json``) as one line, fsync'd."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(jsonable(record), ensure_ascii=False, allow_nan=False) + "\n"
    with open(p, "r+b" if p.exists() else "w+b") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() > 0:  # a writer killed mid-line left no newline: do not glue onto it
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                _move_torn_tail(p, fh)
        fh.seek(0, os.SEEK_END)
        fh.write(line.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def _move_torn_tail(p: Path, fh: Any) -> None:
    """A killed writer's unfinished last line goes, byte for byte, to ``<file>.torn``; the
    file keeps only whole records (so a strict reader finds no fragment in the middle)."""
    fh.seek(0)
    data = fh.read()
    cut = data.rfind(b"\n") + 1
    with open(p.with_name(p.name + ".torn"), "ab") as side:
        side.write(data[cut:] + b"\n")
        side.flush()
        os.fsync(side.fileno())
    fh.truncate(cut)


# the two JSONL files of a sweep()/tune() run folder
POINTS_FILE = "points.jsonl"  # one ServedPoint per served point
TUNE_FILE = "tune.jsonl"  # tune(): one record per step, then a summary


def last_summary(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last ``"kind": "summary"`` record of a tune.jsonl (a resumed loop adds one)."""
    return next((r for r in reversed(steps) if r.get("kind") == "summary"), None)


def tune_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """The summary a tune() run folder ended with; None before it ended."""
    return last_summary(read_jsonl(Path(run_dir) / TUNE_FILE))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL file (or its ``.gz`` twin); [] when it is missing; torn or
    blank lines are skipped."""
    if not is_present(path):
        return []
    out: list[dict[str, Any]] = []
    for line in read_text(path, errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


# ---------------------------------------------------------------- a run folder's integrity

# the files a run folder may hold, with the key each of their records must carry
RUN_FILES: dict[str, str | None] = {
    POINTS_FILE: "key",
    TUNE_FILE: "kind",
    "knee.jsonl": "rate_key",
    "batch1.jsonl": None,
    "results.jsonl": None,
}


def _point_record(rec: dict[str, Any]) -> None:
    """A points.jsonl / knee.jsonl line that a resume or a replay can use."""
    from course_utils.core.records import ServedPoint

    if rec.get("status") not in ("ok", "failed"):
        raise ValueError(f"status {rec.get('status')!r}")
    ServedPoint.from_json(rec)


RUN_CHECKS: dict[str, Callable[[dict[str, Any]], Any]] = {
    POINTS_FILE: _point_record,
    "knee.jsonl": _point_record,
}
RUN_JSON = ("gpu.json", "params.json", "model_config.json", "environment.json")


def _bad(what: str, fix: str) -> Exception:
    from course_utils.core.validate import BadInput

    return BadInput(what, fix)


def read_records(
    path: str | Path,
    *,
    need: str | None = None,
    torn_ok: bool = False,
    check: Callable[[dict[str, Any]], Any] | None = None,
) -> list[dict[str, Any]]:
    """The records of a recorded JSONL file, strictly: a line that is not a JSON object (or
    lacks ``need``, or fails ``check``) raises BadInput naming the file and line. ``torn_ok``: a last line
    without its newline that does not parse is the trace of a killed writer and is
    skipped (its point was never finished). Missing file: []."""
    p = Path(path)
    if p.exists() and not p.is_file():
        raise _bad(
            f"{p} is a directory, not a file", f"move {p} out of the way, or use a new folder"
        )
    if not is_present(p):
        return []
    try:
        text = read_text(p)
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise _bad(f"{p}: cannot be read ({exc})", "restore the file or use a new folder") from None
    lines = text.splitlines()
    out: list[dict[str, Any]] = []
    fix = f"restore {p.name} from a copy, or move the folder aside and run into a new one"
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) and not text.endswith("\n"):
                if torn_ok:
                    break
                raise _bad(
                    f"{p} line {i} is torn (the run was killed while writing it)",
                    "run the same command again to resume (that point is measured again)",
                ) from None
            raise _bad(f"{p} line {i} is not JSON (an edited or damaged line)", fix) from None
        if not isinstance(rec, dict):
            raise _bad(f"{p} line {i} is a JSON {type(rec).__name__}, not a record", fix)
        if need and need not in rec:
            raise _bad(f"{p} line {i} has no {need!r}", fix)
        if need == "key" and not isinstance(rec.get("key"), str):
            raise _bad(f"{p} line {i}: 'key' is not a string", fix)
        if check is not None:
            try:
                check(rec)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                from course_utils.core.records import PredatesWindows

                if isinstance(exc, PredatesWindows):
                    raise _bad(
                        f"{p} line {i} is a record from before points kept their windows",
                        f"migrate the folder once: python tools/migrate_records.py {Path(p).parent}",
                    ) from None
                raise _bad(f"{p} line {i} is not a whole record ({exc!r})", fix) from None
        out.append(rec)
    return out


def check_run_folder(out: str | Path, *, resume: bool = True) -> None:
    """Before a run writes into ``out``: it is a folder (or absent), each of its recorded
    files is a file whose every line is a record, and ``resume=False`` finds no finished
    point to measure again (nothing finished is ever overwritten). Raises BadInput."""
    d = Path(out)
    if d.exists() and not d.is_dir():
        raise _bad(
            f"the output folder {d} is a file",
            "give a folder path (--out, or -p output_dir in a lab)",
        )
    if not d.exists():
        return
    for name in RUN_JSON:
        if (d / name).exists() and not (d / name).is_file():
            raise _bad(f"{d / name} is a directory, not a file", f"move {d / name} out of the way")
    if (d / "points").exists() and not (d / "points").is_dir():
        raise _bad(f"{d / 'points'} is a file, not a folder", f"move {d / 'points'} out of the way")
    for name, need in RUN_FILES.items():
        recs = read_records(d / name, need=need, torn_ok=True, check=RUN_CHECKS.get(name))
        if not resume and name in (POINTS_FILE, "knee.jsonl"):
            if any(r.get("status") == "ok" for r in recs):
                raise _bad(
                    f"{d / name} holds finished points and --no-resume would measure them again",
                    "drop --no-resume to resume from them, or give a new output folder "
                    f"than {d} (--out, or -p output_dir in a lab)",
                )


def set_aside(path: str | Path) -> Path | None:
    """Move an earlier attempt's file or folder to the first free ``<name>.<n>`` name (its
    bytes unchanged), so a new attempt never writes over it. None when nothing was there."""
    p = Path(path)
    if not p.exists() or (p.is_dir() and not any(p.iterdir())):
        return None
    if p.is_file() and not p.stat().st_size:
        return None
    stem, suffix = (p.stem, p.suffix) if p.is_file() else (p.name, "")
    n = 1
    while (p.with_name(f"{stem}.{n}{suffix}")).exists():
        n += 1
    new = p.with_name(f"{stem}.{n}{suffix}")
    p.rename(new)
    return new
