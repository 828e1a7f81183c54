"""Goldens for gpt_oss on the CPU engine (tests/test_gpt_oss.cpp): a tiny random GptOssForCausalLM
and transformers' fp32 logits of it.

  tiny-gpt-oss        the model as save_pretrained writes it (bf16, experts fused, gate/up
                      interleaved): 3 layers sliding / full / sliding with sliding_window 8 (the
                      24 tokens reach past it), 4 experts top 2, nonzero attention sinks, YaRN
                      RoPE (factor 4, truncate false), swiglu_limit 7 reached by some gates.
  tiny-gpt-oss-mxfp4  the same with every expert weight rounded to MXFP4 and stored as the
                      released checkpoints store it (<proj>_blocks / _scales, quantization_config
                      quant_method mxfp4); the logits are of the rounded weights, and transformers'
                      own dequantizer (integrations/mxfp4.py convert_moe_packed_tensors) is checked
                      to give back exactly those weights from the packing written here.

MXFP4 packing (OCP Microscaling spec, E2M1 elements, E8M0 shared scale per 32 along the input
dimension): scale 2^e with e = ceil(log2(amax / 6)), elements the nearest E2M1 value of w / 2^e.

logits.json: ids, logits [24, vocab] of the batch forward (fp32, eager attention), and
ppl_chunks_ctx8, the mean NLL of eval-ppl's "chunks" protocol at ctx 8 (three chunks, 21 tokens).
Run with a Python that has transformers 5.24 and torch (never in CI).
"""
import copy
import json
import os

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, GptOssConfig
from transformers.integrations.mxfp4 import FP4_VALUES, convert_moe_packed_tensors

HERE = os.path.dirname(os.path.abspath(__file__))
N = 24

cfg = GptOssConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=4,
                   num_experts_per_tok=2, sliding_window=8,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   max_position_embeddings=256, rms_norm_eps=1e-5, swiglu_limit=7.0,
                   tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                   rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                                    "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                    "original_max_position_embeddings": 64})

LUT = torch.tensor(FP4_VALUES)


def mxfp4_pack(w):
    """w [E, out, in] (in % 32 == 0) -> blocks [E, out, in/32, 16] uint8, scales [E, out, in/32] uint8."""
    E, R, C = w.shape
    g = w.reshape(E, R, C // 32, 32)
    amax = g.abs().amax(-1)
    e = torch.where(amax > 0, torch.ceil(torch.log2(amax / 6.0)), torch.zeros_like(amax)).clamp(-127, 127)
    x = g / torch.ldexp(torch.ones_like(e), e.int())[..., None]
    codes = (x[..., None] - LUT).abs().argmin(-1).to(torch.uint8)  # nearest; +0 before -0
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks, (e + 127).to(torch.uint8)


def init(m, g, gate_scale):
    with torch.no_grad():
        for pname, p in m.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif pname.endswith("sinks"):
                p.copy_(1.0 * torch.randn(p.shape, generator=g))
            elif pname.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif pname.endswith("experts.gate_up_proj"):  # [E, in, out]: large enough to reach the clamp
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-2] ** 0.5) * gate_scale)
            elif pname.endswith("experts.down_proj"):
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-2] ** 0.5) * 1.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5) * 1.5)
            p.copy_(p.to(torch.bfloat16).float())


def write(m, ids, name):
    # no near-tie between the k-th and (k+1)-th router logit (a rounding must not flip the choice)
    gaps = []
    hooks = [l.mlp.router.register_forward_hook(
        lambda mod, inp, out: gaps.append(float((lambda s: (s[:, 1] - s[:, 2]).min())(out[0].sort(-1, True).values))))
        for l in m.model.layers]
    with torch.no_grad():
        m(ids[None], use_cache=False)
    for h in hooks:
        h.remove()
    print(name, "smallest top-2 router logit margin", min(gaps))
    assert min(gaps) > 1e-3, "a near-tie in the router: choose another seed"
    with torch.no_grad():
        lg = m(ids[None], use_cache=False).logits[0].float().numpy()
        nll = []  # eval-ppl's chunks at ctx 8: three chunks of 8 tokens, 7 scored each
        for c0 in range(0, N, 8):
            chunk = ids[c0:c0 + 8]
            lp = torch.log_softmax(m(chunk[None], use_cache=False).logits[0].double(), dim=-1)
            nll += [float(-lp[p, chunk[p + 1]]) for p in range(7)]
    d = os.path.join(HERE, "logits", "tiny-" + name)
    # a copy: casting m itself would round its RoPE buffer (inv_freq) for the next model
    copy.deepcopy(m).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    if os.path.exists(os.path.join(d, "generation_config.json")):
        os.remove(os.path.join(d, "generation_config.json"))
    with open(os.path.join(d, "logits.json"), "w") as fh:
        json.dump({"made_by": "tests/golden/make_gpt_oss_golden.py", "arch": "gpt_oss",
                   "transformers": transformers.__version__, "torch": torch.__version__,
                   "ids": [int(i) for i in ids], "ppl_chunks_ctx8": sum(nll) / len(nll), "logits": [float(x) for x in lg.reshape(-1)]},
                  fh, separators=(",", ":"))
    print("wrote", d, "logit range", float(lg.min()), float(lg.max()))
    return d


torch.manual_seed(0)
g = torch.Generator().manual_seed(6001)
m = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
init(m, g, 4.0)
ids = torch.randint(0, cfg.vocab_size, (N,), generator=g)

# the clamp matters: some gate pre-activations exceed the limit
with torch.no_grad():
    h = m.model.embed_tokens(ids[None])
    x = m.model.layers[0].post_attention_layernorm(h)[0]
    gu = x @ m.model.layers[0].mlp.experts.gate_up_proj[0] + m.model.layers[0].mlp.experts.gate_up_proj_bias[0]
    print("layer 0 expert 0 gate max", float(gu[:, ::2].max()), "up range", float(gu[:, 1::2].min()),
          float(gu[:, 1::2].max()))

write(m, ids, "gpt-oss")

# MXFP4: round the experts, check transformers' dequantizer, store packed.
packed = {}
with torch.no_grad():
    for i, layer in enumerate(m.model.layers):
        ex = layer.mlp.experts
        for proj in ("gate_up_proj", "down_proj"):
            w = getattr(ex, proj)  # [E, in, out]
            blocks, scales = mxfp4_pack(w.transpose(1, 2).contiguous())
            deq = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # [E, in, out]
            assert deq.shape == w.shape
            w.copy_(deq)
            assert torch.equal(convert_moe_packed_tensors(blocks, scales, dtype=torch.float32), w)
            packed[f"model.layers.{i}.mlp.experts.{proj}_blocks"] = blocks
            packed[f"model.layers.{i}.mlp.experts.{proj}_scales"] = scales
d = write(m, ids, "gpt-oss-mxfp4")
st = os.path.join(d, "model.safetensors")
t = load_file(st)
for k in list(t):
    if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"):
        del t[k]
t.update(packed)
save_file(t, st, metadata={"format": "pt"})
with open(os.path.join(d, "config.json")) as fh:
    c = json.load(fh)
c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
with open(os.path.join(d, "config.json"), "w") as fh:
    json.dump(c, fh, indent=2)
