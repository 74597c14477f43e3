"""A Llama-family decoder-only LM in plain torch (Llama, Qwen2, Qwen3 differ only in flags).

Weights are fused at load time: q/k/v into one matrix and gate/up into another, so each layer runs
four matmuls, each through a ``Linear`` whose kernel and weight layout were measured fastest on this
host for the model's shapes (kernels/matmul/choice.py), int8 ones under
``quantization="int8"`` (w8a8.py).
With tensor parallelism (parallel.py) each rank loads only its KV-head groups and MLP columns, and
all-reduces the partial outputs of o_proj and down_proj; bias and residual are added on rank 0.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from minisgl_core.engine.attention import AttentionMetadata, Workspace, paged_attention
from minisgl_core.engine.config import ModelConfig
from minisgl_core.engine.kv_cache import KVPool
from minisgl_core.engine.parallel import Shard, TensorParallel, shard
from minisgl_core.engine.weights import Checkpoint
from minisgl_core.kernels import Choice, Linear, elementwise, invariant

log = logging.getLogger(__name__)

@dataclass
class Layer:
    """One decoder layer's (fused, transposed) weights; biases are None when absent."""

    ln_attn: torch.Tensor
    ln_mlp: torch.Tensor
    qkv: Linear  # -> [T, (Hq + 2 Hkv) * D] (this rank's heads under tensor parallelism)
    o: Linear
    gate_up: Linear  # -> [T, 2 I]
    down: Linear
    qk_norm: torch.Tensor | None  # [Hq + Hkv, D]: Qwen3's per-head q and k RMSNorm weights
    # ln_attn and ln_mlp in fp32, where rms_norm multiplies by them (None: F.rms_norm's own)
    ln_attn32: torch.Tensor | None
    ln_mlp32: torch.Tensor | None


@functools.cache
def _norm_scalars(width: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``width`` and ``eps`` as fp32 scalar tensors: a Python number in an op becomes a new
    tensor at every call, and both round to fp32 the same way."""
    return torch.tensor(float(width)), torch.tensor(eps, dtype=torch.float32)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, weight32: torch.Tensor | None,
             eps: float) -> torch.Tensor:
    """``F.rms_norm(x, (H,), weight, eps)`` of ``x [T, H]`` in fewer ops.

    torch's CPU rms_norm is a composite that dispatches 34 ops at bf16 (fp32 copies of x and of
    the weight, each Python scalar made a tensor, mean as sum and divide). Given the weight
    already in fp32 (``weight32``) this runs the same fp32 arithmetic (sum of squares, / H,
    + eps, rsqrt, x * r * weight, one rounding to x's dtype) in one native pass
    (kernels/elementwise.py), or where the library does not run in 16 torch ops in torch's
    order (the same bits). Inside a compiled graph (or without ``weight32``) torch's own:
    inductor fuses it there, and the graph stays what it was.
    """
    if weight32 is None or torch.compiler.is_compiling():
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    y = elementwise.rms_norm(x, weight32, eps)
    if y is not None:
        return y
    width, eps32 = _norm_scalars(x.shape[-1], eps)
    x32 = x.float()  # x itself when already fp32: then not written in place
    r = (x32 * x32).sum(-1, keepdim=True).div_(width).add_(eps32).rsqrt_()  # [T, 1]
    y = x32 * r if x32 is x else x32.mul_(r)
    return y.mul_(weight32).to(x.dtype)


def rotary(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotary embedding of ``qk [T, H, D]`` with ``cos``, ``sin [T, 1, D]`` (sin's first
    half negated): one native pass in an eager step, torch's ops in a compiled graph."""
    if not torch.compiler.is_compiling():
        y = elementwise.rope(qk, cos, sin)
        if y is not None:
            return y
    half = qk.shape[-1] // 2
    return qk * cos + torch.cat((qk[..., half:], qk[..., :half]), -1) * sin


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of ``gate_up [T, 2 I]`` -> ``[T, I]``: one native pass in an eager
    step, torch's ops (one new tensor, not two) in a compiled graph."""
    if not torch.compiler.is_compiling():
        y = elementwise.swiglu(gate_up)
        if y is not None:
            return y
    inter = gate_up.shape[1] // 2
    return F.silu(gate_up[:, :inter]).mul_(gate_up[:, inter:])


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies ``[D / 2]`` (fp32), with linear or llama3 scaling when configured."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = cfg.rope_scaling
    if scaling is None:
        return inv
    kind = scaling["rope_type"]
    if kind == "linear":
        return inv / float(scaling["factor"])
    if kind == "llama3":
        factor = float(scaling["factor"])
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        mid = (1 - smooth) * scaled / factor + smooth * scaled
        is_mid = (wavelen >= old / high) & (wavelen <= old / low)
        return torch.where(is_mid, mid, scaled)
    raise ValueError(f"unsupported rope scaling {kind!r} (supported: default, linear, llama3)")


class DecoderForCausalLM:
    """Embedding -> N x (RMSNorm, attention, RMSNorm, SwiGLU MLP) -> RMSNorm -> LM head."""

    qk_norm: ClassVar[bool] = False  # Qwen3 normalizes each q and k head before RoPE
    # --deterministic: batch-invariant kernels (set by the engine before the weights load), and
    # norms, RoPE and SwiGLU as opaque ops in a compiled graph (kernels/invariant.py)
    deterministic: bool = False
    compiles_deterministic: ClassVar[bool] = True

    def __init__(self, cfg: ModelConfig, *, dtype: torch.dtype, device: torch.device | str,
                 max_seq_len: int, tp: TensorParallel | None = None,
                 quantization: str | None = None) -> None:
        self.cfg, self.dtype, self.device = cfg, dtype, device
        self.tp = tp if tp is not None and tp.size > 1 else None  # None: the whole model here
        rank, size = (0, 1) if self.tp is None else (self.tp.rank, self.tp.size)
        self.shard: Shard = shard(cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size, size,
                                  rank)
        self.num_kv_heads = self.shard.num_kv  # this rank's KV heads (its KV pool's width)
        self.num_q_heads = self.shard.num_q  # this rank's query heads
        self.layers: list[Layer] = []
        self.quantization = quantization
        # each role's kernel per row bucket: given by the engine (use_kernels) before the
        # weights load, as the measured choice for this model's shapes here
        self.kernels: Choice | None = None
        self.embed = self.norm = torch.empty(0)  # embed: [V, H]
        self.norm32: torch.Tensor | None = None  # the final norm's weight in fp32 (rms_norm)
        self.lm_head: Linear | None = None
        # a tied head whose packed weight serves embedding rows too (int8-wo, also under int4):
        # lookups read its rows, and the table itself is not kept
        self.embed_rows: Linear | None = None
        positions = torch.arange(max_seq_len, dtype=torch.float32)
        freqs = torch.outer(positions, rope_inv_freq(cfg))  # [S, D/2], as transformers computes
        # rotate_half(x) * sin == cat(x2, x1) * cat(-sin, sin): the sign lives in the table
        self.cos = torch.cat((freqs.cos(), freqs.cos()), -1).to(device, dtype)  # [S, D]
        self.sin = torch.cat((-freqs.sin(), freqs.sin()), -1).to(device, dtype)

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """``(out, in)`` of this rank's matmul weights by role (the LM head on rank 0 only)."""
        c, s = self.cfg, self.shard
        shapes = {"qkv": ((s.num_q + 2 * s.num_kv) * c.head_dim, c.hidden_size),
                  "o": (c.hidden_size, s.num_q * c.head_dim),
                  "gate_up": (2 * s.num_inter, c.hidden_size),
                  "down": (c.hidden_size, s.num_inter)}
        if self.tp is None or self.tp.leader:
            shapes["lm_head"] = (c.vocab_size, c.hidden_size)
        return shapes

    def shared_roles(self) -> set[str]:
        """Roles whose weight another part of the model keeps too: a tied LM head multiplies by
        the embedding table itself, so it gets a kernel that keeps one copy of it, not two."""
        return {"lm_head"} if self.cfg.tie_word_embeddings else set()

    def use_kernels(self, choice: Choice) -> None:
        """The kernels each role runs (``kernels.choose`` on ``linear_shapes``); before loading."""
        self.kernels = choice
        log.info("linear kernels (%s%s): %s", choice.source,
                 f", {self.quantization}" if self.quantization else "", choice.summary())

    def _linear(self, role: str, weight: torch.Tensor, bias: torch.Tensor | None) -> Linear:
        if self.kernels is None:
            raise RuntimeError("no kernels given: call use_kernels(kernels.choose(...)) first")
        return Linear(weight, bias, self.kernels.kernels[role])

    def load_weights(self, ckpt: Checkpoint) -> None:
        """Read HF-named tensors layer by layer, fuse and pack them; ValueError if one is missing.

        One layer's raw tensors at a time, so loading peaks at the model's size plus one layer.
        """
        self.norm = self._take(ckpt, "model.norm.weight")
        self.norm32 = self.norm.float()
        self.embed = self._take(ckpt, "model.embed_tokens.weight")
        if self.tp is None or self.tp.leader:  # only rank 0 computes logits
            head = self.embed  # tied: kept as it is (see __init__), unless MINISGL_LINEAR
            if not self.cfg.tie_word_embeddings and "lm_head.weight" in ckpt:
                head = self._take(ckpt, "lm_head.weight")
            self.lm_head = self._linear("lm_head", head, None)
            if head is self.embed and self.lm_head.serves_rows:
                self.embed_rows, self.embed = self.lm_head, torch.empty(0)
        self.layers = [self._load_layer(ckpt, i) for i in range(self.cfg.num_layers)]

    def _take(self, ckpt: Checkpoint, name: str, rows: tuple[int, int] | None = None,
              cols: tuple[int, int] | None = None) -> torch.Tensor:
        """One tensor, or its ``[rows, cols]`` slice (this rank's shard), on the device."""
        if name not in ckpt:
            raise ValueError(f"checkpoint has no tensor {name!r}")
        t = ckpt.get(name)
        if rows is not None:
            t = t[rows[0]:rows[1]]
        if cols is not None:
            t = t[:, cols[0]:cols[1]]
        # moved as stored (bf16 / fp16 moves half the bytes), then converted where it computes
        return t.to(self.device).to(self.dtype).contiguous()

    def _cat(self, ckpt: Checkpoint, names: list[str],
             rows: list[tuple[int, int] | None]) -> torch.Tensor | None:
        """The named tensors' row slices stacked along dim 0; None when none exists (biases)."""
        if not any(n in ckpt for n in names):
            return None
        return torch.cat([self._take(ckpt, n, r) for n, r in zip(names, rows, strict=True)])

    def _load_layer(self, ckpt: Checkpoint, i: int) -> Layer:
        p = f"model.layers.{i}."
        s, d = self.shard, self.cfg.head_dim
        full = self.tp is None
        leader = self.tp is None or self.tp.leader
        q_rows = None if full else (s.q_heads[0] * d, s.q_heads[1] * d)
        kv_rows = None if full else (s.kv_heads[0] * d, s.kv_heads[1] * d)
        inter = None if full else s.inter
        attn = [f"{p}self_attn.{n}_proj" for n in "qkv"]
        attn_rows = [q_rows, kv_rows, kv_rows]
        mlp = [f"{p}mlp.gate_proj", f"{p}mlp.up_proj"]
        qkv_w = self._cat(ckpt, [a + ".weight" for a in attn], attn_rows)
        gate_up_w = self._cat(ckpt, [m + ".weight" for m in mlp], [inter, inter])
        if qkv_w is None or gate_up_w is None:
            raise ValueError(f"checkpoint has no q/k/v or gate/up weights for layer {i}")
        qk_norm = None
        if self.qk_norm:
            qn = self._take(ckpt, f"{p}self_attn.q_norm.weight").expand(s.num_q, -1)
            kn = self._take(ckpt, f"{p}self_attn.k_norm.weight").expand(s.num_kv, -1)
            qk_norm = torch.cat((qn, kn)).contiguous()

        def summed_bias(name: str) -> torch.Tensor | None:
            # added once: on rank 0, so the all_reduce of the partial outputs carries it once
            return self._take(ckpt, name) if name in ckpt and leader else None

        ln_attn = self._take(ckpt, f"{p}input_layernorm.weight")
        ln_mlp = self._take(ckpt, f"{p}post_attention_layernorm.weight")
        return Layer(
            ln_attn=ln_attn, ln_mlp=ln_mlp, ln_attn32=ln_attn.float(), ln_mlp32=ln_mlp.float(),
            qkv=self._linear("qkv", qkv_w,
                             self._cat(ckpt, [a + ".bias" for a in attn], attn_rows)),
            o=self._linear("o", self._take(ckpt, f"{p}self_attn.o_proj.weight", cols=q_rows),
                           summed_bias(f"{p}self_attn.o_proj.bias")),
            gate_up=self._linear("gate_up", gate_up_w,
                                 self._cat(ckpt, [m + ".bias" for m in mlp], [inter, inter])),
            down=self._linear("down", self._take(ckpt, f"{p}mlp.down_proj.weight", cols=inter),
                              summed_bias(f"{p}mlp.down_proj.bias")),
            qk_norm=qk_norm,
        )

    def forward(self, input_ids: torch.Tensor, meta: AttentionMetadata, kv: KVPool,
                ws: Workspace) -> torch.Tensor:
        """``input_ids [T]`` -> last hidden states ``[T, H]`` (before the final norm)."""
        c, tp = self.cfg, self.tp
        # this rank's heads and columns (all of them without tensor parallelism)
        t, hq, hkv, d, eps = input_ids.shape[0], self.shard.num_q, self.shard.num_kv, \
            c.head_dim, c.rms_norm_eps
        qk_dim = (hq + hkv) * d
        # rank 0 adds the residual (and biases) into its partial sum; the others add nothing
        keep = tp is None or tp.leader
        # sums the ranks' partial outputs; the whole model here has nothing to sum
        reduce = (lambda y: y) if tp is None else tp.all_reduce
        cos = self.cos[meta.positions].unsqueeze(1)  # [T, 1, D], looked up once for all layers
        sin = self.sin[meta.positions].unsqueeze(1)
        x = self.embed_tokens(input_ids)  # [T, H]
        if self.deterministic:
            return self._forward_invariant(x, meta, kv, ws, cos, sin)
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.ln_attn, layer.ln_attn32, eps)
            qkv = layer.qkv(h)  # [T, (Hq + 2 Hkv) * D]
            qk = qkv[:, :qk_dim].view(t, hq + hkv, d)
            if layer.qk_norm is not None:
                qk = F.rms_norm(qk, (d,), eps=eps) * layer.qk_norm
            qk = rotary(qk, cos, sin)
            q, k = qk[:, :hq], qk[:, hq:]
            v = qkv[:, qk_dim:].view(t, hkv, d)
            kv.store(i, meta.out_slots, k, v)
            o = paged_attention(q, k, v, kv.k_layers[i], kv.v_layers[i], meta, ws)
            x = reduce(layer.o(o, residual=x if keep else None))  # [T, H]
            h = rms_norm(x, layer.ln_mlp, layer.ln_mlp32, eps)
            gu = layer.gate_up(h)  # [T, 2 I] (I: this rank's columns)
            act = swiglu(gu)  # [T, I]
            x = reduce(layer.down(act, residual=x if keep else None))
        return x

    def _forward_invariant(self, x: torch.Tensor, meta: AttentionMetadata, kv: KVPool,
                           ws: Workspace, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``forward``'s layers under --deterministic: the same math, each op one whose per-row
        result does not depend on the row count, opaque to a compiled graph."""
        c, tp, t = self.cfg, self.tp, x.shape[0]
        hq, hkv, d, eps = self.shard.num_q, self.shard.num_kv, c.head_dim, c.rms_norm_eps
        keep = tp is None or tp.leader
        reduce = (lambda y: y) if tp is None else tp.all_reduce
        for i, layer in enumerate(self.layers):
            qkv = layer.qkv(invariant.rms_norm(x, layer.ln_attn, eps))
            qk = invariant.rope(qkv[:, :(hq + hkv) * d].view(t, hq + hkv, d), cos, sin,
                                layer.qk_norm, eps)
            q, k = qk[:, :hq], qk[:, hq:]
            v = qkv[:, (hq + hkv) * d:].view(t, hkv, d)
            kv.store(i, meta.out_slots, k, v)
            o = paged_attention(q, k, v, kv.k_layers[i], kv.v_layers[i], meta, ws)
            x = reduce(layer.o(o, residual=x if keep else None))  # [T, H]
            gu = layer.gate_up(invariant.rms_norm(x, layer.ln_mlp, eps))  # [T, 2 I]
            x = reduce(layer.down(invariant.swiglu(gu), residual=x if keep else None))
        return x

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids [T]`` -> their rows of the embedding table ``[T, H]``."""
        if self.embed_rows is None:
            return F.embedding(input_ids, self.embed)
        return self.embed_rows.rows(input_ids, self.dtype)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm and LM head on the rows that get a next token: ``[N, H] -> [N, V]``."""
        return self.head(self.final_norm(hidden))

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final norm of ``logits``, ``[N, H] -> [N, H]``: fp32 where the head takes fp32
        rows at no cost (``Linear.fp32_rows``). The engine runs it with the forward, so that a
        compiled decode step fuses it into its graph (engine/head_rows.py)."""
        if self.lm_head is None:  # a tensor-parallel rank that holds no head: none taken
            return hidden
        if self.deterministic:
            return invariant.rms_norm(hidden, self.norm, self.cfg.rms_norm_eps)
        if self.lm_head.fp32_rows and self.norm32 is not None:
            return rms_norm(hidden.float(), self.norm32, self.norm32, self.cfg.rms_norm_eps)
        return rms_norm(hidden, self.norm, self.norm32, self.cfg.rms_norm_eps)

    def head(self, rows: torch.Tensor) -> torch.Tensor:
        """The LM head of ``logits`` on ``final_norm``'s rows: ``[N, H] -> [N, V]``."""
        assert self.lm_head is not None
        return self.lm_head(rows)

    def describe(self) -> dict[str, Any]:
        """A few facts for logs and /v1/models."""
        return {"architecture": self.cfg.architecture, "layers": self.cfg.num_layers,
                "linear_backend": self.kernels.summary() if self.kernels else "none",
                "quantization": self.quantization}
