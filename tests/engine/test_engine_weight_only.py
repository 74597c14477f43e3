"""--quantization int8-wo / int4: the native kernels (AVX2, AVX-512, AMX) and their torch
fallback against the dequantized fp32 product, the quantizers' error bounds, the kernel choice,
the tiny model."""

from __future__ import annotations

import logging

import pytest
import torch

from minisgl_core.bench.ceilings import config_cost, model_cost
from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.kernels import BUCKETS, Kernel
from minisgl_core.kernels.matmul.choice import candidates, choose
from minisgl_core.kernels.matmul.w8a8 import quantize_weight
from minisgl_core.kernels.matmul.weight_only import (
    GROUP,
    Int8Weight,
    WeightOnlyAmx,
    WeightOnlyDequant,
    WeightOnlyNative,
    amx_matmul,
    dequantize_int4,
    dequantize_int8,
    native_matmul,
    quantize_int4,
)
from minisgl_core.kernels.matmul.wo_gemm import WeightOnlyGemm
from minisgl_core.kernels.matmul.wo_panels import Int8Panels, unpanel
from minisgl_core.kernels.native import library as native
from minisgl_core.plugin.model_lookup import resolve
from minisgl_core.wire.schema import SamplingParams

SCHEMES = ("int8-wo", "int4")
# (out, in): the default model's o / down-sized layers, and odd widths (a partial int4 group,
# an int8 row that is no multiple of the vector width, an out that splits unevenly over threads,
# int4 blocks of four groups followed by a lone group and a partial one)
SHAPES = [(576, 576), (37, 100), (1536, 576), (40, 1536), (5, 33), (23, 300)]
ROWS = (1, 2, 3, 8, 33)


def _packed(scheme: str, w: torch.Tensor) -> Int8Weight | object:
    return quantize_int4(w) if scheme == "int4" else Int8Weight(*quantize_weight(w))


def _dequant(scheme: str, packed: object) -> torch.Tensor:
    return dequantize_int4(packed) if scheme == "int4" else dequantize_int8(packed)  # type: ignore


def _isas() -> list[str]:
    best = native.best_isa()
    return [name for name, isa in native.ISAS.items() if isa <= best]


@pytest.mark.skipif(native.library() is None, reason=f"no native library: {native.failure()}")
@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("scheme", SCHEMES)
def test_native_kernel_equals_the_dequantized_product(scheme: str, isa: str) -> None:
    gen = torch.Generator().manual_seed(1)
    for out, inp in SHAPES:
        packed = _packed(scheme, torch.randn(out, inp, generator=gen) * 0.05)
        deq = _dequant(scheme, packed)
        for rows in ROWS:
            x = torch.randn(rows, inp, generator=gen)
            ref = x.double() @ deq.double().t()
            y = native_matmul(x, packed, native.ISAS[isa])  # type: ignore[arg-type]
            assert y.shape == (rows, out)
            err = float((y - ref).abs().max() / ref.abs().max())
            assert err < 1e-5, (out, inp, rows, err)


@pytest.mark.skipif(not WeightOnlyAmx("int4").available(torch.device("cpu"), torch.bfloat16),
                    reason="no AMX here (or no native library)")
@pytest.mark.parametrize("scheme", SCHEMES)
def test_amx_kernel_equals_the_dequantized_product(scheme: str) -> None:
    gen = torch.Generator().manual_seed(4)
    for out, inp in [*SHAPES, (3072, 576)]:
        packed = _packed(scheme, torch.randn(out, inp, generator=gen) * 0.05)
        deq = _dequant(scheme, packed)
        if scheme == "int4":  # its tiles are the fp32 weight rounded once to bf16
            deq = deq.bfloat16().float()
        for rows in (*ROWS, 16, 17, 32, 64, 65, 130):  # one to four C tiles, and a second pass
            x = torch.randn(rows, inp, generator=gen).bfloat16()
            ref = x.double() @ deq.double().t()
            y = amx_matmul(x, packed)  # type: ignore[arg-type]
            assert y is not None and y.shape == (rows, out)
            err = float((y - ref).abs().max() / ref.abs().max())
            assert err < 1e-5, (out, inp, rows, err)
            res = torch.randn(rows, out, generator=gen).bfloat16()
            fused = amx_matmul(x, packed, res, torch.bfloat16)  # type: ignore[arg-type]
            assert fused is not None and fused.dtype == torch.bfloat16
            # the fp32 sum rounded once to bf16
            assert torch.equal(fused, (y + res.float()).bfloat16()), (out, inp, rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_kernels_add_bias_and_residual_in_the_input_dtype(scheme: str, dtype: torch.dtype
                                                          ) -> None:
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(37, 100, generator=gen)
    x, bias, res = (torch.randn(*s, generator=gen).to(dtype) for s in ((3, 100), (37,), (3, 37)))
    kernels: list[Kernel] = [WeightOnlyDequant(scheme)]
    if native.library() is not None:
        kernels.append(WeightOnlyNative(scheme))
    if WeightOnlyAmx(scheme).available(torch.device("cpu"), dtype):
        kernels.append(WeightOnlyAmx(scheme))
    for k in kernels:
        assert k.available(torch.device("cpu"), dtype)
        packed = k.pack(w)
        y = k.run(packed, x, bias, res)
        ref = x.float() @ _dequant(scheme, packed).t() + bias.float() + res.float()
        assert y.dtype == dtype and y.shape == (3, 37)
        tol = 1e-4 if dtype == torch.float32 else 3e-2  # bf16: 8 bits of mantissa
        assert float((y.float() - ref).abs().max() / ref.abs().max()) < tol, k.name


def test_quantizers_round_trip_within_their_step() -> None:
    w = torch.randn(64, 100, generator=torch.Generator().manual_seed(3))
    q, scale = quantize_weight(w)
    err8 = (dequantize_int8(Int8Weight(q, scale)) - w).abs()
    assert bool((err8 <= scale[:, None] * 0.5 + 1e-6).all())
    for symmetric in (False, True):
        p = quantize_int4(w, symmetric)
        assert p.q.shape == (64, 4, 16) and p.q.dtype == torch.uint8  # 100 -> 4 groups of 32
        err4 = (dequantize_int4(p) - w).abs()
        step = p.scale.float().abs().repeat_interleave(GROUP, 1)[:, :100]  # Q4_0: may be < 0
        # half a step (Q4_0: a whole one on the side opposite the largest magnitude, which
        # reaches only 7 steps of the 8), plus what rounding scale and min to fp16 moves
        bound = step * (1.0 if symmetric else 0.5) + 2e-3 * w.abs().amax()
        assert bool((err4 <= bound).all()), symmetric
        assert float(err4.max()) > float(err8.max())  # 4 bits are coarser than 8: not a no-op


def test_without_a_compiler_the_fallback_runs_and_says_why_once(monkeypatch, caplog) -> None:
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "_failure", None)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        pool = candidates("down", torch.device("cpu"), torch.float32, "int4")
        candidates("gate_up", torch.device("cpu"), torch.float32, "int8-wo")
    assert [k.name for k in pool] == ["int4-dequant"]
    assert "no C compiler" in (native.failure() or "")
    assert sum("torch fallback" in r.getMessage() for r in caplog.records) == 1


def test_the_choice_takes_the_fastest_kernel_per_bucket_on_one_copy(tmp_path) -> None:
    # a timer where the native kernel wins decode buckets and the fallback wins prefill
    def timer(kernel: Kernel, packed: object, x: torch.Tensor) -> float:
        native_wins = x.shape[0] < BUCKETS[-1]
        return 1e-3 if (kernel.name.endswith("-dequant") != native_wins) else 2e-3

    shapes = {"qkv": (96, 64), "down": (64, 100), "lm_head": (200, 64)}
    choice = choose(shapes, torch.device("cpu"), torch.float32, "int4", cache=tmp_path,
                    timer=timer, load=lambda: 0.0, budget_s=300)  # a budget a slow host meets
    assert choice.source.startswith("measured") and "partly" not in choice.source
    names = choice.names()
    assert all(n.startswith("int4") for n in names["qkv"])  # inputs unrounded: qkv too
    assert all(n.startswith("int8-wo") for n in names["lm_head"])  # the head a step above
    if native.library() is not None:
        assert names["down"] == ["int4"] * (len(BUCKETS) - 1) + ["int4-dequant"]
    else:
        assert names["down"] == ["int4-dequant"] * len(BUCKETS)
    again = choose(shapes, torch.device("cpu"), torch.float32, "int4", cache=tmp_path,
                   load=lambda: 0.0)
    assert again.names() == names and again.source.startswith("cached")


PROMPTS = [[5, 9, 13, 2, 7, 30, 11], [3, 4], [8, 1, 6, 21, 17]]


def _greedy(engine: Engine, n: int) -> list[list[int]]:
    sp = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(PROMPTS):
        engine.add_request(f"r{i}", p, sp)
    out: dict[str, list[int]] = {}
    for _ in range(10 * n):
        if not engine.has_work():
            break
        for step in engine.step():
            out.setdefault(step.request_id, []).extend(step.token_ids)
    assert not engine.has_work()
    return [out[f"r{i}"] for i in range(len(PROMPTS))]


@pytest.fixture(scope="module")
def fp32_tokens(tiny_models) -> list[list[int]]:
    model = resolve(str(tiny_models["llama"]))
    return _greedy(Engine(EngineConfig(model=model.path, num_threads=1), model.model_class), 6)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_tiny_model_generates_and_int8_wo_follows_fp32(tiny_models, fp32_tokens,
                                                       scheme: str) -> None:
    model = resolve(str(tiny_models["llama"]))
    engine = Engine(EngineConfig(model=model.path, num_threads=1, quantization=scheme),
                    model.model_class)
    facts = engine.info()  # what /v1/models meta, the dashboard and bench offline show
    assert facts["quantization"] == scheme and f"down: 1 {scheme}" in facts["kernels"]
    layer = engine.model.layers[0]
    assert layer.down.kernels[0].quantized == scheme
    assert layer.qkv.kernels[0].quantized == scheme  # unlike int8's, its inputs unrounded
    assert engine.model.lm_head.kernels[0].quantized == "int8-wo"  # int4's too (role_scheme)
    dense = layer.down.in_features * layer.down.out_features * 4
    assert layer.down.nbytes() < dense / (3 if scheme == "int8-wo" else 5)  # one packed copy
    # the benchmarks' roofline from config.json alone counts the bytes the engine holds
    held, estimate = model_cost(engine.model), config_cost(str(model.path), scheme)
    assert estimate.fp32_params == held.fp32_params and estimate.int8_params == 0
    assert abs(estimate.weight_bytes - held.weight_bytes) <= 0.02 * held.weight_bytes, (
        estimate, held)
    # the tied head's int8 rows stand for the embedding table, which is not kept beside them
    # (in either int8 layout: rows, or the panels of AVX2 / AVX512-VNNI hosts)
    head = engine.model.lm_head.weight
    head = unpanel(head) if isinstance(head, Int8Panels) else head
    assert engine.model.embed_rows is engine.model.lm_head and engine.model.embed.numel() == 0
    ids = torch.tensor([0, 5, 5, engine.vocab_size - 1])
    torch.testing.assert_close(engine.model.embed_tokens(ids),
                               dequantize_int8(head)[ids].to(engine.model.dtype))
    tokens = _greedy(engine, 6)
    assert [len(t) for t in tokens] == [6] * len(PROMPTS)
    if scheme == "int8-wo":  # within 0.5% per weight: the same greedy tokens as fp32's
        assert tokens == fp32_tokens


@pytest.mark.skipif(native.library() is None, reason=f"no native library: {native.failure()}")
def test_kernel_benchmark_reads_every_layer_weight_once_per_pass(
        tiny_models, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from minisgl_core.bench import wo_kernels
    from minisgl_core.engine.config import ModelConfig

    path = tiny_models["llama"]
    threads = torch.get_num_threads()
    try:
        assert wo_kernels.main(str(path), [1, 3], threads=1, isa=None, repeat=1,
                               json_lines=True, bf16=True) == 0
    finally:
        torch.set_num_threads(threads)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    lib = native.library()
    kinds = ("fp32", "bf16", *(("bf16-amx",) if lib.wo_has_amx() else ()),
             *(("bf16-gemm",) if lib.wo_has_bf16() else ()))
    assert [(r["scheme"], r["inputs"], r["rows"]) for r in rows] == [
        (s, i, n) for s in ("int8-wo", "int4") for i in kinds for n in (1, 3)]
    c = ModelConfig.from_dir(path)
    head = c.vocab_size * c.hidden_size + 4 * c.vocab_size  # int8-wo: a byte a weight + scale
    layers_bytes = config_cost(str(path), "int8-wo").weight_bytes - head
    half = len(rows) // 2
    assert all(r["bytes"] == layers_bytes for r in rows[:half])
    assert all(0 < r["bytes"] == rows[half]["bytes"] < layers_bytes for r in rows[half:])
    for r in rows:
        assert r["gb_s"] == pytest.approx(r["bytes"] / r["ms"] / 1e6)
        assert r["share_of_read"] == pytest.approx(r["gb_s"] / r["read_gb_s"])


@pytest.mark.skipif(native.library() is None, reason=f"no native library: {native.failure()}")
@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_profiler_sees_the_native_kernels_as_matmul(scheme: str) -> None:
    from torch.profiler import profile

    from minisgl_core.bench.profile import MATMUL

    packed = _packed(scheme, torch.randn(64, 96) * 0.05)
    with profile() as prof:
        native_matmul(torch.randn(1, 96), packed)  # type: ignore[arg-type]
    seen = {e.key: e.self_cpu_time_total for e in prof.key_averages() if e.key in MATMUL}
    assert list(seen) == [f"minisgl::wo_{scheme.removesuffix('-wo')}"] and all(seen.values())


@pytest.mark.skipif(native.library() is None, reason=f"no native library: {native.failure()}")
def test_kernel_benchmark_refuses_a_path_wider_than_the_cpu(
        tiny_models, monkeypatch, capsys: pytest.CaptureFixture[str]) -> None:
    from minisgl_core.bench import wo_kernels

    monkeypatch.setattr(native, "best_isa", lambda: native.ISAS["avx2"])  # an AVX2-only host
    assert wo_kernels.main(str(tiny_models["llama"]), [1], threads=1, isa="avx512", repeat=1,
                           json_lines=True) == 1
    said = capsys.readouterr().err.strip()
    assert said == "bench kernels: this CPU runs avx2 at most, not avx512"


@pytest.mark.skipif(not WeightOnlyGemm("int4").available(torch.device("cpu"), torch.bfloat16),
                    reason="no AVX512-BF16 here (or no native library)")
def test_a_bf16_engine_generates_on_the_gemm(tiny_models, monkeypatch) -> None:
    model = resolve(str(tiny_models["llama"]))
    layers = {}
    for kernel in ("int4", "int4-gemm"):  # the dot-product kernel, then the GEMM, every bucket
        monkeypatch.setenv("MINISGL_LINEAR", kernel)
        engine = Engine(EngineConfig(model=model.path, num_threads=1, quantization="int4",
                                     dtype="bfloat16"), model.model_class)
        layer = engine.model.layers[0]
        assert {k.name for k in layer.down.kernels} == {kernel}
        layers[kernel] = layer
        sp = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        for i, prompt in enumerate([[5, 9, 13, 2, 7], [3, 4], [8, 1, 6]]):
            engine.add_request(f"r{i}", prompt, sp)
        out: dict[str, list[int]] = {}
        for _ in range(40):  # bounded: 4 tokens each need a few steps
            if not engine.has_work():
                break
            for step in engine.step():
                out.setdefault(step.request_id, []).extend(step.token_ids)
        assert not engine.has_work() and sorted(map(len, out.values())) == [4, 4, 4]
    # the same packed weight through both kernels (the C++ operator where it is built)
    x = torch.randn(5, layers["int4"].down.in_features,
                    generator=torch.Generator().manual_seed(9)).bfloat16()
    a, b = (layers[k].down(x).float() for k in ("int4", "int4-gemm"))
    assert float((a - b).abs().max() / a.abs().max()) < 1e-2  # both rounded once to bf16
