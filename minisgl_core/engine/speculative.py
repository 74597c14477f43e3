"""N-gram (prompt-lookup) speculation: drafts from a request's own tokens, verified in one forward.

A decoding request whose last ``n`` tokens (``prompt_lookup_max`` down to ``prompt_lookup_min``)
occurred earlier in its prompt + output proposes the up to ``k`` tokens that followed that earlier
occurrence. The engine then runs its last token and the drafts as ``k + 1`` decode rows of the
step's batch (step_layout.py), and ``verify`` keeps the longest accepted prefix plus
one token of the target's own: exactly the greedy tokens under greedy, and under sampling the
rejection rule for a point-mass draft (accept draft t with probability p(t), else sample from p
with t removed), which leaves the output distribution that of plain decoding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minisgl_core.engine.batching import Batcher
from minisgl_core.engine.config import SpecOptions
from minisgl_core.engine.request import Request
from minisgl_core.engine.sampler import Sampler, adjusts, token_logprobs
from minisgl_core.sampling import TokenLogprob

METHODS = ("ngram",)
MAX_PAUSE = 16  # steps a request that keeps drafting wrong waits at most before trying again


def propose(tokens: Sequence[int], k: int, n_min: int, n_max: int) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of the longest suffix of
    ``tokens`` (``n_max`` down to ``n_min`` long) that has ``k`` followers (else the one with the
    most); [] when no suffix occurred before."""
    total = len(tokens)
    for n in range(min(n_max, total - 1), n_min - 1, -1):
        suffix = list(tokens[total - n:])
        first = suffix[0]
        best: list[int] = []
        # latest candidate first (recent text predicts best); the suffix itself is no match
        for start in range(total - n - 1, -1, -1):
            if tokens[start] == first and list(tokens[start:start + n]) == suffix:
                follow = list(tokens[start + n:start + n + k])
                if len(follow) == k:
                    return follow
                if len(follow) > len(best):
                    best = follow
        if best:
            return best
    return []


def accept_point_mass(p: torch.Tensor, draft: int,
                      generator: torch.Generator | None) -> tuple[int, bool]:
    """Rejection sampling of one position for a draft that proposes ``draft`` with certainty:
    ``(draft, True)`` with probability p(draft), else ``(t, False)`` with t drawn from p with
    ``draft`` zeroed and renormalised; ``p [V]`` may be unnormalised. The result is exactly p."""
    p = p.float()
    total = p.sum()
    u = torch.rand((), generator=generator, device=p.device)
    if bool(u * total < p[draft]):
        return draft, True
    residual = p.clone()
    residual[draft] = 0.0
    if not bool(residual.sum() > 0):  # p was all on the draft (u hit the boundary)
        return draft, True
    return int(torch.multinomial(residual, 1, generator=generator)), False


class Speculator:
    """Plans each step's drafts (taking pages only if free) and verifies them."""

    def __init__(self, options: SpecOptions, sampler: Sampler, max_seq_len: int) -> None:
        self.options = options
        self.sampler = sampler
        self.max_seq_len = max_seq_len
        self.draft_tokens = 0  # proposed so far
        self.accepted_tokens = 0  # of those, accepted by verification

    @staticmethod
    def eligible(req: Request) -> bool:
        """Grammar and logit-adjusting requests (penalties, bias, min_tokens) decode plainly."""
        return req.grammar is None and not adjusts(req)

    def plan(self, decode: list[Request], batcher: Batcher) -> list[Request]:
        """Drafts for the eligible rows of ``decode`` (removed from it): each gets the pages
        of ``k + 1`` positions if they are free, else it decodes plainly this step."""
        o = self.options
        chosen: list[Request] = []
        for req in list(decode):
            if not self.eligible(req):
                continue
            if req.spec_pause > 0:  # its recent drafts were all wrong: decode plainly a while
                req.spec_pause -= 1
                continue
            # never draft past max_tokens or the context: the last position is the target's
            room = min(o.num_speculative_tokens, req.max_tokens - len(req.output_ids) - 1,
                       self.max_seq_len - req.num_cached - 1)
            if room < 1:
                continue
            drafts = propose(req.prompt_ids + req.output_ids, room, o.prompt_lookup_min,
                             o.prompt_lookup_max)
            if drafts and batcher.grow_if_free(req, req.num_cached + 1 + len(drafts)):
                req.drafts = tuple(drafts)
                decode.remove(req)
                chosen.append(req)
        return chosen

    def verify_all(self, spec: Sequence[Request], every: torch.Tensor, batcher: Batcher
                   ) -> list[tuple[Request, list[int], list[TokenLogprob | None]]]:
        """Each of ``spec`` with the tokens it takes (and their logprobs when it asks) from its
        ``k + 1`` rows of ``every [S, V]`` (in ``spec`` order)."""
        out = []
        start = 0
        for r in spec:
            logits = every[start:start + 1 + len(r.drafts)]  # [k + 1, V]
            start += 1 + len(r.drafts)
            top = r.sampling.logprobs
            # [k + 1, V] from the raw logits, as plain decoding reports them
            dist = torch.log_softmax(logits.float(), -1) if top is not None else None
            tokens = self.verify(r, logits, batcher)
            lps: list[TokenLogprob | None] = [None] * len(tokens)
            if dist is not None:
                lps = list(token_logprobs(dist[:len(tokens)], tokens, [top or 0] * len(tokens)))
            out.append((r, tokens, lps))
        return out

    def verify(self, req: Request, logits: torch.Tensor, batcher: Batcher) -> list[int]:
        """The tokens ``req`` takes from its chunk's ``logits [k + 1, V]``: the accepted drafts
        and one of the target's; its cached length and pages are set to match."""
        drafts = req.drafts
        out: list[int] = []
        if req.sampling.greedy:
            best = logits.max(-1).indices.tolist()  # [k + 1]
            for i, d in enumerate(drafts):
                if best[i] != d:
                    break
                out.append(d)
            out.append(best[len(out)])
        else:
            probs = self.sampler.probs(logits.float(), [req] * logits.shape[0])  # [k + 1, V]
            gen = req.generator if req.generator is not None else self.sampler.generator
            for i, d in enumerate(drafts):
                tok, ok = accept_point_mass(probs[i], d, gen)
                out.append(tok)
                if not ok:
                    break
            else:
                out.append(int(torch.multinomial(probs[len(drafts)], 1, generator=gen)))
        accepted = len(out) - 1
        # text that does not repeat itself wastes the k extra positions: back off exponentially
        # after each wholly rejected draft, and start over after an accepted one
        if accepted == 0:
            req.spec_backoff = min(max(1, 2 * req.spec_backoff), MAX_PAUSE)
            req.spec_pause = req.spec_backoff
        else:
            req.spec_backoff = 0
        self.draft_tokens += len(drafts)
        self.accepted_tokens += accepted
        # the last token and the accepted drafts have valid K/V; rejected positions' pages go
        req.num_cached += 1 + accepted
        batcher.trim(req, req.num_cached + 1)
        req.drafts = ()
        return out

