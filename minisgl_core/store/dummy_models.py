"""Model directories of random weights at the shapes of public models, written once and cached.

``ensure_dummy_model("Qwen3-1.7B")`` writes ``<cache>/dummy/Qwen3-1.7B/``: the model's public
config.json (shipped in ``model_configs/``), a tokenizer, and the random weights of
``random_weights.RandomCheckpoint`` as bf16 safetensors, which vLLM and minisgl serve;
``ensure_dummy_gguf`` adds the same weights as an F16 GGUF for llama.cpp (``dummy_gguf``). The
tokenizer is the default model's (SmolLM2's, 49,152 tokens): the config's vocabulary size is kept,
so the embedding has the public shape; its rows past the tokenizer's are zero, so greedy decoding
emits only ids the tokenizer has (``random_weights``). A path to any config.json works too
(``config_spec``): its model is cached under the folder's name and the config's hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from minisgl_core.did_you_mean import suggest
from minisgl_core.store.errors import ModelNotFoundError
from minisgl_core.store.paths import cache_dir
from minisgl_core.store.random_weights import RandomCheckpoint, tokenizer_size

CONFIGS = "model_configs"
# tokenizer files copied as they are (tokenizer_config.json is rewritten, see _copy_tokenizer)
TOKENIZER_FILES = ("tokenizer.json", "special_tokens_map.json", "chat_template.jinja",
                   "vocab.json", "merges.txt")
# what a cached directory was written by: one written by another version or seed is rewritten
STAMP, STAMP_VERSION = "minisgl-dummy.json", 1
GGUF_FOLDER = "gguf"  # the GGUFs of the same weights: F16, and what llama-quantize makes of it
_SAFETENSORS_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def config_names() -> list[str]:
    """The public configs shipped (``Qwen3-1.7B``...), sorted."""
    folder = resources.files(__package__).joinpath(CONFIGS)
    return sorted(entry.name.removesuffix(".json") for entry in folder.iterdir()
                  if entry.name.endswith(".json"))


def model_config(name: str) -> dict[str, Any]:
    """The shipped config.json of ``name``; ModelNotFoundError (with did-you-mean) if unknown."""
    names = config_names()
    if name not in names:
        raise ModelNotFoundError(f'no public config "{name}";{suggest(name, names)} '
                                 f"known: {', '.join(names)}")
    text = resources.files(__package__).joinpath(CONFIGS, f"{name}.json").read_text()
    return dict(json.loads(text))


def is_config_path(spec: str) -> bool:
    """Whether ``spec`` names a config file or a folder holding one, not a shipped config."""
    return spec.endswith(".json") or "/" in spec or os.sep in spec


def config_spec(spec: str) -> tuple[str, dict[str, Any], Path | None]:
    """(cache name, config, tokenizer folder or None) of a shipped config's name or a path to a
    config.json (or a folder holding one). A path's model is named after its folder and the
    config's hash, and takes the tokenizer beside the config when there is one."""
    if not is_config_path(spec):
        return spec, model_config(spec), None
    path = Path(spec).expanduser()
    file = path / "config.json" if path.is_dir() else path
    try:
        text = file.read_text()
        config = json.loads(text)
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"cannot read model config {file}: {exc}") from None
    if not isinstance(config, dict):
        raise ModelNotFoundError(f"{file} is not a model config (a JSON object)")
    stem = file.parent.name if file.name == "config.json" else file.stem
    name = f"{stem or 'config'}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    tokenizer = file.parent if (file.parent / "tokenizer.json").is_file() else None
    return name, config, tokenizer


def dummy_dir(name: str) -> Path:
    """Where ``name``'s random model is cached: ``<cache>/dummy/<name>`` (``name``: a shipped
    config's, or the cache name ``config_spec`` gives a path)."""
    return cache_dir() / "dummy" / name


def ensure_dummy_model(spec: str, *, tokenizer_dir: Path | None = None, seed: int = 0) -> Path:
    """The model directory of random weights of ``spec`` (a shipped config's name or a path to
    a config.json), written on first use (atomically: a directory that exists is complete).
    ``tokenizer_dir``: whose tokenizer files to take (default: the one beside a config path,
    else the default model's)."""
    name, config, beside = config_spec(spec)
    out = dummy_dir(name)
    stamp = {"version": STAMP_VERSION, "seed": seed}
    if _stamp(out) == stamp:
        return out
    tokenizer_dir = tokenizer_dir or beside
    if tokenizer_dir is None:
        from minisgl_core.store.default_model import ensure_default_model

        tokenizer_dir = ensure_default_model()
    partial = out.with_name(f".{name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        write_dummy_model(config, partial, tokenizer_dir, seed=seed)
        (partial / STAMP).write_text(json.dumps(stamp))
        if out.exists():  # stale: written by another version or seed
            shutil.rmtree(out)
        partial.rename(out)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        if _stamp(out) != stamp:  # not another process's rename that won
            raise
    return out


def _stamp(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((path / STAMP).read_text()))
    except (OSError, ValueError):
        return None


def ensure_dummy_gguf(spec: str, *, tokenizer_dir: Path | None = None, seed: int = 0) -> Path:
    """The F16 GGUF of ``spec``'s random model (in GGUF_FOLDER of its directory), written on
    first use; ``llama-quantize`` makes Q4_0 / Q8_0 files of it beside it
    (``bench.peers.gguf_quantized``)."""
    from minisgl_core.store.dummy_gguf import write_dummy_gguf

    model = ensure_dummy_model(spec, tokenizer_dir=tokenizer_dir, seed=seed)
    # a folder of its own: beside tokenizer files, transformers reads those, not the GGUF's
    # (and loses its chat template), when minisgl converts the GGUF to serve it
    out = model / GGUF_FOLDER / f"{model.name}-F16.gguf"
    if not out.is_file():
        out.parent.mkdir(exist_ok=True)
        if (model / out.name).is_file():  # written beside the safetensors by older versions
            (model / out.name).rename(out)
            return out
        partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
        try:
            write_dummy_gguf(model, partial, seed=seed)
            partial.rename(out)
        finally:
            partial.unlink(missing_ok=True)
    return out


def write_dummy_model(config: Mapping[str, Any], out: Path, tokenizer_dir: Path,
                      seed: int = 0) -> Path:
    """Write config.json, generation_config.json, the tokenizer of ``tokenizer_dir`` and the
    random weights (bf16 safetensors) into the new directory ``out``."""
    out.mkdir(parents=True)
    special = _copy_tokenizer(tokenizer_dir, out)
    config = dict(config)
    # the special tokens of the tokenizer served with it, not the public model's own ids
    for key in ("bos_token", "eos_token", "pad_token"):
        if key in special:
            config[f"{key}_id"] = special[key]
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")
                  if k in config}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))
    write_safetensors(RandomCheckpoint(config, seed=seed, tokens=tokenizer_size(out)),
                      out / "model.safetensors")
    return out


def write_safetensors(ckpt: Any, path: Path) -> None:
    """Write every tensor of ``ckpt`` (a ``Checkpoint``-like reader) to one safetensors file,
    one tensor in memory at a time (``safetensors.torch.save_file`` wants them all at once)."""
    import torch

    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    dtype = torch.bfloat16  # what RandomCheckpoint makes
    for name in ckpt.names():
        shape = list(ckpt.shape(name))
        nbytes = dtype.itemsize
        for dim in shape:
            nbytes *= dim
        header[name] = {"dtype": _SAFETENSORS_DTYPES[str(dtype).removeprefix("torch.")],
                        "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for name in ckpt.names():
            tensor = ckpt.get(name).contiguous()
            assert tensor.dtype == dtype, name
            f.write(memoryview(tensor.view(torch.uint8).numpy()))


def _copy_tokenizer(src: Path, out: Path) -> dict[str, int]:
    """Copy the tokenizer files; return the ids of its bos/eos/pad tokens."""
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    config = json.loads((src / "tokenizer_config.json").read_text())
    # transformers 5 writes its own class name and loading flags; older readers (vLLM's) want
    # the fast tokenizer class, and the chat template inline
    for key in ("backend", "is_local", "local_files_only"):
        config.pop(key, None)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    template = src / "chat_template.jinja"
    if "chat_template" not in config and template.is_file():
        config["chat_template"] = template.read_text()
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    tokenizer = json.loads((src / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in tokenizer.get("added_tokens", [])}
    vocab = tokenizer["model"].get("vocab")
    if isinstance(vocab, dict):  # BPE and WordPiece; a Unigram vocabulary is a list
        ids.update({k: v for k, v in vocab.items() if k not in ids})
    return {key: ids[config[key]] for key in ("bos_token", "eos_token", "pad_token")
            if isinstance(config.get(key), str) and config[key] in ids}


__all__ = ["config_names", "config_spec", "dummy_dir", "ensure_dummy_gguf", "ensure_dummy_model",
           "is_config_path", "model_config", "write_dummy_model", "write_safetensors"]
