"""``kv_cache_dtype="int8"``: int8 KV rows with an fp16 scale per token and head, read by the
decode kernel (C, C++ operator, SDPA fallback) and by prefill attention, against fp32 references;
pages per byte budget; the engine's greedy tokens alone, with speculation, under tp=2, through
the prefix cache's disk tier, and a --dp 2 service (its meta, page gauges and an abort)."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import torch

from minisgl_core.config.launch import ConfigError, LaunchConfig
from minisgl_core.engine.attention import build_metadata, paged_attention
from minisgl_core.engine.config import EngineConfig, ModelConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.engine.kv_cache import KVPool, default_num_pages
from minisgl_core.kernels import Workspace, kv_int8
from minisgl_core.kernels import attention as kernel_attention
from minisgl_core.kernels.native import library as native
from minisgl_core.kernels.native import ops as native_ops
from minisgl_core.testing.service import launch_service
from minisgl_core.testing.tp import generate, generate_tp
from minisgl_core.wire.schema import SamplingParams

# Bound on |int8-KV attention - fp32 attention| for keys, values and queries drawn N(0, 1) at
# head_dim 64: each value is off by at most scale / 2 = absmax / 254 (about 0.01 here), an
# output is a convex mix of values, and the keys' error moves the softmax weights a little;
# measured 0.007 at most over these cases.
ATTENTION_BOUND = 0.03
PROMPTS = [[5, 6, 7, 8], [10, 11], list(range(20, 60)), [3] * 70]  # the last one: 2 chunks
OPTS = {"num_threads": 1, "max_prefill_tokens": 48, "num_pages": 64}
ISAS = [i for i in native.ISAS.values() if i <= native.best_isa()]
needs_native = pytest.mark.skipif(native.library() is None,
                                  reason=f"native library not built: {native.failure()}")


def _case(batch: int, length: int, hq: int, hkv: int, d: int, seed: int = 0,
          masked: bool = False) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    slots = 4 * batch * length + 16
    k = torch.randn(slots, hkv, d, generator=g)
    v = torch.randn(slots, hkv, d, generator=g)
    q = torch.randn(batch, hq, d, generator=g)
    index = torch.randperm(slots, generator=g)[:batch * length]
    mask = None
    if masked:
        lens = torch.randint(1, length + 1, (batch,), generator=g)
        mask = (torch.arange(length) < lens.unsqueeze(1))[:, None, None, :]
    return q, k, v, index, mask


def test_rows_pack_values_and_an_fp16_scale_within_half_a_step() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 64, generator=g) * torch.tensor([1e-3, 1.0, 300.0]).view(1, 3, 1)
    x[0, 0] = 0.0  # an all-zero row: scale 0, values 0
    rows = kv_int8.quantize(x)
    assert rows.dtype == torch.int8 and rows.shape == (5, 3, 66)
    scale = rows[..., 64:].contiguous().view(torch.float16).float()  # [5, 3, 1]
    # fp16's rounding (relative 2^-11; absolute 2^-25 where a tiny row's scale is subnormal)
    torch.testing.assert_close(scale, x.abs().amax(-1, keepdim=True) / 127, rtol=2 ** -11,
                               atol=2 ** -25)
    back = kv_int8.dequantize(rows, torch.float32)
    assert back[0, 0].eq(0).all()
    # half a step of the stored scale, plus what its rounding moves the row's largest value
    assert ((back - x).abs() <= scale * 0.5 + 127 * 2 ** -25 + scale * 127 * 2 ** -11).all()
    assert rows[..., :64].abs().max() <= 127


@needs_native
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("batch", "length", "hq", "hkv", "d", "masked"), [
    (1, 1, 1, 1, 64, False), (3, 50, 9, 3, 64, True), (4, 129, 8, 2, 128, True),
    (2, 16, 4, 4, 32, False),
    # keys split in chunks merged per pair where the pairs do not share evenly over 2 threads
    (1, 700, 9, 3, 64, False), (3, 800, 9, 3, 64, True),
])
def test_native_int8_decode_matches_the_dequantized_pages_and_fp32(
        isa: int, dtype: torch.dtype, batch: int, length: int, hq: int, hkv: int, d: int,
        masked: bool) -> None:
    q, k, v, index, mask = _case(batch, length, hq, hkv, d, masked=masked)
    kq, vq = kv_int8.quantize(k), kv_int8.quantize(v)
    got = kernel_attention.decode(q.to(dtype), kq, vq, index, mask, d ** -0.5, isa=isa)
    assert got is not None and got.dtype == dtype and got.shape == (batch, hq * d)
    # the kernel reads the int8 rows exactly as dequantizing them does
    same_pages = kernel_attention.sdpa_decode(
        q.to(dtype).float(), kv_int8.dequantize(kq, torch.float32),
        kv_int8.dequantize(vq, torch.float32), index, mask, d ** -0.5)
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # bf16: the query's and output's rounding
    torch.testing.assert_close(got.float(), same_pages, atol=tol, rtol=tol)
    fp32 = kernel_attention.sdpa_decode(q, k, v, index, mask, d ** -0.5)
    assert (got.float() - fp32).abs().max() <= ATTENTION_BOUND + tol


@pytest.mark.parametrize("path", ["fallback", "operator"])
def test_int8_decode_without_the_c_kernel_is_within_the_bound(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v, index, mask = _case(3, 40, 9, 3, 64, seed=1, masked=True)
    kq, vq = kv_int8.quantize(k), kv_int8.quantize(v)
    fp32 = kernel_attention.sdpa_decode(q, k, v, index, mask, 0.125)
    monkeypatch.setenv("MINISGL_ATTENTION", "sdpa")  # the gather-and-dequantize path
    if path == "fallback":
        got = kernel_attention.decode_attention(q, kq, vq, index, mask, 0.125,
                                                Workspace(3, 64, torch.float32, "cpu"))
    else:
        if not native_ops.available():
            pytest.skip(f"native operators not built: {native_ops.failure()}")
        got = torch.ops.minisgl.native_decode_attention(q, kq, vq, index, mask, 0.125)
    assert got.shape == (3, 9 * 64)
    assert (got - fp32).abs().max() <= ATTENTION_BOUND


def test_prefill_attention_over_int8_pages_is_within_the_bound() -> None:
    # two requests: one with 20 cached tokens and 9 new, one with 3 cached and 14 new
    hq, hkv, d, page = 6, 2, 64, 4
    pools = {kv: KVPool(1, 32, page, hkv, d, torch.float32, "cpu", kv_dtype=kv)
             for kv in ("auto", "int8")}
    pages = [list(range(1, 9)), list(range(9, 14))]
    starts, news = [20, 3], [9, 14]
    g = torch.Generator().manual_seed(2)
    cached = build_metadata([], [(p, 0, s) for p, s in zip(pages, starts, strict=True)],
                            page, "cpu")
    old_k, old_v = (torch.randn(sum(starts), hkv, d, generator=g) for _ in range(2))
    meta = build_metadata([], [(p, s, n) for p, s, n in zip(pages, starts, news, strict=True)],
                          page, "cpu")
    q = torch.randn(sum(news), hq, d, generator=g)
    k, v = (torch.randn(sum(news), hkv, d, generator=g) for _ in range(2))
    outs = {}
    for name, pool in pools.items():
        pool.store(0, cached.out_slots, old_k, old_v)
        pool.store(0, meta.out_slots, k, v)
        ws = Workspace(hkv, d, torch.float32, "cpu")
        outs[name] = paged_attention(q, k, v, pool.k_layers[0], pool.v_layers[0], meta, ws)
    assert pools["int8"].k.dtype == torch.int8
    assert outs["int8"].shape == outs["auto"].shape == (sum(news), hq * d)
    assert 0 < (outs["int8"] - outs["auto"]).abs().max() <= ATTENTION_BOUND


def test_the_same_budget_holds_about_2x_bf16s_pages_and_4x_fp32s() -> None:
    # SmolLM2-135M's shapes: 30 layers, 3 KV heads of 64
    cfg = ModelConfig("LlamaForCausalLM", 49152, 576, 1536, 30, 9, 3, 64, 1e-5, 1e5, 1 << 20,
                      True, False, False)

    def pages(dtype: str, kv: str) -> int:
        config = EngineConfig(model="unused", dtype=dtype, kv_cache_dtype=kv,
                              max_running_requests=1 << 20)
        return default_num_pages(config, cfg, 3, 8192)

    int8, bf16, fp32 = pages("float32", "int8"), pages("bfloat16", "auto"), pages("float32", "auto")
    assert int8 == pages("bfloat16", "int8")  # the model's dtype no longer counts
    assert int8 / bf16 >= 1.9 and int8 / fp32 >= 3.8
    assert KVPool.bytes_per_token(30, 3, 64, torch.bfloat16, "int8") == 2 * 30 * 3 * 66


def test_unknown_kv_cache_dtypes_are_refused() -> None:
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, int8"):
        EngineConfig(model="unused", kv_cache_dtype="fp8")
    with pytest.raises(ConfigError, match='kv_cache_dtype must be one of auto, int8, got "in8"'):
        LaunchConfig(kv_cache_dtype="in8")
    assert LaunchConfig(kv_cache_dtype="int8").kv_cache_dtype == "int8"


def _agreement(a: list[list[int]], b: list[list[int]]) -> float:
    pairs = [(x, y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)]
    return sum(x == y for x, y in pairs) / len(pairs)


@pytest.fixture(scope="module")
def fp32_tokens(tiny_models: dict[str, Path]) -> dict[str, list[list[int]]]:
    return {arch: generate(str(tiny_models[arch]), PROMPTS, 16, dtype="float32", **OPTS)[0]
            for arch in ("qwen3", "gemma3")}


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])  # q/k norms; sliding windows
def test_engine_greedy_tokens_match_fp32_kv(tiny_models: dict[str, Path],
                                            fp32_tokens: dict[str, list[list[int]]],
                                            arch: str) -> None:
    got, _ = generate(str(tiny_models[arch]), PROMPTS, 16, dtype="float32",
                      kv_cache_dtype="int8", **OPTS)
    assert _agreement(got, fp32_tokens[arch]) >= 0.9


def test_engine_reports_int8_and_speculation_verifies_over_int8_pages(
        make_engine: Callable[..., Engine]) -> None:
    greedy = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    prompt = [7, 8, 9, 10, 11, 12] * 6  # repeats: n-gram drafts get accepted
    results = {}
    for spec in (None, "ngram"):
        engine = make_engine("qwen3", kv_cache_dtype="int8", speculative=spec, num_pages=32)
        assert engine.kv.k.dtype == torch.int8 and engine.info()["kv_cache_dtype"] == "int8"
        engine.add_request("r", prompt, greedy)
        results[spec] = [t for out in engine.run_until_idle() for t in out.token_ids]
        engine.check_idle_invariant()
        assert engine.stats().pages_free == engine.num_pages
    spec_engine_stats = engine.stats()
    assert spec_engine_stats.spec_accepted_tokens > 0
    assert results["ngram"] == results[None]


def test_tp2_int8_kv_equals_tp1_int8_kv(tiny_models: dict[str, Path]) -> None:
    path = str(tiny_models["qwen2"])
    want, _ = generate(path, PROMPTS, 16, kv_cache_dtype="int8", **OPTS)
    got, _ = generate_tp(path, PROMPTS, 16, 2, kv_cache_dtype="int8", **OPTS)
    assert got == want


def test_int8_pages_and_their_scales_round_trip_through_the_disk_tier(
        make_engine: Callable[..., Engine], tmp_path: Path) -> None:
    greedy = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    prompt = [random.Random(3).randrange(5, 250) for _ in range(70)]  # 4 full pages of 16
    first = make_engine("qwen2", kv_cache_dtype="int8", prefix_cache_dir=str(tmp_path / "a"))
    first.add_request("a", prompt, greedy)
    want = [t for out in first.run_until_idle() for t in out.token_ids]
    first.close()
    files = sorted((tmp_path / "a").rglob("*.kvp"))
    # the prompt's 4 full pages and the one its answer filled; each file a header, then K and V
    # of 2 layers x 16 tokens x 2 heads x (16 values + their 2-byte scale)
    assert len(files) == 5 and {f.stat().st_size for f in files} == {128 + 2 * 2 * 16 * 2 * 18}
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    again = make_engine("qwen2", kv_cache_dtype="int8", prefix_cache_dir=str(tmp_path / "b"))
    again.add_request("b", prompt, greedy)
    outs = list(again.run_until_idle())
    assert [t for out in outs for t in out.token_ids] == want
    assert outs[-1].cached_tokens == 64
    assert dict(again.stats().prefix_tiers)["prefix_cache_disk_hit_tokens_total"] == 64
    cache_a, cache_b = first.batcher.cache, again.batcher.cache
    assert cache_a is not None and cache_b is not None
    slots = [[p * 16 + i for p in c.match(prompt)[1] for i in range(16)]
             for c in (cache_a, cache_b)]
    assert first.kv.k[:, slots[0]].equal(again.kv.k[:, slots[1]])  # values and scales
    assert first.kv.v[:, slots[0]].equal(again.kv.v[:, slots[1]])
    again.close()
    # an fp32 pool's engine does not read them: another fingerprint, computed afresh
    other = make_engine("qwen2", prefix_cache_dir=str(tmp_path / "b"))
    other.add_request("c", prompt, greedy)
    assert list(other.run_until_idle())[-1].cached_tokens == 0
    other.close()
    assert len(list((tmp_path / "b").rglob("*.kvp"))) == 10  # its own pages beside them


def test_a_dp2_service_serves_int8_kv_says_so_and_returns_every_page(
        tiny_models: dict[str, Path], tmp_path: Path) -> None:
    svc = launch_service(str(tiny_models["qwen2"]), log_dir=tmp_path, args=[
        "--kv-cache-dtype", "int8", "--dp", "2", "--num-pages", "64",
        "--max-seq-len-override", "512"])
    try:
        card = httpx.get(f"{svc.url}/v1/models", timeout=30).json()["data"][0]
        assert card["meta"]["kv_cache_dtype"] == "int8"
        assert "(KV int8)" in svc.log()  # each replica's "engine ready" line
        info = httpx.get(f"{svc.url}/v1/engine/info", timeout=30).json()  # the dashboard's
        assert info["kv_cache_dtype"] == "int8"
        body = {"model": card["id"], "prompt": "Hello world", "max_tokens": 8, "temperature": 0}
        for _ in range(4):  # the dispatcher spreads them over both replicas
            r = httpx.post(f"{svc.url}/v1/completions", json=body, timeout=60)
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
        # a streamed request dropped after its first chunk is aborted, its pages freed
        with httpx.stream("POST", f"{svc.url}/v1/completions", timeout=60,
                          json={**body, "max_tokens": 400, "stream": True}) as s:
            next(s.iter_lines())

        def idle(m: dict[str, float]) -> bool:
            free = [m[f'minisgl_kv_pages_free{{dp_rank="{i}"}}'] for i in range(2)]
            return free == [64, 64] and m["minisgl_requests_running"] == 0

        m = svc.wait_metrics(idle, what="both replicas idle, every page free")
        assert m["minisgl_kv_pages_total"] == 128
    finally:
        assert svc.stop() == 0


def test_bench_perplexity_serves_each_kv_dtype_and_compares_them(
        tiny_models: dict[str, Path]) -> None:
    from typer.testing import CliRunner

    from minisgl_core.cli.app import make_app
    from minisgl_core.plugin.loading import build_manager

    app = make_app(build_manager(), plugin_commands=False)
    result = CliRunner().invoke(app, [
        "bench", "perplexity", "--model", str(tiny_models["qwen2"]), "--tokens", "64", "--json",
        "--kv-cache-dtype", "auto", "--kv-cache-dtype", "int8"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert [r["kv_cache_dtype"] for r in rows] == ["auto", "int8"]
    assert rows[0]["tokens"] == rows[1]["tokens"] == 64
    assert rows[0]["perplexity"] > 1 and 0 < abs(rows[1]["vs_first_kv"]) < 0.01
    refused = CliRunner().invoke(app, ["bench", "perplexity", "--kv-cache-dtype", "fp8"])
    assert refused.exit_code == 2 and "auto, int8" in refused.output


def test_bench_quality_puts_int8_kv_next_to_fp32(tiny_models: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from minisgl_core.bench import quality

    threads = torch.get_num_threads()
    try:  # the tiny model's whole context: its keys and values as int8 pages give them back
        quality.main(str(tiny_models["qwen2"]), [], tokens=500, max_tokens=4, json_lines=True,
                     threads=1, kv_int8=True)
    finally:
        torch.set_num_threads(threads)
    rows = [quality.Quality(**json.loads(line)) for line in capsys.readouterr().out.splitlines()]
    assert [r.system for r in rows] == ["fp32", "kv-int8"]
    fp32, int8 = rows
    assert int8.perplexity != fp32.perplexity
    assert int8.perplexity == pytest.approx(fp32.perplexity, rel=0.01)
    assert int8.agreement >= 0.9
