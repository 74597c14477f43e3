"""Engine: one model, its paged KV cache and the batching loop, driven by add / abort / step.

The offline LLM and the service's scheduler process both drive this class; it is synchronous
(schedule -> forward -> sample -> emit -> free), so nothing is ever in flight when a request is
aborted or finished and its pages go back exactly once.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from minisgl_core.engine import huge_pages, prompt_logprobs, quantization_choice
from minisgl_core.engine.admission import Limits, admit
from minisgl_core.engine.attention import Workspace, build_metadata, choose_prefill_kernel
from minisgl_core.engine.batching import Batcher
from minisgl_core.engine.compile_choice import resolve_compile
from minisgl_core.engine.compiled import CompiledDecode
from minisgl_core.engine.config import EngineConfig, ModelConfig, eos_token_ids
from minisgl_core.engine.grammar import GrammarCache, GrammarGate
from minisgl_core.engine.head_rows import forward_rows, head_of
from minisgl_core.engine.kv_cache import KVPool, PageAllocator, default_num_pages
from minisgl_core.engine.prefix_disk import DiskTier, open_disk_tier, tier_metrics
from minisgl_core.engine.request import Request, State, StepOutput
from minisgl_core.engine.sampler import Sampler
from minisgl_core.engine.speculative import Speculator
from minisgl_core.engine.stats import EngineStats
from minisgl_core.engine.step_layout import fold_keys, layout
from minisgl_core.engine.stopping import finish_reason, stop_window
from minisgl_core.engine.weights import load_weights, make_deterministic, release_freed_memory
from minisgl_core.kernels import model_weight_bytes
from minisgl_core.sampling import SamplingParams, TokenLogprob
from minisgl_core.store.naming import model_name_of

if TYPE_CHECKING:
    from minisgl_core.engine.parallel import TensorParallel

log = logging.getLogger(__name__)

GRAMMAR_WAIT_S = 0.005  # an idle step waits this long for a compiling grammar instead of spinning


class Engine:
    """Continuous batching over a paged KV cache for one model on one device.

    ``config.model`` is a model directory and ``model_class`` the class of its architecture,
    both already resolved (``minisgl_core.plugin.model_lookup``). With ``tp`` (size > 1) this is one
    tensor-parallel rank: rank 0 schedules, samples and broadcasts each step's inputs; the other
    ranks only run ``follow()``.
    """

    def __init__(self, config: EngineConfig, model_class: Any,
                 tp: TensorParallel | None = None) -> None:
        from minisgl_core.engine.dtype_choice import resolve_why
        from minisgl_core.text.hf import load_tokenizer  # without transformers when it can

        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)
        # quantization "auto": a GGUF's own weight format (quantization_choice.py); first, as
        # the dtype is timed on the scheme's kernels
        config, self.quantization_reason = quantization_choice.resolve_why(config)
        # dtype "auto": fp32 or bf16, measured (dtype_choice.py)
        config, self.dtype_reason = resolve_why(config)
        self.config = config
        path = Path(config.model)
        self.model_path = path
        self.model_name = model_name_of(path)
        self.model_config = cfg = ModelConfig.from_dir(path)
        self.device = torch.device(config.device)
        self.dtype: torch.dtype = getattr(torch, config.dtype)
        self.max_seq_len = cfg.max_position_embeddings
        if config.max_seq_len_override is not None:
            self.max_seq_len = config.max_seq_len_override
        self.vocab_size = cfg.vocab_size
        self.tp = tp if tp is not None and tp.size > 1 else None
        extra: dict[str, Any] = {} if self.tp is None else {"tp": self.tp}  # plugin models
        if config.quantization is not None:  # need not know tp or quantization unless used
            extra["quantization"] = config.quantization
        self.model = model_class(cfg, dtype=self.dtype, device=self.device,
                                 max_seq_len=self.max_seq_len, **extra)
        compile_step, self.compile_reason = resolve_compile(
            config.compile, self.model, config.device, config.deterministic)
        if config.deterministic:
            make_deterministic(self.model, compile_step)
        self.load_report = load_weights(self.model, path, self.dtype, config.load_format)
        self.weight_place = huge_pages.move_weights(self.model)  # read faster there
        leader = self.tp is None or self.tp.leader
        self.tokenizer = load_tokenizer(path, text_process=False) if leader else None
        self.eos_token_ids = eos_token_ids(path, self.tokenizer, cfg)
        self.page_size = config.page_size
        kv_heads = int(getattr(self.model, "num_kv_heads", cfg.num_kv_heads))  # this rank's
        self.num_pages = config.num_pages or default_num_pages(config, cfg, kv_heads,
                                                               self.max_seq_len)
        self.limits = Limits(self.vocab_size, self.max_seq_len, self.page_size, self.num_pages)
        self.kv = KVPool(cfg.num_layers, self.num_pages, self.page_size, kv_heads,
                         cfg.head_dim, self.dtype, self.device, prefault=config.cache == "radix",
                         kv_dtype=config.kv_cache_dtype)
        # prefill rows a step lays out as decode rows (step_layout): fewer where a key is larger
        self.fold_keys = fold_keys(KVPool.bytes_per_token(cfg.num_layers, kv_heads, cfg.head_dim,
                                                          self.dtype, config.kv_cache_dtype))
        self.allocator = PageAllocator(self.num_pages)
        self.workspace = Workspace(kv_heads, cfg.head_dim, self.dtype, self.device)
        choose_prefill_kernel(int(getattr(self.model, "num_q_heads", cfg.num_heads)), kv_heads,
                              cfg.head_dim, self.dtype, self.device)
        self.sampler = Sampler(self.vocab_size, self.device, config.seed, self.eos_token_ids)
        self.batcher = Batcher(self.allocator, self.page_size, config.max_running_requests,
                               config.max_prefill_tokens, config.cache)
        self.prefix_disk = self._open_prefix_disk()
        self.speculator = None if config.speculative is None else Speculator(
            config.spec_options(), self.sampler, self.max_seq_len)
        self.requests: dict[str, Request] = {}
        self.compiled: CompiledDecode | None = None
        # a step's forward gives the rows the LM head takes (the final norm run with it), and
        # self.head turns them into logits (head_rows.py)
        self.forward: Callable[..., torch.Tensor] = self._forward
        self.head = head_of(self.model)
        if compile_step:  # graphs from the cache before serving, else compiled meanwhile
            self.compiled = CompiledDecode(self.model, self.kv, self.workspace, self.device,
                                           config.deterministic)
            settings = {k: v for k, v in vars(config).items() if k != "compile"}
            # a child process compiles where it can build the same engine: one rank, the CPU
            child = (config, model_class) if self.tp is None and self.device.type == "cpu" \
                else None
            self.compiled.start(f"{settings!r} {cfg!r}", child)  # its graphs' configuration
            self.forward = self.compiled
        self.grammar = GrammarGate(None if self.tokenizer is None else GrammarCache(
            self.tokenizer, self.vocab_size, self.eos_token_ids))
        self._generated_tokens = 0
        release_freed_memory()
        log.info("engine ready: %s (%s), %d pages x %d tokens (KV %s), context %d",
                 self.model_name, cfg.architecture, self.num_pages, self.page_size,
                 self.kv_cache_dtype, self.max_seq_len)

    def _forward(self, input_ids: torch.Tensor, meta: Any, kv: KVPool,
                 ws: Workspace) -> torch.Tensor:
        """The eager forward, ``input_ids [T]`` -> the rows the LM head takes ``[T, H]``."""
        return forward_rows(self.model, input_ids, meta, kv, ws)

    def _open_prefix_disk(self) -> DiskTier | None:
        c, cache = self.config, self.batcher.cache
        if c.prefix_cache_dir is None or cache is None:
            return None
        if self.tp is not None or self.device.type != "cpu":
            # other ranks hold their own heads' pages (not loaded there); pages copied by numpy
            log.warning("prefix cache: the disk tier is off under tensor parallelism and off "
                        "the CPU")
            return None
        disk = open_disk_tier(c.prefix_cache_dir, c.prefix_cache_disk_gb, self.model_path,
                              self.kv, (c.dtype, c.quantization, c.kv_cache_dtype))
        cache.attach_disk(disk)
        return disk

    @property
    def scheduler(self) -> Batcher:
        """Deprecated name of ``batcher`` (the batching policy; the scheduler is the role)."""
        warnings.warn("Engine.scheduler is deprecated and goes away in minisgl 0.3: use "
                      "Engine.batcher", DeprecationWarning, stacklevel=2)
        return self.batcher

    # ---- requests --------------------------------------------------------------------------

    def add_request(self, request_id: str, prompt_ids: Sequence[int],
                    sampling: SamplingParams) -> None:
        """Queue a request; RequestRejected when it can never run (nothing is kept then)."""
        admitted = admit(request_id, prompt_ids, sampling, self.limits, self.requests)
        req = Request(request_id, admitted.prompt, sampling, admitted.max_tokens)
        req.stop_window = stop_window(sampling.stop)
        if sampling.prompt_logprobs is not None:
            req.prompt_lp = prompt_logprobs.PromptLogprobState(sampling.prompt_logprobs)
        self.sampler.prepare(req)
        # a constrained request waits outside the batcher until its grammar compiled (admit
        # raises RequestRejected for a grammar known to fail: nothing is kept then)
        parked = sampling.structured is not None and not self.grammar.admit(req)
        self.requests[request_id] = req
        if not parked:
            self.batcher.add(req)

    def _unpark(self) -> list[StepOutput]:
        """Queue the requests whose grammar compiled; refuse those whose grammar failed."""
        attached, failed = self.grammar.ready()
        for req in attached:
            self.batcher.add(req)
        for req, _ in failed:
            self.requests.pop(req.request_id, None)
        return [StepOutput(r.request_id, (), "error", len(r.prompt_ids), 0, error=exc)
                for r, exc in failed]

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is and free its pages; False if unknown or already done."""
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        if not self.grammar.drop(request_id):
            self.batcher.remove(req)
        return True

    def when_idle(self) -> bool:
        """Work for a moment with no request: load decode graphs compiled meanwhile. Whether
        anything changed."""
        return self.compiled is not None and self.compiled.when_idle()

    def has_work(self) -> bool:
        """True while any request is waiting or running."""
        return bool(self.batcher.waiting or self.batcher.running or self.grammar.parked)

    def run_until_idle(self) -> Iterator[StepOutput]:
        """Step until no request is left, yielding every StepOutput as it comes."""
        while self.has_work():
            yield from self.step()

    def info(self) -> dict[str, str]:
        """Facts the frontends need (sent with the scheduler's Ready)."""
        kernels = getattr(self.model, "kernels", None)  # a plugin model may choose none
        return {"model_name": self.model_name, "max_seq_len": str(self.max_seq_len),
                "vocab_size": str(self.vocab_size), "dtype": self.config.dtype,
                "dtype_reason": self.dtype_reason,
                "quantization": self.config.quantization or "none",
                "quantization_reason": self.quantization_reason,
                "kv_cache_dtype": self.kv_cache_dtype,
                "kernels": kernels.summary() if hasattr(kernels, "summary") else "model's own",
                "weight_bytes": str(model_weight_bytes(self.model,  # a one-row step's reads
                                                       1 if self.tp is None else self.tp.size)),
                "weight_huge_page_bytes": str(0 if self.weight_place is None
                                              else huge_pages.huge_bytes(self.weight_place)),
                "compile": "off" if self.compiled is None else "on",
                "compile_reason": self.compile_reason}

    def stats(self) -> EngineStats:
        """Current load, page use and counters."""
        s, c = self.batcher, self.batcher.cache
        waiting = len(s.waiting) + len(self.grammar.parked)  # compiling grammars wait too
        tiers = () if c is None else tier_metrics(c.hit_tokens, s.prompt_tokens,
                                                  c.num_pages * self._page_bytes(),
                                                  self.prefix_disk)
        return EngineStats(len(s.running), waiting, self.num_pages, s.num_available,
                           self.page_size, s.num_preemptions, s.prompt_tokens,
                           self._generated_tokens, c.num_pages if c else 0,
                           c.hit_tokens if c else 0, *self._spec_counts(), tiers,
                           int(self.compiled is not None and self.compiled.ready))

    @property
    def kv_cache_dtype(self) -> str:
        """What the KV pages hold: "int8", else the model's dtype ("auto" resolved)."""
        return "int8" if self.kv.quantized else self.config.dtype

    def _page_bytes(self) -> int:
        return self.page_size * (self.kv.k[0, 0].nbytes + self.kv.v[0, 0].nbytes) * len(
            self.kv.k_layers)

    def _spec_counts(self) -> tuple[int, int]:
        sp = self.speculator
        return (0, 0) if sp is None else (sp.draft_tokens, sp.accepted_tokens)

    # ---- the loop ----------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> list[StepOutput]:
        """Run one batch (decode every running request, prefill within the budget)."""
        refused = self._unpark() if self.grammar.parked else []
        batch = self.batcher.schedule()
        if batch is None:
            if self.grammar.parked and not refused:  # only compiling grammars: do not spin
                self.grammar.wait(GRAMMAR_WAIT_S)
            return refused
        spec = [] if self.speculator is None else self.speculator.plan(batch.decode,
                                                                        self.batcher)
        lay = layout(batch, spec, self.fold_keys)
        if self.tp is not None:  # the followers run the same forward on their shards
            self.tp.send_step(lay.ids, lay.decode, lay.prefill, self.page_size)
        meta = build_metadata(lay.decode, lay.prefill, self.page_size, self.device,
                              self.config.deterministic)
        input_ids = torch.tensor(lay.ids, device=self.device)
        head_in = self.forward(input_ids, meta, self.kv, self.workspace)
        if lay.chunks:
            prompt_logprobs.collect(lay.chunks, head_in, self.head)
        for r in batch.decode:
            r.num_cached += 1
        for r, n in batch.prefill:
            r.num_cached += n
        to_sample, rows = lay.to_sample, lay.rows
        if not to_sample and not spec:
            return refused
        # the plain rows, then the k + 1 rows of every speculating request: one LM-head call
        picked = rows + lay.spec_rows
        if picked != list(range(head_in.shape[0])):  # not every row in order: gather them
            head_in = head_in.index_select(0, torch.tensor(picked, device=self.device))
        every = self.head(head_in)  # [N + S, V]
        if self.speculator is not None and spec:
            refused = refused + [self._append_many(*took) for took in
                                 self.speculator.verify_all(spec, every[len(rows):],
                                                            self.batcher)]
        if not to_sample:
            return refused
        tokens, logprobs = self.sampler.sample_with_logprobs(every[:len(rows)], to_sample)
        return refused + [self._append_many(r, [tok], [lp])
                          for r, tok, lp in zip(to_sample, tokens, logprobs, strict=True)]

    @torch.inference_mode()
    def follow(self) -> None:
        """Ranks > 0: run rank 0's forwards on this shard until it sends stop (or goes away)."""
        assert self.tp is not None and not self.tp.leader, "follow() is for ranks > 0"
        while (step := self.tp.recv_step()) is not None:
            ids, decode, prefill = step
            meta = build_metadata(decode, prefill, self.page_size, self.device,
                                  self.config.deterministic)
            self.forward(torch.tensor(ids, device=self.device), meta, self.kv, self.workspace)

    def close(self) -> None:
        """Rank 0: stop the followers; every rank leaves the process group (no-op without tp)."""
        self.grammar.close()
        if self.prefix_disk is not None:
            self.prefix_disk.close()
        if self.compiled is not None:
            self.compiled.close()
        if self.tp is None:
            return
        if self.tp.leader:
            self.tp.send_stop()
        self.tp.close()
        self.tp = None

    def _append_many(self, req: Request, tokens: Sequence[int],
                     logprobs: Sequence[TokenLogprob | None]) -> StepOutput:
        """Take ``tokens`` one by one until one ends the request (the rest are dropped)."""
        reason = None
        taken: list[TokenLogprob] = []
        n = 0
        for token, logprob in zip(tokens, logprobs, strict=True):
            req.output_ids.append(token)
            self._generated_tokens += 1
            n += 1
            if logprob is not None:
                taken.append(logprob)
            self.sampler.observe(req, token)
            if req.grammar is not None and not req.grammar.accept(token):
                log.warning("request %s: its grammar refused token %d", req.request_id, token)
            reason = finish_reason(req, token, self.eos_token_ids, self.tokenizer)
            if reason is not None:
                req.finish_reason = reason
                self.requests.pop(req.request_id, None)
                self.batcher.remove(req)
                break
        return StepOutput(req.request_id, tuple(tokens[:n]), reason, len(req.prompt_ids),
                          len(req.output_ids), req.cached_tokens, tuple(taken),
                          prompt_logprobs.take(req.prompt_lp, req.prompt_ids))

    def check_idle_invariant(self) -> None:
        """Raise AssertionError unless, with no work left, free + cached pages == total."""
        if self.has_work():
            raise AssertionError("engine is not idle")
        self.batcher.check_pages_returned(self.num_pages)
        if self.grammar.parked or any(r.state is not State.FINISHED
                                      for r in self.requests.values()):
            raise AssertionError("requests left in the engine")
