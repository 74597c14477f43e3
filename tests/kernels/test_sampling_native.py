"""The sampler's native passes (csrc/sampling.c) against torch: the same argmax, the same kept
tokens for top-k / top-p / min-p, the same draw at the same u, frequencies that follow the
probabilities, on every ISA this host runs."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.kernels import sampling
from minisgl_core.kernels.native import library as native

pytestmark = pytest.mark.skipif(native.library() is None,
                                reason=f"native library unavailable: {native.failure()}")
ISAS = [i for i in native.ISAS.values() if i <= native.best_isa()]
# (temperature, top_k, top_p, min_p): none, each filter alone, all together, a cut within ties
SETTINGS = [(1.0, 0, 1.0, 0.0), (0.7, 0, 0.9, 0.0), (1.3, 0, 0.5, 0.0), (0.8, 5, 1.0, 0.0),
            (1.0, 40, 1.0, 0.0), (1.0, 0, 1.0, 0.1), (0.6, 20, 0.95, 0.02), (2.0, 3, 0.99, 0.0)]


def _logits(n: int, v: int, seed: int, peaked: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, v, generator=g) * (4.0 if peaked else 0.5)  # [N, V]
    if peaked:  # a few tokens far ahead of a long tail, as a language model's logits are
        x[:, torch.randint(0, v, (n, 6), generator=g)[0]] += 12.0
    return x


def _kept(logits: torch.Tensor, setting: tuple[float, int, float, float], isa: int,
          grid: int) -> torch.Tensor:
    """Which tokens the native draw picks over a grid of u in [0, 1): ``[N, V]`` bool."""
    n, v = logits.shape
    t, k, p, m = setting
    seen = torch.zeros(n, v, dtype=torch.bool)
    for j in range(grid):
        u = torch.full((n,), (j + 0.5) / grid, dtype=torch.float64)
        tokens = sampling.draw(logits, [t] * n, [k] * n, [p] * n, [m] * n, u, isa=isa)
        assert tokens is not None
        seen[torch.arange(n), torch.tensor(tokens)] = True
    return seen


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (1, 49152), (3, 1000), (32, 4099)])
def test_argmax_is_torchs(isa: int, dtype: torch.dtype, shape: tuple[int, int]) -> None:
    x = _logits(*shape, seed=shape[1], peaked=False).to(dtype)
    assert sampling.argmax(x, isa=isa) == x.max(-1).indices.tolist()
    ties = torch.zeros(shape, dtype=dtype)  # every value equal: the first one
    ties[:, shape[1] // 2:] = 1.0
    assert sampling.argmax(ties, isa=isa) == ties.max(-1).indices.tolist()


@pytest.mark.parametrize("isa", ISAS)
def test_argmax_of_masked_and_signed_zero_rows(isa: int) -> None:
    x = torch.full((3, 70), float("-inf"))
    x[1, 9] = 0.0
    x[1, 5] = -0.0
    x[2, 69] = -3.0
    for dtype in (torch.float32, torch.bfloat16):
        assert sampling.argmax(x.to(dtype), isa=isa) == [0, 5, 69]


@pytest.mark.parametrize("isa", ISAS)
def test_argmax_passes_over_nans(isa: int) -> None:
    """NaNs are never the maximum (torch's max would return one); a row of NaNs gives 0. The
    maximum in the last, partial block of the search, and in a later block than a NaN."""
    x = torch.full((3, 131), float("nan"))
    x[0, 1], x[0, 130] = 1.0, 3.0
    x[1, 64], x[1, 100] = -2.0, -2.0
    for dtype in (torch.float32, torch.bfloat16):
        assert sampling.argmax(x.to(dtype), isa=isa) == [130, 64, 0]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("peaked", [True, False])
def test_draw_matches_the_sorted_inverse_cdf(isa: int, setting: tuple[float, int, float, float],
                                             peaked: bool) -> None:
    """At the same u, the native draw and torch's (probabilities sorted, cut, cumsum) agree."""
    n, v = 32, 5003
    x = _logits(n, v, seed=7, peaked=peaked)
    t, k, p, m = setting
    probs = sampling.probabilities(x, [t] * n, [k] * n, [p] * n, [m] * n)
    for seed in range(4):
        u = torch.rand(n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        native_tokens = sampling.draw(x, [t] * n, [k] * n, [p] * n, [m] * n, u, isa=isa)
        assert native_tokens is not None
        torch_tokens = sampling.draw_from(probs, u)
        # equal but where u lies within rounding of a boundary between two tokens
        assert sum(a != b for a, b in zip(native_tokens, torch_tokens, strict=True)) <= 1
        assert all(probs[i, tok] > 0 for i, tok in enumerate(native_tokens))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("setting", SETTINGS[1:])
def test_filters_keep_what_sorting_keeps(isa: int,
                                         setting: tuple[float, int, float, float]) -> None:
    """Over a fine grid of u every token torch keeps with mass above the grid step is drawn, and
    no token it cuts ever is."""
    n, v, grid = 4, 3001, 4000
    x = _logits(n, v, seed=3, peaked=True)
    t, k, p, m = setting
    probs = sampling.probabilities(x, [t] * n, [k] * n, [p] * n, [m] * n)
    norm = probs / probs.sum(-1, keepdim=True)
    seen = _kept(x, setting, isa, grid)
    assert not (seen & (probs == 0)).any()
    assert (seen | (norm < 2.0 / grid)).all()


@pytest.mark.parametrize("isa", ISAS)
def test_ties_at_the_top_k_cut_keep_the_lower_ids(isa: int) -> None:
    x = torch.zeros(1, 64)
    x[0, [3, 9, 17, 40]] = 2.0  # four equal tokens ahead, top-k 2 keeps ids 3 and 9
    seen = _kept(x, (1.0, 2, 1.0, 0.0), isa, grid=64)
    assert seen[0].nonzero().flatten().tolist() == [3, 9]


@pytest.mark.parametrize("isa", ISAS)
def test_draw_frequencies_follow_the_probabilities(isa: int) -> None:
    """Random u: each token's share of 40,000 draws is its probability (within 5 sigma)."""
    v, n, rounds = 12, 400, 100
    x = torch.linspace(-2.0, 1.5, v).repeat(n, 1)  # [N, V], every row alike
    probs = torch.softmax(x[0] / 0.9, -1)
    counts = torch.zeros(v)
    g = torch.Generator().manual_seed(5)
    for _ in range(rounds):
        u = torch.rand(n, dtype=torch.float64, generator=g)
        tokens = sampling.draw(x, [0.9] * n, [0] * n, [1.0] * n, [0.0] * n, u, isa=isa)
        assert tokens is not None
        counts += torch.bincount(torch.tensor(tokens), minlength=v)
    total = n * rounds
    sigma = (probs * (1 - probs) / total).sqrt()
    assert ((counts / total - probs).abs() <= 5 * sigma + 1e-4).all()


@pytest.mark.parametrize("isa", ISAS)
def test_extreme_rows(isa: int) -> None:
    """A row of one finite logit among -inf draws it at any u; u next to 1 draws a kept token; a
    vocabulary of one draws token 0."""
    x = torch.full((2, 50), float("-inf"))
    x[0, 33] = 1.0
    x[1] = torch.linspace(0.0, 1.0, 50)
    for u in (0.0, 0.5, 1.0 - 2.0**-53):
        tokens = sampling.draw(x, [1.0, 1.0], [0, 3], [1.0, 1.0], [0.0, 0.0],
                               torch.tensor([u, u], dtype=torch.float64), isa=isa)
        assert tokens is not None and tokens[0] == 33 and tokens[1] in (47, 48, 49)
    one = sampling.draw(torch.zeros(1, 1), [1.0], [0], [0.5], [0.0],
                        torch.tensor([0.7], dtype=torch.float64), isa=isa)
    assert one == [0]


def test_torch_path_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINISGL_SAMPLING", "torch")
    x = _logits(2, 100, seed=1, peaked=True)
    assert sampling.draw(x, [1.0, 1.0], [0, 0], [1.0, 1.0], [0.0, 0.0],
                         torch.rand(2, dtype=torch.float64)) is None
    assert sampling.argmax(x) == x.max(-1).indices.tolist()


def test_a_samplers_argmax_is_chosen_once_for_its_device(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _logits(3, 1000, seed=4, peaked=False)
    x[1, 10] = x[1, 20] = x[1].max() + 1  # ties: the first of equal ones
    want = x.max(-1).indices.tolist()
    native_pass = sampling.argmax_on(torch.device("cpu"))
    torchs = sampling.argmax_on(torch.device("meta"))  # off the CPU: torch's
    assert (native_pass is not torchs) == (native.library() is not None)
    for dtype in (torch.float32, torch.bfloat16):
        assert native_pass(x.to(dtype)) == x.to(dtype).max(-1).indices.tolist()
    assert native_pass(x) == want and native_pass(x[:, ::2]) == x[:, ::2].max(-1).indices.tolist()
    assert native_pass(x.double()) == want  # a dtype the pass does not take: torch's
    monkeypatch.setenv("MINISGL_SAMPLING", "torch")
    switched_off = sampling.argmax_on(torch.device("cpu"))
    assert switched_off is torchs and switched_off(x) == want
