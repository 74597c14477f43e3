"""``shout``: a tokenizer role that changes the case of every prompt, then tokenizes as ``hf``.

Options (``[roles.tokenizer.shout]``): ``case = "upper"`` (the default) or ``"lower"``. It
satisfies ``minisgl_core.api.Tokenizer`` by wrapping the core's HF tokenizer role, and
``TokenizerCalls`` (the frontends' /tokenize and /detokenize) by passing them on re-cased.
"""

from __future__ import annotations

from typing import Any

import msgspec

from minisgl_core.api import (
    ChatMessage,
    DetokenizeCall,
    GenerateRequest,
    RoleContext,
    TokenizeCall,
    TokenizedRequest,
    TokenizerReply,
    TokenizerRole,
)

CASES = ("upper", "lower")


class ShoutTokenizer:
    """Re-cases the prompt text and chat contents; token ids pass through untouched."""

    def __init__(self, inner: TokenizerRole, case: str = "upper") -> None:
        if case not in CASES:
            raise ValueError(f'[roles.tokenizer.shout] case must be "upper" or "lower", '
                             f"got {case!r}")
        self.inner = inner
        self.case = case

    def _cased(self, text: str) -> str:
        return text.upper() if self.case == "upper" else text.lower()

    def _recased(self, request: GenerateRequest) -> GenerateRequest:
        changes: dict[str, Any] = {}
        if request.prompt is not None:
            changes["prompt"] = self._cased(request.prompt)
        if request.messages is not None:
            changes["messages"] = tuple(ChatMessage(m.role, self._cased(m.content))
                                        for m in request.messages)
        return msgspec.structs.replace(request, **changes)

    def tokenize(self, request: GenerateRequest) -> TokenizedRequest:
        return self.inner.tokenize(self._recased(request))

    def tokenize_call(self, call: TokenizeCall) -> TokenizerReply:
        return self.inner.tokenize_call(msgspec.structs.replace(
            call, request=self._recased(call.request)))

    def detokenize_call(self, call: DetokenizeCall) -> TokenizerReply:
        return self.inner.detokenize_call(call)

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
