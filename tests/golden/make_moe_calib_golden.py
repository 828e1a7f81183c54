#!/usr/bin/env python3
"""Golden per-expert calibration statistics of the tiny mixture-of-experts models
(tests/golden/logits/tiny-qwen3-moe, tiny-mixtral, made by make_arch_logits_golden.py; tiny-gpt-oss,
made by make_gpt_oss_golden.py), computed by
transformers itself: the model in fp32 on the golden's 16 token ids (no BOS), a forward hook on
each sparse layer's <Family>Experts module reading what transformers hands it (the normed hidden
states and the router's top-k expert indices), and from those, per expert e, the tokens routed to
it and, over them, the Gram matrices of its two inputs: X_eᵀX_e of the hidden states (gate/up's
input) and D_eᵀD_e of act(X_e G_eᵀ) * (X_e U_eᵀ) (down's input), with G/U read from the module's own
fused gate_up_proj (gpt_oss: its interleaved gate_up_proj with its bias through the module's own
_apply_gate, the clamped SwiGLU). quanttool's act-stats and GPTQ Hessians of an expert are these sums plus the
prior of calib/expert_prior.h (tests/test_moe_calib.cpp).

Run:  python tests/golden/make_moe_calib_golden.py   (a venv with torch, transformers)
Writes tests/golden/moe_calib/<name>.json.
"""
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))


def g9(v):
    """9 significant digits (a float32's worth; the tests compare to 1e-5 of the largest entry):
    the file stays under 1 MiB."""
    return float("%.9g" % float(v))

for name in ("qwen3-moe", "mixtral", "gpt-oss"):
    src = os.path.join(HERE, "logits", "tiny-" + name)
    ids = torch.tensor(json.load(open(os.path.join(src, "logits.json")))["ids"])
    m = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    layers = {}

    def hook_for(layer):
        def hook(mod, args, out):
            x, top_k_index = args[0].float(), args[1]
            experts = []
            for e in range(mod.num_experts):
                tok = torch.where((top_k_index == e).any(dim=-1))[0]
                xe = x[tok]
                if hasattr(mod, "gate_up_proj_bias"):  # gpt_oss: interleaved gate/up, with a bias
                    w = mod.gate_up_proj[e]  # [hidden, 2·inter] as declared, [2·inter, hidden] once loaded
                    gu = xe @ w if w.shape[0] == x.shape[1] else torch.nn.functional.linear(xe, w)
                    d = mod._apply_gate(gu + mod.gate_up_proj_bias[e])
                else:
                    gate, up = torch.nn.functional.linear(xe, mod.gate_up_proj[e]).chunk(2, dim=-1)
                    d = mod.act_fn(gate) * up
                experts.append({
                    "tokens": int(tok.numel()),
                    "gram_in": [g9(v) for v in (xe.T.double() @ xe.double()).reshape(-1)],
                    "gram_down": [g9(v) for v in (d.T.double() @ d.double()).reshape(-1)],
                    "absmax_in": [float(v) for v in (xe.abs().amax(dim=0) if len(tok) else torch.zeros(x.shape[1]))],
                })
            layers[layer] = experts
        return hook

    hooks = []
    for i, layer in enumerate(m.model.layers):
        for mod in layer.modules():
            if type(mod).__name__.endswith("Experts"):
                hooks.append(mod.register_forward_hook(hook_for(i)))
    with torch.no_grad():
        m(ids[None], use_cache=False)
    for h in hooks:
        h.remove()
    out = os.path.join(HERE, "moe_calib", name + ".json")
    with open(out, "w") as fh:
        json.dump({"made_by": "tests/golden/make_moe_calib_golden.py", "transformers": transformers.__version__,
                   "torch": torch.__version__, "ids": [int(i) for i in ids],
                   "layers": {str(k): v for k, v in sorted(layers.items())}}, fh, separators=(",", ":"))
    print("wrote", out, {k: [e["tokens"] for e in v] for k, v in layers.items()})
