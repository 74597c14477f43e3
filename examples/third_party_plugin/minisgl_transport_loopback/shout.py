"""``shout``: a tokenizer role that changes the case of every prompt, then tokenizes as ``hf``.

Options (``[roles.tokenizer.shout]``): ``case = "upper"`` (the default) or ``"lower"``. It
satisfies ``minisgl_core.api.Tokenizer`` by wrapping the core's HF tokenizer role.
"""

from __future__ import annotations

from typing import Any

import msgspec

from minisgl_core.api import (
    ChatMessage,
    GenerateRequest,
    RoleContext,
    TokenizedRequest,
    Tokenizer,
    TokenizerRole,
)

CASES = ("upper", "lower")


class ShoutTokenizer:
    """Re-cases the prompt text and chat contents; token ids pass through untouched."""

    def __init__(self, inner: Tokenizer, case: str = "upper") -> None:
        if case not in CASES:
            raise ValueError(f'[roles.tokenizer.shout] case must be "upper" or "lower", '
                             f"got {case!r}")
        self.inner = inner
        self.case = case

    def _cased(self, text: str) -> str:
        return text.upper() if self.case == "upper" else text.lower()

    def tokenize(self, request: GenerateRequest) -> TokenizedRequest:
        changes: dict[str, Any] = {}
        if request.prompt is not None:
            changes["prompt"] = self._cased(request.prompt)
        if request.messages is not None:
            changes["messages"] = tuple(ChatMessage(m.role, self._cased(m.content))
                                        for m in request.messages)
        result: TokenizedRequest = self.inner.tokenize(msgspec.structs.replace(request,
                                                                               **changes))
        return result

    def close(self) -> None:
        self.inner.close()


def make_shout(context: RoleContext) -> ShoutTokenizer:
    """The role factory: ``factory(context)`` with this role's options table."""
    unknown = sorted(set(context.options) - {"case"})
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} in [roles.tokenizer.shout]")
    spec = context.spec
    return ShoutTokenizer(TokenizerRole(spec.model_dir, spec.max_context),
                          str(context.options.get("case", "upper")))
