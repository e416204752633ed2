"""Bad input, as a new user types it: every subcommand, the three labs' parameters and
damaged run folders. Each case: exit status 2, exactly one ``error: ... → fix: ...`` line
naming the flag or file, no traceback, no usage block, nothing written, and every byte of a
folder that existed unchanged. The arguments are checked before the machine: preflight is
never reached (it fails the test if it is). In process (``main(argv)``), so the corpus is fast.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_utils.__main__ import main
from course_utils.core import knobs
from course_utils.core.lab_params import check_lab_params
from course_utils.core.slo import SLO, SLOError
from course_utils.core.validate import BadInput, error_line, parse_values
from tests.core.benchjson import make_result

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad arguments must be refused before preflight looks at the machine."""

    def reached(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("preflight reached before the arguments were refused")

    monkeypatch.setattr("course_utils.lab.cli.preflight", reached)


def tree(d: Path) -> dict[str, str]:
    """Every file under ``d`` (relative path -> sha256); folders as 'dir'."""
    if not d.exists():
        return {}
    if d.is_file():
        return {".": hashlib.sha256(d.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(d.rglob("*"))
    }


def assert_one_error(rc: int, err: str, names: str | tuple[str, ...]) -> str:
    assert rc == 2, err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "usage:" not in err, err
    line = lines[0]
    assert " → fix: " in line, line
    names = (names,) if isinstance(names, str) else names
    assert any(n in line for n in names), f"{names} not named in: {line}"
    return line


def run(capsys: pytest.CaptureFixture[str], argv: list[str], names: str | tuple[str, ...]) -> str:
    rc = main(argv)
    return assert_one_error(rc, capsys.readouterr().err, names)


# ------------------------------------------------------------------------ files the cases use


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    good = make_result([0.1] * 10, 0.02)
    f: dict[str, Any] = {}

    def put(name: str, data: Any, raw: bool = False) -> None:
        p = tmp_path / name
        p.write_text(data if raw else json.dumps(data))
        f[name] = str(p)

    put("bench.json", good)
    put("notjson.json", "{not json", raw=True)
    put("list.json", [1, 2])
    put("missing.json", {"duration": 1.0})
    put("zero.json", {**good, "completed": 0})
    put("short.json", {**good, "ttfts": good["ttfts"][:3]})
    put("nodur.json", {**good, "duration": 0})
    put("strdur.json", {**good, "duration": "ten"})
    sample = {"t": 0.0, "values": {"vllm:num_requests_running": 1.0}, "histograms": {}}
    put("series.jsonl", json.dumps(sample) + "\n", raw=True)
    put("empty.jsonl", "", raw=True)
    put("tornmid.jsonl", json.dumps(sample) + "\n{torn\n" + json.dumps(sample) + "\n", raw=True)
    put("listline.jsonl", "[1, 2]\n", raw=True)
    (tmp_path / "adir").mkdir()
    f["adir"] = str(tmp_path / "adir")
    (tmp_path / "afile").write_text("x")
    f["afile"] = str(tmp_path / "afile")
    f["tmp"] = str(tmp_path)
    return f


# ------------------------------------------------------------------------ the reference commands

KNOBS = ["knobs", "--validate"]
CAP = ["capacity", "--gpu", "rtx4090"]
REP = ["replicas", "--knee-low", "50", "--target", "300"]

CLI_CASES: list[tuple[list[str], str | tuple[str, ...]]] = [
    # knobs --validate: vLLM 0.26.0's rules
    (KNOBS + ["max_num_seqs=0"], "max_num_seqs"),
    (KNOBS + ["max_num_seqs=-3"], "max_num_seqs"),
    (KNOBS + ["max_num_seqs=abc"], "max_num_seqs"),
    (KNOBS + ["max_num_seqs=1.5"], "max_num_seqs"),
    (KNOBS + ["max_num_seqs"], "--validate"),
    (KNOBS + ["=5"], "--validate"),
    (KNOBS + ["max_num_seqs="], "--validate"),
    (KNOBS + ["nosuch=1"], "nosuch"),
    (KNOBS + ["gpu_memory_utilization=1.5"], "gpu_memory_utilization"),
    (KNOBS + ["gpu_memory_utilization=0"], "gpu_memory_utilization"),
    (KNOBS + ["gpu_memory_utilization=-0.2"], "gpu_memory_utilization"),
    (KNOBS + ["gpu_memory_utilization=nan"], "gpu_memory_utilization"),
    (KNOBS + ["gpu_memory_utilization=inf"], "gpu_memory_utilization"),
    (KNOBS + ["max_model_len=1.5K"], "max_model_len"),
    (KNOBS + ["max_model_len=0"], "max_model_len"),
    (KNOBS + ["max_model_len=-2"], "max_model_len"),
    (KNOBS + ["max_model_len=abc"], "max_model_len"),
    (KNOBS + ["max_model_len=1e3"], "max_model_len"),
    (KNOBS + ["max_model_len=1.5"], "max_model_len"),
    (KNOBS + ["max_num_batched_tokens=2.5M"], "max_num_batched_tokens"),
    (KNOBS + ["max_num_batched_tokens=10", "max_num_seqs=20"], "max_num_batched_tokens"),
    (KNOBS + ["tensor_parallel_size=0"], "tensor_parallel_size"),
    (KNOBS + ["enable_prefix_caching=maybe"], "enable_prefix_caching"),
    (KNOBS + ["kv_cache_dtype=int3"], "kv_cache_dtype"),
    (KNOBS + ["speculative_config={bad"], "speculative_config"),
    (KNOBS + ["max_num_seqs=1", "max_num_seqs=2"], "max_num_seqs"),
    (["knobs", "--gpu-memory-gib", "-24"], "--gpu-memory-gib"),
    (["knobs", "--gpu-memory-gib", "0"], "--gpu-memory-gib"),
    (["knobs", "--gpu-memory-gib", "abc"], "--gpu-memory-gib"),
    (["knobs", "--goal", "nosuch"], "--goal"),
    (["knobs", "--entry", "x"], "--entry"),
    (["knobs", "--format", "xml"], "--format"),
    (["knobs", "--lang", "fr"], "--lang"),
    # capacity
    (CAP + ["--max-model-len", "0"], "--max-model-len"),
    (CAP + ["--max-model-len", "-100"], "--max-model-len"),
    (CAP + ["--max-model-len", "-1"], "--max-model-len"),
    (CAP + ["--max-model-len", "auto"], "--max-model-len"),
    (CAP + ["--max-model-len", "abc"], "--max-model-len"),
    (CAP + ["--max-model-len", "1.5K"], "--max-model-len"),
    (CAP + ["--max-num-seqs", "0"], "--max-num-seqs"),
    (CAP + ["--max-num-seqs", "-5"], "--max-num-seqs"),
    (CAP + ["--max-num-seqs", "abc"], "--max-num-seqs"),
    (CAP + ["--max-num-batched-tokens", "0"], "--max-num-batched-tokens"),
    (CAP + ["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (CAP + ["--gpu-memory-utilization", "-0.2"], "--gpu-memory-utilization"),
    (CAP + ["--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
    (CAP + ["--overhead-gib", "-10"], "--overhead-gib"),
    (CAP + ["--max-num-batched-tokens", "100", "--max-num-seqs", "512"], "--max-num-batched-tokens"),
    (["capacity", "--gpu-total-gib", "0"], "--gpu-total-gib"),
    (["capacity", "--gpu-total-gib", "-1"], "--gpu-total-gib"),
    (["capacity", "--kv-memory-gib", "0"], "--kv-memory-gib"),
    (["capacity", "--kv-memory-gib", "-3"], "--kv-memory-gib"),
    (["capacity", "--gpu", "nosuch"], "--gpu"),
    (["capacity", "--gpu", "rtx4090", "--gpu-total-gib", "24"], "--gpu-total-gib"),
    (["capacity", "--model", "/nonexistent/model"], "--model"),
    (["capacity", "--kv-dtype", "int3"], "--kv-dtype"),
    # replicas
    (["replicas", "--knee-low", "0", "--target", "300"], "--knee-low"),
    (["replicas", "--knee-low", "-1", "--target", "300"], "--knee-low"),
    (["replicas", "--knee-low", "abc", "--target", "300"], "--knee-low"),
    (["replicas", "--knee-low", "50", "--target", "0"], "--target"),
    (["replicas", "--knee-low", "50"], "--target"),
    (REP + ["--headroom", "1.5"], "--headroom"),
    (REP + ["--headroom", "-0.1"], "--headroom"),
    (REP + ["--knee-high", "abc"], "--knee-high"),
    # the tree itself
    ([], "cmd"),
    (["nosuch"], "nosuch"),
    (["quiz", "--lesson", "nosuch"], "--lesson"),
    (["replay"], "folder"),
]


@pytest.mark.parametrize(("argv", "names"), CLI_CASES, ids=[" ".join(a) or "-" for a, _ in CLI_CASES])
def test_cli_bad_input(capsys: pytest.CaptureFixture[str], argv: list[str], names: Any) -> None:
    run(capsys, argv, names)


# goodput / diagnose: {name} is a file of the ``files`` fixture
FILE_CASES: list[tuple[list[str], str]] = [
    (["goodput", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{tmp}/nonexistent.json", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{notjson.json}", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{list.json}", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{missing.json}", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{zero.json}", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{short.json}", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{nodur.json}", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{strdur.json}", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{adir}", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{series.jsonl}", "--slo", "ttft:300"], "--bench"),
    (["goodput", "--bench", "{bench.json}"], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", ""], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", "ttft"], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", "ttft:abc"], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", "foo:3"], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", "ttft:-1"], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", "ttft:0"], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", "ttft:1 ttft:2"], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", "rate:0 ttft:3"], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", "ttft:nan"], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", "ttft:inf"], "--slo"),
    (["goodput", "--bench", "{bench.json}", "--slo", "rate:5"], "--slo"),
    (["diagnose"], "--metrics"),
    (["diagnose", "--metrics", "{tmp}/nonexistent.jsonl"], "--metrics"),
    (["diagnose", "--metrics", "{bench.json}", "--bench", "{series.jsonl}"], "--metrics"),
    (["diagnose", "--metrics", "{empty.jsonl}"], "--metrics"),
    (["diagnose", "--metrics", "{tornmid.jsonl}"], "tornmid.jsonl"),
    (["diagnose", "--metrics", "{listline.jsonl}"], "listline.jsonl"),
    (["diagnose", "--metrics", "{adir}"], "adir"),
    (["diagnose", "--metrics", "{series.jsonl}", "--bench", "{series.jsonl}"], "--bench"),
    (["diagnose", "--metrics", "{series.jsonl}", "--bench", "{zero.json}"], "--bench"),
    (["diagnose", "--metrics", "{series.jsonl}", "--max-num-seqs", "0"], "--max-num-seqs"),
    (["diagnose", "--metrics", "{series.jsonl}", "--max-num-seqs", "-1"], "--max-num-seqs"),
    (["diagnose", "--metrics", "{series.jsonl}", "--threshold", "x=1"], "--threshold"),
    (["diagnose", "--metrics", "{series.jsonl}", "--threshold", "kv_full"], "--threshold"),
    (["diagnose", "--metrics", "{series.jsonl}", "--threshold", "kv_full=abc"], "--threshold"),
    (["diagnose", "--metrics", "{series.jsonl}", "--threshold", "kv_full=-1"], "--threshold"),
    (["diagnose", "--metrics", "{series.jsonl}", "--slo", "ttft:"], "--slo"),
    (["replay", "{tmp}/nonexistent"], "nonexistent"),
    (["replay", "{afile}"], "afile"),
    (["replay", "{adir}"], "adir"),
    (["modelfolder", "{afile}"], "afile"),
    (["modelfolder", "{tmp}"], "tmp"),
    (["modelfolder", "{tmp}/new", "--vocab-size", "0"], "--vocab-size"),
    (["modelfolder", "{tmp}/new", "--config", "{tmp}/nonexistent"], "--config"),
    (["modelfolder", "{tmp}/new", "--max-corpus-mb", "-1"], "--max-corpus-mb"),
    (["preflight", "--model", "m", "--port", "99999"], "--port"),
    (["preflight", "--model", "m", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["preflight", "--model", "m", "--min-disk-gib", "-1"], "--min-disk-gib"),
    (["preflight", "--model", "m", "--lang", "fr"], "--lang"),
    (["scaleout", "--config", "dp4", "--model", "m", "--out", "{tmp}/s", "--rates", "6"], "--config"),
    (["scaleout", "--config", "dp2", "--model", "m", "--out", "{tmp}/s", "--rates", "0,a"], "--rates"),
    (["scaleout", "--config", "dp2", "--model", "m", "--out", "{tmp}/s", "--rates", "6",
      "--window-s", "0"], "--window-s"),
]


def _fill(argv: list[str], files: dict[str, str]) -> list[str]:
    return [re.sub(r"\{([^}]+)\}", lambda m: files[m.group(1)], a) for a in argv]


@pytest.mark.parametrize(("argv", "names"), FILE_CASES, ids=[" ".join(a) for a, _ in FILE_CASES])
def test_file_bad_input(capsys: pytest.CaptureFixture[str], files: dict[str, str],
                        argv: list[str], names: str) -> None:
    before = tree(Path(files["tmp"]))
    name = files.get(names, names) if names in files else names
    run(capsys, _fill(argv, files), (name, Path(name).name))
    after = tree(Path(files["tmp"]))
    assert after == before  # nothing written, nothing changed


# ------------------------------------------------------------------------ sweep, tune, knee


def _harness(cmd: str, out: Path) -> list[str]:
    base = ["--model", "m", "--out", str(out), "--slo", "ttft:300", "--gpu-memory-gib", "24"]
    extra = {
        "sweep": ["--knob", "max_num_seqs", "--values", "64,128"],
        "tune": ["--candidate", "max_num_seqs=64,128"],
        "knee": ["--rates", "2,4"],
    }[cmd]
    return [cmd, *base, *extra]


def _replace(argv: list[str], flag: str, value: str | None) -> list[str]:
    out = list(argv)
    if flag in out:
        i = out.index(flag)
        del out[i : i + 2]
    return out if value is None else [*out, flag, value]


COMMON_BAD: list[tuple[str, str | None]] = [
    ("--slo", "ttft"), ("--slo", "ttft:-5"), ("--slo", "foo:1"), ("--slo", "ttft:300 ttft:3"),
    ("--rate", "0"), ("--rate", "-1"), ("--rate", "abc"),
    ("--num-prompts", "0"), ("--num-prompts", "-1"), ("--num-prompts", "abc"),
    ("--input-len", "0"), ("--output-len", "0"), ("--prefix-len", "-1"),
    ("--max-concurrency", "0"), ("--seed", "-1"),
    ("--port", "99999"), ("--port", "-1"), ("--port", "0"), ("--port", "abc"),
    ("--base", "max_num_seqs=0"), ("--base", "foo"), ("--base", "nosuch=1"),
    ("--base", "max_num_seqs="), ("--base", "gpu_memory_utilization=1.5"),
    ("--preset", "nosuch"), ("--gpu", "nosuch"), ("--rehearse-gpu", "nosuch"),
    ("--warmup-share", "1.5"), ("--warmup-share", "-0.1"),
    ("--repeats", "-1"), ("--remeasure", "-1"), ("--patience", "0"),
    ("--gpu-memory-gib", "0"), ("--startup-timeout", "0"), ("--bench-timeout", "-1"),
    ("--vllm-cmd", ""), ("--vllm-cmd", '"unclosed'), ("--objective", "nope"),
    ("--model", None), ("--out", None),
]
SWEEP_BAD: list[tuple[str, str | None]] = [
    ("--values", "abc"), ("--values", ""), ("--values", "64,,128"), ("--values", "0"),
    ("--values", "-5"), ("--knob", "nosuch"), ("--knob", None), ("--slo", None),
]
TUNE_BAD: list[tuple[str, str | None]] = [
    ("--plateau", "-1"), ("--plateau", "abc"), ("--plateau", "nan"),
    ("--candidate", "max_num_seqs="), ("--candidate", "max_num_seqs"), ("--candidate", "=64"),
    ("--candidate", "nosuch=1"), ("--candidate", "max_num_seqs=0"),
    ("--candidate", "gpu_memory_utilization=1.5"), ("--candidate", "max_num_seqs=64,,128"),
    ("--candidate", None), ("--gpu-minutes", "0"), ("--gpu-minutes", "-5"),
    ("--max-steps", "0"),
]
KNEE_BAD: list[tuple[str, str | None]] = [
    ("--rates", ""), ("--rates", "0,2"), ("--rates", "abc"), ("--rates", "-1"), ("--rates", "inf"),
    ("--rates", None),
    ("--batch1-prompts", "-1"), ("--bracket-repeats", "-1"),
]
HARNESS_CASES = (
    [("sweep", f, val) for f, val in COMMON_BAD + SWEEP_BAD]
    + [("tune", f, val) for f, val in COMMON_BAD + TUNE_BAD]
    + [("knee", f, val) for f, val in KNEE_BAD + [("--slo", "ttft"), ("--rate", "0")]]
)


@pytest.mark.parametrize(("cmd", "flag", "value"), HARNESS_CASES,
                         ids=[f"{c} {f} {val!r}" for c, f, val in HARNESS_CASES])
def test_harness_bad_flag_before_the_machine(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                             cmd: str, flag: str, value: str | None) -> None:
    out = tmp_path / "o"
    argv = _replace(_harness(cmd, out), flag, value)
    names: tuple[str, ...] = (flag,)
    if flag == "--knob" and value is None:
        names = ("--knob",)
    if flag == "--preset":
        names = ("--preset",)
    run(capsys, argv, names)
    assert not out.exists()  # nothing written


def test_a_preset_without_the_size_names_the_preset(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    argv = ["tune", "--model", "m", "--out", str(tmp_path / "o"), "--preset", "decode",
            "--gpu", "h100"]
    run(capsys, argv, "--preset")


def test_prefix_longer_than_the_prompt(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = _harness("sweep", tmp_path / "o") + ["--input-len", "10", "--prefix-len", "20"]
    run(capsys, argv, "--prefix-len")


def test_pair_rule_names_the_values(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = _replace(_harness("sweep", tmp_path / "o"), "--knob", "max_num_batched_tokens")
    argv = _replace(argv, "--values", "16") + ["--base", "max_num_seqs=64"]
    run(capsys, argv, "--values")


# ------------------------------------------------------------------------ damaged run folders


def _point(key: str = "k1", slo: str = "ttft:300") -> dict[str, Any]:
    return {"key": key, "knob": "baseline", "value": None, "knobs": {}, "workload": {},
            "slo": slo, "status": "ok", "windows": []}


def _finished(d: Path) -> Path:
    """A folder a run finished: a point, its raw files, the loop's log."""
    d.mkdir(parents=True)
    (d / "points.jsonl").write_text(json.dumps(_point()) + "\n")
    (d / "points" / "k1").mkdir(parents=True)
    (d / "points" / "k1" / "bench.json").write_text(json.dumps(make_result([0.1] * 4, 0.02)))
    (d / "tune.jsonl").write_text(json.dumps({"kind": "baseline", "point": "k1"}) + "\n")
    return d


def _damage(d: Path, how: str) -> str:
    """Damage the folder ``how``; return what the error line must name."""
    pts = d / "points.jsonl"
    line = json.dumps(_point("k2")) + "\n"
    if how == "mid-not-json":
        pts.write_text("{torn\n" + pts.read_text())
    elif how == "wrong-type":
        pts.write_text(pts.read_text() + "[1, 2]\n")
    elif how == "string-line":
        pts.write_text(pts.read_text() + '"text"\n')
    elif how == "missing-key":
        pts.write_text(pts.read_text() + json.dumps({"status": "ok"}) + "\n")
    elif how == "key-not-string":
        pts.write_text(pts.read_text() + json.dumps({**_point(), "key": 5}) + "\n")
    elif how == "tune-no-kind":
        (d / "tune.jsonl").write_text(json.dumps({"step": 0}) + "\n")
        return "tune.jsonl"
    elif how == "tune-mid-torn":
        (d / "tune.jsonl").write_text("{\n" + (d / "tune.jsonl").read_text())
        return "tune.jsonl"
    elif how == "knee-no-rate":
        (d / "knee.jsonl").write_text(json.dumps({"status": "ok"}) + "\n")
        return "knee.jsonl"
    elif how == "points-dir":
        pts.unlink()
        pts.mkdir()
        (pts / "x").write_text(line)
    elif how == "tune-dir":
        (d / "tune.jsonl").unlink()
        (d / "tune.jsonl").mkdir()
        return "tune.jsonl"
    elif how == "knee-dir":
        (d / "knee.jsonl").mkdir()
        return "knee.jsonl"
    elif how == "gpu-dir":
        (d / "gpu.json").mkdir()
        return "gpu.json"
    elif how == "params-dir":
        (d / "params.json").mkdir()
        return "params.json"
    elif how == "points-file":
        import shutil

        shutil.rmtree(d / "points")
        (d / "points").write_text("x")
        return "points"
    elif how == "bad-status":
        pts.write_text(pts.read_text() + json.dumps({**_point("k3"), "status": None}) + "\n")
    elif how == "bad-windows":
        pts.write_text(pts.read_text() + json.dumps({**_point("k3"), "windows": 5}) + "\n")
    elif how == "binary":
        pts.write_bytes(pts.read_bytes() + b"\xff\xfe\x00garbage\n")
    return "points.jsonl"


DAMAGE = ["mid-not-json", "wrong-type", "string-line", "missing-key", "key-not-string",
          "tune-no-kind", "tune-mid-torn", "knee-no-rate", "points-dir", "tune-dir", "knee-dir",
          "gpu-dir", "params-dir", "points-file", "binary", "bad-status", "bad-windows"]


@pytest.mark.parametrize("cmd", ["tune", "sweep", "knee"])
@pytest.mark.parametrize("how", DAMAGE)
def test_damaged_folder_is_refused_and_kept(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            cmd: str, how: str) -> None:
    d = _finished(tmp_path / "o")
    name = _damage(d, how)
    before = tree(d)
    run(capsys, _harness(cmd, d), name)
    assert tree(d) == before


@pytest.mark.parametrize("how", DAMAGE[:8] + DAMAGE[-2:] + ["torn-last", "empty-points", "no-baseline",
                                              "baseline-missing"])
def test_replay_of_a_damaged_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                    how: str) -> None:
    d = _finished(tmp_path / "o")
    if how == "torn-last":
        with open(d / "points.jsonl", "a") as fh:
            fh.write('{"key": "k2", "sta')
        name = "points.jsonl"
    elif how == "empty-points":
        (d / "tune.jsonl").unlink()
        (d / "points.jsonl").write_text("")
        name = "points.jsonl"
    elif how == "no-baseline":
        (d / "tune.jsonl").write_text(json.dumps({"kind": "summary"}) + "\n")
        name = "tune.jsonl"
    elif how == "baseline-missing":
        (d / "tune.jsonl").write_text(json.dumps({"kind": "baseline", "point": "zz"}) + "\n")
        name = "points.jsonl"
    else:
        name = _damage(d, how)
    before = tree(d)
    run(capsys, ["replay", str(d)], name)
    assert tree(d) == before


def test_no_resume_on_a_finished_folder_is_refused(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    d = _finished(tmp_path / "o")
    before = tree(d)
    for cmd in ("tune", "sweep"):
        run(capsys, [*_harness(cmd, d), "--no-resume"], ("points.jsonl", "--no-resume"))
    assert tree(d) == before


def test_out_that_is_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "o"
    f.write_text("x")
    for cmd in ("tune", "sweep", "knee"):
        run(capsys, _harness(cmd, f), "--out")
    assert f.read_text() == "x"


def test_replay_of_a_lab01_folder_says_so(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text(json.dumps({"knob": "x"}) + "\n")
    line = run(capsys, ["replay", str(tmp_path)], "lab 01")
    assert "backend replay" in line


# ------------------------------------------------------------------------ the labs' parameters


def _defaults(nb: str) -> dict[str, Any]:
    """A lab's parameters as its parameters cell sets them."""
    cells = json.loads((ROOT / "labs" / nb).read_text())["cells"]
    cell = next(c for c in cells if "parameters" in (c["metadata"].get("tags") or []))
    ns: dict[str, Any] = {}
    exec("".join(cell["source"]), ns)  # noqa: S102 - the course's own notebook
    ns.pop("__builtins__")
    return ns


NB = {"01": "01_knob_sweep.ipynb", "02": "02_slo_loop.ipynb", "03": "03_scale_out.ipynb"}
LAB_BAD: list[tuple[str, str, Any]] = [
    *[(lab, "backend", "gpu") for lab in NB],
    *[(lab, "lang", "fr") for lab in NB],
    *[(lab, "output_dir", "") for lab in NB],
    *[(lab, "model", "") for lab in NB],
    *[(lab, "max_model_len", 0) for lab in NB],
    *[(lab, "max_model_len", "1.5K") for lab in NB],
    *[(lab, "max_model_len", -1) for lab in NB],
    ("01", "knob", "nosuch"), ("01", "values", [0.8, 1.5]), ("01", "values", "[0.8,"),
    ("01", "values", []), ("01", "values", "abc"), ("01", "baseline", 0.5),
    ("01", "base_knobs", {"max_num_seqs": 0}), ("01", "base_knobs", "[1]"),
    ("01", "max_tokens", 0), ("01", "load_prompts", -1), ("01", "load_max_tokens", 1.5),
    ("01", "temperature", -0.1), ("01", "seed", -1), ("01", "min_gain", -0.5),
    ("01", "p99_latency_slo_s", 0), ("01", "gpu", "nosuch"), ("01", "rehearse_gpu", "x"),
    ("01", "point_timeout_s", 0),
    ("02", "slo", "ttft"), ("02", "slo", ""), ("02", "rate", 0), ("02", "rate", "fast"),
    ("02", "knee_rates", []), ("02", "knee_rates", [2, -4]), ("02", "knee_fraction", 0),
    ("02", "input_len", 0), ("02", "output_len", -1), ("02", "num_prompts", 0),
    ("02", "prefix_len", 1000), ("02", "prefix_len", -1), ("02", "batch1_prompts", -1),
    ("02", "base_knobs", {"gpu_memory_utilization": 2}), ("02", "knob", "nosuch"),
    ("02", "candidates", [64, 0]), ("02", "candidates", "abc"), ("02", "second_knob", "x"),
    ("02", "second_candidates", ["abc"]), ("02", "objective", "speed"), ("02", "plateau", -1),
    ("02", "max_steps", 0), ("02", "budget_gpu_minutes", 0), ("02", "gpu", "nosuch"),
    ("02", "preset", "nosuch"), ("02", "startup_timeout_s", 0),
    ("03", "slo", "foo:1"), ("03", "configs", ["one", "tp8"]), ("03", "configs", []),
    ("03", "rates", {"one": []}), ("03", "rates", {"one": [4, 0], "dp2": [8], "tp2": [6]}),
    ("03", "rates", "[1]"), ("03", "window_s", 0), ("03", "target_rate", -1),
    ("03", "headroom", 1.0), ("03", "headroom", -0.1), ("03", "budget_s", 0),
    ("03", "input_len", 0),
]


@pytest.mark.parametrize(("lab", "name", "value"), LAB_BAD,
                         ids=[f"lab{lab} {n}={v!r}" for lab, n, v in LAB_BAD])
def test_lab_parameter_is_refused_in_one_line(lab: str, name: str, value: Any) -> None:
    p = _defaults(NB[lab])
    check_lab_params(lab, p, ROOT)  # the defaults pass
    p[name] = value
    with pytest.raises(BadInput) as exc:
        check_lab_params(lab, p, ROOT)
    line = error_line(exc.value)
    assert "\n" not in line and f"-p {name}" in line and " → fix: " in line
    assert exc.value._render_traceback_() == [line]  # what the notebook shows


@pytest.mark.parametrize("lab", list(NB))
def test_lab_replay_checks_its_folder(lab: str, tmp_path: Path) -> None:
    p = {**_defaults(NB[lab]), "backend": "replay", "replay_dir": str(tmp_path / "nope")}
    with pytest.raises(BadInput, match="-p replay_dir"):
        check_lab_params(lab, p, ROOT)


def test_lab01_replay_of_a_lab02_folder_names_the_lab(tmp_path: Path) -> None:
    (tmp_path / "points.jsonl").write_text("")
    p = {**_defaults(NB["01"]), "backend": "replay", "replay_dir": str(tmp_path)}
    with pytest.raises(BadInput, match="a lab 02 folder"):
        check_lab_params("01", p, ROOT)


def test_each_notebook_checks_its_parameters_first() -> None:
    """The check runs before the preset, the setup's own asserts and the preflight."""
    for lab, nb in NB.items():
        cells = ["".join(c["source"]) for c in json.loads((ROOT / "labs" / nb).read_text())["cells"]
                 if c["cell_type"] == "code"]
        call = f'preflight.check_params("{lab}", globals()'
        at = next(i for i, c in enumerate(cells) if call in c)
        flight = next(i for i, c in enumerate(cells) if "preflight.lab_check(" in c)
        assert 1 <= at <= flight  # right after the parameters cell
        cell = cells[at]
        for later in ("if preset:", "assert backend", "preflight.lab_check("):
            assert later not in cell or cell.index(call) < cell.index(later), (nb, later)


@pytest.mark.parametrize("verb", ["knobs", "capacity", "goodput", "diagnose", "replicas", "sweep",
                                  "tune", "knee", "replay", "preflight", "modelfolder", "quiz",
                                  "workload", "scaleout"])
def test_every_verb_has_help(capsys: pytest.CaptureFixture[str], verb: str) -> None:
    assert main([verb, "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m course_utils " + verb)


# ------------------------------------------------------------------------ properties


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_slo_parser_accepts_or_refuses_in_one_line(text: str) -> None:
    try:
        s = SLO.parse(text)
    except SLOError as exc:
        assert "\n" not in error_line(exc)
        return
    assert s.targets() and all(v > 0 for v in s.targets().values())
    assert SLO.parse(str(s).split(" @ ")[0], rate=s.rate) == s  # the printed form reads back


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(knobs.KNOBS)), st.text(max_size=12))
def test_knob_values_are_vllm_typed_or_refused(name: str, text: str) -> None:
    try:
        v = knobs.validate({name: text})[name]
    except knobs.KnobError as exc:
        assert "\n" not in error_line(exc)
        return
    t = knobs.KNOBS[name].value_type
    if v is not None:
        want = {"int": int, "float": float, "bool": bool, "str": str, "json": dict}.get(t)
        assert want is None or isinstance(v, want)
    if name == "gpu_memory_utilization":
        assert 0 < v <= 1
    if name in ("max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size"):
        assert v >= 1
    if name == "max_model_len":
        assert v == -1 or v >= 1


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=0, max_value=10**6), st.sampled_from("kKmMgGtT"),
       st.booleans())
def test_sizes_read_as_vllm_reads_them(n: int, suffix: str, decimal: bool) -> None:
    """human_readable_int (vllm/utils/argparse_utils.py): decimal suffixes take decimals,
    binary ones do not."""
    text = f"{n}.5{suffix}" if decimal else f"{n}{suffix}"
    power = "kmgt".index(suffix.lower()) + 1
    if decimal and suffix.isupper():
        with pytest.raises(knobs.KnobError, match="decimals"):
            knobs.human_readable_int(text, "x")
        return
    got = knobs.human_readable_int(text, "x")
    want = int((n + 0.5 * decimal) * 10 ** (3 * power)) if suffix.islower() else n * 2 ** (10 * power)
    assert got == want


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                          st.sampled_from(["true", "none", "x"])), min_size=1, max_size=6))
def test_value_lists_read_back(values: list[Any]) -> None:
    text = ",".join(str(v) for v in values)
    got = parse_values(text)
    assert len(got) == len(values)
    for g, v in zip(got, values, strict=True):
        if isinstance(v, int | float):
            assert g == v


def test_empty_items_are_refused() -> None:
    for bad in ("", ",", "1,,2", "1,", " , "):
        with pytest.raises(BadInput, match="empty value"):
            parse_values(bad)


def test_the_real_process_prints_one_line_and_exits_2() -> None:
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "course_utils", "capacity", "--max-model-len", "0"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: argument --max-model-len")


@pytest.mark.parametrize(
    ("main", "content", "argv", "names"),
    [
        ("table", "[1, 2]", ["--index", "{f}"], "{f}"),
        ("table", '{"cases": "x"}', ["--index", "{f}"], "{f}"),
        ("table", "{not json", ["--index", "{f}"], "{f}"),
        ("table", '{"cases": [{"grid": "g"}]}', ["--index", "{f}"], "{f}"),
        ("table", "{}", ["--index", "{f}.missing"], "{f}.missing"),
        ("table", "{}", ["bogus"], "bogus"),
        ("tool", "{}", ["compare", "{f}"], "tune_dir"),
        ("tool", "{}", ["bogus"], "bogus"),
    ],
)
def test_grid_tool_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, main: str,
                             content: str, argv: list[str], names: str) -> None:
    """The book's grid table (lab.grid) and the GPU host's grid tool speak the same one line."""
    from course_utils.__main__ import main as cli_main
    from tests.tooling import tool

    def table(argv: list[str]) -> int:
        return cli_main(["grid", *argv])

    run_main = table if main == "table" else tool("gpu/gridrun.py").main
    f = tmp_path / "index.json"
    f.write_text(content)
    before = tree(tmp_path)
    rc = run_main([a.replace("{f}", str(f)) for a in argv])
    assert_one_error(rc, capsys.readouterr().err, names.replace("{f}", str(f)))
    assert tree(tmp_path) == before
