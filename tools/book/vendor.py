"""Copy the browser JavaScript the book needs from tools/web/node_modules (installed by `npm ci`
from the committed package-lock.json) into book/_assets/vendor/ (git-ignored).

Usage: python tools/book/vendor.py [--check]
  --check  only verify that every vendored file is present (exit 1 listing the missing ones).

Nothing is fetched here; `make book` runs `npm ci` first. Source maps are left out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NODE = REPO / "tools" / "web" / "node_modules"
VENDOR = REPO / "book" / "_assets" / "vendor"

# (npm package, source glob relative to the package, destination dir relative to VENDOR)
FILES: list[tuple[str, str, str]] = [
    ("mermaid", "dist/mermaid.esm.min.mjs", "mermaid"),
    ("mermaid", "dist/chunks/mermaid.esm.min/*.mjs", "mermaid/chunks/mermaid.esm.min"),
    ("mermaid", "LICENSE", "mermaid"),
    ("requirejs", "require.js", "requirejs"),
    ("@jupyter-widgets/html-manager", "dist/embed-amd.js", "jupyter-widgets"),
    ("@jupyter-widgets/html-manager", "dist/*.embed.js", "jupyter-widgets"),
    ("@jupyter-widgets/html-manager", "dist/*.woff2", "jupyter-widgets"),
    ("@jupyter-widgets/html-manager", "dist/*.woff", "jupyter-widgets"),
    ("@jupyter-widgets/html-manager", "dist/*.ttf", "jupyter-widgets"),
    ("@jupyter-widgets/html-manager", "dist/*.eot", "jupyter-widgets"),
    ("@jupyter-widgets/html-manager", "dist/*.svg", "jupyter-widgets"),
    ("@jupyter-widgets/html-manager", "dist/embed.js.LICENSE.txt", "jupyter-widgets"),
    ("mathjax", "es5/tex-mml-chtml.js", "mathjax"),
    ("mathjax", "es5/output/chtml/fonts/woff-v2/*", "mathjax/output/chtml/fonts/woff-v2"),
    ("mathjax", "es5/input/tex/extensions/*.js", "mathjax/input/tex/extensions"),
    ("mathjax", "es5/a11y/*.js", "mathjax/a11y"),
    ("mathjax", "es5/ui/*.js", "mathjax/ui"),
    ("mathjax", "es5/adaptors/*.js", "mathjax/adaptors"),
    ("mathjax", "LICENSE", "mathjax"),
]


def plan() -> list[tuple[Path, Path]]:
    pairs: list[tuple[Path, Path]] = []
    for pkg, pattern, dest in FILES:
        root = NODE / pkg
        if not root.is_dir():
            raise SystemExit(f"vendor: {root} missing: run `npm ci` in tools/web (make book does)")
        matches = sorted(root.glob(pattern))
        if not matches and not pattern.endswith("LICENSE"):
            raise SystemExit(f"vendor: nothing matches {pkg}/{pattern}")
        base = (root / pattern).parent
        for src in matches:
            # keep sub-directories below the glob's base (mathjax extensions/<name>/*.js)
            rel = src.relative_to(base) if "*" in pattern else Path(src.name)
            pairs.append((src, VENDOR / dest / rel))
    return pairs


def versions() -> dict[str, str]:
    out = {}
    for pkg in sorted({p for p, _, _ in FILES}):
        meta = json.loads((NODE / pkg / "package.json").read_text())
        out[pkg] = meta["version"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    pairs = plan()
    if args.check:
        missing = [str(d.relative_to(REPO)) for _, d in pairs if not d.is_file()]
        for m in missing:
            print(f"missing: {m}", file=sys.stderr)
        return 1 if missing else 0
    copied = 0
    for src, dst in pairs:
        st = src.stat()
        if dst.is_file() and dst.stat().st_size == st.st_size and dst.stat().st_mtime >= st.st_mtime:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        copied += 1
    (VENDOR / "VERSIONS.json").write_text(json.dumps(versions(), indent=2) + "\n")
    print(f"vendor: {len(pairs)} files in {VENDOR.relative_to(REPO)} ({copied} copied)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
