"""The transformers-free tokenizer of the text processes equals transformers' AutoTokenizer:
the same ids, text, vocabulary size, EOS and chat prompts (or the same refusal)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from minisgl_core.text.hf import load_tokenizer
from minisgl_core.text.light import SPECIAL_KEYS, LightTokenizer, NeedsTransformers, load_light

TEXTS = ["Hello world", " leading space",
         "unicode: h\u00e9llo \U0001f600 \u4e2d\u6587 \u4e16\u754c",
         "<|im_start|>user\nhi<|im_end|>", "", "numbers 0123456789 and\nnewlines\t\ttabs",
         "  multiple   spaces  ", "<s>[user] the cat</s>", "{{ not a template }}"]
CHATS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "\u4e2d\u6587 \U0001f600"}],
    [{"role": "user", "content": "{% raw %}{{ x }}{% endraw %} <|im_end|>"}],
    [{"role": "assistant", "content": "I start"}],  # some templates refuse this
]


@pytest.fixture(params=["smollm2_dir", "sp_dir", "tiny_dir"])
def pair(request: pytest.FixtureRequest) -> tuple[LightTokenizer, Any]:
    from transformers import AutoTokenizer

    path: Path = request.getfixturevalue(request.param)
    light = load_tokenizer(path)
    assert isinstance(light, LightTokenizer)  # these shapes never need transformers
    return light, AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def test_same_ids_vocabulary_and_eos(pair: tuple[LightTokenizer, Any]) -> None:
    light, hf = pair
    assert len(light) == len(hf)
    for key in SPECIAL_KEYS:
        assert getattr(light, key) == getattr(hf, key), key
        assert getattr(light, f"{key}_id") == getattr(hf, f"{key}_id"), key
    for text in TEXTS:
        for special in (True, False):
            assert light.encode(text, add_special_tokens=special) == hf.encode(
                text, add_special_tokens=special), (text, special)


def test_same_text(pair: tuple[LightTokenizer, Any]) -> None:
    light, hf = pair
    rng = random.Random(0)
    batches = [rng.sample(range(len(hf)), 24) for _ in range(20)]
    batches += [list(range(min(len(hf), 300))), [hf.eos_token_id] * 3]
    for ids in batches:
        for skip in (True, False):
            assert light.decode(ids, skip_special_tokens=skip) == hf.decode(
                ids, skip_special_tokens=skip)
        assert light.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    assert light.batch_decode(batches[:3]) == hf.batch_decode(batches[:3])
    assert light.get_vocab() == hf.get_vocab()
    names = [light.convert_ids_to_tokens(i) for i in batches[0]]
    assert light.convert_tokens_to_ids(names) == hf.convert_tokens_to_ids(names)


def test_same_chat_prompts_and_refusals(pair: tuple[LightTokenizer, Any]) -> None:
    light, hf = pair
    assert light.chat_template == hf.chat_template
    for chat in CHATS:
        for gen in (True, False):
            try:
                want = hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
            except Exception as exc:  # noqa: BLE001 - the template's own refusal
                with pytest.raises(type(exc), match=str(exc)[:40]):
                    light.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
                continue
            assert light.apply_chat_template(chat, add_generation_prompt=gen) == want


def test_what_it_cannot_reproduce_falls_back(tiny_dir: Path, tmp_path: Path) -> None:
    import shutil

    for change in ({"tokenizer_class": "LlamaTokenizer"}, {"split_special_tokens": True},
                   {"added_tokens_decoder": {"5000": {"content": "<extra>", "special": True}}},
                   {"additional_special_tokens": ["<not-in-the-vocabulary>"]}):
        target = tmp_path / str(len(list(tmp_path.iterdir())))
        shutil.copytree(tiny_dir, target)
        config = json.loads((target / "tokenizer_config.json").read_text())
        (target / "tokenizer_config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(NeedsTransformers):
            load_light(target)
        assert not isinstance(load_tokenizer(target), LightTokenizer)
