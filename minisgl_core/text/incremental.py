"""Incremental detokenization of one request: bounded decode windows, held-back partial
characters, and stop strings cut at the earliest match."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

REPLACEMENT = "\ufffd"

Decode = Callable[[Sequence[int]], str]


class IncrementalDetokenizer:
    """Turns a growing token sequence into text, emitting each settled piece exactly once.

    ``ids`` holds the prompt's tail (the seed) followed by the output. Each step decodes only the
    window ``ids[prefix:]``; ``ids[prefix:read]`` decodes to ``prefix_text``, text that is
    already accounted for (emitted, or the seed's), so the new text is the window's decode minus
    that prefix. Decoding the window together with its prefix keeps context-dependent rules (a
    SentencePiece decoder stripping the first space, byte pieces of one character) right.

    - A window whose text ends in U+FFFD may end inside a multi-byte character: it is held until
      a later token completes it. After ``max_hold`` tokens without progress (genuinely invalid
      bytes) the longest prefix that can no longer change is emitted instead.
    - ``prefix`` slides forward only to a ``read`` offset known to be a character boundary, once
      the window exceeds ``window`` tokens: every decode is O(window + max_hold), and the number
      of decodes per token is about ``1 + 1/window``.
    - ``read`` only moves forward, and text once returned is never revised.

    The stream equals a one-shot decode of the same ids for any decoder whose output for a
    prefix ending on a complete character is a prefix of the output for every extension. One
    known exception: a ByteFallback decoder renders a run of byte pieces that is not valid UTF-8
    as one U+FFFD per byte, including valid bytes before the fault that were already streamed.
    """

    __slots__ = ("_decode", "_ids", "_prefix", "_read", "_prefix_text", "_read_clean",
                 "_max_hold", "_window")

    def __init__(self, decode: Decode, seed_ids: Sequence[int] = (), *, max_hold: int = 8,
                 window: int = 16) -> None:
        self._decode = decode
        self._max_hold = max(max_hold, 4)  # a UTF-8 character spans up to 4 byte tokens
        self._window = max(window, 1)
        ids = list(seed_ids)
        text = decode(ids) if ids else ""
        if text.endswith(REPLACEMENT):
            # The prompt ends inside a character: its tail is no usable context.
            ids, text = [], ""
        self._ids: list[int] = ids
        self._prefix = 0
        self._read = len(ids)
        self._prefix_text = text
        self._read_clean = True  # is ids[:read] known to end on a character boundary?

    @property
    def window_len(self) -> int:
        """Tokens the next step will decode (for invariant checks: stays bounded)."""
        return len(self._ids) - self._prefix

    @property
    def pending_tokens(self) -> int:
        """Tokens received but not yet turned into text (held back)."""
        return len(self._ids) - self._read

    def push(self, token_ids: Iterable[int]) -> str:
        """Add output tokens; return the text that became settled (possibly empty)."""
        ids = self._ids
        before = len(ids)
        ids.extend(token_ids)
        n = len(ids)
        if n == self._read:
            return ""
        decode, prefix = self._decode, self._prefix
        full = decode(ids[prefix:])
        if not full.endswith(REPLACEMENT):
            return self._commit(full, n, clean=True)
        # Several new tokens may complete a character and start the next one: settle up to the
        # last character boundary among them (earlier positions were tried on earlier steps).
        for j in range(n - 1, max(self._read, before), -1):
            head = decode(ids[prefix:j])
            if not head.endswith(REPLACEMENT):
                return self._commit(head, j, clean=True)
        if n - self._read > self._max_hold:
            return self._force(full, n)
        return ""

    def finish(self) -> str:
        """Flush everything still held back (a trailing partial character becomes U+FFFD)."""
        n = len(self._ids)
        if n == self._read:
            return ""
        full = self._decode(self._ids[self._prefix:])
        new = full[len(self._prefix_text):]
        self._read, self._prefix_text = n, full
        return new

    def _commit(self, head: str, end: int, *, clean: bool) -> str:
        """Account for ``ids[prefix:end]`` whose decode is ``head``; return the new text."""
        new = head[len(self._prefix_text):]
        if self._read_clean and end - self._prefix > self._window:
            # Slide the window to start at the old read offset, a character boundary. An empty
            # context is refused: a decoder that strips the first space would eat the next one.
            context = self._decode(self._ids[self._read:end])
            if context:
                self._prefix, self._prefix_text = self._read, context
                self._read, self._read_clean = end, clean
                self._compact()
                return new
        if end - self._prefix > 16 * self._window + self._max_hold:
            # No clean boundary for far too long (pathological input): bound the work anyway.
            self._prefix, self._prefix_text = end, ""
            self._read, self._read_clean = end, clean
            self._compact()
            return new
        self._prefix_text, self._read, self._read_clean = head, end, clean
        return new

    def _force(self, full: str, n: int) -> str:
        """No progress for too long: emit the longest prefix that later tokens cannot change."""
        # Only the last character of ``full`` can still change (a truncated sequence that later
        # bytes complete). A split j is safe when decode(ids[prefix:j]) is a prefix of ``full``
        # that stops before that character.
        ids, prefix, safe = self._ids, self._prefix, len(full) - 1
        for j in range(n - 1, self._read, -1):
            head = self._decode(ids[prefix:j])
            if len(head) <= safe and full.startswith(head):
                # j is a true boundary (safe to slide to) if the two sides decode independently.
                clean = head + self._decode(ids[j:n]) == full
                return self._commit(head, j, clean=clean)
        if n - self._read > 4 * self._max_hold:
            return self._commit(full, n, clean=False)
        return ""

    def _compact(self) -> None:
        # Drop ids before the window now and then: O(window) per 256 tokens.
        if self._prefix >= 256:
            del self._ids[: self._prefix]
            self._read -= self._prefix
            self._prefix = 0


class StopCutter:
    """Cuts streamed text at the earliest match of any stop string.

    While streaming, the longest suffix that could still grow into a stop string is held back;
    ``flush`` releases it at the end if no stop string matched. After a match nothing more is
    ever released.
    """

    __slots__ = ("_stops", "_prefixes", "_max_prefix", "_held", "matched")

    def __init__(self, stops: Iterable[str]) -> None:
        self._stops = tuple(dict.fromkeys(s for s in stops if s))
        self._prefixes = frozenset(s[:k] for s in self._stops for k in range(1, len(s)))
        self._max_prefix = max((len(s) - 1 for s in self._stops), default=0)
        self._held = ""
        self.matched: str | None = None

    @property
    def held(self) -> str:
        """Text held back because it could be the start of a stop string."""
        return self._held

    def feed(self, text: str) -> str:
        """Add text; return what is safe to release."""
        if self.matched is not None:
            return ""
        if not self._stops:
            return text
        buf = self._held + text if self._held else text
        # Every possible match starts inside buf: anything released earlier could not start one.
        cut, matched = -1, None
        for stop in self._stops:
            i = buf.find(stop)
            if i >= 0 and (cut < 0 or i < cut):
                cut, matched = i, stop
        if matched is not None:
            self._held, self.matched = "", matched
            return buf[:cut]
        keep = 0
        for k in range(min(self._max_prefix, len(buf)), 0, -1):
            if buf[-k:] in self._prefixes:
                keep = k
                break
        if keep:
            self._held = buf[-keep:]
            return buf[:-keep]
        self._held = ""
        return buf

    def flush(self) -> str:
        """Release the held-back suffix (the stream ended without completing a stop string)."""
        out, self._held = ("" if self.matched is not None else self._held), ""
        return out
