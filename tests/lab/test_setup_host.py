"""tools/gpu/setup_host.sh: parts arrive one call at a time; the call that carries the installer
installs only when every part is there, and otherwise stops a job chained after it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _repo(tmp_path: Path, parts: list[int], installer: bool) -> Path:
    """A checkout as one device call carries it: the script and the carried .stage files."""
    repo = tmp_path / "repo"
    (repo / "tools" / "gpu").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "tools" / "gpu" / "setup_host.sh", repo / "tools" / "gpu")
    stage = repo / ".stage"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    for i in parts:
        (stage / f"part-{i:02d}").write_bytes(b"x" * (i + 1))
    if installer:  # a stand-in for the kit's install.sh: records which parts it was given
        (stage / "install.sh").write_text('ls "$PARTS" > "$PARTS/../installed"\n')
        (repo / ".gpu" / "model-tiny").mkdir(parents=True, exist_ok=True)
        (repo / ".gpu" / "model-tiny" / "config.json").write_text("{}")
    return repo


def _call(repo: Path, host: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = repo / "tools" / "gpu" / "setup_host.sh"
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOST_TMP": str(host)}, timeout=60)


def test_parts_collect_call_by_call_and_install_once_all_are_there(tmp_path: Path) -> None:
    host = tmp_path / "host"
    first = _call(_repo(tmp_path, [0], installer=False), host, "3")
    assert first.returncode == 0 and "parts on host: 1 of 3" in first.stdout
    second = _call(_repo(tmp_path, [2], installer=False), host, "3")
    assert second.returncode == 0 and "parts on host: 2 of 3" in second.stdout
    assert not (host / "installed").exists()
    last = _call(_repo(tmp_path, [1], installer=True), host, "3")
    assert last.returncode == 0, last.stdout + last.stderr
    assert (host / "installed").read_text().split() == ["part-00", "part-01", "part-02"]
    assert (host / "model-tiny" / "config.json").is_file()
    assert (host / ".session_t0").read_text().strip().isdigit()


def test_the_installing_call_stops_a_chained_job_while_a_part_is_missing(tmp_path: Path) -> None:
    host = tmp_path / "host"
    _call(_repo(tmp_path, [1], installer=False), host, "3")
    res = _call(_repo(tmp_path, [2], installer=True), host, "3")
    assert res.returncode == 2
    errors = [x for x in res.stdout.splitlines() if x.startswith("error:")]
    assert errors == ["error: 2 of 3 parts on the host, missing: part-00 → fix: send each missing"
                      " part in its own call, then this call again"]
    assert not (host / "installed").exists() and not (host / "model-tiny").exists()
    # the parts that did arrive stay: the missing one and this call again finish the install
    _call(_repo(tmp_path, [0], installer=False), host, "3")
    again = _call(_repo(tmp_path, [], installer=True), host, "3")
    assert again.returncode == 0 and (host / "installed").is_file()


def test_a_bad_part_count_is_one_line_before_anything_is_copied(tmp_path: Path) -> None:
    host = tmp_path / "host"
    for bad in ([], ["0"], ["eleven"]):
        res = _call(_repo(tmp_path, [0], installer=True), host, *bad)
        assert res.returncode == 2 and res.stdout.count("\n") == 1
        assert res.stdout.startswith("error: NPARTS") and "→ fix:" in res.stdout
    assert not host.exists()
