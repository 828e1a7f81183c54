#!/usr/bin/env python3
"""Goldens for reading and writing llama.cpp's importance-matrix files (tests/test_llama_imatrix.cpp).

Run:  PYTHONPATH=<llama.cpp>/gguf-py LLAMA_BIN=<llama.cpp build>/bin python3 tests/golden/make_imatrix_goldens.py
      (gguf-py and numpy; LLAMA_BIN must hold llama-imatrix)

tests/golden/imatrix/tiny-spm.gguf
    A random 2-layer llama (hidden 64, 4 heads of 16, 2 kv heads, feed-forward 128, untied output)
    written with gguf.GGUFWriter, F16 weights, F32 norms, with a SentencePiece vocabulary of the
    259 tokens <unk>, <s>, </s> and the 256 byte tokens <0x00>..<0xFF>: every text tokenizes to
    its UTF-8 bytes (llama.cpp's byte fallback), so llama-imatrix and quanttool read the same
    tokens from the same text without a real vocabulary.

tests/golden/imatrix/tiny-spm.imatrix.gguf, tiny-spm.imatrix.dat
    llama-imatrix on tiny-spm.gguf over the first 4 chunks of 64 tokens of
    data/wikitext-2/wiki.valid.tokens.txt, the output head included (--process-output):
        llama-imatrix -m tiny-spm.gguf -f wiki.valid.tokens.txt -c 64 --chunks 4 --process-output
                      --no-ppl [-o X.gguf | --output-format dat -o X.dat]
    (the current GGUF form with <name>.in_sum2 / <name>.counts, and the legacy binary .dat).

tests/golden/imatrix/tiny-spm-moe.gguf, tiny-spm-moe.imatrix.gguf, tiny-spm-moe.imatrix.dat
    The same model with a mixture of experts in every layer, as llama.cpp stores Mixtral (arch
    llama, expert_count 4, expert_used_count 2, F32 ffn_gate_inp, F16 ffn_{gate,up,down}_exps of
    feed-forward 32), and llama-imatrix's files from the same command. The embedding's channel 0
    is +8 for every token and the routers weigh it +4 for experts 0-2 and -4 for expert 3, so
    the text never reaches expert 3: its counts are 0 in llama.cpp's file.

tests/golden/imatrix/expected.json
    What llama-quantize would take from each file, read here independently: per entry (llama.cpp
    name) the importance in float32, in_sum2 / counts for the GGUF (common/imatrix-loader.cpp then
    tools/quantize/quantize.cpp load_imatrix), values / ncall for the .dat; and the GGUF's
    metadata (datasets, chunk_count, chunk_size) and counts.
"""
import json
import os
import struct
import subprocess
import tempfile

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "imatrix")
ROOT = os.path.dirname(os.path.dirname(HERE))
TEXT = os.path.join(ROOT, "data", "wikitext-2", "wiki.valid.tokens.txt")

H, F, L, NH, NKV, V = 64, 128, 2, 4, 2, 259
E, K, FE = 4, 2, 32  # the MoE model's experts, experts per token, expert feed-forward


def write_model(path, moe=False):
    rng = np.random.default_rng(32)
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name("tiny-spm-moe" if moe else "tiny-spm")
    w.add_vocab_size(V)
    w.add_context_length(256)
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(FE if moe else F)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(H // NH)
    w.add_file_type(1)  # MOSTLY_F16
    if moe:
        w.add_expert_count(E)
        w.add_expert_used_count(K)
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * V)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def mat(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float16)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(H)).astype(np.float32)

    hd = H // NH
    embd = mat(V, H, 1.0)
    if moe:
        embd[:, 0] = 8.0  # a channel every token carries: the routers keep expert 3 unreached
    w.add_tensor("token_embd.weight", embd)
    for i in range(L):
        p = "blk.%d." % i
        w.add_tensor(p + "attn_norm.weight", norm())
        w.add_tensor(p + "attn_q.weight", mat(NH * hd, H, 0.125))
        w.add_tensor(p + "attn_k.weight", mat(NKV * hd, H, 0.125))
        w.add_tensor(p + "attn_v.weight", mat(NKV * hd, H, 0.125))
        w.add_tensor(p + "attn_output.weight", mat(H, NH * hd, 0.125))
        w.add_tensor(p + "ffn_norm.weight", norm())
        if moe:
            router = (rng.standard_normal((E, H)) * 0.125).astype(np.float32)
            router[:, 0] = [4.0, 4.0, 4.0, -4.0]
            w.add_tensor(p + "ffn_gate_inp.weight", router)
            w.add_tensor(p + "ffn_gate_exps.weight", np.stack([mat(FE, H, 0.125) for _ in range(E)]))
            w.add_tensor(p + "ffn_up_exps.weight", np.stack([mat(FE, H, 0.125) for _ in range(E)]))
            w.add_tensor(p + "ffn_down_exps.weight", np.stack([mat(H, FE, 0.09) for _ in range(E)]))
            continue
        w.add_tensor(p + "ffn_gate.weight", mat(F, H, 0.125))
        w.add_tensor(p + "ffn_up.weight", mat(F, H, 0.125))
        w.add_tensor(p + "ffn_down.weight", mat(H, F, 0.09))
    w.add_tensor("output_norm.weight", norm())
    w.add_tensor("output.weight", mat(V, H, 0.125))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_gguf_imatrix(path):
    r = gguf.GGUFReader(path)
    t = {x.name: np.asarray(x.data, dtype=np.float32).reshape(-1) for x in r.tensors}
    out, counts = {}, {}
    for name in sorted(t):
        if not name.endswith(".in_sum2"):
            continue
        base = name[: -len(".in_sum2")]
        c = np.float32(round(float(t[base + ".counts"][0])))
        out[base] = [float(v) for v in (t[name] / c).astype(np.float32)]
        counts[base] = float(c)

    def field(k):
        f = r.fields[k]
        if k == "imatrix.datasets":
            return [bytes(f.parts[i]).decode() for i in f.data]
        return int(f.parts[f.data[0]][0])

    meta = {k: field(k) for k in ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size")}
    return out, counts, meta


def read_dat_imatrix(path):
    b = open(path, "rb").read()
    pos = 0

    def i32():
        nonlocal pos
        v = struct.unpack_from("<i", b, pos)[0]
        pos += 4
        return v

    out = {}
    for _ in range(i32()):
        n = i32()
        name = b[pos : pos + n].decode()
        pos += n
        ncall, nval = i32(), i32()
        v = np.frombuffer(b, dtype=np.float32, count=nval, offset=pos)
        pos += 4 * nval
        out[name] = [float(x) for x in (v / np.float32(ncall)).astype(np.float32)]
    return out


def run_imatrix(name):
    """llama-imatrix's GGUF and .dat files for tests/golden/imatrix/<name>.gguf."""
    model = os.path.join(OUT, name + ".gguf")
    imatrix = os.path.join(os.environ["LLAMA_BIN"], "llama-imatrix")
    gg = os.path.join(OUT, name + ".imatrix.gguf")
    dat = os.path.join(OUT, name + ".imatrix.dat")
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "wiki.valid.tokens.txt")  # the dataset name written is the base name
        with open(TEXT, "rb") as f, open(text, "wb") as g:
            g.write(f.read(4096))
        base = [imatrix, "-m", model, "-f", "wiki.valid.tokens.txt", "-c", "64", "--chunks", "4",
                "--process-output", "--no-ppl", "-t", "2"]
        subprocess.run(base + ["-o", gg], check=True, cwd=tmp)
        subprocess.run(base + ["--output-format", "dat", "-o", dat], check=True, cwd=tmp)
    return gg, dat


def main():
    os.makedirs(OUT, exist_ok=True)
    write_model(os.path.join(OUT, "tiny-spm.gguf"))
    write_model(os.path.join(OUT, "tiny-spm-moe.gguf"), moe=True)
    gg, dat = run_imatrix("tiny-spm")
    g, counts, meta = read_gguf_imatrix(gg)
    d = read_dat_imatrix(dat)
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"gguf": g, "counts": counts, "meta": meta, "dat": d}, f, indent=0)
        f.write("\n")
    run_imatrix("tiny-spm-moe")


if __name__ == "__main__":
    main()
