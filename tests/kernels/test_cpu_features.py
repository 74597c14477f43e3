"""MINISGL_CPU_FEATURES: one mask narrows every CPU-dependent choice, in Python and in C."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from minisgl_core.kernels import cpu_features as cf


def test_a_feature_implies_those_below_it() -> None:
    assert cf.parse_mask("avx2") == {"avx2"}
    assert cf.parse_mask("avx512_bf16") == {"avx2", "avx512", "avx512_bf16"}
    assert cf.parse_mask("amx") == set(cf.FEATURES)
    assert cf.parse_mask(" avx512-bf16 ") == {"avx2", "avx512", "avx512_vnni", "avx512_bf16"}
    assert cf.parse_mask("") is None


def test_an_unknown_feature_is_refused_with_a_suggestion() -> None:
    with pytest.raises(ValueError, match='unknown feature .avx3.; did you mean "avx2"'):
        cf.parse_mask("avx2,avx3")


def test_a_mask_never_adds_what_the_cpu_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cf.ENV, "amx")
    assert cf.features() == cf.host_features()
    monkeypatch.setenv(cf.ENV, "avx2")
    assert cf.features() == cf.host_features() & {"avx2"}
    assert not cf.has("avx512_bf16")
    with pytest.raises(KeyError):
        cf.has("sse9")


def test_masked_env_narrows_torch_and_writes_the_canonical_mask() -> None:
    env = cf.masked_env("avx512-bf16", {})
    assert env == {cf.ENV: "avx2,avx512,avx512_vnni,avx512_bf16", "ATEN_CPU_CAPABILITY": "avx512",
                   "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
    assert cf.masked_env("avx2", {})["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert cf.masked_env("", {cf.ENV: "avx2"}) == {}  # no mask: the host as it is


PROBE = """
import json
from minisgl_core.kernels import bf16_fast
from minisgl_core.kernels.matmul import w8a8
from minisgl_core.kernels.native import library as native
lib = native.library()
print(json.dumps({"isa": native.best_isa(), "amx": lib is not None and bool(lib.wo_has_amx()),
                  "bf16_c": lib is not None and bool(lib.wo_has_bf16()),
                  "bf16": bf16_fast(), "vnni": w8a8._has_vnni()}))
"""


def probe(mask: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE], env=cf.masked_env(mask),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_native_library_and_the_python_choices_follow_the_mask() -> None:
    avx2 = probe("avx2")
    assert avx2 == {"isa": min(avx2["isa"], 1), "amx": False, "bf16_c": False, "bf16": False,
                    "vnni": avx2["vnni"]}
    assert avx2["isa"] == (1 if "avx2" in cf.host_features() else 0)
    if "avx512_bf16" in cf.host_features():  # this host can act an AVX-512 host without AMX
        zen4 = probe("avx512-bf16")
        assert (zen4["isa"], zen4["amx"], zen4["bf16_c"], zen4["bf16"]) == (2, False, True, True)
