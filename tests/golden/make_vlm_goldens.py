#!/usr/bin/env python3
"""Tiny random vision-language models and their text logits, made by Hugging Face transformers
itself (fp32, CPU, eager attention) from a config (no download):

  tiny-qwen2_5_vl  Qwen2_5_VLForConditionalGeneration: a qwen2 language model (q/k/v biases,
                   GQA 4/2 heads, head_dim 8, M-RoPE sections [2, 1, 1]) and a 2-block vision
                   tower with its merger; untied head
  tiny-qwen3_vl    Qwen3VLForConditionalGeneration: a qwen3 language model (q/k norms, GQA 4/2,
                   head_dim 8, interleaved M-RoPE sections [2, 1, 1]), a 2-block vision tower with
                   a deepstack merger; untied head; stored under "model.language_model.*"
  tiny-gemma3_vl   Gemma3ForConditionalGeneration: a gemma3_text language model (head_dim 32,
                   q/k norms, sliding window 5 on layers 0 and 1, tied head), a 2-layer SigLIP
                   vision tower and the multimodal projector

Each folder: config.json, model.safetensors (bf16; random weights rounded to bf16 first), an
image processor's preprocessor_config.json (a few fields) and a chat_template.jinja (files convert must copy),
logits.json: the VLM's fp32 logits on 16 text tokens (no image tokens: M-RoPE's three position
components are then equal, formats/vlm.cpp).

With --quanttool PATH it also converts each folder to compressed-tensors W4A16
(`convert --scheme int4_ct --group-size 32`), loads that output with transformers
(compressed-tensors package) and records its logits on the same tokens as logits_ct_w4a16 in
logits.json: what transformers makes of our output, which tests/test_vlm.cpp compares quanttool's
own logits of that folder against. (Weight-only: for W8A8, compressed-tensors' fake quantization
rounds the activations with scale absmax/127.5, vLLM's kernels and ours with absmax/127, which
moves these tiny random models' logits by up to 0.2.)

Run:  python tests/golden/make_vlm_goldens.py --quanttool build/quanttool
      (a venv with torch, transformers 5.24, compressed-tensors, safetensors)
"""
import argparse
import json
import os
import subprocess
import tempfile

import torch
import transformers
from transformers import (AutoModelForImageTextToText, Gemma3Config, Gemma3ForConditionalGeneration,
                          Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen3VLConfig,
                          Qwen3VLForConditionalGeneration)

HERE = os.path.dirname(os.path.abspath(__file__))
N = 16

TINY = {
    "qwen2_5_vl": (Qwen2_5_VLForConditionalGeneration, {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14,
                                                     "merge_size": 2, "temporal_patch_size": 2}, Qwen2_5_VLConfig(
        text_config=dict(vocab_size=160, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 1, 1]}),
        vision_config=dict(depth=2, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                           fullatt_block_indexes=[1]),
        image_token_id=150, video_token_id=151, vision_start_token_id=152, vision_end_token_id=153,
        tie_word_embeddings=False)),
    "qwen3_vl": (Qwen3VLForConditionalGeneration, {"image_processor_type": "Qwen2VLImageProcessorFast", "patch_size": 16,
                                                   "merge_size": 2, "temporal_patch_size": 2}, Qwen3VLConfig(
        text_config=dict(vocab_size=160, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
                         rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 5e6,
                                                             "mrope_section": [2, 1, 1], "mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                           deepstack_visual_indexes=[0]),
        image_token_id=150, video_token_id=151, vision_start_token_id=152, vision_end_token_id=153,
        tie_word_embeddings=False)),
    "gemma3_vl": (Gemma3ForConditionalGeneration, {"image_processor_type": "Gemma3ImageProcessor", "size": {"height": 28, "width": 28}},
                  Gemma3Config(
        text_config=dict(vocab_size=160, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32,
                         max_position_embeddings=512, rms_norm_eps=1e-6, sliding_window=5,
                         sliding_window_pattern=3, tie_word_embeddings=True, pad_token_id=0, bos_token_id=2,
                         eos_token_id=1),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                           image_size=28, patch_size=14),
        mm_tokens_per_image=1, image_token_index=150, boi_token_index=151, eoi_token_index=152)),
}
SEED = {"qwen2_5_vl": 6001, "gemma3_vl": 6002, "qwen3_vl": 6003}


def text_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids[None], use_cache=False).logits[0].float()


ap = argparse.ArgumentParser()
ap.add_argument("--quanttool", default="", help="quanttool binary: also record transformers' load of its output")
args = ap.parse_args()

for name, (cls, proc, cfg) in TINY.items():
    g = torch.Generator().manual_seed(SEED[name])
    m = cls(cfg).float().eval()
    m.config._attn_implementation = "eager"
    with torch.no_grad():
        for pname, p in m.named_parameters():
            if "norm" in pname and pname.endswith("weight") and p.dim() == 1:
                base = 0.0 if name.startswith("gemma") else 1.0  # Gemma's RMSNorm scales by 1 + w
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
            elif pname.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5) * 1.5)
            p.copy_(p.to(torch.bfloat16).float())
    ids = torch.randint(0, 150, (N,), generator=g)  # below the image / video token ids
    lg = text_logits(m, ids)
    d = os.path.join(HERE, "vlm", "tiny-" + name)
    m.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    with open(os.path.join(d, "preprocessor_config.json"), "w") as fh:  # written by hand: no torchvision here
        json.dump(proc, fh, indent=2)
    with open(os.path.join(d, "chat_template.jinja"), "w") as fh:
        fh.write("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    gen = os.path.join(d, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    out = {"made_by": "tests/golden/make_vlm_goldens.py", "arch": cfg.model_type,
           "transformers": transformers.__version__, "torch": torch.__version__,
           "ids": [int(i) for i in ids], "logits": [float(x) for x in lg.reshape(-1)]}
    # Reloaded from the bf16 folder: what the file holds gives the same logits.
    back = AutoModelForImageTextToText.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    assert torch.equal(text_logits(back, ids), lg), "the saved folder does not reproduce the logits"
    if args.quanttool:
        with tempfile.TemporaryDirectory() as tmp:
            ct = os.path.join(tmp, "ct")
            subprocess.run([args.quanttool, "convert", "--in", d, "--out", ct, "--scheme", "int4_ct", "--group-size",
                            "32"], check=True)
            q = AutoModelForImageTextToText.from_pretrained(ct, dtype=torch.float32, attn_implementation="eager").eval()
            lq = text_logits(q, ids)
            out["logits_ct_w4a16"] = [float(x) for x in lq.reshape(-1)]
            print(name, "ct w4a16 vs float: max |diff|", float((lq - lg).abs().max()))
    with open(os.path.join(d, "logits.json"), "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
    print("wrote", d, "logit range", float(lg.min()), float(lg.max()))
