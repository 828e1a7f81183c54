#!/usr/bin/env python3
"""A tiny Llama HF folder with a SentencePiece tokenizer, and what llama.cpp's converter writes for
its vocabulary (tests/test_gguf_spm_vocab.cpp).

Run:  PYTHONPATH=<llama.cpp>/gguf-py python3 tests/golden/make_spm_gguf_golden.py <llama.cpp> <llama-tokenize>
      (torch, transformers, sentencepiece, protobuf; <llama.cpp> holds convert_hf_to_gguf.py,
      <llama-tokenize> is llama.cpp's tools/tokenize binary)

tests/golden/spm_gguf/tiny-llama-spm/   the HF folder: a SentencePiece BPE model (byte_fallback,
    512 pieces) trained on the first 2000 lines of wiki.valid, saved as tokenizer.model and as the
    tokenizer.json / tokenizer_config.json transformers' LlamaTokenizerFast writes for it (BOS added;
    one added token, "<|sep|>", not special but special-looking, which convert_hf_to_gguf.py types
    CONTROL from added_tokens_decoder), and a random 1-layer Llama
    (hidden 16) over that vocabulary.
tests/golden/spm_gguf/tiny-llama-spm.tokenizer.json   every tokenizer.ggml.* key of
    `convert_hf_to_gguf.py tiny-llama-spm --outtype f32` (llama.cpp's _set_vocab_sentencepiece,
    since tokenizer.model is present); for the strings under "texts", HF tokenizers' ids (BOS added)
    and `llama-tokenize --ids --no-parse-special` on that GGUF (llama_ids; llama_ids_parse_special
    without --no-parse-special). HF's and llama.cpp's ids differ where
    their rules differ, and "hf_same" lists the texts where they agree: HF's Metaspace adds no '▁'
    before text that already starts with a space, SentencePiece (and llama.cpp) always do; HF matches
    special-token text ("<s>") in the input, llama.cpp only with parse_special.
tests/golden/spm_gguf/tiny-gemma2-spm/ and tiny-gemma2-spm.tokenizer.json   the same tokenizer
    files beside a random 1-layer Gemma 2 (config pad_token_id 0, as Gemma's), and the converter's
    tokenizer.ggml.* keys for it (Gemma2Model.set_vocab: add_space_prefix false; gguf.SpecialVocab
    takes the pad id from config.json).
"""
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "spm_gguf")
ROOT = os.path.dirname(os.path.dirname(HERE))
TEXTS = [
    "Hello world",
    " The tower is 324 metres ( 1 @,@ 063 ft ) tall , about the same height as an 81 @-@ storey building .",
    "  two  spaces\tand a tab\nnew line",
    "unicode: café naïve Ærøskøbing — “quotes” – 日本語 テスト 🙂 ∑ ≠",
    "</s> and <s> as plain text",
    "",
    "\u00a0nbsp and \u200bzero width",
]


def converter_keys(lcpp, folder, out):
    subprocess.run([sys.executable, os.path.join(lcpp, "convert_hf_to_gguf.py"), folder, "--outtype", "f32",
                    "--outfile", out], check=True, stdout=subprocess.DEVNULL)
    import gguf
    r = gguf.GGUFReader(out)
    return {name: field.contents() for name, field in r.fields.items() if name.startswith("tokenizer.ggml.")}


def main():
    lcpp, llama_tokenize = sys.argv[1], sys.argv[2]
    import sentencepiece as spm
    import torch
    import transformers

    folder = os.path.join(OUT, "tiny-llama-spm")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with open(os.path.join(ROOT, "data/wikitext-2/wiki.valid.tokens.txt"), encoding="utf-8") as f:
        lines = [next(f) for _ in range(2000)]
    model = io.BytesIO()  # an iterator and a writer: no file paths recorded in the model's trainer_spec
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=512, model_type="bpe",
        byte_fallback=True, character_coverage=0.995, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        num_threads=1, minloglevel=2,
        normalization_rule_name="identity")  # no NFKC table: keeps tokenizer.model small
    with open(os.path.join(folder, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())

    # transformers converts tokenizer.model (LlamaConverter: merges ranked by piece score) when the
    # folder has no tokenizer.json yet; it needs the protobuf package to read the model.
    tok = transformers.LlamaTokenizerFast.from_pretrained(folder, legacy=True, add_bos_token=True)
    tok.add_tokens(["<|sep|>"])
    tok.save_pretrained(folder)
    # save_pretrained of a tokenizers-backed tokenizer may drop or rewrite the SentencePiece file.
    if not os.path.exists(os.path.join(folder, "tokenizer.model")):
        raise SystemExit("tokenizer.model was not kept by save_pretrained")
    n_vocab = len(tok)
    # transformers 4.x also listed every added token in tokenizer_config.json (most Llama-2 / Mistral
    # folders have it); convert_hf_to_gguf.py types the tokens from that list.
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        tc = json.load(f)
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        added = json.load(f)["added_tokens"]
    tc["added_tokens_decoder"] = {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                  "single_word", "special")} for a in added}
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(tc, f, indent=2, ensure_ascii=False)

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=n_vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                                   tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    model = transformers.LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(folder)

    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    ids = [hf.encode(t).ids for t in TEXTS]

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ref.gguf")
        keys = converter_keys(lcpp, folder, out)
        llama_ids, llama_ids_special = [], []
        for i, t in enumerate(TEXTS):
            p = os.path.join(tmp, f"{i}.txt")
            with open(p, "w", encoding="utf-8") as f:
                f.write(t)
            for flags, dst in ((["--no-parse-special"], llama_ids), ([], llama_ids_special)):
                res = subprocess.run([llama_tokenize, "-m", out, "-f", p, "--ids", "--log-disable"] + flags,
                                     check=True, capture_output=True, text=True)
                dst.append(json.loads(res.stdout.strip().splitlines()[-1]))
    hf_same = [i for i in range(len(TEXTS)) if ids[i] == llama_ids[i]]
    assert {0, 3, 5, 6} <= set(hf_same), hf_same  # the plain, unicode / byte-fallback and empty texts
    golden = {"keys": keys, "texts": TEXTS, "hf_ids": ids, "llama_ids": llama_ids,
              "llama_ids_parse_special": llama_ids_special, "hf_same": hf_same}
    with open(os.path.join(OUT, "tiny-llama-spm.tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=0)
    print(f"{n_vocab} tokens; keys: {sorted(keys)}")

    gemma = os.path.join(OUT, "tiny-gemma2-spm")
    shutil.rmtree(gemma, ignore_errors=True)
    os.makedirs(gemma)
    for name in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(folder, name), os.path.join(gemma, name))
    torch.manual_seed(0)
    gcfg = transformers.Gemma2Config(vocab_size=n_vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                     query_pre_attn_scalar=8, sliding_window=4, max_position_embeddings=128,
                                     pad_token_id=0, bos_token_id=1, eos_token_id=2)
    transformers.Gemma2ForCausalLM(gcfg).to(torch.float32).save_pretrained(gemma)
    with tempfile.TemporaryDirectory() as tmp:
        gkeys = converter_keys(lcpp, gemma, os.path.join(tmp, "ref.gguf"))
    with open(os.path.join(OUT, "tiny-gemma2-spm.tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump({"keys": gkeys}, f, ensure_ascii=False, indent=0)
    print(f"gemma2 keys: {sorted(gkeys)}")


if __name__ == "__main__":
    main()
