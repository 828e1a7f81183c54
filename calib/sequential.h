// Layer-by-layer calibration (GPTQ's sequential pass, as AutoGPTQ and llm-compressor run it):
// the calibration chunks are embedded once and carried through the blocks one at a time. For
// block l, every projection's input is accumulated as H = Σ xᵀx from the outputs of the blocks
// before it — already quantized — then each projection named in `targets` is quantized by the
// callback, and the block is re-run with the quantized (dequantized-to-fp32) projections to give
// block l+1 its inputs. After the last block the output head's input (the final-normed hidden
// states) gives its H, for "lm_head.weight" (or, for a tied model, "model.embed_tokens.weight").
// Memory: one block's dense fp32 weights and Hessians at a time (the others are not loaded), the
// chunks' hidden states, and the source's mapping; the packed results wait in a temporary file
// (packed_spill.h), so an 8B model calibrates in a few GB.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "libquant/schemes/scheme.h"

namespace qt::calib {

struct SequentialOptions {
  int ctx = 512;
  int chunks = 64;
  int32_t bos_id = -1;  // ≥ 0: each chunk starts with it
};

// Quantizes the weight `name` (w: [rows, cols] fp32) given the Hessian H [cols, cols] = Σ xᵀx of
// its input. Projections reading the same input come one after another with the same `site`
// ("model.layers.3.attn_in") and the same H, so a caller prepares H once per site — and may take
// it (move from it) then: the others of the site are then handed what is left (an 8B model's
// down_proj Hessian is 822 MB, not held twice).
using HessianQuantizer = std::function<PackedTensor(const std::string& name, const std::vector<float>& w, int64_t rows,
                                                    int64_t cols, std::vector<float>& H, const std::string& site)>;

// The pass itself, for any output form: `round` quantizes the weight `name` given its H (as
// HessianQuantizer), keeps the result itself, and returns the dequantized values the following
// blocks' forward pass uses ([rows, cols] as w; unused when `need` is false, for the output head).
using HessianRounder =
    std::function<std::vector<float>(const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols,
                                     std::vector<float>& H, const std::string& site, bool need)>;
void run_sequential(const Checkpoint& ck, const std::set<std::string>& targets, const std::vector<int32_t>& tokens,
                    const SequentialOptions& opt, const HessianRounder& round);

// The packed tensors of `targets` (HF weight names) by name. UserError for a target that is not a
// block projection or the output head, or a text shorter than one chunk.
std::map<std::string, PackedTensor> quantize_sequential(const Checkpoint& ck, const std::set<std::string>& targets,
                                                        const std::vector<int32_t>& tokens,
                                                        const SequentialOptions& opt, const HessianQuantizer& quantize);

}  // namespace qt::calib
