#!/usr/bin/env python3
"""Greedy-generation and chat-template goldens for tests/test_generate.cpp, computed by Hugging Face
transformers (fp32, CPU, eager attention).

Run:  build/quanttool convert --in models/SmolLM2-135M-Instruct.Q4_1.gguf --out /tmp/smol-f32 --dtype f32
      python3 tests/golden/make_generate_golden.py [/tmp/smol-f32]

The model is the GGUF's weights dequantized to an fp32 Hugging Face folder (transformers' own GGUF
loader needs accelerate, which this venv lacks); the test runs the GGUF, so both sides compute
from the same values. The chat template is the GGUF's tokenizer.chat_template, which convert
copies into tokenizer_config.json.

Writes tests/golden/generate/smollm2_greedy.json with, per case ("raw": a plain text prompt;
"chat": one user message through the chat template with the generation prompt)
  prompt        the text given to the tokenizer (for "chat": apply_chat_template's rendering)
  prompt_ids    its ids (add_special_tokens=False: the rendering already has its special tokens)
  generated     generate(do_sample=False, max_new_tokens=64) ids after the prompt (stops at EOS)
  margins       per generated token, the top-1 minus top-2 logit (how far from a tie each was)
and tests/golden/generate/chat_templates.json: two 2-message conversations (user+assistant without a
system message, where SmolLM2's template adds its default one; system+user with
add_generation_prompt=True) and a tool-calling one (tools, an assistant tool call, a tool reply),
rendered by SmolLM2's template (apply_chat_template(tokenize=False)) and by each template in
tests/golden/generate/templates/.
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
model_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/smol-f32"
OUT = os.path.join(HERE, "generate")
N = 64

torch.manual_seed(0)
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
model.eval()
eos = tok.eos_token_id

RAW = "The history of the Roman Empire begins"
CHAT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def greedy(prompt):
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=N,
                             eos_token_id=eos, pad_token_id=eos, output_scores=True,
                             return_dict_in_generate=True, num_beams=1)
    gen = out.sequences[0, len(ids):].tolist()
    margins = []
    for s in out.scores:
        top = torch.topk(s[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    return {"prompt": prompt, "prompt_ids": ids, "generated": gen, "margins": margins}


chat_prompt = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
cases = {"raw": greedy(RAW), "chat": greedy(chat_prompt)}
cases["chat"]["messages"] = CHAT
meta = {"model": "SmolLM2-135M-Instruct.Q4_1.gguf dequantized to f32 (quanttool convert --dtype f32)", "transformers": transformers.__version__, "torch": torch.__version__,
        "max_new_tokens": N, "eos_token_id": eos, "dtype": "float32", "attention": "eager"}
os.makedirs(OUT, exist_ok=True)
with open(os.path.join(OUT, "smollm2_greedy.json"), "w") as fh:
    json.dump({"meta": meta, "cases": cases}, fh, indent=1)

convs = [
    {"messages": [{"role": "user", "content": "Hi there!"},
                  {"role": "assistant", "content": "Hello! How can I help you today?"}],
     "add_generation_prompt": False},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Name a prime number.  "}],
     "add_generation_prompt": True},
    # Tool calling (Qwen2.5's tools branch): tojson of dicts whose keys are not in sorted order.
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function",
                                   "function": {"name": "get_weather", "arguments": {"unit": "C", "city": "Paris"}}}]},
                  {"role": "tool", "content": "{\"temp\": 21}"}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                                  "parameters": {"type": "object",
                                                                 "properties": {"city": {"type": "string"}}}}}],
     "add_generation_prompt": True},
]
# SmolLM2's own template through its tokenizer; the others (templates/*.jinja: ChatML, Llama-3's and
# Qwen2.5-Instruct's as their model repos publish them, and one exercising the Jinja features the
# renderer supports) through transformers' renderer (trim_blocks, lstrip_blocks) with the same
# variables apply_chat_template passes.
from transformers.utils.chat_template_utils import _compile_jinja_template

templates = {"smollm2": {"template": tok.chat_template, "conversations": []}}
for c in convs:
    templates["smollm2"]["conversations"].append(dict(c, rendered=tok.apply_chat_template(
        c["messages"], tools=c.get("tools"), tokenize=False, add_generation_prompt=c["add_generation_prompt"])))
tdir = os.path.join(OUT, "templates")
for name in sorted(os.listdir(tdir)):
    src = open(os.path.join(tdir, name), encoding="utf-8").read()
    t = _compile_jinja_template(src)
    templates[name] = {"conversations": []}
    for c in convs:
        extra = {"tools": c["tools"]} if "tools" in c else {}
        out = t.render(messages=c["messages"], add_generation_prompt=c["add_generation_prompt"],
                       bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", **extra)
        templates[name]["conversations"].append(dict(c, rendered=out))
with open(os.path.join(OUT, "chat_templates.json"), "w") as fh:
    json.dump({"meta": meta, "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "templates": templates},
              fh, indent=1)
for k, c in cases.items():
    print(k, len(c["prompt_ids"]), "prompt ids,", len(c["generated"]), "generated; min margin",
          min(c["margins"]), repr(tok.decode(c["generated"])))
