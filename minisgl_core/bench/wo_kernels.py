"""The weight-only kernels alone, as a decode step runs them: every matmul of a model's layers
(q/k/v, o, gate/up, down; distinct weights per layer, so nothing stays in cache) at a few row
counts, as GB/s of packed weight streamed and a share of the host's read bandwidth measured in
the same run. The LM head and everything that is not a matmul are left out (``bench offline``
times whole steps)."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from minisgl_core.bench.options import JsonOpt, fail

if TYPE_CHECKING:
    from minisgl_core.kernels.matmul.weight_only import Int4Weight, Int8Weight

    Packed = list[list[Int8Weight | Int4Weight]]  # [layer][matmul]

SCHEMES = ("int8-wo", "int4")


def pack_layers(scheme: str, layers: int, shapes: list[tuple[int, int]]
                ) -> tuple[Packed, int]:
    """Random weights of every layer's matmuls packed as ``scheme``, and their packed bytes."""
    import torch

    from minisgl_core.kernels.matmul.weight_only import WeightOnlyNative

    kernel = WeightOnlyNative(scheme)
    gen = torch.Generator().manual_seed(0)
    packed = [[kernel.pack(torch.randn(*s, generator=gen) * 0.02) for s in shapes]
              for _ in range(layers)]
    return packed, sum(kernel.nbytes(p) for layer in packed for p in layer)


def stream_seconds(packed: Packed, shapes: list[tuple[int, int]], rows: int, isa: int | None,
                   repeat: int, inputs: str = "fp32") -> float:
    """The best of ``repeat`` passes over every packed layer with ``rows`` input rows: fp32 or
    bf16 ones on the native kernel, or bf16 ones on the AMX kernel (``bf16-amx``) or the
    AVX512-BF16 GEMM (``bf16-gemm``)."""
    import torch

    from minisgl_core.kernels.matmul.weight_only import amx_matmul, native_matmul
    from minisgl_core.kernels.matmul.wo_gemm import gemm_matmul

    matmul = {"bf16-amx": lambda x, p, isa: amx_matmul(x, p),
              "bf16-gemm": lambda x, p, isa: gemm_matmul(x, p)}.get(inputs, native_matmul)
    dtype = torch.float32 if inputs == "fp32" else torch.bfloat16
    xs = [torch.randn(rows, s[1]).to(dtype) for s in shapes]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for layer in packed:
            for x, p in zip(xs, layer, strict=True):
                matmul(x, p, isa)
        best = min(best, time.perf_counter() - start)
    return best


def main(model: str | None, rows: list[int], threads: int | None, isa: str | None,
         repeat: int, json_lines: bool, bf16: bool = False) -> int:
    """Print one line (or JSON object) per scheme, input dtype and row count; 1 when the
    library is absent or ``isa`` is wider than this CPU runs."""
    import torch

    from minisgl_core.bench.ceilings import layer_matmuls, measure
    from minisgl_core.kernels.native import library as native
    from minisgl_core.plugin.model_lookup import resolve

    if native.library() is None:
        print(f"bench kernels: the native library is not available: {native.failure()}",
              file=sys.stderr)
        return 1
    if threads:
        torch.set_num_threads(threads)
    widest = {v: k for k, v in native.ISAS.items()}[native.best_isa()]
    if isa is not None and native.ISAS[isa] > native.ISAS[widest]:
        print(f"bench kernels: this CPU runs {widest} at most, not {isa}", file=sys.stderr)
        return 1
    path = isa or widest
    resolved = resolve(model)
    config, by_role = layer_matmuls(resolved.path)
    layers, shapes = config.num_layers, list(by_role.values())
    ceilings = measure()
    lib = native.library()
    kinds = ["fp32", *(("bf16",) if bf16 else ()),
             *(("bf16-amx",) if bf16 and lib.wo_has_amx() else ()),
             *(("bf16-gemm",) if bf16 and lib.wo_has_bf16() else ())]
    if not json_lines:
        print(f"{resolved.path}: {layers} layers of {shapes} (outputs, inputs), path {path}, "
              f"{torch.get_num_threads()} threads, best of {repeat}")
        print(ceilings.line())
    for scheme in SCHEMES:
        packed, nbytes = pack_layers(scheme, layers, shapes)
        for inputs in kinds:
            for n in rows:
                seconds = stream_seconds(packed, shapes, n, native.ISAS[path], repeat, inputs)
                gb_s = nbytes / seconds / 1e9
                # unrounded: on a slow host or a tiny model a rounded rate says little
                row: dict[str, Any] = {"scheme": scheme, "inputs": inputs, "rows": n,
                                       "path": path, "bytes": nbytes, "ms": seconds * 1e3,
                                       "gb_s": gb_s, "share_of_read": gb_s / ceilings.read_gb_s,
                                       "read_gb_s": ceilings.read_gb_s}
                print(json.dumps(row) if json_lines else
                      f"{scheme:8} {inputs:8} rows {n:3}: {seconds * 1e3:7.2f} ms, "
                      f"{gb_s:5.1f} GB/s = {gb_s / ceilings.read_gb_s:4.0%} of the read bandwidth")
    return 0


def kernels_command(
    model: Annotated[str | None, typer.Option(help="Model directory or name (its shapes).")] = None,
    rows: Annotated[list[int] | None, typer.Option(help="Input rows (repeat).")] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    isa: Annotated[str | None, typer.Option(
        help="c, avx2 or avx512 (default: the widest this CPU runs).")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per case; the best counts.")] = 5,
    bf16: Annotated[bool, typer.Option(
        help="Also bf16 inputs (int4 on AVX512-BF16's dot product where the CPU has it; "
             "the AMX kernels too, as bf16-amx, where it has AMX; the GEMM on weight panels "
             "unpacked into bf16, as bf16-gemm, where it has AVX512-BF16).")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """The native weight-only kernels alone on a model's layer shapes: GB/s of packed weight
    read, against the host's read bandwidth."""
    if isa not in (None, "c", "avx2", "avx512"):
        raise fail(f'--isa must be c, avx2 or avx512, got "{isa}"')
    raise typer.Exit(main(model=model, rows=rows or [1, 2, 4, 8], threads=threads, isa=isa,
                          repeat=repeat, json_lines=json_, bf16=bf16))
