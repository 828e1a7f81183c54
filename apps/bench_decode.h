// bench --decode: prefill a prompt of wiki.test.raw, then generate token by token (greedy), with
// any weights and KV cache; prefill and decode tokens/s and peak RSS (libquant/bench/decode_bench.h).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace qt {

struct DecodeBenchOptions {
  std::string model;
  std::string text = "data/wikitext-2/wiki.test.raw";
  int prompt = 512, gen = 128, ubatch = 512;
  std::string kv_k = "f16", kv_v = "f16";
  std::string compute = "f32";
  std::string artifacts;
  std::string weight_act;  // "", "int8" or "int8-token" (PackedLinearOptions::weight_act)
};

// Prints the result and returns it as JSON. UserError for bad options or inputs.
nlohmann::json run_bench_decode(const DecodeBenchOptions& o);

}  // namespace qt
