#!/usr/bin/env python3
"""Goldens for tests/test_tokenizer.cpp, written to tests/golden/tokenizer/.

Each file comes from a reference implementation, never from quanttool's tokenizer code:

  smollm2_wiki.json  The Python `tokenizers` library on the tokenizer.json that our exporter wrote for
                     SmolLM2 (the independent check is that the HF library itself produces these ids
                     from that file): count, CRC-32 and first 2000 ids of all of wiki.test.raw (no BOS,
                     add_special_tokens=False), plus a few strings (special tokens included, which HF
                     always matches). Before writing, it asserts that transformers.AutoTokenizer on the
                     exported folder gives the same wiki ids, and llama.cpp too when --llama-tokenize
                     is given.
  bpe_families.json  `tokenizers` BPE models built here from the SmolLM2 GGUF's vocabulary and merges
                     (read with gguf-py) with the HF pre-tokenizers of Llama-3 and Qwen2
                     (Split(regex, Isolated) + ByteLevel(use_regex=False); ignore_merges as Llama-3's
                     tokenizer.json sets it). No NFC normalizer (llama.cpp applies none either).
  spm_metaspace.json `tokenizers` on the exported Llama-2 (llama-spm) tokenizer.json with the normalizer
                     replaced by a Metaspace pre-tokenizer (prepend_scheme first / always, split off /
                     on): the SentencePiece-style layouts of non-legacy Llama and Mistral files. (The
                     exported file itself is checked against the HF-made vectors, see below.)
  llamacpp.json      llama.cpp's llama-tokenize (only with --llama-tokenize BIN): count and CRC-32 of the
                     ids of all of wiki.test.raw for every vocabulary, and strings (chat markup, invalid
                     UTF-8, space runs) with and without special-token parsing and BOS.

It also checks (asserts, writes nothing) that `tokenizers` on each exported tokenizer.json reproduces
llama.cpp's test vectors (data/tokenizer-vectors/*.out, made by the original HF tokenizers).

Usage (from the repository root, after building test_tokenizer):
  QT_TOKENIZER_EXPORT_DIR=/tmp/tokexp build/test_tokenizer --gtest_filter='*Export*:*Families*'
  python3 tests/golden/make_tokenizer_goldens.py --export /tmp/tokexp \
      [--llama-tokenize /path/to/llama.cpp/build/bin/llama-tokenize]
CRC-32 is zlib.crc32 over the ids as little-endian int32.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import zlib
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "data"
OUT = ROOT / "tests" / "golden" / "tokenizer"
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = SHARED / "wikitext-2" / "wiki.test.raw"
VOCABS = ["gpt-2", "llama-spm", "phi-3", "starcoder", "falcon", "deepseek-coder", "refact", "mpt"]

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

EXTRAS = [
    "I'M SURE YOU'RE RIGHT, WE'VE SEEN IT. HE'LL SAY SHE'D DO IT'S FINE, DON'T",
    "In 1984 there were 1234567 people; pi=3.14159, 1,000,000!",
    "\n\n\n  \t x \r\n\r\n y  \n",
    "a\u00a0b\u2003c\u3000d\u2028e\u0085f  \u00a0 g",
    "x \u0085y \u0085\u0085 z\u0085 !\u00a0\u00a0w \u2003\u2003v\u205f\u3000",
    "hello!!!\n\nworld??\r\n  ",
    "  leading and trailing  ",
    "\u00e7a va? \u00dcn\u00efc\u00f6d\u00e9 \u00f1 \u4f60\u597d\u4e16\u754c \u3053\u3093\u306b\u3061\u306f \uc548\ub155\ud558\uc138\uc694 \u0645\u0631\u062d\u0628\u0627",
    "def f(x):\n    return x**2  # comment\n\t\tpass",
    "emoji \U0001F44D\U0001F3FD\U0001F1FA\U0001F1F8 \u2764\ufe0f \U0001F600\U0001F600",
    "mixed123abc456 \u00bd \u00b2 \u0663\u0664 x\u00b3",
]

SMOLLM2_STRINGS = EXTRAS + [
    "<|im_start|>system\nYou are a helpful AI assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n",
    "text<|endoftext|>more <file_sep> <jupyter_code>x = 1",
    " = = Robert Boulter = = \n \n Robert Boulter is an English film , television and theatre actor .",
]


def crc(ids):
    a = array("i", ids)
    if sys.byteorder != "little":
        a.byteswap()
    return zlib.crc32(a.tobytes()) & 0xFFFFFFFF


def read_cases(gguf):
    raw = Path(str(gguf) + ".inp").read_bytes().decode("utf-8")
    sep = "\n__ggml_vocab_test__\n"
    inp = raw.split(sep)
    if inp and inp[-1] == "":
        inp.pop()
    out = Path(str(gguf) + ".out").read_text().split("\n")
    if out and out[-1] == "":
        out.pop()
    assert len(inp) == len(out), gguf
    return [(t, [int(x) for x in o.split()]) for t, o in zip(inp, out)]


def write(name, obj):
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    path.write_text(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def llama_tokenize(binary, gguf, data, parse_special, add_bos):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
        name = f.name
    try:
        cmd = [binary, "-m", str(gguf), "-bf", name, "--ids", "--log-disable"]
        if not parse_special:
            cmd.append("--no-parse-special")
        if not add_bos:
            cmd.append("--no-bos")
        env = dict(os.environ, LD_LIBRARY_PATH=str(Path(binary).parent))
        res = subprocess.run(cmd, capture_output=True, env=env, check=True)
        last = res.stdout.decode().strip().splitlines()[-1]
        return [int(x) for x in last.strip("[]").split(",") if x.strip()]
    finally:
        os.unlink(name)


def smollm2(export_dir, wiki_text, llama_bin):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    import tokenizers
    import transformers

    folder = Path(export_dir) / "smollm2"
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = tok.encode(wiki_text, add_special_tokens=False).ids
    auto = AutoTokenizer.from_pretrained(str(folder))
    auto_ids = auto(wiki_text, add_special_tokens=False)["input_ids"]
    assert auto_ids == ids, "transformers AutoTokenizer disagrees with tokenizers on the exported folder"
    checks = ["transformers.AutoTokenizer on the exported folder: equal"]
    if llama_bin:
        ref = llama_tokenize(llama_bin, MODEL, wiki_text.encode("utf-8"), True, False)
        assert ref == ids, "llama.cpp llama-tokenize disagrees"
        checks.append("llama.cpp llama-tokenize on the GGUF: equal")
    strings = [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in SMOLLM2_STRINGS]
    write("smollm2_wiki.json", {
        "source": f"tokenizers {tokenizers.__version__} Tokenizer.from_file(exported tokenizer.json)"
                  f".encode(wiki.test.raw, add_special_tokens=False); transformers {transformers.__version__}",
        "checks": checks,
        "count": len(ids),
        "crc32": crc(ids),
        "first_ids": ids[:2000],
        "strings": strings,
    })


def bpe_families(wiki_text):
    import gguf
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers
    import tokenizers

    r = gguf.GGUFReader(str(MODEL))
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = []
    for m in r.fields["tokenizer.ggml.merges"].contents():
        pos = m.find(" ", 1)
        merges.append((m[:pos], m[pos + 1:]))
    vocab = {t: i for i, t in enumerate(tokens)}
    texts = [t for t, _ in read_cases(SHARED / "tokenizer-vectors" / "ggml-vocab-gpt-2.gguf")] + EXTRAS
    texts.append(wiki_text[:6000])
    out = {"source": f"tokenizers {tokenizers.__version__}: BPE(SmolLM2 vocab+merges) with the HF "
                     "Llama-3 / Qwen2 Split regex (Isolated) + ByteLevel(use_regex=False)"}
    for name, regex, ignore_merges in (("llama-bpe", LLAMA3, True), ("qwen2", QWEN2, False)):
        tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                               for t, ty in zip(tokens, types) if ty == 3])
        out[name] = [{"text": t, "ids": tk.encode(t, add_special_tokens=False).ids} for t in texts]
    write("bpe_families.json", out)


def check_exported_families(export_dir):
    """tokenizers on our exported Llama-3 / Qwen2 tokenizer.json against bpe_families.json."""
    from tokenizers import Tokenizer
    golden = json.loads((OUT / "bpe_families.json").read_text(encoding="utf-8"))
    for name in ("llama-bpe", "qwen2"):
        path = Path(export_dir) / name / "tokenizer.json"
        if not path.exists():
            print(f"skip {name}: no {path}")
            continue
        tok = Tokenizer.from_file(str(path))
        ok = sum(tok.encode(c["text"], add_special_tokens=False).ids == c["ids"] for c in golden[name])
        print(f"tokenizers on exported {name}/tokenizer.json: {ok}/{len(golden[name])} family cases equal")


def metaspace_variants(export_dir):
    """The exported Llama-2 tokenizer.json with its normalizer replaced by a Metaspace pre-tokenizer
    (transformers' non-legacy Llama / Mistral layouts), run by `tokenizers`."""
    from tokenizers import Tokenizer
    import tokenizers
    src = Path(export_dir) / "llama-spm" / "tokenizer.json"
    base = json.loads(src.read_text(encoding="utf-8"))
    texts = [t for t, _ in read_cases(SHARED / "tokenizer-vectors" / "ggml-vocab-llama-spm.gguf")] + [
        "<s>Hello world</s> and <unk> more", "  two leading spaces", "\u2581already marked \u2581x"]
    out = {"source": f"tokenizers {tokenizers.__version__} on the exported llama-spm tokenizer.json with "
                     "normalizer null and the pre_tokenizer given here"}
    for name, scheme, split in (("first_nosplit", "first", False), ("always_split", "always", True)):
        pre = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}
        j = dict(base, normalizer=None, pre_tokenizer=pre)
        tok = Tokenizer.from_str(json.dumps(j))
        out[name] = {"pre_tokenizer": pre,
                     "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in texts]}
    write("spm_metaspace.json", out)


def check_exported_vectors(export_dir):
    from tokenizers import Tokenizer
    for v in VOCABS:
        path = Path(export_dir) / v / "tokenizer.json"
        if not path.exists():
            print(f"skip {v}: no {path}")
            continue
        tok = Tokenizer.from_file(str(path))
        cases = read_cases(SHARED / "tokenizer-vectors" / f"ggml-vocab-{v}.gguf")
        bad = [(t, ids, tok.encode(t, add_special_tokens=False).ids) for t, ids in cases
               if tok.encode(t, add_special_tokens=False).ids != ids]
        print(f"tokenizers on exported {v}/tokenizer.json: {len(cases) - len(bad)}/{len(cases)} vector cases equal")
        for t, want, got in bad[:3]:
            print(f"   {t!r}: want {want} got {got}")


def llamacpp(binary, wiki_text):
    data = wiki_text.encode("utf-8")
    wiki = {}
    for v in ["smollm2"] + VOCABS:
        gguf = MODEL if v == "smollm2" else SHARED / "tokenizer-vectors" / f"ggml-vocab-{v}.gguf"
        ids = llama_tokenize(binary, gguf, data, True, False)
        wiki[v] = {"count": len(ids), "crc32": crc(ids)}
    bad_utf8 = (b"ok \xff\xfe caf\xc3 \xe2\x82 \xed\xa0\x80 \xc0\xaf x\xf0\x9f\x98 y 12\xe0\xa4\xb9 "
                b"\x80end\xc3")
    chat = (b"<|im_start|>system\nYou are nice.<|im_end|>\n<|im_start|>user\n"
            b"Hi  <|endoftext|> there<file_sep>x")
    phi = b"<s>[INST] Hi </s>  <|end|>\n hello<|user|>  x</s> y"
    spaces = b"a    b     c\n\n   d\t\t  e" + b" " * 30 + b"f"
    inputs = [("smollm2", chat), ("smollm2", bad_utf8), ("llama-spm", bad_utf8), ("llama-spm", phi),
              ("phi-3", phi), ("gpt-2", bad_utf8), ("mpt", spaces), ("deepseek-coder", "õ÷Áý x".encode()),
              ("starcoder", chat)]
    strings = []
    for v, data_s in inputs:
        gguf = MODEL if v == "smollm2" else SHARED / "tokenizer-vectors" / f"ggml-vocab-{v}.gguf"
        for parse_special in (False, True):
            for add in (False, True):
                strings.append({"vocab": v, "hex": data_s.hex(), "parse_special": parse_special,
                                "add_special": add,
                                "ids": llama_tokenize(binary, gguf, data_s, parse_special, add)})
    write("llamacpp.json", {"source": f"llama.cpp llama-tokenize ({binary}) -bf FILE --ids "
                                      "[--no-parse-special] [--no-bos]; wiki: parse special, no BOS",
                            "wiki": wiki, "strings": strings})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True, help="QT_TOKENIZER_EXPORT_DIR used when running test_tokenizer")
    ap.add_argument("--llama-tokenize", help="llama.cpp's llama-tokenize binary (for llamacpp.json)")
    a = ap.parse_args()
    wiki_text = WIKI.read_bytes().decode("utf-8")
    check_exported_vectors(a.export)
    smollm2(a.export, wiki_text, a.llama_tokenize)
    bpe_families(wiki_text)
    check_exported_families(a.export)
    metaspace_variants(a.export)
    if a.llama_tokenize:
        llamacpp(a.llama_tokenize, wiki_text)


if __name__ == "__main__":
    main()
