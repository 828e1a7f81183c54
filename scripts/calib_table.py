#!/usr/bin/env python3
"""The calibrated-quantization table and plot of results/calib.md, from results/calib/*.json
(made by scripts/device_calib_table.sh: 64 chunks of wiki.test.raw, KLD against the SmolLM2 Q4_1
GGUF). Prints a Markdown table; with --plot FILE (matplotlib) draws KLD (log) against bits per
weight for our rows by method beside llama.cpp's types, and our GGUF files beside llama-quantize's
(the GGUF list below).

  python3 scripts/calib_table.py                       # the table
  python3 scripts/calib_table.py --plot results/calib/kld_vs_bpw.png
"""
import argparse
import glob
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# row -> (method, convert flags beyond --in/--out; S = the act-stats file, V = wiki.valid.tokens.txt;
# --gptq calibrates on 32 chunks: --calib-chunks 32)
ROWS = {
    "w8a8": ("RTN", "--scheme int8 --group-size 0"),
    "w8a8-smooth": ("SmoothQuant", "--scheme int8 --group-size 0 --smooth S --alpha 0.5"),
    "w8a8-gptq": ("GPTQ", "--scheme int8 --group-size 0 --gptq --calib V"),
    "w4a8-gptq": ("GPTQ", "--scheme int4 --group-size 0 --gptq --calib V"),
    "w4a8-gptq-imat": ("GPTQ+imatrix", "--scheme int4 --group-size 0 --gptq --calib V --imatrix S"),
    "w4a8-g128-gptq-imat": ("GPTQ+imatrix", "--scheme int4 --group-size 128 --gptq --calib V --imatrix S"),
    "a4-rtn": ("RTN", "--scheme affine --bits 4 --group-size 64 --dtype bf16"),
    "a4-imat": ("imatrix", "--scheme affine --bits 4 --group-size 64 --dtype bf16 --imatrix S"),
    "a4-gptq-imat": ("GPTQ+imatrix", "--scheme affine --bits 4 --group-size 64 --dtype bf16 --gptq --calib V --imatrix S"),
    "a4-mix-rtn": ("RTN", "--scheme affine --bits 4 --group-size 64 --dtype bf16 --recipe q4-mix"),
    "a4-mix-imat": ("imatrix", "--scheme affine --bits 4 --group-size 64 --dtype bf16 --recipe q4-mix --imatrix S"),
    "a4-mix-gptq-imat": ("GPTQ+imatrix", "--scheme affine --bits 4 --group-size 64 --dtype bf16 --recipe q4-mix --gptq --calib V --imatrix S"),
    "a4-g32-e6-gptq-imat": ("GPTQ+imatrix", "--scheme affine --bits 4 --group-size 32 --dtype bf16 --embedding-bits 6 --gptq --calib V --imatrix S"),
    "a3-mix-rtn": ("RTN", "--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe q3-mix"),
    "a3-mix-gptq-imat": ("GPTQ+imatrix", "--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe q3-mix --gptq --calib V --imatrix S"),
    "a4-gptq-imat-actorder": ("GPTQ+imatrix", "--scheme affine --bits 4 --group-size 64 --dtype bf16 --gptq --calib V --act-order --imatrix S"),
    "a3-mix-imat": ("imatrix", "--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe q3-mix --imatrix S"),
    "a3-g32-mix-gptq-imat": ("GPTQ+imatrix", "--scheme affine --bits 3 --group-size 32 --dtype bf16 --recipe q3-mix --embedding-bits 6 --gptq --calib V --imatrix S"),
    "w4a8-keepemb-gptq-imat": ("GPTQ+imatrix", "--scheme int4 --group-size 0 --recipe keep-embedding --gptq --calib V --imatrix S"),
    "w8a8-smooth-0.8": ("SmoothQuant", "--scheme int8 --group-size 0 --smooth S --alpha 0.8"),
    "w8a8-smooth-gptq": ("SmoothQuant", "--scheme int8 --group-size 0 --smooth S --alpha 0.5 --gptq --calib V"),
    "nf4-gptq-imat": ("GPTQ+imatrix", "--scheme nf4 --group-size 64 --format native --embedding-bits 4 --gptq --calib V --imatrix S"),
    # Second round: searched SmoothQuant α, AWQ (the searches on 4 chunks of V), Q3_K_M-shaped mixes.
    "w8a8-smooth-auto": ("SmoothQuant auto", "--scheme int8 --group-size 0 --smooth S --alpha auto --calib V --search-chunks 4"),
    "w8a8-smooth-auto-gptq": ("SmoothQuant auto+GPTQ", "--scheme int8 --group-size 0 --smooth S --alpha auto --calib V --search-chunks 4 --gptq"),
    "w4a8-keepemb-smoothauto-gptq-imat": ("SmoothQuant auto+GPTQ", "--scheme int4 --group-size 0 --recipe keep-embedding --smooth S --alpha auto --calib V --search-chunks 4 --gptq --imatrix S"),
    "w4a8-smoothauto-gptq-imat": ("SmoothQuant auto+GPTQ", "--scheme int4 --group-size 0 --smooth S --alpha auto --calib V --search-chunks 4 --gptq --imatrix S"),
    "w4a8-keepemb-awq-gptq-imat": ("AWQ+GPTQ+imatrix", "--scheme int4 --group-size 0 --recipe keep-embedding --awq --calib V --search-chunks 4 --gptq --imatrix S"),
    "w4a8-keepemb-awq-noclip-gptq-imat": ("AWQ+GPTQ+imatrix", "--scheme int4 --group-size 0 --recipe keep-embedding --awq --no-clip --calib V --search-chunks 4 --gptq --imatrix S"),
    "w4a8-awq-gptq-imat": ("AWQ+GPTQ+imatrix", "--scheme int4 --group-size 0 --awq --calib V --search-chunks 4 --gptq --imatrix S"),
    "a4-awq": ("AWQ", "--scheme affine --bits 4 --group-size 64 --dtype bf16 --awq --calib V --search-chunks 4"),
    "a4-awq-gptq-imat": ("AWQ+GPTQ+imatrix", "--scheme affine --bits 4 --group-size 64 --dtype bf16 --awq --calib V --search-chunks 4 --gptq --imatrix S"),
    "a4-awq-noclip-gptq-imat": ("AWQ+GPTQ+imatrix", "--scheme affine --bits 4 --group-size 64 --dtype bf16 --awq --no-clip --calib V --search-chunks 4 --gptq --imatrix S"),
    "a3-mix-awq": ("AWQ", "--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe q3-mix --awq --calib V --search-chunks 4"),
    "a3-mix-awq-gptq-imat": ("AWQ+GPTQ+imatrix", "--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe q3-mix --awq --calib V --search-chunks 4 --gptq --imatrix S"),
    "a3-g32-mixm-gptq-imat": ("GPTQ+imatrix", "--scheme affine --bits 3 --group-size 32 --dtype bf16 --recipe q3-mix-m --embedding-bits 6 --gptq --calib V --imatrix S"),
    "a3-g32-mixm-gptq-imat-actorder": ("GPTQ+imatrix", "--scheme affine --bits 3 --group-size 32 --dtype bf16 --recipe q3-mix-m --embedding-bits 6 --gptq --calib V --act-order --imatrix S"),
    "w8a8-smooth-auto8-gptq": ("SmoothQuant auto+GPTQ", "--scheme int8 --group-size 0 --smooth S --alpha auto --calib V --search-chunks 8 --gptq"),
    "w4a8-keepemb-smoothauto-gptq-imat-actorder": ("SmoothQuant auto+GPTQ", "--scheme int4 --group-size 0 --recipe keep-embedding --smooth S --alpha auto --calib V --search-chunks 4 --gptq --act-order --imatrix S"),
    "w4a8-keepemb-smoothauto8-gptq64-imat": ("SmoothQuant auto+GPTQ", "--scheme int4 --group-size 0 --recipe keep-embedding --smooth S --alpha auto --calib V --search-chunks 8 --gptq --calib-chunks 64 --imatrix S"),
    "w4a8-keepemb-awq-noclip-gptq-imat-actorder": ("AWQ+GPTQ+imatrix", "--scheme int4 --group-size 0 --recipe keep-embedding --awq --no-clip --calib V --search-chunks 4 --gptq --act-order --imatrix S"),
    "w4a8-smoothauto-gptq-imat-actorder": ("SmoothQuant auto+GPTQ", "--scheme int4 --group-size 0 --smooth S --alpha auto --calib V --search-chunks 4 --gptq --act-order --imatrix S"),
    "a3-g32-mixl-gptq-imat-actorder": ("GPTQ+imatrix", "--scheme affine --bits 3 --group-size 32 --dtype bf16 --recipe q3-mix-l --embedding-bits 6 --gptq --calib V --act-order --imatrix S"),
    "a3-mixl-gptq-imat": ("GPTQ+imatrix", "--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe q3-mix-l --gptq --calib V --imatrix S"),
    "a3-g32-mixl-gptq-imat": ("GPTQ+imatrix", "--scheme affine --bits 3 --group-size 32 --dtype bf16 --recipe q3-mix-l --embedding-bits 6 --gptq --calib V --imatrix S"),
    # Stop 27: the residual stream rotated first (R = `convert --rotate --dtype f32` of the GGUF,
    # S_R = act-stats on R, 64 chunks), then R quantized; run on the 2-core Zen 3 (AVX2), not the Xeon.
    "w4a8-rot-keepemb-gptq-imat-actorder": ("Rotation+GPTQ+imatrix", "--in R --scheme int4 --group-size 0 --recipe keep-embedding --dtype bf16 --gptq --calib V --act-order --imatrix S_R"),
    "w4a8-rot-keepembhead-gptq-imat-actorder": ("Rotation+GPTQ+imatrix", "--in R --scheme int4 --group-size 0 --recipe keep-embedding-head --dtype bf16 --gptq --calib V --act-order --imatrix S_R"),
    "w4a8-rot-keepembhead-smoothauto-gptq-imat-actorder": ("Rotation+SmoothQuant auto+GPTQ", "--in R --scheme int4 --group-size 0 --recipe keep-embedding-head --dtype bf16 --smooth S_R --alpha auto --calib V --search-chunks 4 --gptq --act-order --imatrix S_R"),
    "w4a16-g64-rtn": ("RTN", "--scheme int4_ct --group-size 64 --dtype bf16"),
    "w4a16-g64-imat": ("imatrix", "--scheme int4_ct --group-size 64 --dtype bf16 --imatrix S"),
    "w4a16-g64-gptq-imat": ("GPTQ+imatrix", "--scheme int4_ct --group-size 64 --dtype bf16 --gptq --calib V --imatrix S"),
}
NOTES = {
    "w4a8-g128-gptq-imat": "576 columns do not divide 128: only the MLP's down_proj is grouped, the rest stays float (hence 26.5 bpw)",
    "a4-g32-e6-gptq-imat": "Q4_1-sourced model: group 32 is the source's own 4-bit grid, which the weighted search recovers almost exactly; not a fair 4-bit figure",
    "w4a8-keepemb-gptq-imat": "the tied embedding / head kept bf16 (recipes/keep-embedding.json)",
    "w4a8-keepemb-awq-gptq-imat": "the tied embedding / head kept bf16",
    "w4a8-keepemb-awq-noclip-gptq-imat": "the tied embedding / head kept bf16",
    "w4a8-keepemb-smoothauto-gptq-imat": "the tied embedding / head kept bf16",
    "a3-g32-mixm-gptq-imat": "Q3_K_M's shape: q/k/gate/up 3-bit, o 4, v/down 5, head 6",
    "a3-g32-mixl-gptq-imat": "q3-mix-m with up_proj at 4 bits",
    "w4a8-rot-keepemb-gptq-imat-actorder": "rotated (`--rotate`): the embedding bf16, the untied head int4 W4A8; this 2-core Zen 3",
    "w4a8-rot-keepembhead-gptq-imat-actorder": "rotated: embedding and head bf16; this 2-core Zen 3",
    "w4a8-rot-keepembhead-smoothauto-gptq-imat-actorder": "rotated, then SmoothQuant's α searched on it: embedding and head bf16; this 2-core Zen 3",
}
# llama.cpp on the same source (results/llama: llama-cpp-python 0.3.36's
# sources, llama-imatrix -f wiki.valid.tokens.txt -c 512 --chunks 64, llama-quantize [--imatrix],
# llama-perplexity -c 512 --chunks 64 --kl-divergence against the F32 GGUF).
LLAMA = [("Q8_0", 8.51, 0.0039), ("Q5_0", 6.14, 0.0796), ("Q4_0", 5.36, 0.289), ("Q4_0 + imatrix", 5.36, 0.175),
         ("IQ4_NL + imatrix", 5.35, 0.097), ("Q4_K_S + imatrix", 5.96, 0.038), ("Q3_K_M + imatrix", 5.46, 0.090)]

# GGUF files, ours and llama.cpp's at the same tensor types and sizes (results/gguf.md, "Calibrated
# rounding" and "--target-bpw"): (label, MiB of tensors as llama-quantize prints, ours, llama.cpp's),
# each a llama-perplexity statistics file under results/ (64 chunks, KLD against the F32 GGUF).
# Ours: convert --format gguf --gptq --act-order --imatrix S (target: --target-bpw 4.5); llama.cpp's:
# llama-quantize --imatrix of llama-imatrix --chunks 64. Target 4.5 is set against llama.cpp's
# --pure IQ4_NL of the same size.
GGUF = [("Q2_K", 82.41, "gguf-gptq/kld64_xao_q2_k_mix.txt", "gguf-gptq/kld64_lq_q2_k_mix.txt"),
        ("Q3_K_M", 87.48, "gguf-gptq/kld64_xao_q3_k_m.txt", "gguf-gptq/kld64_lq_q3_k_m.txt"),
        ("Q4_0", 72.27, "gguf-gptq/kld64_xao_q4_0.txt", "gguf-gptq/kld64_lq_q4_0.txt"),
        ("IQ4_XS", 84.98, "gguf-gptq/kld64_xao_iq4_xs_mix.txt", "gguf-gptq/kld64_lq_iq4_xs_mix.txt"),
        ("Q4_K_M", 98.87, "gguf-gptq/kld64_xao_q4_k_m.txt", "gguf-gptq/kld64_lq_q4_k_m.txt"),
        ("target 4.5 / IQ4_NL", 72.27, "gguf-target/kld64_tb45k.txt", "gguf-target/kld64_im_lq_IQ4_NL.txt")]
# Ours alone (no llama.cpp file of that size): convert --rotate, then the GGUF GPTQ recipe on the
# rotated model; its untied head is one more Q4_0 tensor (49152 × 576: 15.19 MiB).
GGUF_ALONE = [("Q4_0 --rotate", 72.27 + 15.19, "gguf-rotate/kld64_rxao_q4_0.txt")]
N_PARAMS = 134515008  # SmolLM2-135M


def gguf_points():
    """[(label, bpw, KLD ours, KLD llama.cpp's)], [(label, bpw, KLD ours)] from the GGUF statistics files."""
    def kld(rel):
        for line in open(os.path.join(ROOT, "results", rel)):
            if line.startswith("Mean    KLD:"):
                return float(line.split()[2])
        raise ValueError(rel + ": no Mean KLD line")
    return ([(n, mib * 2**20 * 8 / N_PARAMS, kld(o), kld(l)) for n, mib, o, l in GGUF],
            [(n, mib * 2**20 * 8 / N_PARAMS, kld(o)) for n, mib, o in GGUF_ALONE])


def load():
    rows = []
    for name in ROWS:
        p = os.path.join(ROOT, "results", "calib", name + ".json")
        if not os.path.exists(p):
            continue
        j = json.load(open(p))
        log = open(os.path.join(ROOT, "results", "calib", name + ".convert.log")).read()
        conv = [l for l in log.splitlines() if l.startswith("converted")]
        secs = float(conv[0].split("load ")[1].split(" s")[0]) if conv else float("nan")
        rows.append(dict(name=name, method=ROWS[name][0], flags=ROWS[name][1], ppl=j["ppl"], ppl_err=j["ppl_err"],
                         kld=j["kld"]["kld_mean"], top=100 * j["kld"]["same_top"], bpw=j["bits_per_weight"],
                         convert_s=secs))
    return rows


def table(rows):
    print("| row | method | PPL | KLD | same top % | bits/weight | convert s | flags |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        note = NOTES.get(r["name"], "")
        print(f"| {r['name']} | {r['method']} | {r['ppl']:.4f} ± {r['ppl_err']:.4f} | {r['kld']:.5f} | {r['top']:.2f} | "
              f"{r['bpw']:.3f} | {r['convert_s']:.0f} | `{r['flags']}`{' — ' + note if note else ''} |")
    for n, b, k in LLAMA:
        print(f"| llama.cpp {n} | llama-quantize | | {k} | | {b} | | |")
    pairs, alone = gguf_points()
    for n, b, k in alone:
        print(f"| GGUF {n} | quanttool GGUF | | {k:.5f} | | {b:.3f} | | |")
    for n, b, ko, kl in pairs:
        print(f"| GGUF {n} | quanttool GGUF / llama-quantize | | {ko:.5f} / {kl:.5f} | | {b:.3f} | | |")


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(15, 6.5), gridspec_kw={"width_ratios": [3, 2]})
    marks = {"RTN": "o", "imatrix": "s", "GPTQ": "^", "GPTQ+imatrix": "D", "SmoothQuant": "v",
             "SmoothQuant auto": "<", "SmoothQuant auto+GPTQ": ">", "AWQ": "P", "AWQ+GPTQ+imatrix": "*",
             "Rotation+GPTQ+imatrix": "h", "Rotation+SmoothQuant auto+GPTQ": "H"}
    for m, mk in marks.items():
        pts = [r for r in rows if r["method"] == m and r["bpw"] < 16 and r["name"] != "a4-g32-e6-gptq-imat"]
        if pts:
            ax.scatter([r["bpw"] for r in pts], [r["kld"] for r in pts], marker=mk, s=50, label=f"quanttool {m}")
            for r in pts:
                ax.annotate(r["name"], (r["bpw"], r["kld"]), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.scatter([b for _, b, _ in LLAMA], [k for _, _, k in LLAMA], marker="x", s=60, color="k", label="llama.cpp")
    for n, b, k in LLAMA:
        ax.annotate(n, (b, k), fontsize=7, xytext=(4, -9), textcoords="offset points")
    g, alone = gguf_points()
    ax.scatter([b for _, b, _, _ in g], [k for _, _, k, _ in g], marker="D", s=55, facecolors="none",
               edgecolors="darkmagenta", linewidths=1.8, label="quanttool GGUF (GPTQ+act-order+imatrix; llama-perplexity)")
    ax.scatter([b for _, b, _, _ in g], [k for _, _, _, k in g], marker="+", s=110, color="darkmagenta",
               label="llama.cpp GGUF (llama-quantize+imatrix), same types and size")
    # The GGUF pairs again, alone: ours above llama-quantize's at each type's size.
    for n, b, ko, kl in g:
        ax2.plot([b, b], [ko, kl], color="darkmagenta", alpha=0.5, linewidth=1.2)
        ax2.annotate(f"{n}: {ko / kl:.2f}x", (b, ko), fontsize=8, color="darkmagenta", xytext=(5, -3),
                     textcoords="offset points")
    ax2.scatter([b for _, b, _, _ in g], [k for _, _, k, _ in g], marker="D", s=55, facecolors="none",
                edgecolors="darkmagenta", linewidths=1.8, label="quanttool convert --format gguf")
    ax2.scatter([b for _, b, _, _ in g], [k for _, _, _, k in g], marker="+", s=110, color="k",
                label="llama-quantize --imatrix")
    ax2.scatter([b for _, b, _ in alone], [k for _, _, k in alone], marker="h", s=60, color="darkmagenta",
                label="quanttool --rotate, then the same (untied head)")
    for n, b, k in alone:
        ax2.annotate(n, (b, k), fontsize=8, color="darkmagenta", xytext=(5, -3), textcoords="offset points")
    ax2.set_yscale("log")
    ax2.set_xlabel("bits per weight (tensor bytes)")
    ax2.set_title("GGUF: quanttool vs llama.cpp, same types and size", fontsize=10)
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8, loc="lower left")
    ax.set_yscale("log")
    ax.set_xlabel("bits per weight (every stored byte)")
    ax.set_ylabel("KLD vs unquantized (64 chunks, wiki.test.raw)")
    ax.set_title("SmolLM2-135M-Instruct: weight quantization, KLD against size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower center", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--plot", help="write the KLD-vs-bits PNG here (needs matplotlib)")
    a = ap.parse_args()
    rows = load()
    table(rows)
    if a.plot:
        plot(rows, a.plot)
