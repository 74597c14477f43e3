"""Reasoning split: the <think> block of a chat answer, streamed or whole, as the prompt left it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minisgl_core.text.reasoning import (
    PARSERS,
    ReasoningSplitter,
    begins_inside,
    prompt_state,
    split,
    syntax_of,
)

QWEN3, R1 = PARSERS["qwen3"], PARSERS["deepseek_r1"]


@pytest.mark.parametrize(("text", "inside", "want"), [
    ("<think>\nplan\n</think>\n\nanswer", False, ("plan\n", "answer")),
    ("answer only", False, ("", "answer only")),
    ("before <think>mid</think> after", False, ("mid", "before after")),
    ("<think>cut short", False, ("cut short", "")),
    ("plan</think>answer", True, ("plan", "answer")),
    ("<think>plan</think>answer", True, ("plan", "answer")),  # R1 writing its own tag
    ("  <think>plan</think>answer", True, ("plan", "answer")),
    ("still thinking <thi", True, ("still thinking <thi", "")),
    ("a</think>b</think>c", True, ("a", "b</think>c")),  # one block: the rest is content
    ("x <think>a</think>b <think>c</think>", False, ("a", "x b <think>c</think>")),
    ("2 < 3 and <th", False, ("", "2 < 3 and <th")),
])
def test_split(text: str, inside: bool, want: tuple[str, str]) -> None:
    assert split(text, QWEN3, inside) == want


def test_prompt_states_and_where_answers_begin() -> None:
    assert prompt_state("<|im_start|>assistant\n<think>\n", QWEN3) == "open"
    assert prompt_state("<think>\n\n</think>\n\n", QWEN3) == "closed"
    assert prompt_state("<|im_start|>assistant\n", QWEN3) == "none"
    assert begins_inside("open", QWEN3) and begins_inside("open", R1)
    assert not begins_inside("closed", R1) and not begins_inside("closed", QWEN3)
    assert begins_inside("none", R1) and not begins_inside("none", QWEN3)
    with pytest.raises(ValueError, match="unknown reasoning parser 'qwen4' .known: "
                                         "deepseek_r1, qwen3"):
        syntax_of("qwen4")


PIECES = st.sampled_from(["<think>", "</think>", "<", "</", "think", ">", " ", "\n", "a",
                          "b c", "<thi", "nk>", "你好", "😀"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(PIECES, max_size=14), cuts=st.lists(st.integers(0, 60), max_size=8),
       inside=st.booleans())
def test_streamed_split_equals_the_whole(parts: list[str], cuts: list[int],
                                         inside: bool) -> None:
    text = "".join(parts)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    splitter = ReasoningSplitter(QWEN3, inside)
    reasoning, content = [], []
    for a, b in zip(bounds, bounds[1:], strict=False):
        r, c = splitter.feed(text[a:b])
        reasoning.append(r)
        content.append(c)
    r, c = splitter.finish()
    assert ("".join(reasoning) + r, "".join(content) + c) == split(text, QWEN3, inside)
    # nothing is lost but the markers of the one block and the whitespace after them
    assert len("".join(reasoning) + r + "".join(content) + c) <= len(text)
