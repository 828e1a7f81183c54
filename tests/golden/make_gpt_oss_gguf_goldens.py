#!/usr/bin/env python3
"""gpt-oss GGUFs as llama.cpp writes them (tests/test_gguf_gptoss.cpp).

Run:  LLAMA_QUANTIZE=/path/llama-quantize PYTHONPATH=<llama.cpp>/gguf-py \
        python3 tests/golden/make_gpt_oss_gguf_goldens.py <llama.cpp>
      (torch, transformers, numpy; <llama.cpp> holds convert_hf_to_gguf.py and conversion/)

The sources are the tiny gpt_oss folders of make_gpt_oss_golden.py (tests/golden/logits/):
tests/golden/gguf_gptoss/tiny-gpt-oss.bf16.gguf
    `convert_hf_to_gguf.py tiny-gpt-oss --outtype bf16`, run in-process with the 64-piece
    SentencePiece vocabulary of make_gguf_arch_goldens.py (the folders have no tokenizer):
    conversion/gpt_oss.py GptOssModel splits the fused, interleaved gate_up_proj into
    ffn_gate_exps / ffn_up_exps (and their biases), transposes the experts to [n_expert, rows, cols],
    names the sinks attn_sinks.weight; the router and 1-D tensors F32.
tests/golden/gguf_gptoss/tiny-gpt-oss-mxfp4.bf16.gguf
    The same converter on the MXFP4 folder: the experts' blocks and scales are repacked into
    ggml's block_mxfp4 (GptOssModel.repack_mxfp4: nibbles reordered, no requantization), the rest
    bf16, general.file_type MOSTLY_MXFP4_MOE (38).
tests/golden/gguf_gptoss/tiny-gpt-oss.mxfp4_moe.gguf
    `llama-quantize tiny-gpt-oss.bf16.gguf OUT MXFP4_MOE` (src/llama-quant.cpp: 3-D expert
    tensors MXFP4 by quantize_row_mxfp4_ref, every other quantizable weight Q8_0).
tests/golden/gguf_gptoss/tiny-gpt-oss.mxfp4_pure.gguf
    `llama-quantize --pure … MXFP4_MOE`: every quantizable weight MXFP4 (`--gguf-type mxfp4`).
tests/golden/gguf_gptoss/tiny-gpt-oss-mxfp4.mxfp4_moe.gguf
    llama-quantize MXFP4_MOE of the converter's file of the MXFP4 folder: the experts, already MXFP4,
    copied; the rest Q8_0.
tests/golden/gguf_gptoss/tiny-{qwen3moe,mixtral8}.mxfp4_moe.gguf
    The same llama-quantize MXFP4_MOE of make_moe_gguf_goldens.py's bf16 files (llama-quantize allows
    the mix on any architecture).
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "gguf_gptoss")
sys.path.insert(0, HERE)
from make_gguf_arch_goldens import write_tiny_vocab  # noqa: E402


def main():
    lcpp = sys.argv[1]
    sys.path.insert(0, lcpp)
    import convert_hf_to_gguf as conv  # noqa: E402
    import gguf  # noqa: E402
    from conversion import gpt_oss  # noqa: E402

    def set_vocab(self):
        write_tiny_vocab(self, gguf)

    gpt_oss.GptOssModel.set_vocab = set_vocab
    os.makedirs(OUT, exist_ok=True)
    for name in ("gpt-oss", "gpt-oss-mxfp4"):
        src = os.path.join(HERE, "logits", "tiny-" + name)
        f = os.path.join(OUT, "tiny-%s.bf16.gguf" % name)
        sys.argv = ["convert_hf_to_gguf.py", src, "--outtype", "bf16", "--outfile", f]
        conv.main()
    quantize = os.environ.get("LLAMA_QUANTIZE")
    if quantize:
        for name in ("gpt-oss", "gpt-oss-mxfp4"):
            subprocess.run([quantize, os.path.join(OUT, "tiny-%s.bf16.gguf" % name),
                            os.path.join(OUT, "tiny-%s.mxfp4_moe.gguf" % name), "MXFP4_MOE"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([quantize, "--pure", os.path.join(OUT, "tiny-gpt-oss.bf16.gguf"),
                        os.path.join(OUT, "tiny-gpt-oss.mxfp4_pure.gguf"), "MXFP4_MOE"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name in ("qwen3moe", "mixtral8"):
            subprocess.run([quantize, os.path.join(HERE, "gguf_moe", "tiny-%s.bf16.gguf" % name),
                            os.path.join(OUT, "tiny-%s.mxfp4_moe.gguf" % name), "MXFP4_MOE"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
