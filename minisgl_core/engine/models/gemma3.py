"""Gemma 3 (text): the decoder with four norms per layer, sliding-window and global attention.

As transformers' ``modeling_gemma3.py`` defines it: every norm is an RMSNorm scaling by
``1 + weight`` (kept here as that sum, so each is one ``F.rms_norm``); the embedding is scaled by
``sqrt(hidden)`` (not the tied LM head); q and k get a per-head norm; the attention output and
the MLP output are normed before their residual adds; the MLP is GeGLU (tanh GELU); attention
scales by ``query_pre_attn_scalar ** -0.5``. ``layer_types`` says which layers attend over a
sliding window (``sliding_window``, 512 tokens, RoPE base ``rope_local_base_freq``) and which over
everything (one in six, RoPE base ``rope_theta``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from minisgl_core.engine.attention import AttentionMetadata, Workspace, paged_attention, windowed
from minisgl_core.engine.config import ModelConfig
from minisgl_core.engine.kv_cache import KVPool
from minisgl_core.engine.models.decoder import DecoderForCausalLM, Layer
from minisgl_core.engine.parallel import TensorParallel
from minisgl_core.engine.weights import Checkpoint

SLIDING, FULL = "sliding_attention", "full_attention"
DEFAULT_THETAS = {SLIDING: 10_000.0, FULL: 1_000_000.0}


@dataclass
class GemmaLayer(Layer):
    """One layer's weights; every norm is stored as ``1 + weight``. ``ln_attn`` is the input
    norm, ``ln_mlp`` the pre-feedforward one, ``qk_norm`` ``[Hq + Hkv, D]``."""

    post_attn: torch.Tensor  # post_attention_layernorm (on the attention output)
    post_mlp: torch.Tensor  # post_feedforward_layernorm (on the MLP output)
    window: int | None  # sliding layers: the keys each query sees; None: all of them


def layer_types(raw: dict[str, Any], num_layers: int) -> list[str]:
    """``layer_types`` of the config, or the older ``sliding_window_pattern`` (default 6)."""
    types = raw.get("layer_types")
    if types:
        return list(types)
    pattern = int(raw.get("sliding_window_pattern") or raw.get("_sliding_window_pattern") or 6)
    return [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(num_layers)]


def rope_thetas(raw: dict[str, Any]) -> dict[str, float]:
    """The RoPE base of each layer type (transformers 5 nests them; 4.x has two keys)."""
    nested = raw.get("rope_parameters") or {}
    out = dict(DEFAULT_THETAS)
    if isinstance(nested.get(FULL), dict) or isinstance(nested.get(SLIDING), dict):
        for kind in (FULL, SLIDING):
            params = nested.get(kind) or {}
            if params.get("rope_type", "default") != "default":
                raise ValueError(f"unsupported Gemma 3 rope scaling {params['rope_type']!r} "
                                 f"(supported: default)")
            out[kind] = float(params.get("rope_theta", out[kind]))
        return out
    if raw.get("rope_scaling"):
        raise ValueError("unsupported Gemma 3 rope scaling (supported: default)")
    out[FULL] = float(raw.get("rope_theta", out[FULL]))
    out[SLIDING] = float(raw.get("rope_local_base_freq", out[SLIDING]))
    return out


class Gemma3ForCausalLM(DecoderForCausalLM):
    """Gemma 3's text model (Gemma3ForCausalLM)."""

    qk_norm: ClassVar[bool] = True  # the base loader reads q_norm / k_norm
    # its forward is its own (post-norms, GELU): batch-invariant eagerly (the kernels, attention
    # by its keys), but its compiled graph would let inductor fuse the code between the matmuls
    compiles_deterministic: ClassVar[bool] = False

    def __init__(self, cfg: ModelConfig, *, dtype: torch.dtype, device: torch.device | str,
                 max_seq_len: int, tp: TensorParallel | None = None,
                 quantization: str | None = None) -> None:
        raw = cfg.raw
        for key in ("attn_logit_softcapping",):
            if raw.get(key) is not None:
                raise ValueError(f"Gemma 3 with {key} is not supported")
        if raw.get("use_bidirectional_attention"):
            raise ValueError("Gemma 3 with bidirectional attention is not supported")
        act = raw.get("hidden_activation", "gelu_pytorch_tanh")
        if act not in ("gelu_pytorch_tanh", "gelu"):
            raise ValueError(f"unsupported Gemma 3 activation {act!r}")
        super().__init__(cfg, dtype=dtype, device=device, max_seq_len=max_seq_len, tp=tp,
                         quantization=quantization)
        self.gelu_approximate = "tanh" if act == "gelu_pytorch_tanh" else "none"
        self.types = layer_types(raw, cfg.num_layers)
        self.sliding_window = int(raw.get("sliding_window") or 4096)
        self.scale = float(raw.get("query_pre_attn_scalar") or cfg.head_dim) ** -0.5
        self.softcap = raw.get("final_logit_softcapping")
        # transformers scales the embedding by sqrt(hidden) cast to the weights' dtype
        self.embed_scale = torch.tensor(math.sqrt(cfg.hidden_size), dtype=dtype).item()
        self.tables = {kind: self._rope_table(theta, max_seq_len)
                       for kind, theta in rope_thetas(raw).items()}
        self.cos = self.sin = torch.empty(0)  # the base class's single table is not used

    def _rope_table(self, theta: float, max_seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.cfg.head_dim
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv)  # [S, D/2]
        # rotate_half(x) * sin == cat(x2, x1) * cat(-sin, sin): the sign lives in the table
        return (torch.cat((freqs.cos(), freqs.cos()), -1).to(self.device, self.dtype),
                torch.cat((-freqs.sin(), freqs.sin()), -1).to(self.device, self.dtype))

    def _norm(self, ckpt: Checkpoint, name: str) -> torch.Tensor:
        return self._take(ckpt, name) + 1.0  # Gemma's RMSNorm scales by 1 + weight

    def load_weights(self, ckpt: Checkpoint) -> None:
        """As the base class (the LM head tied to the unscaled embedding), layers below."""
        super().load_weights(ckpt)
        self.norm = self.norm + 1.0
        self.norm32 = self.norm.float()  # 1 + weight, for the fp32 logits (F.rms_norm)

    def _load_layer(self, ckpt: Checkpoint, i: int) -> GemmaLayer:
        base = super()._load_layer(ckpt, i)  # q/k/v, o, gate/up, down (sharded), q/k norms
        p = f"model.layers.{i}."
        assert base.qk_norm is not None
        return GemmaLayer(
            ln_attn=base.ln_attn + 1.0,
            ln_mlp=self._norm(ckpt, p + "pre_feedforward_layernorm.weight"),
            ln_attn32=None, ln_mlp32=None,  # every norm here is F.rms_norm's own
            qkv=base.qkv, o=base.o, gate_up=base.gate_up, down=base.down,
            qk_norm=base.qk_norm + 1.0,
            post_attn=base.ln_mlp + 1.0,  # the base reads post_attention_layernorm as ln_mlp
            post_mlp=self._norm(ckpt, p + "post_feedforward_layernorm.weight"),
            window=self.sliding_window if self.types[i] == SLIDING else None)

    def forward(self, input_ids: torch.Tensor, meta: AttentionMetadata, kv: KVPool,
                ws: Workspace) -> torch.Tensor:
        """``input_ids [T]`` -> last hidden states ``[T, H]`` (before the final norm)."""
        c, tp = self.cfg, self.tp
        t, hq, hkv, d, eps = input_ids.shape[0], self.shard.num_q, self.shard.num_kv, \
            c.head_dim, c.rms_norm_eps
        qk_dim, inter, h = (hq + hkv) * d, self.shard.num_inter, c.hidden_size
        reduce = (lambda y: y) if tp is None else tp.all_reduce
        ropes = {kind: (cos[meta.positions].unsqueeze(1), sin[meta.positions].unsqueeze(1))
                 for kind, (cos, sin) in self.tables.items()}  # [T, 1, D] each
        half = d // 2
        x = self.embed_tokens(input_ids) * self.embed_scale  # [T, H]
        for i, layer in enumerate(self.layers):
            assert isinstance(layer, GemmaLayer)
            cos, sin = ropes[SLIDING if layer.window is not None else FULL]
            hs = F.rms_norm(x, (h,), layer.ln_attn, eps)
            qkv = layer.qkv(hs)  # [T, (Hq + 2 Hkv) * D]
            qk = F.rms_norm(qkv[:, :qk_dim].view(t, hq + hkv, d), (d,), eps=eps) * layer.qk_norm
            qk = qk * cos + torch.cat((qk[..., half:], qk[..., :half]), -1) * sin
            q, k = qk[:, :hq], qk[:, hq:]
            v = qkv[:, qk_dim:].view(t, hkv, d)
            kv.store(i, meta.out_slots, k, v)
            step = meta if layer.window is None else windowed(meta, layer.window)
            o = paged_attention(q, k, v, kv.k_layers[i], kv.v_layers[i], step, ws, self.scale)
            # the norms come after the (all-reduced) outputs, before the residual adds
            x = x + F.rms_norm(reduce(layer.o(o)), (h,), layer.post_attn, eps)
            gu = layer.gate_up(F.rms_norm(x, (h,), layer.ln_mlp, eps))  # [T, 2 I]
            act = F.gelu(gu[:, :inter], approximate=self.gelu_approximate).mul_(gu[:, inter:])
            x = x + F.rms_norm(reduce(layer.down(act)), (h,), layer.post_mlp, eps)
        return x

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final norm: ``[N, H] -> [N, H]``, fp32 where the head takes fp32 rows at no cost
        (``Linear.fp32_rows``)."""
        if self.lm_head is None:  # a tensor-parallel rank that holds no head: none taken
            return hidden
        fp32 = self.lm_head.fp32_rows
        x, w = (hidden.float(), self.norm32) if fp32 else (hidden, self.norm)
        return F.rms_norm(x, (self.cfg.hidden_size,), w, self.cfg.rms_norm_eps)

    def head(self, rows: torch.Tensor) -> torch.Tensor:
        """The (tied, unscaled) LM head on ``final_norm``'s rows: ``[N, H] -> [N, V]``,
        soft-capped when the config says so."""
        assert self.lm_head is not None
        out = self.lm_head(rows)
        if self.softcap:
            cap = float(self.softcap)
            out = torch.tanh(out / cap) * cap
        return out

    def describe(self) -> dict[str, Any]:
        """A few facts for logs and /v1/models."""
        return {**super().describe(), "sliding_window": self.sliding_window,
                "global_layers": [i for i, kind in enumerate(self.types) if kind == FULL]}
