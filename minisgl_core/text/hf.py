"""Loading a Hugging Face tokenizer from a local directory, single-threaded and offline."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def load_tokenizer(model_dir: str | Path, *, text_process: bool = True) -> Any:
    """Load the tokenizer of an HF-format directory; never downloads.

    A plain ``tokenizer.json`` loads without transformers (``light.load_light``: no torch in
    the text processes); anything else through transformers' AutoTokenizer. ``text_process``
    (a tokenizer or detokenizer process) also keeps the tokenizers library on one thread.
    """
    if text_process:
        # Both must be set before tokenizers starts its thread pool; the roles run one thread.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from minisgl_core.text.light import NeedsTransformers, load_light

    path = Path(model_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    try:
        return load_light(path)
    except NeedsTransformers as why:
        log.info("loading the tokenizer with transformers (%s)", why)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def raw_decoder(tokenizer: Any, skip_special_tokens: bool) -> Callable[[Sequence[int]], str]:
    """A fast ids -> text function equal to ``tokenizer.decode`` for this tokenizer.

    It calls the Rust backend directly (about half the cost of ``tokenizer.decode``) unless
    the tokenizer may post-process the text (``clean_up_tokenization_spaces``), in which case
    it keeps ``tokenizer.decode``.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    cleanup = bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
    if backend is not None and not cleanup:
        decode = backend.decode

        def fast(ids: Sequence[int]) -> str:
            return decode(ids, skip_special_tokens=skip_special_tokens)

        return fast

    def slow(ids: Sequence[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    return slow


def eos_token_ids(tokenizer: Any, model_dir: str | Path | None = None) -> frozenset[int]:
    """The full end-of-sequence set: the tokenizer's EOS plus generation_config.json's."""
    ids: set[int] = set()
    if isinstance(getattr(tokenizer, "eos_token_id", None), int):
        ids.add(tokenizer.eos_token_id)
    if model_dir is not None:
        gen = Path(model_dir) / "generation_config.json"
        try:
            value = json.loads(gen.read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            value = None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(v for v in value if isinstance(v, int))
    return frozenset(ids)
