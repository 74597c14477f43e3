"""Wire schema: tags are unique, unions are closed per channel, SamplingParams validates itself."""

from __future__ import annotations

from typing import get_args

import msgspec
import pytest

from minisgl_core.wire import schema as m


def _tag(cls: type) -> str:
    return msgspec.inspect.type_info(cls).tag  # type: ignore[attr-defined,no-any-return]


def test_every_top_level_message_has_a_unique_tag() -> None:
    tags = [_tag(cls) for cls in get_args(m.Message)]
    assert all(tags) and len(tags) == len(set(tags))


@pytest.mark.parametrize(("union", "expected"), [
    (m.TokenizerInbound, {"generate", "tokenize", "detokenize", "abort", "shutdown", "stats"}),
    (m.SchedulerInbound, {"tokenized", "abort", "shutdown"}),
    (m.DetokenizerInbound, {"token_batch", "shutdown"}),
    (m.FrontendInbound, {"text_batch", "tokenizer_reply", "shutdown"}),
    (m.ControlInbound, {"ready", "fatal", "stats"}),
])
def test_each_channel_union_is_exactly_its_messages(union: object, expected: set[str]) -> None:
    assert {_tag(cls) for cls in get_args(union)} == expected


def test_messages_are_frozen() -> None:
    msg = m.Abort("r1")
    with pytest.raises(AttributeError):
        msg.request_id = "r2"  # type: ignore[misc]


def test_sampling_defaults_are_valid_and_not_greedy() -> None:
    sp = m.SamplingParams()
    assert sp.problem() is None
    assert sp.max_tokens == 16 and sp.temperature == 1.0 and not sp.greedy
    assert m.SamplingParams(temperature=0).greedy and m.SamplingParams(top_k=1).greedy


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": float("inf")}, "temperature must be a finite number"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -1}, "top_k"),
    ({"min_p": 2.0}, "min_p"),
    ({"presence_penalty": 3.0}, "presence_penalty"),
    ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"stop": ("",)}, "stop strings"),
    ({"stop_token_ids": (-1,)}, "stop_token_ids"),
    ({"min_tokens": -1}, "min_tokens must be >= 0"),
    ({"min_tokens": 5, "max_tokens": 4}, r"min_tokens \(5\) must not exceed max_tokens \(4\)"),
    ({"logit_bias": ((-1, 1.0),)}, "logit_bias token ids"),
    ({"logit_bias": ((3, 100.5),)}, "logit_bias values"),
    ({"logit_bias": ((3, float("nan")),)}, "logit_bias values"),
])
def test_invalid_sampling_params_raise_value_error(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        m.SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_sampling_params_accept_boundaries() -> None:
    sp = m.SamplingParams(max_tokens=None, temperature=0.0, top_p=1.0, min_p=1.0,
                          presence_penalty=-2, frequency_penalty=2, repetition_penalty=2.0,
                          min_tokens=10**6, logit_bias=((0, -100.0), (7, 100.0)))
    assert sp.problem() is None
    assert m.SamplingParams(max_tokens=4, min_tokens=4).problem() is None
