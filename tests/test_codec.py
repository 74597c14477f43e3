"""Codec: every message round-trips on its channel, and every kind of bad input is a DecodeError."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minisgl_core.wire import codec
from minisgl_core.wire import schema as m

SP = m.SamplingParams(max_tokens=32, temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, seed=7,
                      stop=("\n\n", "END"), stop_token_ids=(2, 3), ignore_eos=True,
                      skip_special_tokens=False, presence_penalty=0.5, frequency_penalty=-0.5,
                      repetition_penalty=1.1)
ERR = m.ErrorInfo(message="prompt too long", type="invalid_request_error", code="ctx", param="x")
DETOK = m.DetokenizeInfo(owner="fe-1", prompt_tail_ids=(5, 6), stop=("x",),
                         skip_special_tokens=False)

# One (or more) fully populated instance of every top-level message, with the channels it may
# arrive on.
SAMPLES: list[tuple[m.Message, tuple[str, ...]]] = [
    (m.GenerateRequest("r1", "fe-1", SP, prompt="hello", arrival_time=1.5), ("tokenizer",)),
    (m.GenerateRequest("r2", "fe-1", m.SamplingParams(),
                       messages=(m.ChatMessage("system", "be brief"), m.ChatMessage("user", "hi"))),
     ("tokenizer",)),
    (m.GenerateRequest("r3", "fe-2", SP, token_ids=(1, 2, 151643)), ("tokenizer",)),
    (m.TokenizeCall("c1", "fe-1", m.GenerateRequest(
        "c1", "fe-1", m.SamplingParams(), messages=(m.ChatMessage("user", "hi"),),
        tools='[{"type": "function"}]'), add_special_tokens=True, add_generation_prompt=False,
        token_strs=True), ("tokenizer",)),
    (m.DetokenizeCall("c2", "fe-1", (1, 2, 151643)), ("tokenizer",)),
    (m.Abort("r1"), ("tokenizer", "scheduler")),
    (m.Abort("r1", reason="deadline"), ("tokenizer", "scheduler")),
    (m.Shutdown(), ("tokenizer", "scheduler", "detokenizer", "frontend")),
    (m.TokenizedRequest("r1", (1, 2, 3), SP, DETOK, arrival_time=2.0), ("scheduler",)),
    (m.TokenizedRequest("r9", (), m.SamplingParams(), m.DetokenizeInfo(owner="fe"), error=ERR),
     ("scheduler",)),
    (m.TokenBatch(deltas=(
        m.TokenDelta("r1", (10, 11), prompt_tokens=3, completion_tokens=2, detokenize=DETOK),
        m.TokenDelta("r2", (), finish_reason="abort", completion_tokens=4, cached_tokens=2),
        m.TokenDelta("r3", finish_reason="error", error=ERR),
    )), ("detokenizer",)),
    (m.TokenBatch(deltas=()), ("detokenizer",)),
    (m.TextBatch(deltas=(
        m.TextDelta("r1", "Hel", (10,), prompt_tokens=3, completion_tokens=1),
        m.TextDelta("r1", "lo \u00e9\u4e2d", (11, 12), finish_reason="stop", completion_tokens=3,
                    cached_tokens=1),
        m.TextDelta("r2", finish_reason="length"),
        m.TextDelta("r3", error=ERR, finish_reason="error"),
    )), ("frontend",)),
    (m.TokenizerReply("c1", (1, 2), ("he", "llo")), ("frontend",)),
    (m.TokenizerReply("c2", text="hello"), ("frontend",)),
    (m.TokenizerReply("c3", error=ERR), ("frontend",)),
    (m.Ready("scheduler", 1234, {"context_length": "8192"}), ("control",)),
    (m.Ready("tokenizer", 1), ("control",)),
    (m.Fatal("scheduler", 1234, "CUDA out of memory"), ("control",)),
    # Stats reach the tokenizer too: under --dp, each scheduler replica's load, for dispatch
    (m.Stats("scheduler", {"running": 3.0}, {"tokens": 1e6}, (0.1, 0.2), (0.01,), dp_rank=1),
     ("control", "tokenizer")),
    (m.Stats("detokenizer"), ("control", "tokenizer")),
]
CHANNELS = ("tokenizer", "scheduler", "detokenizer", "frontend", "control")
IDS = [f"{type(msg).__name__}-{i}" for i, (msg, _) in enumerate(SAMPLES)]


def test_samples_cover_every_message_type() -> None:
    assert {type(msg) for msg, _ in SAMPLES} == set(codec.MESSAGE_TYPES)


@pytest.mark.parametrize(("msg", "channels"), SAMPLES, ids=IDS)
def test_round_trip_on_every_channel_that_accepts_it(msg: m.Message,
                                                     channels: tuple[str, ...]) -> None:
    data = codec.encode(msg)
    assert isinstance(data, bytes)
    for channel in channels:
        assert codec.decode(data, channel) == msg
        assert type(codec.decode(data, channel)) is type(msg)
    assert codec.decode(data) == msg  # the "any" decoder


@pytest.mark.parametrize(("msg", "channels"), SAMPLES, ids=IDS)
def test_message_on_the_wrong_channel_is_rejected(msg: m.Message,
                                                  channels: tuple[str, ...]) -> None:
    data = codec.encode(msg)
    for channel in set(CHANNELS) - set(channels):
        with pytest.raises(codec.DecodeError, match=f"bad {channel} message"):
            codec.decode(data, channel)


def test_named_decoders_and_frontend_ids() -> None:
    data = codec.encode(m.TextBatch(deltas=(m.TextDelta("r", "x"),)))
    assert codec.decode_frontend(data) == codec.decode(data, "frontend.fe-7")
    assert codec.decode_scheduler(codec.encode(m.Abort("a"))) == m.Abort("a")
    assert codec.decode_tokenizer(codec.encode(m.Shutdown())) == m.Shutdown()
    assert codec.decode_detokenizer(codec.encode(m.TokenBatch(()))) == m.TokenBatch(())
    assert codec.decode_control(codec.encode(m.Ready("x", 1))) == m.Ready("x", 1)
    with pytest.raises(KeyError, match="unknown channel"):
        codec.decode(b"", "nowhere")


@pytest.mark.parametrize(("msg", "channels"), SAMPLES, ids=IDS)
def test_every_truncation_is_rejected(msg: m.Message, channels: tuple[str, ...]) -> None:
    data = codec.encode(msg)
    for cut in range(len(data)):
        with pytest.raises(codec.DecodeError):
            codec.decode(data[:cut], channels[0])


def _raw(obj: object) -> bytes:
    return msgspec.msgpack.encode(obj)


GOOD_TOKENIZED = {"type": "tokenized", "request_id": "a", "prompt_ids": [1, 2],
                  "sampling": {"max_tokens": 4}, "detokenize": {"owner": "fe"}}


def test_a_valid_raw_map_decodes() -> None:
    # The hand-written baseline that the malformed variants below start from.
    msg = codec.decode_scheduler(_raw(GOOD_TOKENIZED))
    assert msg == m.TokenizedRequest("a", (1, 2), m.SamplingParams(max_tokens=4),
                                     m.DetokenizeInfo(owner="fe"))


@pytest.mark.parametrize(("patch", "match"), [
    ({"type": "teleport"}, "Invalid value 'teleport'"),
    ({"type": 3}, "Expected `str`"),
    ({"request_id": 17}, r"Expected `str`, got `int` - at `\$.request_id`"),
    ({"prompt_ids": "1 2 3"}, r"at `\$.prompt_ids`"),
    ({"prompt_ids": [1, "two"]}, r"at `\$.prompt_ids\[1\]`"),
    ({"prompt_ids": [1, 1.5]}, r"Expected `int`, got `float`"),
    ({"sampling": [1, 2]}, r"at `\$.sampling`"),
    ({"sampling": {"top_p": 5.0}}, r"top_p must be in \(0, 1\]"),
    ({"sampling": {"temperature": float("nan")}}, "temperature must be a finite number"),
    ({"sampling": {"temperature": -1.0}}, "temperature must be >= 0"),
    ({"sampling": {"max_tokens": 0}}, "max_tokens must be at least 1"),
    ({"sampling": {"top_k": -3}}, "top_k must be >= 0"),
    ({"sampling": {"stop": ["ok", ""]}}, "stop strings must not be empty"),
    ({"sampling": {"temprature": 0.5}}, "unknown field `temprature`"),
    ({"detokenize": None}, r"at `\$.detokenize`"),
    ({"request_id": None}, r"request_id"),
])
def test_malformed_fields_are_rejected_with_a_clear_message(patch: dict[str, object],
                                                            match: str) -> None:
    with pytest.raises(codec.DecodeError, match=match) as info:
        codec.decode_scheduler(_raw({**GOOD_TOKENIZED, **patch}))
    assert str(info.value).startswith("bad scheduler message (")


@pytest.mark.parametrize("data", [
    b"", b"\xc1", b"\x00", b"\xff" * 7, b"\x81\xa4type", _raw([1, 2, 3]), _raw("generate"),
    _raw({"kind": "abort", "request_id": "x"}), _raw({"type": "abort"}),  # tag name / field missing
    b"\x91" * 50_000 + b"\x00",  # deeply nested arrays
])
def test_garbage_is_rejected(data: bytes) -> None:
    for channel in CHANNELS:
        with pytest.raises(codec.DecodeError):
            codec.decode(data, channel)


@pytest.mark.parametrize("data", ["a string", None, 42, ["list"]])
def test_non_bytes_input_is_a_decode_error(data: object) -> None:
    with pytest.raises(codec.DecodeError, match="expected bytes"):
        codec.decode_tokenizer(data)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_random_bytes_never_raise_anything_but_decode_error(data: bytes) -> None:
    for channel in CHANNELS:
        try:
            msg = codec.decode(data, channel)
        except codec.DecodeError:
            continue
        assert type(msg) in codec.MESSAGE_TYPES  # astronomically unlikely, but valid if so


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(len(SAMPLES))), st.data())
def test_corrupted_messages_never_raise_anything_but_decode_error(index: int,
                                                                  data: st.DataObject) -> None:
    msg, channels = SAMPLES[index]
    raw = bytearray(codec.encode(msg))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] = data.draw(st.integers(0, 255))
    try:
        out = codec.decode(bytes(raw), channels[0])
    except codec.DecodeError:
        return
    assert type(out) in codec.MESSAGE_TYPES


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["max_tokens", "temperature", "top_p", "top_k", "min_p",
                                        "seed", "stop", "repetition_penalty", "ignore_eos"]),
                       st.one_of(st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=4),
                                 st.none(), st.booleans(), st.lists(st.text(max_size=3),
                                                                    max_size=2))))
def test_any_sampling_table_decodes_to_valid_params_or_a_decode_error(
        sampling: dict[str, object]) -> None:
    raw = _raw({**GOOD_TOKENIZED, "sampling": sampling})
    try:
        msg = codec.decode_scheduler(raw)
    except codec.DecodeError:
        return
    assert isinstance(msg, m.TokenizedRequest)
    assert msg.sampling.problem() is None


def test_encode_refuses_non_messages() -> None:
    with pytest.raises(codec.EncodeError, match="not a wire message: TokenDelta"):
        codec.encode(m.TokenDelta("r"))  # type: ignore[arg-type]
    with pytest.raises(codec.EncodeError, match="not a wire message: dict"):
        codec.encode({"type": "abort", "request_id": "x"})  # type: ignore[arg-type]
    with pytest.raises(codec.EncodeError, match="cannot encode TokenizedRequest"):
        codec.encode(m.TokenizedRequest("r", (2**70,), m.SamplingParams(),
                                        m.DetokenizeInfo(owner="f")))


def test_no_pickle_in_the_codec() -> None:
    import inspect

    assert "pickle" not in inspect.getsource(codec).replace("There is no pickle anywhere", "")
