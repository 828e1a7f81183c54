// `convert --format gguf --target-bpw B` (calib/target_bpw.h): the GGUF candidates. Each 2-D
// weight's ggml type among Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1, Q8_0 and, with rows a multiple of 256,
// Q2_K, Q3_K, IQ4_XS, Q4_K, Q5_K, Q6_K; quantized as the GGUF export does
// (ggml_quantize_weighted with its --imatrix importances); the sensitivity probed at Q4_0.
#pragma once
#include <string>
#include <vector>

#include "calib/target_bpw.h"
#include "formats/checkpoint.h"
#include "formats/ggml_blocks.h"

namespace qt::calib {

// The candidates for ck's weights (names: ggml's, "Q4_0"; labels: the GGUF tensor names).
TargetCandidates gguf_target_candidates(const Checkpoint& ck);

// The plan as `--tensor-type` lines, one per weight: ^blk\.0\.attn_q\.weight$=q4_1.
std::vector<std::string> gguf_target_recipe(const TargetPlan& plan);

// The type holding the most bytes of the plan (lower-case name, e.g. "q4_1"): the file's
// general.file_type when --gguf-type is not given.
std::string gguf_target_main_type(const TargetPlan& plan);

}  // namespace qt::calib
