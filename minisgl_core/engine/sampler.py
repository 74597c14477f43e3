"""Batched sampling: penalties, logit bias, min_tokens, temperature, top-k, top-p, min-p,
per-request seeds.

A sampled row draws one uniform u and takes the token where the running sum of its probabilities
passes u (inverse CDF; kernels/sampling.py, natively on the CPU: torch's exponential noise and
sort cost more than the decode step at 32 rows); a seeded request's u comes from its own
generator, so its tokens do not depend on what else is in the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from minisgl_core.engine.grammar import apply_masks
from minisgl_core.engine.request import Request
from minisgl_core.kernels import sampling
from minisgl_core.sampling import TokenLogprob


def _has_penalty(req: Request) -> bool:
    s = req.sampling
    return s.repetition_penalty != 1.0 or s.presence_penalty != 0.0 or s.frequency_penalty != 0.0


def adjusts(req: Request) -> bool:
    """True when this step's logits of ``req`` change before sampling."""
    return req.counts is not None or req.bias is not None or (
        req.banned is not None and len(req.output_ids) < req.sampling.min_tokens)


def token_logprobs(logprobs: torch.Tensor, tokens: Sequence[int],
                   tops: Sequence[int]) -> list[TokenLogprob]:
    """Row i of ``logprobs [A, V]``: the logprob of ``tokens[i]`` and the ``tops[i]`` most likely
    tokens with theirs (one topk for every row, cut per row)."""
    chosen = logprobs.gather(1, torch.tensor(tokens, device=logprobs.device).unsqueeze(1))
    k = max(tops, default=0)
    if k == 0:
        return [TokenLogprob(lp) for lp in chosen.squeeze(1).tolist()]
    values, ids = logprobs.topk(k, dim=-1)  # [A, k] each, most likely first
    return [TokenLogprob(lp, tuple(zip(i[:n], v[:n], strict=True)))
            for lp, i, v, n in zip(chosen.squeeze(1).tolist(), ids.tolist(), values.tolist(), tops,
                                   strict=True)]


def _filters(reqs: Sequence[Request]) -> tuple[list[float], list[int], list[float], list[float]]:
    """Each request's temperature, top_k, top_p and min_p, as kernels/sampling.py takes them."""
    params = [r.sampling for r in reqs]
    return ([s.temperature for s in params], [s.top_k for s in params],
            [s.top_p for s in params], [s.min_p for s in params])


class Sampler:
    """Turns a step's logits ``[N, V]`` into one next token per request."""

    def __init__(self, vocab_size: int, device: torch.device | str, seed: int = 0,
                 eos_token_ids: Iterable[int] = ()) -> None:
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self.argmax = sampling.argmax_on(self.device)  # the greedy rows' pass, chosen once
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.eos_token_ids = frozenset(eos_token_ids)

    def prepare(self, req: Request) -> None:
        """Set up a new request's RNG, penalty, bias and min_tokens state (what it uses)."""
        s = req.sampling
        if s.seed is not None:
            req.generator = torch.Generator(self.device).manual_seed(s.seed)
        if _has_penalty(req):
            req.counts = torch.zeros(self.vocab_size, dtype=torch.float32, device=self.device)
            req.seen = torch.zeros(self.vocab_size, dtype=torch.bool, device=self.device)
            req.seen[torch.tensor(req.prompt_ids, device=self.device)] = True
        if s.logit_bias:
            ids, values = zip(*s.logit_bias, strict=True)
            req.bias = (torch.tensor(ids, device=self.device),
                        torch.tensor(values, dtype=torch.float32, device=self.device))
        stops = set(s.stop_token_ids) | (set() if s.ignore_eos else set(self.eos_token_ids))
        # a constrained request ends when its grammar says so: min_tokens cannot ban its EOS
        if s.min_tokens > 0 and stops and s.structured is None:
            req.banned = torch.tensor(sorted(stops), device=self.device)

    def observe(self, req: Request, token: int) -> None:
        """Record a sampled token in the request's penalty state."""
        if req.counts is not None and req.seen is not None:
            req.counts[token] += 1
            req.seen[token] = True

    def sample_with_logprobs(self, logits: torch.Tensor, reqs: Sequence[Request]
                             ) -> tuple[list[int], list[TokenLogprob | None]]:
        """``sample``, and each token's logprob entry for the requests that ask (else None)."""
        asked = [i for i, r in enumerate(reqs) if r.sampling.logprobs is not None]
        # taken before sampling, which adjusts the logits in place (penalties, bias)
        dist = torch.log_softmax(logits[asked].float(), -1) if asked else None  # [A, V]
        tokens = self.sample(logits, reqs)
        logprobs: list[TokenLogprob | None] = [None] * len(reqs)
        if dist is not None:
            tops = [reqs[i].sampling.logprobs or 0 for i in asked]
            found = token_logprobs(dist, [tokens[i] for i in asked], tops)
            for i, logprob in zip(asked, found, strict=True):
                logprobs[i] = logprob
        return tokens, logprobs

    def sample(self, logits: torch.Tensor, reqs: Sequence[Request]) -> list[int]:
        """One token per row of ``logits [N, V]`` (row i belongs to ``reqs[i]``)."""
        constrained = [i for i, r in enumerate(reqs) if r.grammar is not None]
        if constrained:  # first, so that every later step sees only allowed tokens
            apply_masks(logits, constrained, [reqs[i].grammar for i in constrained])
        if all(r.sampling.greedy and not adjusts(r) for r in reqs):
            return self.argmax(logits)
        logits = logits.float()
        for i, r in enumerate(reqs):
            if adjusts(r):
                self._adjust(logits[i], r)
        out = [0] * len(reqs)
        greedy = [i for i, r in enumerate(reqs) if r.sampling.greedy]
        if greedy:
            rows = torch.tensor(greedy, device=logits.device)
            for i, tok in zip(greedy, self.argmax(logits[rows]), strict=True):
                out[i] = tok
        sampled = [i for i, r in enumerate(reqs) if not r.sampling.greedy]
        if sampled:
            rows = torch.tensor(sampled, device=logits.device)
            toks = self._sample_rows(logits[rows], [reqs[i] for i in sampled])
            for i, tok in zip(sampled, toks, strict=True):
                out[i] = tok
        return out

    @staticmethod
    def _adjust(row: torch.Tensor, r: Request) -> None:
        """In place on ``row [V]``: penalties, then the logit bias, then the min_tokens mask."""
        if r.counts is not None:
            Sampler._penalize(row, r)
        if r.bias is not None:
            row.index_add_(0, r.bias[0], r.bias[1])  # repeated ids add up, as in a dict merge
        if r.banned is not None and len(r.output_ids) < r.sampling.min_tokens:
            row[r.banned] = float("-inf")

    @staticmethod
    def _penalize(row: torch.Tensor, r: Request) -> None:
        """In place on ``row [V]``: repetition (prompt + output), presence/frequency (output)."""
        s = r.sampling
        assert r.counts is not None and r.seen is not None
        if s.repetition_penalty != 1.0:
            vals = row[r.seen]
            row[r.seen] = torch.where(vals > 0, vals / s.repetition_penalty,
                                      vals * s.repetition_penalty)
        if s.presence_penalty != 0.0 or s.frequency_penalty != 0.0:
            row -= s.frequency_penalty * r.counts + s.presence_penalty * (r.counts > 0).float()

    def _sample_rows(self, logits: torch.Tensor, reqs: Sequence[Request]) -> list[int]:
        u = torch.rand(len(reqs), dtype=torch.float64, generator=self.generator,
                       device=self.device)  # [N], one draw per row
        for i, r in enumerate(reqs):
            if r.generator is not None:
                u[i] = torch.rand((), dtype=torch.float64, generator=r.generator,
                                  device=self.device)
        tokens = sampling.draw(logits, *_filters(reqs), u)
        return tokens if tokens is not None else sampling.draw_from(self.probs(logits, reqs), u)

    @staticmethod
    def probs(logits: torch.Tensor, reqs: Sequence[Request]) -> torch.Tensor:
        """What row i of ``logits [N, V]`` is sampled from for ``reqs[i]`` (temperature, top-k,
        top-p, min-p), unnormalised where tokens were cut: ``[N, V]`` float."""
        return sampling.probabilities(logits, *_filters(reqs))
