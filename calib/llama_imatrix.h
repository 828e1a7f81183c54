// llama.cpp's importance-matrix files, read into and written from ActStats (calib/act_stats.h), so
// that `convert --imatrix` takes what llama-imatrix writes and llama-quantize --imatrix takes what
// `calibrate --method act-stats --format gguf|dat` writes. Both hold, per Linear weight (llama.cpp
// tensor names, "blk.3.ffn_down.weight"), the sum of x_j² over the tokens seen and how many tokens:
// the importance llama-quantize uses is their quotient, mean x_j², our sqmean.
//
//  - GGUF (llama-imatrix's default; tools/imatrix/imatrix.cpp save_imatrix): keys general.type =
//    "imatrix", imatrix.datasets (string array), imatrix.chunk_count, imatrix.chunk_size (u32);
//    per weight "<name>.in_sum2" F32 [n_cols, n_mat] (Σ x²) and "<name>.counts" F32 [1, n_mat]
//    (tokens), n_mat the experts of a merged-expert weight, else 1; tensors sorted by name.
//  - legacy .dat (save_imatrix_legacy): int32 n_entries; per entry int32 name length, the name,
//    int32 ncall, int32 nval, nval floats (Σ x² / tokens · ncall); then (optional) int32 chunk count
//    and int32 length + the dataset's name. The importance is value / ncall.
// llama-quantize reads either by common/imatrix-loader.cpp and divides as above; we divide the
// same way, in float.
//
// Names: blk.N.* <-> model.layers.N.* by formats/checkpoint.cpp's table; "output.weight" and
// "token_embd.weight" (the head of a tied model) <-> "lm_head.weight"; Phi-3's fused
// "blk.N.attn_qkv.weight" stands for q/k/v_proj and its "ffn_up.weight" (gate_up) for gate/up_proj,
// all of which read the same input. llama-imatrix records the output head only with
// --process-output. A mixture of experts' merged weights ("blk.N.ffn_up_exps.weight") hold one row
// of sums and one count per expert; they are read into ActStats::expert_slices (an expert the text
// barely reached gets calib/expert_prior.h's prior, where llama-quantize would give an expert with
// no tokens an importance of 1) and named after the model's experts by resolve_expert_slices. Our
// files count each expert's prior tokens in, under the key "quanttool.expert_prior_tokens", so that
// llama-quantize's quotient is our importance and reading them back adds no second prior.
#pragma once
#include <string>

#include "calib/act_stats.h"
#include "formats/model_config.h"

namespace qt::calib {

// Whether the file at `path` starts like an act-stats safetensors file (a u64 header length and
// '{'); otherwise load_act_stats tries llama.cpp's formats.
bool looks_like_safetensors(const std::string& path);

// A llama.cpp imatrix (GGUF by its magic, else the legacy .dat) as ActStats: sqmean per weight,
// absmax empty (llama.cpp does not record it), tokens the largest count (GGUF; 0 for .dat), text
// the last dataset named. UserError "PATH: ..." for a malformed or foreign file.
ActStats load_llama_imatrix(const std::string& path);

// Names the merged-expert entries of a llama.cpp imatrix (ActStats::expert_slices) after the
// experts of model `c` ("model.layers.3.mlp.experts.5.up_proj.weight"). UserError when an entry is
// not one of the model's merged-expert weights or holds another number of experts.
void resolve_expert_slices(ActStats* s, const ModelConfig& c);

// Write `s` as llama-imatrix would (`chunks` chunks of `chunk_size` tokens, s.tokens = their
// product): GGUF with in_sum2 = sqmean · tokens and counts = tokens, or the legacy .dat with
// value = sqmean · chunks and ncall = chunks. Each stored sum is the float nearest the product
// whose quotient llama-quantize computes gives back sqmean exactly, where one exists. Names follow
// the model `c` (a tied head as token_embd.weight, Phi-3's fused projections once, a mixture of
// experts' experts gathered into their merged weight). UserError for a weight with no llama.cpp name.
void save_llama_imatrix_gguf(const std::string& path, const ActStats& s, const ModelConfig& c, int chunk_size,
                             int chunks);
void save_llama_imatrix_dat(const std::string& path, const ActStats& s, const ModelConfig& c, int chunks);

}  // namespace qt::calib
