"""Did-you-mean: the closest known name to one a user typed, for every "unknown ..." message."""

from __future__ import annotations

import difflib


def suggest(name: str, names: list[str]) -> str:
    """Return ``' did you mean "x"?'`` for the closest of ``names``, or an empty string."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    if not close:
        lowered = {n.lower(): n for n in names}
        close = [lowered[name.lower()]] if name.lower() in lowered else []
    return f' did you mean "{close[0]}"?' if close else ""
