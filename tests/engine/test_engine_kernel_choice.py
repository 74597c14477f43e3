"""Kernel choice at load: measured once, cached on disk, the same choice for a given cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from minisgl_core.kernels import BUCKETS, Kernel
from minisgl_core.kernels.matmul import choice as kernel_choice
from minisgl_core.kernels.matmul.choice import candidates, choose, timed_width
from minisgl_core.kernels.native import library

CPU, FP32 = torch.device("cpu"), torch.float32
SHAPES = {"qkv": (96, 64), "down": (64, 128)}


# a scripted timer measures nothing, but packing each candidate's weight still takes real time:
# a budget a loaded host cannot run out of (a partial measurement is never cached)
SCRIPTED_BUDGET_S = 600.0


def _scripted(fast_small: str) -> object:
    """A timer: ``fast_small`` wins below 8 rows by a hair, dense loses by far above."""
    def timer(kernel: Kernel, packed: object, x: torch.Tensor) -> float:
        rows = x.shape[0]
        if kernel.name == fast_small:
            return 1.0 if rows < 8 else 1.05
        return 1.01 if rows < 8 else (9.0 if kernel.name == "dense" else 1.0)
    return timer


def _never(kernel: Kernel, packed: object, x: torch.Tensor) -> float:
    raise AssertionError("a cached choice must not be measured again")


@pytest.fixture
def pool_names(monkeypatch) -> list[str]:
    monkeypatch.delenv("MINISGL_LINEAR", raising=False)
    names = [k.name for k in candidates("qkv", CPU, FP32, None)]
    if len(names) < 2:
        pytest.skip("only one fp32 kernel works on this host")
    return names


def _quiet() -> float:
    return 0.0


def _busy() -> float:
    return 2.0  # twice as many runnable threads as cores


def test_choice_is_measured_once_then_read_back_the_same(tmp_path: Path, pool_names) -> None:
    first = choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S,
                   timer=_scripted("dense"), load=_quiet)
    assert first.source.startswith("measured")
    assert len(list(tmp_path.glob("linear-*.json"))) == 1
    for load in (_quiet, _busy):
        again = choose(SHAPES, CPU, FP32, cache=tmp_path, timer=_never, load=load)
        assert again.source.startswith("cached")
        assert again.names() == first.names()


def test_a_choice_measured_on_a_busy_machine_is_measured_again_when_quiet(
        tmp_path: Path, pool_names) -> None:
    busy = choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S,
                  timer=_scripted("dense"), load=_busy)
    assert busy.source.startswith("measured")
    still_busy = choose(SHAPES, CPU, FP32, cache=tmp_path, timer=_never, load=_busy)
    assert still_busy.source.startswith("cached")  # no better timings to be had now
    quiet = choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S,
                   timer=_scripted("dense"), load=_quiet)
    assert quiet.source.startswith("measured")
    again = choose(SHAPES, CPU, FP32, cache=tmp_path, timer=_never, load=_quiet)
    assert again.source.startswith("cached") and again.names() == quiet.names()


def test_one_layout_per_layer_with_the_fastest_kernel_per_bucket(tmp_path: Path,
                                                                 pool_names) -> None:
    if "onednn" not in pool_names:
        pytest.skip("oneDNN is not available here")
    # dense wins 1 row by 1%, loses 9x above: the packed layout is kept, and within it the
    # unpadded variant takes the 1-row bucket
    choice = choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S,
                    timer=_scripted("onednn-rows"))
    assert choice.names()["qkv"] == ["onednn-rows"] + ["onednn"] * (len(BUCKETS) - 1)
    assert {k.layout for k in choice.kernels["qkv"]} == {"onednn"}


def test_a_kernel_is_neither_timed_nor_picked_below_the_rows_it_serves(
        tmp_path: Path, monkeypatch, pool_names) -> None:
    if "onednn-rows" not in pool_names:
        pytest.skip("oneDNN is not available here")
    from minisgl_core.kernels.matmul.dense import OneDNN

    # onednn is scripted fastest everywhere, but serves only from 3 rows up
    monkeypatch.setattr(OneDNN, "serves", lambda self, rows: self.name != "onednn" or rows > 2)
    timed: list[tuple[str, int]] = []

    def timer(kernel: Kernel, packed: object, x: torch.Tensor) -> float:
        timed.append((kernel.name, x.shape[0]))
        return 0.5 if kernel.name == "onednn" else 1.0

    choice = choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S, timer=timer)
    assert ("onednn", BUCKETS[0]) not in timed and ("onednn", BUCKETS[1]) in timed
    assert choice.names()["qkv"] == ["onednn-rows"] + ["onednn"] * (len(BUCKETS) - 1)


def test_a_kernel_far_behind_is_not_timed_at_the_prefill_buckets(tmp_path: Path,
                                                                  pool_names) -> None:
    slow, fast = "dense", "dense-hf"  # slow: 4x the others' time at every row count
    if not {slow, fast} <= set(pool_names):
        pytest.skip("no dense kernels here")
    timed: list[tuple[str, int]] = []

    def timer(kernel: Kernel, packed: object, x: torch.Tensor) -> float:
        timed.append((kernel.name, x.shape[0]))
        return x.shape[0] * (4e-3 if kernel.name == slow else 1e-3)

    choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S, timer=timer)
    first = kernel_choice.FIRST_PREFILL_BUCKET
    for b, rows in enumerate(BUCKETS):
        assert ((slow, rows) in timed) == (b < first), rows  # timed at decode's buckets only
        assert (fast, rows) in timed
    body = next(iter(tmp_path.glob("linear-*.json"))).read_text()
    seconds = json.loads(body)["seconds"]["qkv"][slow]
    # taken as growing with the rows from the last bucket it was timed at
    assert seconds == pytest.approx([rows * 4e-3 for rows in BUCKETS])



def test_a_kernel_far_behind_but_flat_in_the_rows_is_still_timed(tmp_path: Path,
                                                                 pool_names) -> None:
    # a kernel dequantizing its weight per call: 4x the other at 32 rows, but the same time at
    # every row count, so at 512 rows it is ahead; the rows' ratio would have said 4x behind
    flat, linear = "dense", "dense-hf"
    if not {flat, linear} <= set(pool_names):
        pytest.skip("no dense kernels here")
    timed: list[tuple[str, int]] = []

    def timer(kernel: Kernel, packed: object, x: torch.Tensor) -> float:
        timed.append((kernel.name, x.shape[0]))
        return 0.128 if kernel.name == flat else x.shape[0] * 1e-3

    choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S, timer=timer)
    assert all((flat, rows) in timed for rows in BUCKETS)
    body = next(iter(tmp_path.glob("linear-*.json"))).read_text()
    assert json.loads(body)["seconds"]["qkv"][flat] == pytest.approx([0.128] * len(BUCKETS))

def test_the_default_models_layers_are_timed_whole_and_larger_ones_trimmed() -> None:
    smollm2 = {"qkv": (960, 576), "gate_up": (3072, 576), "down": (576, 1536)}
    assert all(timed_width(out, inp) == out for out, inp in smollm2.values())
    assert timed_width(49152, 576) == 8192  # its LM head, as before the trim was by weights
    # Qwen3-1.7B: untrimmed, its five shapes ran past the budget at every start
    for out, inp in [(4096, 2048), (12288, 2048), (2048, 6144), (151936, 2048)]:
        width = timed_width(out, inp)
        assert width % 64 == 0 and 64 <= width < out and width * inp <= kernel_choice.MAX_WEIGHTS
    assert timed_width(4096, 10**6) == 64  # never fewer rows than one block


def test_a_wide_layer_runs_its_kernels_on_its_first_rows_only(tmp_path: Path, monkeypatch,
                                                               pool_names) -> None:
    monkeypatch.setattr(kernel_choice, "MAX_WEIGHTS", 128 * 64)
    widths: dict[str, set[int]] = {"qkv": set(), "lm_head": set()}

    def timer(kernel: Kernel, packed: object, x: torch.Tensor) -> float:
        out = kernel.run(packed, x, None, None).shape[-1]
        widths["lm_head" if out != 96 else "qkv"].add(out)
        return 1.0

    choice = choose({"qkv": (96, 64), "lm_head": (5000, 64)}, CPU, FP32, cache=tmp_path,
                    budget_s=SCRIPTED_BUDGET_S, timer=timer)
    assert widths == {"qkv": {96}, "lm_head": {128}}
    assert choice.source.startswith("measured") and "partly" not in choice.source


def test_a_different_cache_key_measures_again(tmp_path: Path, pool_names) -> None:
    choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S, timer=_scripted("dense"))
    other = choose({"qkv": (96, 32)}, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S,
                   timer=_scripted("dense"))
    assert other.source.startswith("measured")
    assert len(list(tmp_path.glob("linear-*.json"))) == 2


def test_other_native_kernels_measure_again(tmp_path: Path, monkeypatch, pool_names) -> None:
    # the cached times are of the kernels' code: a library built from other sources re-times them
    choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S, timer=_scripted("dense"))
    monkeypatch.setattr(library, "source_digest", lambda: "other sources")
    again = choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S,
                   timer=_scripted("dense"))
    assert again.source.startswith("measured")
    assert len(list(tmp_path.glob("linear-*.json"))) == 2


def test_minisgl_linear_forces_one_kernel(tmp_path: Path, monkeypatch, pool_names) -> None:
    monkeypatch.setenv("MINISGL_LINEAR", "dense")
    choice = choose(SHAPES, CPU, FP32, cache=tmp_path, timer=_never)
    assert all(n == "dense" for names in choice.names().values() for n in names)
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("MINISGL_LINEAR", "int8")
    with pytest.raises(RuntimeError, match="needs --quantization int8"):
        choose(SHAPES, CPU, FP32, cache=tmp_path)
    monkeypatch.setenv("MINISGL_LINEAR", "fastest")
    with pytest.raises(RuntimeError, match="names no kernel"):
        choose(SHAPES, CPU, FP32, cache=tmp_path)


def test_a_corrupt_cache_file_is_measured_over(tmp_path: Path, pool_names) -> None:
    choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S, timer=_scripted("dense"))
    (path,) = tmp_path.glob("linear-*.json")
    path.write_text("{not json")
    again = choose(SHAPES, CPU, FP32, cache=tmp_path, budget_s=SCRIPTED_BUDGET_S,
                   timer=_scripted("dense"))
    assert again.source.startswith("measured")


def test_a_shared_role_gets_only_kernels_that_keep_the_weight_as_it_is(tmp_path: Path,
                                                                       pool_names) -> None:
    if "onednn" not in pool_names:
        pytest.skip("oneDNN is not available here")

    def packed_layout_wins(kernel: Kernel, packed: object, x: torch.Tensor) -> float:
        return 1.0 if kernel.layout == "onednn" else 2.0

    shapes = {**SHAPES, "lm_head": (96, 64)}
    choice = choose(shapes, CPU, FP32, shared={"lm_head"}, cache=tmp_path,
                    timer=packed_layout_wins, load=_quiet)
    assert all(k.shares_weight for k in choice.kernels["lm_head"])
    assert not all(k.shares_weight for k in choice.kernels["qkv"])  # onednn packs a copy


def test_a_tied_lm_head_is_the_embedding_table_itself(make_engine, monkeypatch) -> None:
    monkeypatch.delenv("MINISGL_LINEAR", raising=False)
    model = make_engine("llama").model  # the tiny llama ties its LM head to the embeddings
    assert model.cfg.tie_word_embeddings and model.lm_head is not None
    assert model.lm_head.weight.data_ptr() == model.embed.data_ptr()  # one copy, not two
    h = torch.randn(3, model.cfg.hidden_size)
    torch.testing.assert_close(model.lm_head(h), h @ model.embed.t())
    monkeypatch.setenv("MINISGL_LINEAR", "dense")  # a forced kernel may pack its own copy
    forced = make_engine("llama").model
    assert forced.lm_head is not None and forced.lm_head.backend == "dense"
    torch.testing.assert_close(forced.lm_head(h), h @ forced.embed.t())
