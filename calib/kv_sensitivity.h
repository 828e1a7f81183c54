// Per-layer KV-cache sensitivity (the w_i of bit_allocation.h), measured on calibration
// text: for each layer and side (keys, values), the mean KL divergence of the next-token
// distribution when only that layer's side is quantized with the reference method, all else
// in the fp16 cache. Chunks follow llama-perplexity's protocol (the second half of each chunk
// scored); decode visibility (what generation sees).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "libquant/kv/spec.h"
#include "libquant/model/llama.h"

namespace qt::calib {

struct KvSensitivityOptions {
  kv::KVSpec reference;  // the method at the bit width the sensitivities are measured with
  int ctx = 512;
  int chunks = 2;
  int residual = -1;  // as eval-ppl --kv-residual
  int bos_id = -1;    // replaces each chunk's first token (llama protocol), −1: none
  uint64_t seed = 42;
  std::string artifacts;
};

struct KvSensitivity {
  std::vector<double> k, v;  // mean KLD per layer
  double base_ppl = 0;       // the fp16-cache model on the same rows
  int64_t rows = 0;          // scored positions
};

// progress(done, total) after each of the 2·n_layers + 1 passes.
KvSensitivity measure_kv_sensitivity(LlamaModel& model, const std::vector<int32_t>& tokens,
                                     const KvSensitivityOptions& o, const std::function<void(int, int)>& progress = {});

}  // namespace qt::calib
