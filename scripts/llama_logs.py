"""Figures of a llama-perplexity log (both table scripts read llama.cpp's rows through this)."""
import re


def llama_log(path):
    """PPL (± error), the base model's PPL, KLD and same-top % of a --kl-divergence log, and the
    final estimate of a plain run; None for what the log does not have."""
    s = open(path, encoding="utf-8", errors="replace").read()

    def num(pattern):
        m = re.search(pattern, s)
        return float(m.group(1)) if m else None

    return {
        "ppl": num(r"Mean PPL\(Q\)\s*:\s*([\d.]+)"),
        "ppl_err": num(r"Mean PPL\(Q\)\s*:\s*[\d.]+\s*±\s*([\d.]+)"),
        "ppl_base": num(r"Mean PPL\(base\)\s*:\s*([\d.]+)"),
        "kld": num(r"Mean\s+KLD:\s*([-\d.]+)"),
        "same_top": num(r"Same top p:\s*([\d.]+)"),
        "final": num(r"Final estimate: PPL = ([\d.]+)"),
    }
