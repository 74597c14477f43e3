"""The offline engine as the ceiling of `minisgl bench compare`: the same chats as the service's
load, run in-process with no server in between."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from minisgl_core.bench.results import Record, ServeResult
from minisgl_core.bench.serve import default_requests, make_messages


class OfflineEngine:
    """The offline Engine, in this process, on the same chats as the service (greedy, EOS
    ignored, same chat template), configured as ``minisgl launch`` with the same ``-s`` settings
    configures the service's (no flags: ``--dtype auto``, ``--quantization auto``, compiled
    where it works); it takes every core, as the service's scheduler does."""

    def __init__(self, model_dir: str, prompt_len: int | None,
                 launch_args: Sequence[str] = ()) -> None:
        """``launch_args``: the services' ``-s KEY=VALUE`` pairs (anything else is passed
        over)."""
        from minisgl_core.config.sources import load_config
        from minisgl_core.engine.engine import Engine
        from minisgl_core.plugin.model_lookup import resolve
        from minisgl_core.service.engine_settings import engine_config

        pairs = zip(launch_args, launch_args[1:], strict=False)
        settings = [value for flag, value in pairs if flag == "-s"]
        resolved = resolve(model_dir)
        config = engine_config(load_config(overrides=settings), resolved.path,
                               os.cpu_count() or 1)
        self.engine = Engine(config, resolved.model_class)
        self.prompt_len = prompt_len

    def _prompt(self, i: int) -> list[int]:
        tok = self.engine.tokenizer
        text = tok.apply_chat_template(make_messages(i, self.prompt_len),
                                       add_generation_prompt=True, tokenize=False)
        return list(tok.encode(text, add_special_tokens=False))

    def _batch(self, ids: range, n_tokens: int) -> list[Record]:
        from minisgl_core.wire.schema import SamplingParams

        sp = SamplingParams(max_tokens=n_tokens, temperature=0.0, ignore_eos=True)
        start = time.perf_counter()
        for i in ids:
            self.engine.add_request(f"b{i}", self._prompt(i), sp)
        first: dict[str, float] = {}
        records = []
        for out in self.engine.run_until_idle():
            now = time.perf_counter() - start
            if out.token_ids:
                first.setdefault(out.request_id, now)
            if out.finish_reason is not None:
                records.append(Record(True, start, first.get(out.request_id, now), now,
                                      out.completion_tokens, out.prompt_tokens))
        return records

    def measure(self, batch: int, max_tokens: int, requests: int | None) -> dict[str, Any]:
        """Batch size ``batch`` on the level's requests (``requests`` or the service default),
        as whole batches added at once, after the same warm-up wave; TTFT counts from the add."""
        print(f"bench compare: offline engine: batch {batch}", file=sys.stderr, flush=True)
        self.engine.when_idle()  # decode graphs compiled meanwhile, as the service loads them
        self._batch(range(batch), min(4, max_tokens))  # warm-up
        records: list[Record] = []
        t0 = time.perf_counter()
        for r in range(-(-(requests or default_requests(batch)) // batch)):
            records += self._batch(range(r * batch, (r + 1) * batch), max_tokens)
        return ServeResult.from_records(batch, len(records), records, time.perf_counter() - t0,
                                        max_tokens, True).as_dict()
