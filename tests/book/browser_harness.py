"""Reusable headless-Chromium harness for tests of the built book (`_build/html`).

How to use it from another test module (e.g. a quiz test that clicks answers):

    from tests.book.browser_harness import run_plan, serve_site

    def test_quiz_grades_without_kernel():
        with serve_site() as base:
            res = run_plan(base, [{
                "name": "zh-knobs-quiz", "path": "book/zh/knobs.html",
                "steps": [{"click": ".quiz input[value='b']"},
                          {"eval": "document.querySelector('.quiz .feedback').textContent",
                           "as": "feedback"}],
            }])
        page = res["pages"][0]
        assert not page["step_errors"] and "正确" in page["evals"]["feedback"]

`run_plan` drives tools/web/browser.mjs (playwright-core + Debian /usr/bin/chromium, fresh
profile, hardened flags). A page spec: name, path (relative to the site root), optional
checks (subset of "mermaid", "cjk", "langswitch") and steps ({"click"|"fill"+"value"|"wait_for":
css}, {"wait_ms": n}, {"eval": js, "as": key}); the plan format is documented at the top of
browser.mjs. The result has per-page dicts plus "requests", "external_requests" (left
127.0.0.1, aborted) and "bad_responses" ([status, url] for HTTP >= 400). Screenshots go to
.artifacts/screenshots/<name>.png (git-ignored) unless screenshots=None.

`make test` builds the site and installs chromium + node_modules first (targets book,
browser-deps); a missing prerequisite fails with a message saying which make target to run.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "_build" / "html"
SCRIPT = REPO / "tools" / "web" / "browser.mjs"
NODE_MODULES = REPO / "tools" / "web" / "node_modules"
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = REPO / ".artifacts" / "screenshots"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


def missing_prerequisites() -> list[str]:
    """What the browser harness lacks, each with the make target that provides it."""
    out = []
    if not (SITE / "index.html").is_file():
        out.append(f"{SITE} not built: run `make book`")
    if not CHROMIUM.is_file():
        out.append("/usr/bin/chromium missing: run `make browser-deps`")
    if shutil.which("node") is None:
        out.append("node missing")
    if not (NODE_MODULES / "playwright-core").is_dir():
        out.append("tools/web/node_modules missing: run `make vendor` (npm ci)")
    return out


@contextlib.contextmanager
def serve_site(root: Path = SITE) -> Iterator[str]:
    """Serve `root` over HTTP on 127.0.0.1 (random port); yields the base URL ending in '/'."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def run_plan(base: str, pages: list[dict[str, Any]], *,
             screenshots: Path | None = SCREENSHOTS, timeout_ms: int = 30000,
             process_timeout_s: float = 300.0, concurrency: int = 2) -> dict[str, Any]:
    """Load `pages` from `base` in one headless Chromium session, `concurrency` pages at once
    (most of a page's time is waiting); return browser.mjs's JSON."""
    missing = missing_prerequisites()
    if missing:
        raise RuntimeError("browser harness: " + "; ".join(missing))
    plan: dict[str, Any] = {"base": base, "chromium": str(CHROMIUM), "timeout_ms": timeout_ms,
                            "concurrency": concurrency, "pages": pages}
    if screenshots is not None:
        plan["screenshots"] = str(screenshots)
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "plan.json"
        plan_path.write_text(json.dumps(plan), encoding="utf-8")
        proc = subprocess.run(["node", str(SCRIPT), str(plan_path)], capture_output=True,
                              text=True, timeout=process_timeout_s, cwd=SCRIPT.parent)
    if proc.returncode != 0:
        raise RuntimeError(f"browser.mjs failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)
