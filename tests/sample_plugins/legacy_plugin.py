"""A plugin written to the docs of minisgl's first layout: it imports the message types from
``minisgl_core.messages``, types nothing, and builds its tokenizer role with the old factory
signature, ``factory(spec: WorkerSpec)``; its detokenizer is the core's, by its old path.

Its tokenizer makes every request a greedy one of LEGACY_MAX_TOKENS tokens, so that a client
sees that it ran.
"""

from __future__ import annotations

from typing import Any

import msgspec

from minisgl_core import hookimpl
from minisgl_core.messages import GenerateRequest, SamplingParams

LEGACY_MAX_TOKENS = 3


@hookimpl
def minisgl_register_roles(register: Any) -> None:
    register("tokenizer", "legacy", "legacy_plugin:make_legacy_tokenizer")
    register("detokenizer", "legacy", "minisgl_core.runtime.roles:make_detokenizer")


class LegacyTokenizer:
    """The core's HF tokenizer role, on requests rewritten to LEGACY_MAX_TOKENS greedy tokens."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def tokenize(self, request: GenerateRequest) -> Any:
        if not isinstance(request, GenerateRequest):
            raise TypeError(f"a GenerateRequest was expected, got {type(request).__name__}")
        fixed = SamplingParams(max_tokens=LEGACY_MAX_TOKENS, temperature=0.0, ignore_eos=True)
        return self.inner.tokenize(msgspec.structs.replace(request, sampling=fixed))

    def close(self) -> None:
        self.inner.close()


def make_legacy_tokenizer(spec: Any) -> LegacyTokenizer:
    """The old factory signature: what it gets is read as a WorkerSpec."""
    from minisgl_core.text.tokenize import TokenizerRole

    return LegacyTokenizer(TokenizerRole(spec.model_dir, spec.max_context))
