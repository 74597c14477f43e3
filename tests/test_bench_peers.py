"""Peers of `minisgl bench compare`: names, the not-installed error, vLLM's command line and
environment, and a real OpenAI-compatible server started as a peer, measured and stopped."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from minisgl_core.bench import compare, peers
from minisgl_core.cli.app import make_app
from minisgl_core.plugin.loading import build_manager

pytestmark = pytest.mark.usefixtures("short_bench_samples")  # conftest.py


def test_unknown_peer_exits_2_naming_the_peers() -> None:
    result = CliRunner().invoke(make_app(build_manager()),
                                ["bench", "compare", "--peer", "vllm", "--peer", "sglang"])
    assert result.exit_code == 2
    assert "unknown peer 'sglang': known peers are vllm, llamacpp" in " ".join(
        result.output.replace("│", " ").split())


def test_peer_not_installed_names_the_make_target(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINISGL_PEERS_ROOT", str(tmp_path))
    with pytest.raises(peers.PeerNotInstalledError, match=r"run `make bench-peers` in"):
        peers.build_specs(["vllm"], [], str(tmp_path))
    with pytest.raises(peers.PeerNotInstalledError,
                       match=r"llamacpp/bin/llama-server\): run `make bench-peers PEERS=llamacpp`"):
        peers.build_specs(["llamacpp"], [], str(tmp_path))
    with pytest.raises(peers.PeerNotInstalledError, match="libtcmalloc-minimal4"):
        peers.find_tcmalloc([str(tmp_path)])


def test_vllm_command_line_and_env(tmp_path: Path) -> None:
    venv = tmp_path / ".venv-vllm"
    for f in ("bin/python", "lib/libiomp5.so", "sys/libtcmalloc_minimal.so.4"):
        (venv / f).parent.mkdir(parents=True, exist_ok=True)
        (venv / f).touch()
    spec = peers.vllm_spec(Path("/models/m-hf"), "m", tmp_path, [str(venv / "sys")])
    assert spec.command(8123) == [
        str(venv / "bin/python"), "-m", "vllm.entrypoints.openai.api_server",
        "--model", "/models/m-hf", "--served-model-name", "m", "--host", "127.0.0.1",
        "--port", "8123", "--dtype", "float32", "--max-model-len", "2048"]
    assert spec.env["LD_PRELOAD"] == (f"{venv}/sys/libtcmalloc_minimal.so.4:"
                                      f"{venv}/lib/libiomp5.so")
    assert (spec.env["VLLM_CPU_KVCACHE_SPACE"], spec.env["VLLM_CPU_NUM_OF_RESERVED_CPU"]) == (
        "2", "0")
    assert spec.env["VLLM_CPU_OMP_THREADS_BIND"] == peers.cpu_list()
    assert spec.env["HF_HUB_OFFLINE"] == "1"  # nothing is downloaded
    assert (spec.name, spec.scheme) == ("vllm-cpu 0.32.0 fp32", "fp32")
    bf16 = peers.vllm_spec(Path("/models/m-hf"), "m", tmp_path, [str(venv / "sys")], "bfloat16")
    assert bf16.command(1)[-3:] == ["bfloat16", "--max-model-len", "2048"]
    assert (bf16.name, bf16.scheme) == ("vllm-cpu 0.32.0 bf16", "bf16")


@pytest.mark.parametrize(("flags", "dtypes"), [
    ({"avx2", "fma"}, ["float32"]),  # bf16 emulated: hundreds of times slower, never picked
    ({"avx512f", "avx512_bf16"}, ["float32", "bfloat16"]),
    ({"avx512f", "amx_bf16", "amx_tile"}, ["float32", "bfloat16"])])
def test_vllm_runs_in_fp32_and_in_bf16_where_the_host_computes_it(
        flags: set[str], dtypes: list[str]) -> None:
    assert peers.vllm_dtypes(flags) == dtypes


def test_llamacpp_server_command_line(tmp_path: Path) -> None:
    server = tmp_path / ".venv-llamacpp" / "bin" / "llama-server"
    server.parent.mkdir(parents=True)
    server.touch()
    spec = peers.llamacpp_spec(Path("/m/SmolLM2-135M-Instruct.Q4_1.gguf"), 8, tmp_path)
    threads = str(len(os.sched_getaffinity(0)))
    assert spec.command(8123) == [
        str(server), "--model", "/m/SmolLM2-135M-Instruct.Q4_1.gguf", "--host", "127.0.0.1",
        "--port", "8123", "--threads", threads, "--threads-batch", threads, "--parallel", "8",
        "--ctx-size", str(8 * 2048), "--no-webui"]
    assert (spec.name, spec.scheme, spec.gguf) == (
        "llama.cpp server Q4_1", "GGUF Q4_1", Path("/m/SmolLM2-135M-Instruct.Q4_1.gguf"))
    q8 = peers.llamacpp_spec(Path("/m/SmolLM2-135M-Instruct.Q8_0.gguf"), 8, tmp_path)
    assert (q8.name, q8.scheme) == ("llama.cpp server Q8_0", "GGUF Q8_0")
    # 32 slots of 2,048 tokens at Qwen3-1.7B's 114,688 bytes a token pass 2 GiB: one pool of
    # 2 GiB shared by the slots, as vLLM's and minisgl's KV caches
    big = peers.llamacpp_spec(Path("/m/Qwen3-1.7B-Q4_0.gguf"), 32, tmp_path,
                              kv_bytes_per_token=28 * 2 * 8 * 128 * 2)
    assert big.command(8123)[-4:] == ["--ctx-size", str((2 << 30) // 114_688), "--kv-unified",
                                      "--no-webui"]
    small = peers.llamacpp_spec(Path("/m/m.gguf"), 32, tmp_path, kv_bytes_per_token=23_040)
    assert small.command(8123)[-3:] == ["--ctx-size", str(32 * 2048), "--no-webui"]


def test_hf_copy_of_a_converted_model(tmp_path: Path) -> None:
    src = tmp_path / "conv"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(
        {"model_type": "llama", "dtype": "float32", "rope_parameters": {"rope_theta": 1e5}}))
    (src / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class":
                                                           "TokenizersBackend"}))
    (src / "chat_template.jinja").write_text("{{ messages }}")
    (src / "model.safetensors").write_bytes(b"w")
    out = peers.hf_model_dir(src, tmp_path / "peers")
    assert out == tmp_path / "peers" / "conv-hf"
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["rope_theta"], config["torch_dtype"]) == (1e5, "float32")
    tok = json.loads((out / "tokenizer_config.json").read_text())
    assert tok == {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": "{{ messages }}"}
    assert (out / "model.safetensors").read_bytes() == b"w"
    assert peers.hf_model_dir(src, tmp_path / "peers") == out  # again: same copy


@pytest.mark.parametrize("bad", ["no-equals {port}", "=cmd {port}", "x=cmd", "x="])
def test_peer_command_needs_label_and_port(bad: str) -> None:
    with pytest.raises(ValueError, match="LABEL=COMMAND"):
        peers.command_spec(bad)


def test_command_peer_is_measured_and_stopped(tmp_path: Path) -> None:
    from minisgl_core.testing.tiny import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny-llama", "llama")
    command = shlex.join([sys.executable, "-m", "minisgl_core", "launch", "--transport", "zmq",
                          "--scheduler", "synthetic", "--model", str(model)]) + " --port {port}"
    out = tmp_path / "results"
    results = compare.main(["zmq"], [2], 2, 4, str(model), out, offline=False,
                           command="minisgl bench compare --test", progress=False,
                           scheduler="synthetic", peer_commands=[f"other={command}"])
    (peer,) = results["peers"]
    assert peer["transport"] == "other" and peer["exit_code"] == 0
    (level,) = peer["levels"]
    assert (level["concurrency"], level["failures"], level["output_tokens"]) == (2, 0, 8)
    assert peer["rss_mb"] > 0 and results["service"][0]["rss_mb"] > 0
    rows = [line.split("|")[1].strip() for line in (out / "results.md").read_text().splitlines()
            if line.startswith("|")]
    assert rows.count("other") == 3  # its level, its start/RSS/idle row, its CPU row
    # stopped by its handle: the port it served on is closed
    (log,) = (out / "logs").glob("peer-other-*.log")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{log.stem.rsplit('-', 1)[1]}/v1/models", timeout=2)


def test_the_q8_0_gguf_is_written_once_by_llama_quantize(tmp_path: Path) -> None:
    bin_dir = tmp_path / ".venv-llamacpp" / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls"
    quantize = bin_dir / "llama-quantize"  # stands for llama.cpp's: copies, logs its arguments
    quantize.write_text(f'#!/bin/sh\necho "$@" >> {calls}\ncp "$2" "$3"\n')
    quantize.chmod(0o755)
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    out = peers.gguf_quantized(gguf, "Q8_0", tmp_path / "cache", tmp_path)
    assert out == tmp_path / "cache" / "SmolLM2-135M-Instruct.Q8_0.gguf"
    assert out.read_bytes() == b"GGUF" and sorted((tmp_path / "cache").iterdir()) == [out]
    # kept: not written again
    assert peers.gguf_quantized(gguf, "Q8_0", tmp_path / "cache", tmp_path) == out
    (line,) = calls.read_text().splitlines()
    assert line.split()[0] == "--allow-requantize" and line.split()[-1] == "Q8_0"


def test_a_failed_llama_quantize_says_why_and_leaves_no_file(tmp_path: Path) -> None:
    bin_dir = tmp_path / ".venv-llamacpp" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "llama-quantize").write_text(  # writes part of its output, then fails
        '#!/bin/sh\necho half > "$3"\necho "bad magic" >&2\nexit 3\n')
    (bin_dir / "llama-quantize").chmod(0o755)
    gguf = tmp_path / "m.Q4_1.gguf"
    gguf.write_bytes(b"x")
    with pytest.raises(RuntimeError, match=r"llama-quantize failed \(3\) writing Q8_0 of "
                                           r".*m\.Q4_1\.gguf:\nbad magic"):
        peers.gguf_quantized(gguf, "Q8_0", tmp_path / "cache", tmp_path)
    assert not list((tmp_path / "cache").iterdir())
