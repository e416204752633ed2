"""VllmServer: argv, /health wait, one-line failure reasons, clean process-group stop."""

from __future__ import annotations

import os
import socket
import stat
import sys
import time
from pathlib import Path

import pytest

from course_utils.lab.server import (
    ServerStartError,
    VllmServer,
    classify_failure,
    gpu_memory_used_mib,
    gpu_pids,
    group_pids,
    visible_devices,
)

# ---------------------------------------------------------------- argv


def test_argv_is_a_list_built_from_knobs() -> None:
    srv = VllmServer("Qwen/Qwen2.5-7B-Instruct",
                     {"max_num_seqs": 128, "enable_prefix_caching": False},
                     port=12345, load_format="dummy", seed=7,
                     extra_args=["--max-model-len", "4096"], vllm_cmd=["/opt/bin/vllm"])
    assert srv.argv == [
        "/opt/bin/vllm", "serve", "Qwen/Qwen2.5-7B-Instruct",
        "--max-num-seqs", "128", "--no-enable-prefix-caching",
        "--host", "127.0.0.1", "--port", "12345", "--load-format", "dummy", "--seed", "7",
        "--max-model-len", "4096",
    ]
    assert srv.base_url == "http://127.0.0.1:12345"
    assert srv.ship_argv() == ["/opt/bin/vllm", "serve", "Qwen/Qwen2.5-7B-Instruct",
                               "--max-num-seqs", "128", "--no-enable-prefix-caching"]


def test_defaults_pick_a_free_port_and_no_load_format() -> None:
    srv = VllmServer("m")
    assert srv.argv[:3] == ["vllm", "serve", "m"]
    assert "--load-format" not in srv.argv
    assert srv.argv[srv.argv.index("--host") + 1] == "127.0.0.1"
    port = int(srv.argv[srv.argv.index("--port") + 1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # it was free


def test_extra_args_must_not_be_a_shell_string() -> None:
    with pytest.raises(TypeError):
        VllmServer("m", extra_args="--enforce-eager --max-model-len 10")  # type: ignore[arg-type]


# ---------------------------------------------------------------- classify_failure (0.26.0 texts)

KV_MSG = (
    "ValueError: To serve at least one request with the model's max seq len (32768), "
    "(1.75 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(0.88 GiB). Based on the available memory, the estimated maximum model length is 16384. "
    "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU "
    "backend) or decreasing `max_model_len` when initializing the engine. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)


@pytest.mark.parametrize(
    ("log", "expect"),
    [
        ("INFO loading\n" + KV_MSG + "\n", "not enough KV cache memory for max_model_len 32768"),
        ("ValueError: No available memory for the cache blocks. Try increasing "
         "`gpu_memory_utilization` when initializing the engine", "weights do not fit"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a "
         "total capacity of 23.52 GiB\nRuntimeError: Engine core initialization failed.",
         "CUDA out of memory (tried to allocate 1.02 GiB)"),
        ("ValueError: max_num_batched_tokens (256) must be greater than or equal to "
         "max_num_seqs (512).", "invalid knob combination: max_num_batched_tokens (256) must be"),
        ("ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (4096). This",
         "invalid knob combination: max_num_batched_tokens (2048) < max_model_len (4096)"),
        ("OSError: [Errno 98] Address already in use", "port in use"),
        ("usage: vllm serve [model_tag] [options]\nvllm serve: error: unrecognized arguments: "
         "--max-num-seq 5", "unknown flag for vllm 0.26.0: --max-num-seq 5"),
        ("ValueError: Free memory on device cuda:0 (10.0/79.1 GiB) on startup is less than "
         "desired GPU memory utilization (0.9, 71.2 GiB). Decrease GPU memory utilization",
         "GPU memory already in use: 10.0/79.1 GiB free"),
        ("INFO a\nRuntimeError: something odd happened\nINFO shutting down",
         "RuntimeError: something odd happened"),
    ],
)
def test_classify_failure_gives_one_clear_line(log: str, expect: str) -> None:
    reason = classify_failure(log)
    assert reason.startswith(expect), reason
    assert "\n" not in reason and len(reason) <= 300


def test_classify_failure_empty_log_names_the_exit_code() -> None:
    assert classify_failure("", 3) == "vllm serve exited with code 3"


# ---------------------------------------------------------------- with the fake vllm


def _start(tmp_path: Path, knobs: dict | None = None, **kw) -> VllmServer:
    kw.setdefault("startup_timeout_s", 20)
    kw.setdefault("stop_timeout_s", 5)
    return VllmServer("fake-model", knobs, log_path=tmp_path / "serve.log", **kw)


def test_start_health_and_stop_leaves_no_process(tmp_path: Path, fake_vllm: Path) -> None:
    srv = _start(tmp_path, {"max_num_seqs": 4}, load_format="dummy")
    with srv:
        assert srv.healthy()
        pids = group_pids(srv.pgid)
        assert len(pids) >= 2  # API server + its "EngineCore" child
    assert group_pids(srv.pgid) == []
    assert not srv.alive()
    assert "--load-format" in srv.log_text()


def test_stubborn_children_are_killed(tmp_path: Path, fake_vllm: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_STUBBORN", "1")
    srv = _start(tmp_path, stop_timeout_s=0.6)
    with srv:
        child = [p for p in group_pids(srv.pgid) if p != srv.pgid]
        assert child
    assert group_pids(srv.pgid) == []
    assert not any(_alive(pid) for pid in child)


def _alive(pid: int) -> bool:
    """True for a live process; a zombie (dead, not yet reaped by init) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line[stat_line.rfind(")") + 2] != "Z"


def _fails(tmp_path: Path, knobs: dict | None = None, **kw) -> ServerStartError:
    srv = _start(tmp_path, knobs, **kw)
    t0 = time.monotonic()
    try:
        with pytest.raises(ServerStartError) as ei:
            srv.start()
    finally:  # a start that unexpectedly succeeds must not outlive the test
        srv.stop()
    assert time.monotonic() - t0 < 15  # returned when the process died, not at the timeout
    assert group_pids(srv.pgid) == []
    assert "\n" not in ei.value.reason
    return ei.value


def test_oom(tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_FAIL", "oom")
    assert _fails(tmp_path).reason.startswith("CUDA out of memory")


def test_not_enough_kv_for_max_model_len(tmp_path: Path, fake_vllm: Path) -> None:
    err = _fails(tmp_path, {"max_model_len": 65536})
    assert err.reason.startswith("not enough KV cache memory for max_model_len 65536")
    assert "estimated max_model_len that fits is 32768" in err.reason


def test_weights_leave_no_cache(tmp_path: Path, fake_vllm: Path) -> None:
    assert _fails(tmp_path, {"gpu_memory_utilization": 0.1}).reason.startswith(
        "weights do not fit")


def test_invalid_combination(tmp_path: Path, fake_vllm: Path) -> None:
    err = _fails(tmp_path, extra_args=["--max-num-seqs", "512", "--max-num-batched-tokens", "256"])
    assert err.reason.startswith(
        "invalid knob combination: max_num_batched_tokens (256) must be >= max_num_seqs (512)")


def test_port_in_use(tmp_path: Path, fake_vllm: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        err = _fails(tmp_path, port=s.getsockname()[1])
    assert err.reason.startswith("port in use")


def test_unknown_flag(tmp_path: Path, fake_vllm: Path) -> None:
    # (argparse accepts unique prefixes, as vLLM's FlexibleArgumentParser does: use a real typo)
    err = _fails(tmp_path, extra_args=["--max-num-sequences", "5"])
    assert err.reason == "unknown flag for vllm 0.26.0: --max-num-sequences 5"


def test_health_timeout_stops_the_server(tmp_path: Path, fake_vllm: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "30")
    srv = _start(tmp_path, startup_timeout_s=1.0, stop_timeout_s=2)
    with pytest.raises(ServerStartError) as ei:
        srv.start()
    assert ei.value.reason.startswith("not healthy after 1 s")
    assert group_pids(srv.pgid) == []


def test_stop_waits_for_gpu_release_then_gives_up(tmp_path: Path, fake_vllm: Path) -> None:
    """A fake nvidia-smi lists the server's pid (or high memory use); stop() waits, bounded."""
    listed = tmp_path / "gpu_pids.txt"
    used = tmp_path / "gpu_used.txt"
    smi = fake_vllm / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --query-compute-apps=pid) cat "{listed}";; *) cat "{used}";; esac\n'
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    listed.write_text("")
    used.write_text("1000\n")
    assert gpu_pids() == set()
    srv = _start(tmp_path, gpu_release_timeout_s=1.0)
    srv.start()
    listed.write_text(f"{srv.pgid}\n99999999\n")
    assert gpu_pids() == {srv.pgid, 99999999}
    t0 = time.monotonic()
    srv.stop()
    assert 1.0 <= time.monotonic() - t0 < 8
    listed.write_text("")
    srv2 = _start(tmp_path, gpu_release_timeout_s=5.0)
    srv2.start()
    t0 = time.monotonic()
    srv2.stop()
    assert time.monotonic() - t0 < 4  # nothing of ours listed, memory back: no wait
    srv3 = _start(tmp_path, gpu_release_timeout_s=1.0)
    srv3.start()
    used.write_text("90000\n")  # pids hidden (container), memory still held
    t0 = time.monotonic()
    srv3.stop()
    assert 1.0 <= time.monotonic() - t0 < 8


def test_sigterm_to_python_stops_the_server(tmp_path: Path, fake_vllm: Path) -> None:
    """A Python process holding a VllmServer gets SIGTERM: the server group goes too."""
    import subprocess

    code = (
        "import sys,time\n"
        "from course_utils.lab.server import VllmServer\n"
        f"s=VllmServer('fake-model', log_path=r'{tmp_path / 'serve.log'}', stop_timeout_s=5)\n"
        "with s:\n"
        "    print(s.pgid, flush=True)\n"
        "    time.sleep(60)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    pgid = int(p.stdout.readline())
    assert group_pids(pgid)
    p.terminate()
    assert p.wait(timeout=20) == 128 + 15
    assert group_pids(pgid) == []


def test_killed_python_does_not_orphan_the_server(tmp_path: Path, fake_vllm: Path) -> None:
    """SIGKILL to the Python holding the server (a killed kernel): PDEATHSIG stops vllm."""
    import signal
    import subprocess

    code = (
        "import time\n"
        "from course_utils.lab.server import VllmServer\n"
        f"s=VllmServer('fake-model', log_path=r'{tmp_path / 'serve.log'}')\n"
        "s.start()\n"
        "print(s.pgid, flush=True)\n"
        "time.sleep(60)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    pgid = int(p.stdout.readline())
    assert group_pids(pgid)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    deadline = time.monotonic() + 15
    while group_pids(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group_pids(pgid) == []


def test_stop_watches_only_this_servers_gpus(tmp_path: Path, fake_vllm: Path,
                                             fake_nvidia_smi: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Two jobs on one host, one GPU each: a job starting on GPU 1 while ours (GPU 0) stops
    must not hold our stop until its timeout; our own GPU's memory still does."""
    spec = tmp_path / "gpus.txt"
    monkeypatch.setenv("FAKE_GPU_FILE", str(spec))
    h200 = "NVIDIA H200,143771,{free},580.95.05"
    spec.write_text(f"{h200.format(free=143000)};{h200.format(free=143000)}")
    assert gpu_memory_used_mib() == 2 * 771
    assert gpu_memory_used_mib(["1"]) == 771
    assert gpu_memory_used_mib(["GPU-fake0001"]) == 771  # a UUID prefix, as CUDA takes
    assert gpu_memory_used_mib(["7"]) is None
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "0, 1"}) == ["0", "1"]

    srv = _start(tmp_path, gpu_release_timeout_s=3.0, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert srv.devices == ["0"]
    srv.start()
    spec.write_text(f"{h200.format(free=143000)};{h200.format(free=3000)}")  # the other job
    t0 = time.monotonic()
    srv.stop()
    assert time.monotonic() - t0 < 2.5  # GPU 1 is not ours: no wait

    spec.write_text(f"{h200.format(free=143000)};{h200.format(free=143000)}")
    srv2 = _start(tmp_path, gpu_release_timeout_s=3.0, env={"CUDA_VISIBLE_DEVICES": "0"})
    srv2.start()
    spec.write_text(f"{h200.format(free=3000)};{h200.format(free=143000)}")  # ours still held
    t0 = time.monotonic()
    srv2.stop()
    assert time.monotonic() - t0 >= 3.0
