"""Weights and KV pages moved into huge-page memory: the same values, the same sums, views kept."""

from __future__ import annotations

import mmap

import pytest
import torch

from minisgl_core.engine import huge_pages
from minisgl_core.kernels import Linear, model_linears

# where the host gives no huge pages nothing is moved (the last two tests)
moves = pytest.mark.skipif(huge_pages.buffer(1) is None, reason="no huge pages on this host")


def _inside(t: torch.Tensor, place: torch.Tensor) -> bool:
    start = place.data_ptr()
    return start <= t.data_ptr() and t.data_ptr() + t.nbytes <= start + place.nbytes


@moves
def test_a_buffer_is_zeroed_writable_and_starts_on_a_huge_page() -> None:
    place = huge_pages.buffer(3 * huge_pages.HUGE_PAGE + 5)
    assert place is not None and place.dtype == torch.uint8
    assert place.numel() == 3 * huge_pages.HUGE_PAGE + 5
    assert place.data_ptr() % huge_pages.HUGE_PAGE == 0
    assert int(place.count_nonzero()) == 0
    place.fill_(7)  # every byte written: the kernel now says how much of it is huge pages
    assert 0 <= huge_pages.huge_bytes(place) <= place.nbytes
    kv = huge_pages.empty((3, 5, 7), torch.bfloat16, "cpu")
    assert kv.shape == (3, 5, 7) and kv.dtype == torch.bfloat16 and kv.is_contiguous()
    assert kv.data_ptr() % huge_pages.HUGE_PAGE == 0 and not kv.any()
    assert huge_pages.empty((2, 3), torch.float32, "meta").device.type == "meta"


@moves
def test_moved_tensors_keep_values_views_and_an_empty_tensor_s_null() -> None:
    base = torch.randn(1000, 33)
    view = base[7:, 3:]  # a view of base: stays one, at the same offset
    as_bytes = base.view(torch.uint8)  # another dtype over the same storage
    with torch.inference_mode():
        frozen = torch.arange(77, dtype=torch.int8)  # an inference tensor
    half = torch.randn(5, 9).half()
    empty = torch.empty(0, dtype=torch.float16)  # an int4 layout's absent min: a NULL pointer
    before = [t.clone() for t in (base, view, frozen, half)]
    offset = view.data_ptr() - base.data_ptr()
    place = huge_pages.move([base, view, as_bytes, frozen, half, empty, base,
                             torch.empty(3, device="meta")])
    assert place is not None and place.data_ptr() % huge_pages.HUGE_PAGE == 0
    for t, old in zip((base, view, frozen, half), before, strict=True):
        assert _inside(t, place) and torch.equal(t, old)
    assert base.data_ptr() % 64 == frozen.data_ptr() % 64 == half.data_ptr() % 64 == 0
    assert view.data_ptr() - base.data_ptr() == offset
    assert as_bytes.data_ptr() == base.data_ptr()
    assert empty.data_ptr() == 0
    assert huge_pages.move([empty]) is None  # nothing with bytes: nothing moved


@moves
@pytest.mark.parametrize("kernel", ["dense", "onednn", "int8-wo-panels", "int4-panels",
                                    "int4-copy-panels", "int8"])
def test_a_linear_gives_the_same_sums_from_its_moved_weight(kernel: str) -> None:
    from minisgl_core.kernels import all_kernels

    if not all_kernels()[kernel].available(torch.device("cpu"), torch.float32):
        pytest.skip(f"{kernel} does not run here")
    torch.manual_seed(0)
    lin = Linear(torch.randn(96, 64), torch.randn(96), kernel)
    x = torch.randn(3, 64)
    want = lin(x)
    place = huge_pages.move(lin.tensors())  # a library's own layout (oneDNN's) stays where it is
    assert place is not None
    assert all(_inside(t, place) for t in lin.tensors() if t.layout == torch.strided and t.numel())
    assert torch.equal(lin(x), want)  # the C++ operators' registry reads the new place too


@moves
def test_the_engine_keeps_its_weights_and_kv_pages_in_huge_page_memory(make_engine, drain,
                                                                      tokens_of) -> None:
    from minisgl_core.wire.schema import SamplingParams

    engine = make_engine("qwen3", quantization="int4", dtype="bfloat16")
    place = engine.weight_place
    assert place is not None and place.data_ptr() % huge_pages.HUGE_PAGE == 0
    moved = [t for lin in model_linears(engine.model) for t in lin.tensors()
             if t.layout == torch.strided and t.numel()]
    assert moved and all(_inside(t, place) for t in moved)
    assert engine.kv.k.data_ptr() % huge_pages.HUGE_PAGE == 0
    facts = engine.info()
    assert 0 <= int(facts["weight_huge_page_bytes"]) <= place.nbytes
    engine.add_request("r", [5, 6, 7, 8], SamplingParams(max_tokens=8, temperature=0.0))
    assert len(tokens_of(drain(engine)["r"])) == 8


def test_minisgl_huge_pages_0_keeps_torch_s_own_allocations(monkeypatch) -> None:
    monkeypatch.setenv(huge_pages.OPT_OUT, "0")
    weight = torch.randn(64, 64)
    where = weight.data_ptr()
    assert huge_pages.buffer(1 << 20) is None
    assert huge_pages.move([weight]) is None and weight.data_ptr() == where
    assert huge_pages.empty((4, 4), torch.float32, "cpu").shape == (4, 4)


def test_a_host_whose_setting_is_never_moves_nothing(monkeypatch, tmp_path) -> None:
    setting = tmp_path / "enabled"
    setting.write_text("always madvise [never]\n")
    monkeypatch.setattr(huge_pages, "_SETTING", str(setting))
    monkeypatch.delenv(huge_pages.OPT_OUT, raising=False)
    huge_pages._host_gives_them.cache_clear()
    try:
        weight = torch.randn(64, 64)
        assert huge_pages.buffer(1 << 20) is None and huge_pages.move([weight]) is None
        setting.write_text("always [madvise] never\n")
        huge_pages._host_gives_them.cache_clear()
        assert huge_pages.buffer(1 << 20) is not None or not hasattr(mmap, "MADV_HUGEPAGE")
    finally:
        huge_pages._host_gives_them.cache_clear()
