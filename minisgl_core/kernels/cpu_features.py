"""The CPU features the kernels may use: the host's, narrowed by ``MINISGL_CPU_FEATURES``.

Every choice that depends on the CPU (the kernels' candidates, ``--dtype auto``, the native
library's instruction paths) asks this module, so one variable runs the engine as if on a host
with fewer features: ``MINISGL_CPU_FEATURES=avx2`` is an AVX2-only host, ``=avx512_bf16`` an
AVX-512 host with AVX512-BF16 and no AMX. A feature implies the ones below it (``IMPLIES``); a
mask never adds what the CPU lacks. ``masked_env`` also narrows torch's own dispatch (ATen's
vector code and oneDNN) in the processes it starts. No torch here: the CLI's help path reads it.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from collections.abc import Iterable, Mapping

ENV = "MINISGL_CPU_FEATURES"
# feature -> the /proc/cpuinfo flags it needs (all of them); in order, narrowest first
FEATURES: Mapping[str, tuple[str, ...]] = {
    "avx2": ("avx2", "fma"),
    "avx512": ("avx512f", "avx512bw", "avx512vl"),
    "avx512_vnni": ("avx512_vnni",),
    "avx512_bf16": ("avx512_bf16",),
    "amx": ("amx_tile", "amx_bf16", "amx_int8"),
}
IMPLIES: Mapping[str, tuple[str, ...]] = {
    "avx512": ("avx2",), "avx512_vnni": ("avx512",), "avx512_bf16": ("avx512",),
    "amx": ("avx512_bf16", "avx512_vnni"),
}
# The host kinds the engine is tested on, as masks (README.md, "Speed on the host it runs on")
HOST_KINDS: Mapping[str, str] = {
    "avx2": "avx2",  # AMD EPYC before Zen 4: bf16 emulated
    "avx512-bf16": "avx512_vnni,avx512_bf16",  # AMD Zen 4/5, Intel without AMX
    "amx": "amx",  # Intel Xeon from Sapphire Rapids
}
# torch's own knobs for the same ceiling (read when ATen / oneDNN first dispatch)
_ATEN = {"avx2": "avx2", "avx512": "avx512"}
_ONEDNN = {"avx2": "AVX2", "avx512": "AVX512_CORE", "avx512_vnni": "AVX512_CORE_VNNI",
           "avx512_bf16": "AVX512_CORE_BF16", "amx": "AVX512_CORE_AMX"}


@functools.cache
def host_flags() -> frozenset[str]:
    """The CPU's flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def closure(features: Iterable[str]) -> frozenset[str]:
    """``features`` with every feature they imply."""
    out: set[str] = set()
    todo = list(features)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(IMPLIES.get(name, ()))
    return frozenset(out)


def parse_mask(text: str) -> frozenset[str] | None:
    """A mask's features, implied ones included (None: no mask); ValueError naming a bad one."""
    names = [n.strip().lower() for n in text.replace(" ", ",").split(",") if n.strip()]
    if not names:
        return None
    for name in list(names):
        if name in FEATURES:
            continue
        if name in HOST_KINDS:  # a host kind's name stands for its mask
            names += HOST_KINDS[name].split(",")
        else:
            from minisgl_core.did_you_mean import suggest

            raise ValueError(f"{ENV}: unknown feature {name!r};"
                             f"{suggest(name, [*FEATURES, *HOST_KINDS])} (known: "
                             f"{', '.join(FEATURES)}; host kinds: {', '.join(HOST_KINDS)})")
    return closure(n for n in names if n in FEATURES)


def host_features() -> frozenset[str]:
    """The features this CPU has, unmasked."""
    flags = host_flags()
    return frozenset(f for f, need in FEATURES.items() if all(n in flags for n in need))


def features() -> frozenset[str]:
    """The features the kernels may use here: the host's, narrowed by ``MINISGL_CPU_FEATURES``."""
    mask = parse_mask(os.environ.get(ENV, ""))
    host = host_features()
    return host if mask is None else host & mask


def has(feature: str) -> bool:
    """Whether the kernels may use ``feature`` (a name of ``FEATURES``)."""
    if feature not in FEATURES:
        raise KeyError(feature)
    return feature in features()


def describe() -> str:
    """One line for logs and cache keys: the features in use, and the mask if one is set."""
    names = ",".join(f for f in FEATURES if f in features()) or "none"
    mask = os.environ.get(ENV, "").strip()
    return f"{names} (masked by {ENV}={mask})" if mask else names


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def canonical(allowed: Iterable[str]) -> str:
    """The mask's text as the native library reads it: every feature named, in FEATURES order."""
    return ",".join(f for f in FEATURES if f in set(allowed))


def export_mask() -> None:
    """Write ``MINISGL_CPU_FEATURES`` in canonical form, for the native library (which reads the
    variable itself and knows neither host kinds nor implied features); call before loading it."""
    allowed = parse_mask(os.environ.get(ENV, ""))
    if allowed is not None:
        os.environ[ENV] = canonical(allowed)


def masked_env(mask: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment that runs minisgl (and torch) as on a host with at most ``mask``."""
    env = dict(os.environ if base is None else base)
    allowed = parse_mask(mask)
    env.pop(ENV, None)
    if allowed is not None:
        env[ENV] = canonical(allowed)
        widest = [f for f in FEATURES if f in allowed]
        aten = [_ATEN[f] for f in widest if f in _ATEN]
        env["ATEN_CPU_CAPABILITY"] = aten[-1] if aten else "default"
        env["ONEDNN_MAX_CPU_ISA"] = _ONEDNN[widest[-1]] if widest else "SSE41"
    return env


def vector_code_kind() -> str:
    """The kind of code this process runs and compiles (``avx2-avx2`` on an AVX2-only host):
    ATen's CPU capability, which inductor's generated vector code follows
    (``ATEN_CPU_CAPABILITY`` narrows it), then the features the kernels may use. Graphs compiled
    where ATen ran AVX-512 and loaded from inductor's cache where it ran AVX2 made token 0 at
    every step, so compiled graphs are cached apart by it (imports torch)."""
    import torch

    return "-".join([torch.backends.cpu.get_cpu_capability().lower(),
                     *canonical(features()).split(",")])


def kinds_below_host() -> list[str]:
    """The host kinds a mask can run here: those with fewer features than this CPU."""
    host = host_features()
    return [kind for kind, mask in HOST_KINDS.items()
            if (parse_mask(mask) or frozenset()) < host]


def main(argv: list[str]) -> int:
    """``python -m minisgl_core.kernels.cpu_features``: what this host has; ``kinds-below``: the
    host kinds a mask can run here; ``exec KIND-OR-MASK COMMAND...``: run a command as on it."""
    if argv[:1] == ["kinds-below"]:
        print(" ".join(kinds_below_host()))
        return 0
    if argv[:1] == ["exec"] and len(argv) >= 3:
        os.execvpe(argv[2], argv[2:], masked_env(argv[1]))
    print(f"cpu: {cpu_model()}\nfeatures: {describe()}\nhost kinds a mask can run here: "
          f"{' '.join(kinds_below_host()) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
