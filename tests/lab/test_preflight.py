"""Preflight: each check's passing and failing path, the CLI (one line, a fix, exit 2, no
traceback) and both labs under papermill stopping in their preflight cell.

The GPU checks read a fake `nvidia-smi` (tests/fakes/fake_nvidia_smi.py); `vllm serve` is
the fake of tests/fakes/fake_vllm.py; the dummy model folder is a small one built by
course_utils.lab.modelfolder (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_utils.lab import checks
from course_utils.lab import preflight as pf
from course_utils.lab.server import GpuInfo, gpu_inventory

ROOT = Path(__file__).resolve().parents[2]
RTX4090 = "NVIDIA GeForce RTX 4090,24564,24080,580.65.06"


def _gpu(driver: str = "580.65.06", total: float = 24564, free: float = 24080) -> GpuInfo:
    return GpuInfo(0, "GPU-x", "NVIDIA GeForce RTX 4090", total, free, driver)


def _fake_pkg(site: Path, version: str | None, version_py: str | None = None) -> Path:
    pkg = site / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('preflight must not import vllm')\n")
    if version_py:
        (pkg / "_version.py").write_text(f"__version__ = version = '{version_py}'\n")
    if version:
        dist = site / f"vllm-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return pkg


# ------------------------------------------------------------------------------ vLLM


def test_vllm_package_pinned_version_passes_without_importing(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    _fake_pkg(tmp_path / "site", "0.26.0")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    c = pf.check_vllm_package("llm")  # its __init__ raises: reading metadata only
    assert (c.ok, c.warn, c.detail["en"]) == (True, False, "vLLM 0.26.0")
    assert "vllm" not in sys.modules


def test_vllm_package_other_version_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    _fake_pkg(tmp_path / "site", "0.25.1")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    c = pf.check_vllm_package("llm")
    assert c.ok and c.warn and "0.25.1" in c.detail["en"] and "0.26.0" in c.detail["en"]
    assert "pip install vllm==0.26.0" in c.fix["en"]


def test_vllm_package_version_from_version_py(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    _fake_pkg(tmp_path / "site", None, version_py="0.26.0")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert pf.check_vllm_package("llm").detail["en"] == "vLLM 0.26.0"


def test_vllm_package_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # find_spec answers None
    c = pf.check_vllm_package("llm")
    assert not c.ok and "not installed" in c.detail["en"]
    assert "requirements-gpu.txt" in c.fix["en"] and "requirements-gpu.txt" in c.fix["zh"]
    # vllm serve runs as a subprocess: the executable on PATH is checked instead
    assert pf.check_vllm_package("serve").ok


def test_vllm_cli_on_path_or_not(fake_vllm: Path, monkeypatch: pytest.MonkeyPatch,
                                 tmp_path: Path) -> None:
    c = pf.check_vllm_cli("vllm")
    assert c.ok and c.detail["en"] == str(fake_vllm / "vllm")
    assert pf.check_vllm_cli([str(fake_vllm / "vllm"), "--x"]).ok
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    c = pf.check_vllm_cli(("vllm",))
    assert not c.ok and "`vllm` is not on PATH" in c.line("en") and "fix:" in c.line("en")


# ------------------------------------------------------------------------------ GPU


def test_gpu_inventory_reads_the_fake_csv(fake_nvidia_smi: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_GPU", f"{RTX4090};NVIDIA H200,143771,140000,580.95.05")
    gpus, said = gpu_inventory()
    assert said == "" and [g.name for g in gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA H200"]
    assert (gpus[1].index, gpus[1].total_mib, gpus[1].free_mib, gpus[1].driver) == (
        1, 143771.0, 140000.0, "580.95.05")
    gpu, why = pf.pick_gpu(gpus, said)
    assert gpu is gpus[0] and why == {}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert pf.pick_gpu(gpus, said)[0] is gpus[1]
    c = pf.check_gpu(*pf.pick_gpu(gpus, said))
    assert c.ok and c.detail["en"].startswith("NVIDIA H200 (GPU 1): 136.7 of 140.4 GiB free")


def test_gpu_missing_hidden_or_driver_down(fake_nvidia_smi: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    c = pf.check_gpu(*pf.pick_gpu(*gpu_inventory()))
    assert not c.ok and "CUDA_VISIBLE_DEVICES=''" in c.detail["en"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FAIL", "driver")
    c = pf.check_gpu(*pf.pick_gpu(*gpu_inventory()))
    assert not c.ok and "couldn't communicate with the NVIDIA driver" in c.detail["en"]
    assert "backend replay" in c.fix["en"]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    c = pf.check_gpu(*pf.pick_gpu(*gpu_inventory()))
    assert not c.ok and "no nvidia-smi" in c.detail["en"] and "没有 nvidia-smi" in c.detail["zh"]


def test_driver_must_support_cuda_13() -> None:
    assert pf.check_driver(_gpu("580.65.06")).ok
    assert pf.check_driver(_gpu("590.44.01")).ok
    c = pf.check_driver(_gpu("550.54.14"))
    assert not c.ok and "550.54.14 is older than 580" in c.detail["en"]
    assert "CUDA 13.0" in c.fix["en"] and "CUDA 13.0" in c.fix["zh"]
    assert pf.check_driver(_gpu("n/a")).warn


def test_free_memory_against_gpu_memory_utilization() -> None:
    assert pf.check_gpu_memory(_gpu(free=24080), 0.9).ok  # 23.5 >= 0.9 x 24.0 = 21.6 GiB
    c = pf.check_gpu_memory(_gpu(free=10000), 0.9)
    assert not c.ok and "9.8 GiB free < gpu_memory_utilization 0.9 x 24.0 GiB = 21.6 GiB" in c.line()
    assert "lower gpu_memory_utilization to <= 0.4" in c.fix["en"]


# ------------------------------------------------------------------------------ model


def test_model_folder_checks(dummy_model: Path, tmp_path: Path) -> None:
    c = pf.check_model(str(dummy_model))
    assert c.ok and "tokenizer.json" in c.detail["en"]
    c = pf.check_model(str(tmp_path / "no-such"))
    assert not c.ok and c.detail["en"] == f"model folder {tmp_path / 'no-such'} does not exist"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no config.json" in pf.check_model(str(empty)).detail["en"]
    no_tok = tmp_path / "no-tok"
    no_tok.mkdir()
    shutil.copy(dummy_model / "config.json", no_tok)
    c = pf.check_model(str(no_tok))
    assert not c.ok and "has no tokenizer" in c.detail["en"]
    assert "python -m course_utils modelfolder" in c.fix["en"]
    assert pf.check_model(str(no_tok), tokenizer=str(dummy_model)).ok  # tokenizer elsewhere
    (no_tok / "tokenizer.json").write_text("{}")  # tokenizer_config.json still missing
    assert not pf.check_model(str(no_tok)).ok


def test_hub_id_needs_a_way_to_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HF_HUB_OFFLINE", "HF_ENDPOINT", "VLLM_USE_MODELSCOPE", "HTTPS_PROXY",
                "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(checks, "_reachable", lambda host, port, timeout_s=1.0: False)
    c = pf.check_model("Qwen/Qwen2.5-7B-Instruct")
    assert not c.ok and "huggingface.co is not reachable" in c.detail["en"]
    assert "HF_ENDPOINT=https://hf-mirror.com" in c.fix["en"] and "VLLM_USE_MODELSCOPE" in c.fix["zh"]
    monkeypatch.setattr(checks, "_reachable", lambda host, port, timeout_s=1.0: host == "huggingface.co")
    assert pf.check_model("Qwen/Qwen2.5-7B-Instruct").ok
    monkeypatch.setattr(checks, "_reachable", lambda host, port, timeout_s=1.0: False)
    monkeypatch.setenv("https_proxy", "http://10.0.0.7:12798")  # AutoDL's network_turbo
    assert "through the proxy" in pf.check_model("Qwen/Qwen2.5-7B-Instruct").detail["en"]
    monkeypatch.delenv("https_proxy")
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.com")
    c = pf.check_model("Qwen/Qwen2.5-7B-Instruct")
    assert c.ok and "hf-mirror.com" in c.detail["en"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    c = pf.check_model("Qwen/Qwen2.5-7B-Instruct")
    assert not c.ok and "HF_HUB_OFFLINE=1" in c.detail["en"]
    (tmp_path / "hub" / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / "abc").mkdir(parents=True)
    assert pf.check_model("Qwen/Qwen2.5-7B-Instruct").ok  # cached: offline is fine


def test_reachable_is_a_bounded_tcp_connect() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert checks._reachable("127.0.0.1", port)
    t0 = time.monotonic()
    assert not checks._reachable("127.0.0.1", port, timeout_s=0.5)  # closed now
    assert time.monotonic() - t0 < 1.0


def test_modelscope_needs_its_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_USE_MODELSCOPE", "True")
    monkeypatch.setitem(sys.modules, "modelscope", None)  # find_spec answers None
    c = pf.check_model("Qwen/Qwen2.5-7B-Instruct")
    assert not c.ok and c.fix["en"] == "pip install modelscope"
    monkeypatch.delitem(sys.modules, "modelscope")
    (tmp_path / "site" / "modelscope").mkdir(parents=True)
    (tmp_path / "site" / "modelscope" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    c = pf.check_model("Qwen/Qwen2.5-7B-Instruct")
    assert c.ok and "ModelScope" in c.detail["en"]


def test_dummy_tokenizer_must_cover_the_vocab(dummy_model: Path, tmp_path: Path) -> None:
    c = pf.check_dummy_vocab(str(dummy_model))
    assert c is not None and c.ok and c.detail["en"] == "covers all 700 ids"
    short = tmp_path / "short"
    shutil.copytree(dummy_model, short)
    cfg = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**cfg, "vocab_size": 800}))
    c = pf.check_dummy_vocab(str(short))
    assert c is not None and not c.ok and "decodes 700 of the 800 ids" in c.detail["en"]
    assert "python -m course_utils modelfolder" in c.fix["en"]
    assert pf.check_dummy_vocab("Qwen/Qwen2.5-7B-Instruct") is None  # nothing local to read


# ------------------------------------------------------------------------------ port, disk


def test_port_in_use_or_free() -> None:
    assert pf.check_port(None).ok and pf.check_port(0).ok
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        c = pf.check_port(port)
        assert not c.ok and f"port {port} on 127.0.0.1 is in use" in c.line()
        assert f"ss -ltnp | grep :{port}" in c.fix["en"]
    assert pf.check_port(port).ok


def test_output_folder(tmp_path: Path) -> None:
    c = pf.check_output(tmp_path / "new" / "deeper")
    assert c.ok and not (tmp_path / "new").exists()  # checked, not created
    (tmp_path / "file").write_text("x")
    c = pf.check_output(tmp_path / "file" / "out")
    assert not c.ok and "is a file" in c.detail["en"]
    c = pf.check_output(tmp_path, min_free_gib=1e9)
    assert not c.ok and "less than 1e+09 GiB" in c.detail["en"] and "autodl-tmp" in c.fix["en"]


# ------------------------------------------------------------------------------ the whole


def test_requested_gmu_is_the_largest_asked() -> None:
    assert pf.requested_gmu({}, {"max_num_seqs": [64]}) is None
    assert pf.requested_gmu({"gpu_memory_utilization": 0.8}, {"max_num_seqs": [64]}) == 0.8
    assert pf.requested_gmu({}, {"gpu-memory-utilization": "[0.8, 0.94, 0.9]"}) == 0.94
    assert pf.requested_gmu('{"gpu_memory_utilization": 0.95}', {"no_such": [1]}) == 0.95


def test_preflight_passes_fast_with_one_nvidia_smi_call(fake_vllm: Path, fake_nvidia_smi: Path,
                                                        dummy_model: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    report = pf.preflight(str(dummy_model), output_dir=tmp_path / "out", load_format="dummy",
                          gpu_memory_utilization=0.9)
    assert time.monotonic() - t0 < 2.0
    assert report.ok and report.lines() == []
    assert [c.name for c in report.checks] == ["vllm_package", "vllm_cli", "gpu", "driver",
                                               "gpu_memory", "model", "dummy_vocab", "port", "output"]
    calls = (tmp_path / "nvidia-smi-calls.txt").read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("--query-gpu=")
    table = report.table("zh")
    assert table.startswith("预检") and "✓ 空闲显存" in table and "✗" not in table


def test_failures_render_one_line_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setitem(sys.modules, "vllm", None)
    report = pf.preflight(str(tmp_path / "nope"), entry="llm")
    assert [c.name for c in report.failures()] == ["vllm_package", "gpu", "model"]
    for lang, fix in (("en", " → fix: "), ("zh", " → 解决：")):
        lines = report.lines(lang)
        assert len(lines) == 3 and all(fix in x and "\n" not in x for x in lines)
    with pytest.raises(pf.PreflightError) as exc:
        report.raise_if_failed("zh")
    assert exc.value._render_traceback_() == [f"✗ {x}" for x in report.lines("zh")]
    assert isinstance(exc.value, ValueError)


def test_lab_check_skips_replay_and_reads_repo_paths(fake_nvidia_smi: Path, dummy_model: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert pf.lab_check("replay", model="x", lang="zh") is None
    assert "跳过预检" in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "vllm", None)
    root = dummy_model.parent
    with pytest.raises(pf.PreflightError) as exc:  # lab 01 needs vLLM in this Python
        pf.lab_check("vllm", root=root, entry="llm", model=dummy_model.name, output_dir="out",
                     load_format="dummy")
    assert [x.split(":")[0] for x in exc.value.lines] == ["vLLM package"]
    out = capsys.readouterr().out
    assert re.search(rf"✓ model +{re.escape(str(dummy_model))} \(config.json", out), out
    assert re.search(rf"✓ output folder +{re.escape(str(root / 'out'))} ", out), out


# ------------------------------------------------------------------------------ CLI


def _cli(args: list[str], path: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CUDA_VISIBLE_DEVICES", "HF_HUB_OFFLINE", "FAKE_GPU")}
    return subprocess.run([sys.executable, "-m", "course_utils", *args], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**clean, "PATH": path, "PYTHONPATH": str(ROOT / "src"), **env})


def _run_args(cmd: str, model: str, out: Path, *extra: str) -> list[str]:
    common = ["--model", model, "--slo", "ttft:300 tpot:50", "--out", str(out), "--no-progress",
              "--load-format", "dummy", *extra]
    if cmd == "sweep":
        return ["sweep", *common, "--knob", "max_num_seqs", "--values", "2,4"]
    return ["tune", *common, "--candidate", "max_num_seqs=2,4"]


def _assert_one_line(p: subprocess.CompletedProcess[str], expected: str) -> None:
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert expected in lines[0] and " → fix: " in lines[0], lines[0]
    assert "Traceback" not in p.stdout + p.stderr
    assert p.stdout == ""  # stopped before any point


@pytest.mark.parametrize("cmd", ["tune", "sweep"])
def test_cli_without_vllm_on_path(cmd: str, fake_nvidia_smi: Path, dummy_model: Path,
                                  tmp_path: Path) -> None:
    p = _cli(_run_args(cmd, str(dummy_model), tmp_path / "o"), f"{fake_nvidia_smi.parent}:/usr/bin:/bin")
    _assert_one_line(p, "vllm on PATH: `vllm` is not on PATH")
    assert "requirements-gpu.txt" in p.stderr


@pytest.mark.parametrize("cmd", ["tune", "sweep"])
def test_cli_model_folder_missing(cmd: str, fake_vllm: Path, fake_nvidia_smi: Path,
                                  tmp_path: Path) -> None:
    p = _cli(_run_args(cmd, str(tmp_path / "no" / "such"), tmp_path / "o"), os.environ["PATH"])
    _assert_one_line(p, f"model: model folder {tmp_path / 'no' / 'such'} does not exist")
    assert not (tmp_path / "starts.jsonl").exists()  # no server started


@pytest.mark.parametrize("cmd", ["tune", "sweep"])
def test_cli_folder_without_tokenizer(cmd: str, fake_vllm: Path, fake_nvidia_smi: Path,
                                      dummy_model: Path, tmp_path: Path) -> None:
    folder = tmp_path / "weights-only"
    folder.mkdir()
    shutil.copy(dummy_model / "config.json", folder)
    p = _cli(_run_args(cmd, str(folder), tmp_path / "o"), os.environ["PATH"])
    _assert_one_line(p, f"model: {folder} has no tokenizer")


@pytest.mark.parametrize("cmd", ["tune", "sweep"])
def test_cli_port_in_use(cmd: str, fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path,
                         tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = _cli(_run_args(cmd, str(dummy_model), tmp_path / "o", "--port", str(port)),
                 os.environ["PATH"])
    _assert_one_line(p, f"port: port {port} on 127.0.0.1 is in use")
    assert not (tmp_path / "starts.jsonl").exists()


def test_cli_preflight_subcommand(fake_vllm: Path, fake_nvidia_smi: Path, dummy_model: Path,
                                  tmp_path: Path) -> None:
    p = _cli(["preflight", "--model", str(dummy_model), "--load-format", "dummy",
              "--out", str(tmp_path / "o"), "--gpu-memory-utilization", "0.9"], os.environ["PATH"])
    assert p.returncode == 0, p.stderr
    assert "✓ GPU" in p.stdout and "NVIDIA GeForce RTX 4090" in p.stdout and "✗" not in p.stdout
    p = _cli(["preflight", "--model", str(dummy_model), "--gpu-memory-utilization", "0.99",
              "--lang", "zh"], os.environ["PATH"], FAKE_GPU="NVIDIA GeForce RTX 4090,24564,20000,550.54.14")
    assert p.returncode == 2 and "✗ NVIDIA 驱动" in p.stdout
    lines = p.stderr.strip().splitlines()
    # the other failed checks as "✗" lines, then the one error line
    assert [x.strip().split("：")[0] for x in lines] == ["✗ NVIDIA 驱动", "error: 空闲显存"]
    assert all(" → 解决：" in x for x in lines) and "Traceback" not in p.stderr


# ------------------------------------------------------------------------------ labs


@pytest.mark.parametrize(("lab", "lang", "expected"), [
    ("01_knob_sweep.ipynb", "en", "vLLM package: vLLM is not installed in this Python"),
    ("02_slo_loop.ipynb", "en", "vllm on PATH: `vllm` is not on PATH"),
    ("02_slo_loop.ipynb", "zh", "PATH 上的 vllm：PATH 上找不到 `vllm`"),
])
def test_lab_stops_in_its_preflight_cell(lab: str, lang: str, expected: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import papermill as pm
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + ":/usr/bin:/bin")  # no vllm
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    out_nb, out_dir = tmp_path / lab, tmp_path / "results"
    with pytest.raises(pm.PapermillExecutionError) as exc:
        pm.execute_notebook(str(ROOT / "labs" / lab), str(out_nb), kernel_name="python3",
                            cwd=str(ROOT), progress_bar=False,
                            parameters={"backend": "vllm", "lang": lang, "output_dir": str(out_dir)})
    assert exc.value.ename == "PreflightError"
    assert expected in str(exc.value)
    nb = json.loads(out_nb.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    errors = [(i, o) for i, c in enumerate(code) for o in c["outputs"] if o["output_type"] == "error"]
    assert len(errors) == 1
    i, err = errors[0]
    assert "preflight.lab_check(" in "".join(code[i]["source"])
    assert "injected-parameters" in code[i - 1]["metadata"]["tags"]  # right after the parameters
    assert all(line.startswith("✗ ") for line in err["traceback"]), err["traceback"]
    assert any(expected in line for line in err["traceback"])
    assert not any("Traceback" in x or 'File "' in x for x in err["traceback"])
    fix = " → 解决：" if lang == "zh" else " → fix: "
    assert all(fix in line for line in err["traceback"])
    table = "".join(code[i]["outputs"][0]["text"])
    assert table.startswith("预检" if lang == "zh" else "preflight") and "✗" in table
    assert all(c["execution_count"] is None for c in code[i + 1:])  # the run stopped there
    assert not (out_dir / "params.json").exists()
