#!/usr/bin/env python3
"""GGUFs of the tiny Gemma 2, Gemma 3 and Phi-3 models as llama.cpp's own converter writes them
(tests/test_gguf_arch.cpp).

Run:  PYTHONPATH=<llama.cpp>/gguf-py python3 tests/golden/make_gguf_arch_goldens.py <llama.cpp>
      (torch, transformers, numpy; <llama.cpp> holds convert_hf_to_gguf.py and conversion/)

tests/golden/gguf_arch/tiny-<arch>.bf16.gguf  (arch: gemma2, gemma3, phi3)
    `convert_hf_to_gguf.py tests/golden/logits/tiny-<arch> --outtype bf16`, run in-process, with
    these changes to its input, because the tiny folders are not quite what the converter expects or
    what llama.cpp can represent:
    - the vocabulary: the folders have no tokenizer.model, so set_vocab is replaced by what
      _set_vocab_sentencepiece writes for a 64-token SentencePiece vocabulary made up here (the
      control tokens at the config's ids, "▁", the letters, some letter pairs with descending
      scores, and for Phi-3 <|endoftext|>; add_space_prefix false for Gemma as Gemma2Model/Gemma3Model.set_vocab write it);
    - tiny-gemma3 gets a tokenizer.json listing those 64 tokens, from which Gemma3Model.modify_tensors
      counts the vocabulary (it cuts the embedding to that many rows);
    - tiny-gemma2's query_pre_attn_scalar 144 becomes 256 (its head_dim): llama.cpp has no key
      for it and scales queries by 1/sqrt(head_dim) (src/models/gemma2.cpp; 1/sqrt(hidden/heads)
      for the 46-layer 27B), so only a model with that value round-trips;
    - tiny-gemma3's layers (sliding, sliding, full: a period of 3) become all sliding: the converter
      writes no attention.sliding_window_pattern and llama.cpp then assumes Gemma 3's period of 6
      (src/models/gemma3.cpp), under which all three layers slide. (quanttool's writer keeps another
      pattern in that key.)
    The test patches the folders the same way before comparing.
    Everything else (tensor names, Gemma's norm weights stored as 1 + w, Phi-3's fused qkv and
    gate_up, the architecture keys) is the converter's.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "gguf_arch")
LETTERS = "abcdefghijklmnopqrstuvwxyz"
PAIRS = ["▁t", "he", "▁a", "in", "er", "an", "th", "▁s", "on", "re", "▁th", "nd", "at", "en", "ed", "▁o",
         "es", "or", "▁w", "is", "ar", "▁i", "it", "al", "ou", "▁c", "te", "▁the", "le", "ng", "▁b", "st",
         "ti", "▁f", "ha", "▁m"]


def tiny_vocab(cfg):
    """64 SentencePiece pieces: control tokens at the config's ids, then ▁, letters, pairs."""
    n = cfg["vocab_size"]
    special = {cfg["pad_token_id"]: "<pad>", cfg["eos_token_id"]: "</s>" if "phi3" in cfg["model_type"] else "<eos>",
               cfg["bos_token_id"]: "<s>" if "phi3" in cfg["model_type"] else "<bos>"}
    unk = min(i for i in range(n) if i not in special)
    special[unk] = "<unk>"
    if "phi3" in cfg["model_type"]:  # llama.cpp's vocabulary loader looks it up for a model named Phi-3
        special[n - 1] = "<|endoftext|>"
    pieces = ["▁"] + list(LETTERS) + PAIRS
    tokens, scores, types = [], [], []
    k = 0
    for i in range(n):
        if i in special:
            tokens.append(special[i])
            scores.append(0.0)
            types.append(2 if i == unk else 3)  # UNKNOWN, CONTROL
        else:
            tokens.append(pieces[k])
            scores.append(-float(k))
            types.append(1)  # NORMAL
            k += 1
    return tokens, scores, types, unk


def write_tiny_vocab(model, gguf):
    """The converter's set_vocab for the tiny folders (no tokenizer files): tiny_vocab written as
    _set_vocab_sentencepiece writes a llama SentencePiece vocabulary, plus the special-token ids."""
    tokens, scores, types, unk = tiny_vocab(model.hparams)
    w = model.gguf_writer
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(unk)
    gguf.SpecialVocab(model.dir_model, n_vocab=len(tokens)).add_to_gguf(w)


def main():
    lcpp = sys.argv[1]
    sys.path.insert(0, lcpp)
    import convert_hf_to_gguf as conv  # noqa: E402
    import gguf  # noqa: E402
    from conversion import gemma, phi  # noqa: E402

    def set_vocab(self):
        write_tiny_vocab(self, gguf)
        if self.model_arch != gguf.MODEL_ARCH.PHI3:
            self.gguf_writer.add_add_space_prefix(False)

    for cls in (gemma.Gemma2Model, gemma.Gemma3Model, phi.Phi3MiniModel):
        cls.set_vocab = set_vocab

    os.makedirs(OUT, exist_ok=True)
    for arch in ("gemma2", "gemma3", "phi3"):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(HERE, "logits", "tiny-" + arch)
            d = os.path.join(tmp, "tiny-" + arch)
            os.makedirs(d)
            for f in ("config.json", "model.safetensors"):
                shutil.copy(os.path.join(src, f), d)
            if arch == "gemma2":
                cfg = json.load(open(os.path.join(d, "config.json")))
                cfg["query_pre_attn_scalar"] = cfg["head_dim"]
                json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
            if arch == "gemma3":
                cfg = json.load(open(os.path.join(d, "config.json")))
                cfg["layer_types"] = ["sliding_attention"] * cfg["num_hidden_layers"]
                cfg["sliding_window_pattern"] = 6
                cfg.pop("_sliding_window_pattern", None)
                json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
                # Gemma3Model.modify_tensors counts the vocabulary in tokenizer.json
                tokens = tiny_vocab(cfg)[0]
                tj = {"model": {"vocab": {t: i for i, t in enumerate(tokens)}}, "added_tokens": []}
                json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w"))
            out = os.path.join(OUT, "tiny-%s.bf16.gguf" % arch)
            sys.argv = ["convert_hf_to_gguf.py", d, "--outtype", "bf16", "--outfile", out]
            conv.main()


if __name__ == "__main__":
    main()
