"""StopCutter: earliest match wins, partial matches held back while streaming, flushed at end."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from minisgl_core.text.incremental import StopCutter


def run(stops: list[str], chunks: list[str]) -> tuple[list[str], str, StopCutter]:
    cutter = StopCutter(stops)
    pieces = [cutter.feed(c) for c in chunks]
    tail = cutter.flush()
    return pieces, tail, cutter


def expected(stops: list[str], text: str) -> str:
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return text[: min(hits)] if hits else text


def test_stop_string_across_chunks_is_cut() -> None:
    pieces, tail, cutter = run(["o w"], ["Hel", "lo", " wor", "ld"])
    assert "".join(pieces) + tail == "Hell"
    assert cutter.matched == "o w"
    assert pieces[1] == "l"  # "o" is held: it could start "o w"


def test_earliest_match_wins_not_list_order() -> None:
    pieces, tail, cutter = run(["world", "lo"], ["hello world"])
    assert "".join(pieces) + tail == "hel"
    assert cutter.matched == "lo"


def test_held_suffix_released_at_finish() -> None:
    pieces, tail, cutter = run(["STOP"], ["go ", "ST"])
    assert pieces == ["go ", ""]
    assert tail == "ST"
    assert cutter.matched is None


def test_nothing_after_a_match() -> None:
    cutter = StopCutter(["END"])
    assert cutter.feed("abcEN") == "abc"
    assert cutter.feed("Dxyz") == ""
    assert cutter.feed("more") == ""
    assert cutter.flush() == ""


def test_holdback_is_the_longest_possible_prefix_only() -> None:
    cutter = StopCutter(["abcd", "xy"])
    assert cutter.feed("zzabc") == "zz"
    assert cutter.held == "abc"
    assert cutter.feed("e") == "abce"
    assert cutter.feed("qx") == "q"


def test_no_stops_passes_through() -> None:
    cutter = StopCutter([])
    assert cutter.feed("anything") == "anything"
    assert cutter.flush() == ""


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="abc世😀 ", max_size=40),
       stops=st.lists(st.text(alphabet="abc世😀 ", min_size=1, max_size=4), min_size=1,
                      max_size=3),
       cuts=st.lists(st.integers(1, 5), min_size=1, max_size=6))
def test_streamed_output_equals_cut_text_and_only_grows(text: str, stops: list[str],
                                                        cuts: list[int]) -> None:
    chunks, i, k = [], 0, 0
    while i < len(text):
        size = cuts[k % len(cuts)]
        chunks.append(text[i:i + size])
        i, k = i + size, k + 1
    # The oracle: the text is cut as soon as a stop string is complete in what has arrived, at
    # the earliest start among the matches present then (the engine stops at that token).
    want, seen = text, ""
    for chunk in chunks:
        seen += chunk
        if expected(stops, seen) != seen:
            want = expected(stops, seen)
            break
    cutter = StopCutter(stops)
    released, seen = "", ""
    for chunk in chunks:
        released += cutter.feed(chunk)
        seen += chunk
        assert want.startswith(released)  # never releases what a match would cut
        if cutter.matched is None:  # only a possible stop-string start is held back
            assert released + cutter.held == seen
            assert len(cutter.held) < max(len(s) for s in stops)
    assert released + cutter.flush() == want
