"""DetokenizerRole: request lifecycle, routing, stop strings and the stream-equals-decode rule."""

from __future__ import annotations

import random
import time

import pytest

from minisgl_core.text.detokenize import DetokenizerRole
from minisgl_core.text.incremental import REPLACEMENT
from minisgl_core.wire.schema import DetokenizeInfo, ErrorInfo, TextDelta, TokenBatch, TokenDelta

TEXT = "Hello world! 😀 🚀 你好，世界！ café naïve über 👍🏽 The capital of France is Paris."


@pytest.fixture(scope="module")
def role(tiny_dir) -> DetokenizerRole:
    return DetokenizerRole(tiny_dir)


def info(owner: str = "fe", tail: tuple[int, ...] = (), stop: tuple[str, ...] = (),
         skip: bool = True) -> DetokenizeInfo:
    return DetokenizeInfo(owner=owner, prompt_tail_ids=tail, stop=stop, skip_special_tokens=skip)


def run(role: DetokenizerRole, rid: str, ids: list[int], first: DetokenizeInfo,
        reason: str = "length", step: int = 1) -> list[TextDelta]:
    """Feed one request's ids ``step`` at a time, then its terminal delta; return all deltas."""
    out: list[TextDelta] = []
    chunks = [ids[i:i + step] for i in range(0, len(ids), step)] or [[]]
    for k, chunk in enumerate(chunks):
        last = k == len(chunks) - 1
        delta = TokenDelta(request_id=rid, token_ids=tuple(chunk),
                           finish_reason=reason if last else None,  # type: ignore[arg-type]
                           prompt_tokens=7, completion_tokens=len(ids),
                           detokenize=first if k == 0 else None)
        for owner, deltas in role.process(TokenBatch((delta,))).items():
            assert owner == first.owner
            out.extend(deltas)
    return out


def text_of(deltas: list[TextDelta]) -> str:
    return "".join(d.text for d in deltas)


@pytest.mark.parametrize("step", [1, 3])
def test_stream_equals_decode_with_one_terminal_delta(role, step: int) -> None:
    tok = role.tokenizer
    ids = tok.encode(TEXT)
    deltas = run(role, f"r1-{step}", ids, info(tail=tuple(tok.encode("Say:"))), step=step)
    assert text_of(deltas) == tok.decode(ids, skip_special_tokens=True) == TEXT
    assert not any(REPLACEMENT in d.text for d in deltas)
    assert [d.finish_reason for d in deltas].count("length") == 1
    assert deltas[-1].finish_reason == "length"
    assert (deltas[-1].prompt_tokens, deltas[-1].completion_tokens) == (7, len(ids))
    assert all(d.text for d in deltas[:-1])  # empty non-terminal deltas are not sent
    assert [t for d in deltas for t in d.token_ids] == ids  # every id delivered once
    assert role.active_count() == 0


def test_random_ids_many_requests_interleaved(role) -> None:
    tok = role.tokenizer
    rng = random.Random(7)
    pool = tok.encode(TEXT) + list(range(len(tok)))
    reqs = {f"q{i}": [rng.choice(pool) for _ in range(rng.randrange(1, 80))] for i in range(24)}
    got: dict[str, list[TextDelta]] = {rid: [] for rid in reqs}
    pos = dict.fromkeys(reqs, 0)
    while pos:
        deltas = []
        for rid in list(pos):
            ids, i = reqs[rid], pos[rid]
            n = rng.randrange(1, 4)
            done = i + n >= len(ids)
            deltas.append(TokenDelta(request_id=rid, token_ids=tuple(ids[i:i + n]),
                                     finish_reason="length" if done else None,
                                     detokenize=info(owner=f"fe{hash(rid) % 3}") if i == 0
                                     else None))
            if done:
                del pos[rid]
            else:
                pos[rid] = i + n
        for owner, out in role.process(TokenBatch(tuple(deltas))).items():
            for d in out:
                assert owner == f"fe{hash(d.request_id) % 3}"
                assert not got[d.request_id] or got[d.request_id][-1].finish_reason is None
                got[d.request_id].append(d)
    for rid, ids in reqs.items():
        full = tok.decode(ids, skip_special_tokens=True)
        assert text_of(got[rid]) == full
        if REPLACEMENT not in full:
            assert not any(REPLACEMENT in d.text for d in got[rid])
        assert [d.finish_reason for d in got[rid]].count("length") == 1
    assert role.active_count() == 0


def test_unknown_and_finished_ids_are_dropped(role) -> None:
    tok = role.tokenizer
    ids = tok.encode("Hello world")
    assert role.process(TokenBatch((TokenDelta("ghost", tuple(ids)),))) == {}
    assert role.process(TokenBatch((TokenDelta("ghost", (), finish_reason="stop"),))) == {}
    run(role, "done", ids, info())
    late = (TokenDelta("done", tuple(ids)), TokenDelta("done", (), finish_reason="stop"),
            TokenDelta("done", tuple(ids), detokenize=info()))  # even with info: no resurrection
    assert role.process(TokenBatch(late)) == {}
    assert role.active_count() == 0


def test_terminal_first_delta_carries_the_error(role) -> None:
    err = ErrorInfo("This model's maximum context length is 8 tokens",
                    code="context_length_exceeded")
    out = role.process(TokenBatch((TokenDelta("bad", finish_reason="error", prompt_tokens=9,
                                              detokenize=info(owner="fe2"), error=err),)))
    assert list(out) == ["fe2"]
    (final,) = out["fe2"]
    assert (final.finish_reason, final.error, final.text, final.prompt_tokens) == (
        "error", err, "", 9)
    assert role.active_count() == 0


def test_abort_mid_stream_ends_once_and_frees_state(role) -> None:
    tok = role.tokenizer
    ids = tok.encode("Hello world! 😀")
    first = run(role, "ab", ids[:-1], info(), reason="length")  # warm-up request, ends normally
    assert first[-1].finish_reason == "length"
    role.process(TokenBatch((TokenDelta("ab2", tuple(ids[:4]), detokenize=info()),)))
    assert role.active_count() == 1
    out = role.process(TokenBatch((TokenDelta("ab2", (), finish_reason="abort"),)))
    assert [d.finish_reason for d in out["fe"]] == ["abort"]
    assert role.active_count() == 0
    assert role.process(TokenBatch((TokenDelta("ab2", tuple(ids)),))) == {}


def test_first_token_leading_space_from_prompt_tail(role) -> None:
    tok = role.tokenizer
    prompt = tok.encode("The capital of France is")
    paris = tok.encode(" Paris")
    deltas = run(role, "sp", paris, info(tail=tuple(prompt[-6:])))
    assert text_of(deltas) == " Paris"
    assert deltas[0].text.startswith(" ")


def test_stop_strings_cut_and_hold(role) -> None:
    tok = role.tokenizer
    ids = tok.encode("The capital of France is Paris. The capital")
    # Several stops: the earliest match wins; it spans several tokens.
    deltas = run(role, "st1", ids, info(stop=("capital of J", "Paris.", "France is")),
                 reason="stop")
    assert text_of(deltas) == "The capital of "
    # A suffix that could become a stop string is held while streaming, released at the end.
    deltas = run(role, "st2", ids, info(stop=("The capital of Japan",)))
    assert text_of(deltas) == "The capital of France is Paris. The capital"
    streamed = text_of(deltas[:-1])
    assert streamed == "The capital of France is Paris. "  # " The capital" was held back
    assert deltas[-1].text == "The capital"
    assert role.active_count() == 0


def test_special_tokens_skipped_or_kept_and_eos_never_rendered(role) -> None:
    tok = role.tokenizer
    start, end = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    ids = tok.encode("Hi") + [start] + tok.encode(" there") + [end]
    skipped = run(role, "sk1", ids, info(skip=True), reason="stop")
    assert text_of(skipped) == "Hi there"
    kept = run(role, "sk2", ids, info(skip=False), reason="stop")
    assert text_of(kept) == "Hi<|im_start|> there"  # the final EOS is how it stopped
    assert kept[-1].token_ids[-1] == end  # ... but its id is still reported
    assert text_of(run(role, "sk3", ids, info(skip=False), reason="length")) == (
        "Hi<|im_start|> there<|im_end|>")


def test_discard_forgets_without_output(role) -> None:
    tok = role.tokenizer
    role.process(TokenBatch((TokenDelta("dd", tuple(tok.encode("Hi")), detokenize=info()),)))
    assert role.discard("dd") is True
    assert role.discard("dd") is False
    assert role.process(TokenBatch((TokenDelta("dd", (), finish_reason="stop"),))) == {}
    assert role.active_count() == 0


def test_out_of_vocabulary_ids_do_not_break_the_role(role) -> None:
    tok = role.tokenizer
    ids = tok.encode("Hi") + [10**6] + tok.encode(" there")
    deltas = run(role, "oov", ids, info())
    assert deltas[-1].finish_reason == "length"
    assert text_of(deltas) == tok.decode(ids)
    assert role.active_count() == 0


def test_smollm2_stream_matches_decode(smollm2_dir) -> None:
    role = DetokenizerRole(smollm2_dir)
    tok = role.tokenizer
    assert role.eos_token_ids == {tok.convert_tokens_to_ids("<|im_end|>")}
    ids = tok.encode(TEXT + " 日本語 🇫🇷 👨‍👩‍👧")
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                     add_generation_prompt=True)
    tail = tuple(tok.encode(prompt)[-6:])
    for step in (1, 2, 5):
        deltas = run(role, f"s{step}", ids, info(tail=tail), step=step)
        assert text_of(deltas) == tok.decode(ids)
        assert not any(REPLACEMENT in d.text for d in deltas)
    assert role.active_count() == 0


def test_throughput_32_requests_x_256_tokens(role, capsys) -> None:
    """Measures process() speed (printed, never asserted: timing is noisy on shared CPUs)."""
    tok = role.tokenizer
    base = tok.encode(TEXT * 12)[:256]
    rids = [f"t{i}" for i in range(32)]
    t0 = time.perf_counter()
    total = 0
    for k in range(256):
        batch = TokenBatch(tuple(
            TokenDelta(rid, (base[k],), finish_reason="length" if k == 255 else None,
                       detokenize=info(owner="fe") if k == 0 else None) for rid in rids))
        for deltas in role.process(batch).values():
            total += sum(len(d.token_ids) for d in deltas)
    elapsed = time.perf_counter() - t0
    assert total == 32 * 256
    assert role.active_count() == 0
    with capsys.disabled():
        print(f"\ndetokenizer: {32 * 256 / elapsed:,.0f} tokens/s (32 x 256)")


def test_a_failing_request_ends_alone_with_an_error(role) -> None:
    tok = role.tokenizer
    good, bad = tok.encode("Hello"), [-1]  # a negative id: the tokenizer itself raises
    out = role.process(TokenBatch((TokenDelta("f-ok", tuple(good), detokenize=info()),
                                   TokenDelta("f-bad", tuple(bad), detokenize=info()))))
    by_id = {d.request_id: d for d in out["fe"]}
    assert by_id["f-ok"].text == "Hello" and by_id["f-ok"].finish_reason is None
    assert by_id["f-bad"].finish_reason == "error"
    assert by_id["f-bad"].error is not None and by_id["f-bad"].error.type == "server_error"
    assert role.active_count() == 1
    # The scheduler does not know yet: its later deltas for the failed request are dropped.
    out = role.process(TokenBatch((TokenDelta("f-bad", tuple(good)),
                                   TokenDelta("f-bad", (), finish_reason="length"),
                                   TokenDelta("f-ok", tuple(bad), finish_reason="length"))))
    (final,) = out["fe"]
    assert (final.request_id, final.finish_reason) == ("f-ok", "error")
    assert final.error is not None and final.error.type == "server_error"
    assert role.active_count() == 0


def test_logprobs_ride_with_their_token_ids_as_text(role) -> None:
    from minisgl_core.wire.schema import TokenLogprob

    tok = role.tokenizer
    ids = tok.encode("😀 café")  # multi-byte characters: some ids show no text on their own
    deltas = []
    for k, t in enumerate(ids):
        lp = TokenLogprob(-0.5 - k, ((t, -0.5 - k), (ids[0], -3.0)))
        delta = TokenDelta(request_id="lp", token_ids=(t,), logprobs=(lp,),
                           finish_reason="length" if k == len(ids) - 1 else None,
                           completion_tokens=k + 1, detokenize=info() if k == 0 else None)
        deltas += role.process(TokenBatch((delta,))).get("fe", [])
    assert any(len(d.token_ids) > 1 for d in deltas)  # held-back ids came later, together
    for d in deltas:
        assert [e.token_id for e in d.logprobs] == list(d.token_ids)
    entries = [e for d in deltas for e in d.logprobs]
    assert [e.logprob for e in entries] == [-0.5 - k for k in range(len(ids))]
    assert [e.token for e in entries] == [tok.decode([t]) for t in ids]
    assert all(e.top[1] == (tok.decode([ids[0]]), -3.0) for e in entries)
    plain = run(role, "plain", ids, info())  # a request that did not ask gets none
    assert all(d.logprobs == () for d in plain)


def test_prompt_logprobs_come_as_text_on_the_first_delta(role) -> None:
    from minisgl_core.wire.schema import PromptLogprobs, TokenLogprob

    tok = role.tokenizer
    prompt = tuple(tok.encode("Hi 😀"))
    entries = tuple(TokenLogprob(-1.0 - i, ((prompt[0], -0.5),)) for i in range(len(prompt) - 1))
    scored = PromptLogprobs(prompt, entries, tuple(range(2, len(prompt) + 1)))
    # the first output is half an emoji: its text is held back, the prompt entries are not
    emoji = tok.encode("😀")
    assert len(emoji) > 1
    first = TokenDelta("pl", (emoji[0],), detokenize=info(), prompt_logprobs=scored)
    (delta,) = role.process(TokenBatch((first,)))["fe"]
    assert (delta.text, delta.token_ids) == ("", ()) and delta.prompt_logprobs is not None
    p = delta.prompt_logprobs
    assert p.text == "Hi 😀" and p.logprobs == scored
    assert list(p.tokens) == [tok.decode([t]) for t in prompt]
    assert p.top_tokens == ((tok.decode([prompt[0]]),),) * (len(prompt) - 1)
    rest = TokenDelta("pl", tuple(emoji[1:]), finish_reason="length")
    (last,) = role.process(TokenBatch((rest,)))["fe"]
    assert last.text == "😀" and last.prompt_logprobs is None
    assert last.token_ids == tuple(emoji)  # the held id rides with its text
    assert role.active_count() == 0
