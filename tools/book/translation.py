"""Translation drift check for the mirrored pages book/zh/<name>.md <-> book/en/<name>.md.

Each page's front matter records the hash of its counterpart's *body* (the text below the
front matter), so editing only front matter never counts as a change:

    translation:
      pair: ../en/knobs.md
      pair_sha: '1a2b3c4d5e6f'    # sha256(body of the pair)[:12]

Usage (from the repo root):
    python tools/book/translation.py check            # exit 1 and list stale pages
    python tools/book/translation.py accept book/en/knobs.md [...]
        # after a translator brought the pair in line: re-record the hash in both pages
        # (adds the `translation:` block when a page has none)
    python tools/book/translation.py accept --all     # record every pair (first set-up only)

`check` reports page P as stale when P's recorded pair_sha differs from the current body hash of
its pair Q: Q changed and P was not updated since.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
LANGS = ("zh", "en")


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(front matter text without the --- fences, body). No front matter -> (None, text)."""
    text = text.replace("\r\n", "\n")
    if not text.startswith("---\n"):
        return None, text
    end = text.find("\n---\n", 3)
    if end == -1:
        if text.endswith("\n---"):
            return text[4:-4], ""
        raise ValueError("front matter is not closed by a '---' line")
    return text[4 : end + 1], text[end + 5 :]


def body_sha(path: Path) -> str:
    _, body = split_front_matter(path.read_text(encoding="utf-8"))
    return hashlib.sha256(body.rstrip().encode("utf-8")).hexdigest()[:12]


def read_record(path: Path) -> dict:
    fm, _ = split_front_matter(path.read_text(encoding="utf-8"))
    meta = yaml.safe_load(fm) if fm else None
    rec = (meta or {}).get("translation")
    return rec if isinstance(rec, dict) else {}


def pair_of(path: Path) -> Path:
    lang = path.parent.name
    if lang not in LANGS:
        raise ValueError(f"{path}: not under book/zh or book/en")
    other = LANGS[1 - LANGS.index(lang)]
    return path.parent.parent / other / path.name


def write_record(path: Path, pair_rel: str, sha: str) -> None:
    """Set the `translation:` block in path's front matter, keeping everything else as is."""
    text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
    fm, body = split_front_matter(text)
    kept: list[str] = []
    skipping = False
    for line in (fm or "").splitlines():
        if line.startswith("translation:"):
            skipping = True
            continue
        if skipping and (line.startswith((" ", "\t")) or not line.strip()):
            continue
        skipping = False
        kept.append(line)
    kept += ["translation:", f"  pair: {pair_rel}", f"  pair_sha: '{sha}'"]
    path.write_text("---\n" + "\n".join(kept) + "\n---\n" + body, encoding="utf-8")


@dataclass
class Problem:
    page: Path
    message: str

    def __str__(self) -> str:
        return f"{self.page}: {self.message}"


def pages(root: Path) -> list[Path]:
    return sorted(p for lang in LANGS for p in (root / lang).glob("*.md"))


def check(root: Path) -> list[Problem]:
    problems: list[Problem] = []
    for page in pages(root):
        rel = _rel(page)
        pair = pair_of(page)
        if not pair.is_file():
            problems.append(Problem(rel, f"no counterpart {_rel(pair)}"))
            continue
        rec = read_record(page)
        want_pair = f"../{pair.parent.name}/{pair.name}"
        if not rec.get("pair_sha"):
            problems.append(Problem(rel, "no translation record: translate, then "
                                         f"`python tools/book/translation.py accept {rel}`"))
            continue
        if rec.get("pair") != want_pair:
            problems.append(Problem(rel, f"translation.pair is {rec.get('pair')!r}, "
                                         f"expected {want_pair!r}"))
            continue
        now = body_sha(pair)
        if str(rec["pair_sha"]) != now:
            problems.append(Problem(
                rel,
                f"stale: {_rel(pair)} changed (recorded {rec['pair_sha']}, now {now}); update "
                f"this page to match, then `python tools/book/translation.py accept {rel}`",
            ))
    return problems


def accept(page: Path) -> None:
    pair = pair_of(page)
    if not page.is_file() or not pair.is_file():
        raise SystemExit(f"accept: both {page} and {pair} must exist")
    write_record(page, f"../{pair.parent.name}/{pair.name}", body_sha(pair))
    write_record(pair, f"../{page.parent.name}/{page.name}", body_sha(page))


def _rel(p: Path) -> Path:
    try:
        return p.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="zh/en translation drift check")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="exit 1 and list stale pages")
    c.add_argument("--root", type=Path, default=REPO / "book")
    a = sub.add_parser("accept", help="re-record the hashes of a page and its pair")
    a.add_argument("pages", nargs="*", type=Path)
    a.add_argument("--all", action="store_true")
    a.add_argument("--root", type=Path, default=REPO / "book")
    args = ap.parse_args(argv)
    if args.cmd == "check":
        problems = check(args.root)
        for p in problems:
            print(p, file=sys.stderr)
        n = len(pages(args.root))
        if problems:
            print(f"translation check: {len(problems)} of {n} pages need attention",
                  file=sys.stderr)
            return 1
        print(f"translation check: {n} pages in sync")
        return 0
    todo = [p for p in pages(args.root) if p.parent.name == "zh"] if args.all else args.pages
    if not todo:
        ap.error("accept: name pages or pass --all")
    for page in todo:
        accept(page)
        print(f"accepted {page} <-> {pair_of(page)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
