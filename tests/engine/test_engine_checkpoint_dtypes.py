"""bf16 and fp16 checkpoints load into the engine's compute dtype, one tensor at a time."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from minisgl_core.plugin.model_lookup import ModelNotFoundError, resolve
from minisgl_core.testing.tiny import make_tiny_model


def stored_as(model_dir: Path, dtype: torch.dtype) -> Path:
    weights = load_file(str(model_dir / "model.safetensors"))
    save_file({k: v.to(dtype) for k, v in weights.items()}, str(model_dir / "model.safetensors"),
              metadata={"format": "pt"})
    config = json.loads((model_dir / "config.json").read_text())
    config["torch_dtype"] = str(dtype).removeprefix("torch.")
    (model_dir / "config.json").write_text(json.dumps(config))
    return model_dir


@pytest.mark.parametrize("stored", [torch.bfloat16, torch.float16])
def test_a_half_precision_checkpoint_computes_as_transformers_upcasts_it(
        stored: torch.dtype, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from transformers import AutoModelForCausalLM

    from minisgl_core import LLM, SamplingParams

    model_dir = stored_as(make_tiny_model(tmp_path / "tiny", "qwen3", seed=4), stored)
    prompt = list(range(5, 17))
    with caplog.at_level(logging.INFO, logger="minisgl_core.engine.weights"):
        llm = LLM(str(model_dir), dtype="float32", num_threads=1)
    report = llm.engine.load_report
    name = str(stored).removeprefix("torch.")
    assert report.stored == (name,) and report.dtype == "float32"
    assert report.bytes_read == sum(t.numel() * t.element_size() for t in
                                    load_file(str(model_dir / "model.safetensors")).values())
    assert re.search(rf"weights of tiny: read 0\.\d\d MiB of {name} and loaded it as float32 in "
                     r"\d+\.\d\d s", caplog.text)
    (out,) = llm.generate([prompt], SamplingParams(max_tokens=16, temperature=0, ignore_eos=True))
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        want = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16,
                           min_new_tokens=16, do_sample=False)[0, len(prompt):].tolist()
    assert out.token_ids == want


def _big_checkpoint(path: Path, stored: torch.dtype) -> tuple[int, int]:
    """A 33.5M-parameter Llama (8 layers, hidden 512) stored as ``stored``; returns its size in
    fp32 and its largest tensor's size in fp32 (the 8192 x 512 embedding and LM head)."""
    path.mkdir()
    h, inter, d, layers, vocab = 512, 1536, 64, 8, 8192
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": h,
              "intermediate_size": inter, "num_hidden_layers": layers,
              "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": vocab,
              "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": False}
    (path / "config.json").write_text(json.dumps(config))
    g = torch.Generator().manual_seed(0)
    shapes = {"model.embed_tokens.weight": (vocab, h), "lm_head.weight": (vocab, h),
              "model.norm.weight": (h,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (h,),
                       p + "post_attention_layernorm.weight": (h,),
                       p + "self_attn.q_proj.weight": (8 * d, h),
                       p + "self_attn.k_proj.weight": (4 * d, h),
                       p + "self_attn.v_proj.weight": (4 * d, h),
                       p + "self_attn.o_proj.weight": (h, 8 * d),
                       p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                       p + "mlp.down_proj.weight": (h, inter)})
    weights = {k: (torch.randn(*s, generator=g) * 0.02).to(stored) for k, s in shapes.items()}
    save_file(weights, str(path / "model.safetensors"))
    numel = [t.numel() for t in weights.values()]
    return 4 * sum(numel), 4 * max(numel)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("stored", [torch.bfloat16, torch.float32])
def test_loading_peaks_at_the_model_plus_one_tensor(stored: torch.dtype, tmp_path: Path) -> None:
    model_bytes, largest = _big_checkpoint(tmp_path / "big", stored)
    done = subprocess.run([sys.executable, "-m", "minisgl_core.testing.peak_load",
                           str(tmp_path / "big"), "float32"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    peak = json.loads(done.stdout.splitlines()[-1])
    # the fp32 model, plus the largest tensor being converted (its fp32 copy and the raw bytes
    # it came from), plus allocator slack; a second copy of the checkpoint (64 MiB in bf16,
    # 128 MiB in fp32) would not fit
    limit = model_bytes + largest + largest * stored.itemsize // 4 + 8 * 2**20
    assert peak["peak_mib"] * 2**20 <= limit, (peak, limit / 2**20)
    assert peak["peak_mib"] * 2**20 >= model_bytes * 0.95  # it did load the whole model


def test_a_pre_quantized_checkpoint_is_refused_in_one_line(tmp_path: Path) -> None:
    model_dir = make_tiny_model(tmp_path / "tiny-awq", "llama")
    config = json.loads((model_dir / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelNotFoundError) as info:
        resolve(str(model_dir))
    assert str(info.value) == (
        "tiny-awq is a pre-quantized checkpoint (awq); minisgl loads float weights (fp32, bf16, "
        "fp16) and quantizes them itself (--quantization int8)")
