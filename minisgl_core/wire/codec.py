"""Wire codec: messages <-> msgpack bytes, decoded against the receiving channel's tagged union.

``encode`` turns any message of ``minisgl_core.wire.schema`` into bytes; each inbound channel has a
typed decoder (``decode_tokenizer``, ``decode_scheduler`` ...) that accepts only that channel's
union. Anything else, garbage bytes, unknown tags, wrong field types, invalid SamplingParams,
raises ``DecodeError`` and nothing else, so a receiving loop can log and drop a bad message with
one ``except``. There is no pickle anywhere.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, get_args

import msgspec

from minisgl_core.wire import schema as m

__all__ = [
    "ChannelDecoder",
    "DecodeError",
    "EncodeError",
    "decode",
    "decode_control",
    "decode_detokenizer",
    "decode_frontend",
    "decode_scheduler",
    "decode_tokenizer",
    "encode",
]

T = TypeVar("T")

# Every top-level message type, i.e. every tagged Struct; encode() refuses anything else.
MESSAGE_TYPES: tuple[type[msgspec.Struct], ...] = tuple(get_args(m.Message))


class DecodeError(ValueError):
    """Bytes that are not a valid message for the channel they arrived on."""


class EncodeError(TypeError):
    """An object that is not a wire message (or holds a value msgpack cannot carry)."""


_encoder = msgspec.msgpack.Encoder()


def encode(msg: m.Message) -> bytes:
    """Serialize one top-level message to msgpack bytes (a map with a ``type`` tag)."""
    if type(msg) not in _MESSAGE_TYPE_SET:
        raise EncodeError(f"not a wire message: {type(msg).__qualname__}")
    try:
        return _encoder.encode(msg)
    except (TypeError, OverflowError, ValueError) as exc:  # e.g. an int beyond 64 bits
        raise EncodeError(f"cannot encode {type(msg).__name__}: {exc}") from exc


_MESSAGE_TYPE_SET = frozenset(MESSAGE_TYPES)


class ChannelDecoder(Generic[T]):
    """A typed decoder for one inbound channel: ``decode(data)`` returns a member of its union."""

    __slots__ = ("_decoder", "channel")

    def __init__(self, channel: str, union: Any) -> None:
        self.channel = channel
        self._decoder = msgspec.msgpack.Decoder(union)

    def decode(self, data: bytes) -> T:
        """Decode ``data``; raise DecodeError, and only that, when it is not a valid message."""
        try:
            return self._decoder.decode(data)  # type: ignore[no-any-return]
        except Exception as exc:  # msgspec errors, and anything a validator might raise
            raise DecodeError(self._describe(data, exc)) from exc

    def _describe(self, data: object, exc: Exception) -> str:
        if not isinstance(data, bytes | bytearray | memoryview):
            return f"bad {self.channel} message: expected bytes, got {type(data).__name__}"
        return f"bad {self.channel} message ({len(data)} bytes): {exc}"

    def __repr__(self) -> str:
        return f"ChannelDecoder({self.channel!r})"


tokenizer_decoder: ChannelDecoder[m.TokenizerInbound] = ChannelDecoder(
    "tokenizer", m.TokenizerInbound)
scheduler_decoder: ChannelDecoder[m.SchedulerInbound] = ChannelDecoder(
    "scheduler", m.SchedulerInbound)
detokenizer_decoder: ChannelDecoder[m.DetokenizerInbound] = ChannelDecoder(
    "detokenizer", m.DetokenizerInbound)
frontend_decoder: ChannelDecoder[m.FrontendInbound] = ChannelDecoder(
    "frontend", m.FrontendInbound)
control_decoder: ChannelDecoder[m.ControlInbound] = ChannelDecoder("control", m.ControlInbound)
any_decoder: ChannelDecoder[m.Message] = ChannelDecoder("any", m.Message)

# Bound methods: the hot loops call these directly.
decode_tokenizer = tokenizer_decoder.decode
decode_scheduler = scheduler_decoder.decode
decode_detokenizer = detokenizer_decoder.decode
decode_frontend = frontend_decoder.decode
decode_control = control_decoder.decode

DECODERS: dict[str, ChannelDecoder[Any]] = {
    d.channel: d
    for d in (tokenizer_decoder, scheduler_decoder, detokenizer_decoder, frontend_decoder,
              control_decoder)
}


def decode(data: bytes, channel: str = "any") -> m.Message:
    """Decode ``data`` as a message of ``channel`` ("tokenizer", "frontend.<id>", ..., or "any")."""
    kind = channel.split(".", 1)[0]  # "frontend.<id>" channels share one union
    decoder = any_decoder if kind == "any" else DECODERS.get(kind)
    if decoder is None:
        raise KeyError(f"unknown channel {channel!r}; known: any, {', '.join(sorted(DECODERS))}")
    return decoder.decode(data)
