"""IncrementalDetokenizer against real tokenizers: the stream equals the one-shot decode."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from minisgl_core.text.hf import raw_decoder
from minisgl_core.text.incremental import REPLACEMENT, IncrementalDetokenizer

# MINISGL_TEXT_EXAMPLES=5000 for a longer hunt.
SETTINGS = settings(max_examples=int(os.environ.get("MINISGL_TEXT_EXAMPLES", "150")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
SAMPLE_TEXT = ("Hello, world! 世界你好 😀👍🏽 naïve café — 🇫🇷 👨‍👩‍👧 日本語のテキスト "
               "Ünïcödé ∑∫ 한국어 \n\tend")


class Counting:
    """A decode function that records how many calls it got and how long each window was."""

    def __init__(self, decode):
        self.decode = decode
        self.calls = 0
        self.tokens = 0
        self.longest = 0

    def __call__(self, ids: Sequence[int]) -> str:
        self.calls += 1
        self.tokens += len(ids)
        self.longest = max(self.longest, len(ids))
        return self.decode(ids)


def stream(decode, seed: Sequence[int], ids: Sequence[int], cuts: Sequence[int], *,
           window: int = 16, max_hold: int = 8) -> list[str]:
    """Push ``ids`` in chunks of the given sizes (cycled), then finish; return every piece."""
    detok = IncrementalDetokenizer(decode, seed, window=window, max_hold=max_hold)
    pieces, i, k = [], 0, 0
    while i < len(ids):
        size = cuts[k % len(cuts)] if cuts else 1
        pieces.append(detok.push(ids[i:i + size]))
        i, k = i + size, k + 1
    pieces.append(detok.finish())
    return pieces


@pytest.fixture(scope="module")
def smol(smollm2_tokenizer):
    tok = smollm2_tokenizer
    backend = tok.backend_tokenizer
    byte_pieces = [i for i in range(len(tok)) if REPLACEMENT in backend.decode([i])]
    sample_ids = tok.encode(SAMPLE_TEXT, add_special_tokens=False)
    return tok, byte_pieces, sample_ids


def smol_ids(smol) -> st.SearchStrategy[list[int]]:
    tok, byte_pieces, sample_ids = smol
    token = st.one_of(st.integers(0, len(tok) - 1), st.sampled_from(byte_pieces),
                      st.sampled_from(sample_ids), st.integers(0, 16))
    return st.lists(token, min_size=0, max_size=60)


@pytest.mark.parametrize("skip", [True, False])
def test_random_tokens_stream_equals_decode(smol, skip: bool) -> None:
    tok = smol[0]
    decode = raw_decoder(tok, skip)
    assert decode([19556, 216, 7906]) == tok.decode([19556, 216, 7906], skip_special_tokens=skip)

    @SETTINGS
    @given(ids=smol_ids(smol), seed=st.lists(st.integers(0, len(tok) - 1), max_size=6),
           cuts=st.lists(st.integers(1, 4), min_size=1, max_size=5),
           window=st.sampled_from([1, 2, 16]), max_hold=st.sampled_from([4, 8]))
    def check(ids: list[int], seed: list[int], cuts: list[int], window: int,
              max_hold: int) -> None:
        pieces = stream(decode, seed, ids, cuts, window=window, max_hold=max_hold)
        full = tok.decode(ids, skip_special_tokens=skip)
        assert "".join(pieces) == full
        if REPLACEMENT not in full:
            assert not any(REPLACEMENT in p for p in pieces)

    check()


@SETTINGS
@given(text=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                    max_size=40),
       cuts=st.lists(st.integers(1, 3), min_size=1, max_size=4))
@example(text="<|im_start|>", cuts=[1])  # a special token's text: skipped on both sides
def test_encoded_text_round_trips_without_replacement_chars(smol, text: str,
                                                           cuts: list[int]) -> None:
    tok = smol[0]
    ids = tok.encode(text + " 😀世界", add_special_tokens=False)
    pieces = stream(raw_decoder(tok, True), tok.encode("Answer:"), ids, cuts)
    # the stream skips special tokens: so does the reference (hypothesis draws the text of
    # one, "<|im_start|>", which encodes to the special token even without add_special_tokens)
    full = tok.decode(ids, skip_special_tokens=True)
    assert "".join(pieces) == full
    if REPLACEMENT not in full:  # (this tokenizer cannot encode a few rare code points)
        assert not any(REPLACEMENT in p for p in pieces)


def test_multibyte_characters_are_held_until_complete(smol) -> None:
    tok = smol[0]
    ids = tok.encode(" 😀", add_special_tokens=False)
    assert len(ids) >= 2  # the emoji's four bytes span several byte-level tokens
    detok = IncrementalDetokenizer(raw_decoder(tok, True), tok.encode("Hi"))
    pieces = [detok.push([i]) for i in ids]
    assert pieces[:-1] == [""] * (len(ids) - 1) or all(REPLACEMENT not in p for p in pieces)
    assert "".join(pieces) == " 😀"
    assert detok.finish() == ""


def test_partial_character_flushed_at_finish(smol) -> None:
    tok = smol[0]
    ids = tok.encode("Hi 😀", add_special_tokens=False)[:-1]
    detok = IncrementalDetokenizer(raw_decoder(tok, True), ())
    streamed = "".join(detok.push([i]) for i in ids)
    assert streamed == "Hi"
    assert detok.finish() == " " + REPLACEMENT  # the partial character, as in tok.decode
    assert tok.decode(ids) == "Hi " + REPLACEMENT
    assert detok.finish() == ""


def test_first_token_keeps_its_leading_space(smol, sp_tokenizer) -> None:
    tok = smol[0]
    prompt = tok.encode("The capital of France is")
    paris = tok.encode(" Paris", add_special_tokens=False)
    detok = IncrementalDetokenizer(raw_decoder(tok, True), prompt[-6:])
    assert detok.push(paris) == " Paris"
    # SentencePiece decoders strip the first space of a decode: only the seed keeps it.
    sp = sp_tokenizer
    hello = sp.convert_tokens_to_ids(["▁hello"])
    seeded = IncrementalDetokenizer(raw_decoder(sp, True), sp.encode("the answer is")[-6:])
    assert seeded.push(hello) == " hello"
    assert IncrementalDetokenizer(raw_decoder(sp, True), ()).push(hello) == "hello"


@pytest.mark.parametrize("skip", [True, False])
def test_sentencepiece_byte_fallback_stream_equals_decode(sp_tokenizer, skip: bool) -> None:
    sp = sp_tokenizer
    decode = raw_decoder(sp, skip)
    pieces_ids = sp.convert_tokens_to_ids(["▁hello", "▁world", "▁", "世", "s", "."])
    other_ids = [i for i in range(len(sp)) if not 3 <= i < 3 + 256]

    def char_bytes(c: str) -> list[int]:  # a character spelled as byte-fallback pieces
        return [3 + b for b in c.encode()]

    # ByteFallback renders a run of byte pieces that is not valid UTF-8 as one U+FFFD per byte,
    # valid leading bytes included, which no stream can match; runs here are whole characters.
    group = st.one_of(st.sampled_from(pieces_ids).map(lambda i: [i]),
                      st.sampled_from(other_ids).map(lambda i: [i]),
                      st.sampled_from("😀中é\n a🇫").map(char_bytes))

    @SETTINGS
    @given(groups=st.lists(group, max_size=30),
           seed=st.lists(st.sampled_from(pieces_ids + [1, 2]), max_size=6),
           cuts=st.lists(st.integers(1, 4), min_size=1, max_size=5),
           window=st.sampled_from([1, 2, 16]))
    def check(groups: list[list[int]], seed: list[int], cuts: list[int], window: int) -> None:
        ids = [i for g in groups for i in g]
        pieces = stream(decode, seed, ids, cuts, window=window)
        context = sp.decode(seed, skip_special_tokens=skip)
        whole = sp.decode(seed + ids, skip_special_tokens=skip)
        assert whole.startswith(context)
        assert "".join(pieces) == whole[len(context):]
        assert not any(REPLACEMENT in p for p in pieces)

    check()


def test_sentencepiece_invalid_byte_runs_still_stream(sp_tokenizer) -> None:
    sp = sp_tokenizer
    decode = Counting(raw_decoder(sp, True))
    detok = IncrementalDetokenizer(decode, sp.encode("the answer is"))
    junk = [3 + 0xFF, 3 + 0x80, 3 + 0xE4]
    pieces = [detok.push([junk[i % 3]]) for i in range(300)]
    pieces.append(detok.finish())
    text = "".join(pieces)
    assert text == REPLACEMENT * 300
    assert sum(1 for p in pieces if p) > 10
    assert decode.longest <= 64


def test_invalid_bytes_do_not_stall_the_stream(smol) -> None:
    tok, byte_pieces, _ = smol
    lone = next(i for i in byte_pieces if tok.decode([i, i, i]).count(REPLACEMENT) == 3)
    decode = Counting(raw_decoder(tok, True))
    detok = IncrementalDetokenizer(decode, (), max_hold=8)
    pieces = [detok.push([lone]) for _ in range(200)]
    pieces.append(detok.finish())
    assert "".join(pieces) == tok.decode([lone] * 200)
    assert sum(1 for p in pieces if p) > 10  # emitted as it goes, not all at the end
    assert decode.longest <= 64


def test_work_per_token_is_bounded(smol) -> None:
    tok, _, sample_ids = smol
    ids = (sample_ids * 60)[:2000]
    decode = Counting(raw_decoder(tok, True))
    detok = IncrementalDetokenizer(decode, tok.encode("Go:"), window=16)
    windows = []
    text = []
    for tid in ids:
        text.append(detok.push([tid]))
        windows.append(detok.window_len)
    text.append(detok.finish())
    assert "".join(text) == tok.decode(ids)
    assert max(windows) <= 16 + 8 + 2  # window + max_hold + the newest tokens
    assert decode.longest <= 16 + 8 + 2
    assert decode.calls <= 1.25 * len(ids)
    assert decode.tokens <= 20 * len(ids)  # O(1) per token, not O(n)
