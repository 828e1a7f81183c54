// A KV-cache method with its parameters, as the command line and recipes spell it:
//   METHOD[:key=value,...]     e.g. "turboquant_mse:bits=3", "kivi:bits=2,group=32,r=128"
// and the per-layer configuration of a whole cache (keys and values separately), read from
// --kv-k/--kv-v or a --kv-recipe JSON file:
//   {"n_layers": 30, "k": ["kivi:bits=4", ...one per layer], "v": [...]}
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace qt::kv {

struct KeyCenter;  // key_center.h
class KVStats;     // kv_stats.h

struct KVSpec {
  std::string method = "f32";
  std::map<std::string, std::string> params;

  // Canonical text: method, then the parameters sorted by key.
  std::string text() const;
  bool has(const std::string& k) const { return params.count(k) != 0; }
  // A parameter as a number; UserError naming `what` (the flag) when it is not one.
  double number(const std::string& k, double fallback, const std::string& what) const;
  std::string str(const std::string& k, const std::string& fallback) const;
  // Whether every value is stored at full precision (f32, f16, bf16): no codec, no residual window.
  bool full_precision() const { return method == "f32" || method == "f16" || method == "bf16"; }
};

// Parses "METHOD[:k=v,...]"; UserError naming `what` on a malformed spec. The method is not
// checked here (the method table does that, with the head dimension at hand).
KVSpec parse_kv_spec(const std::string& text, const std::string& what);

enum class KVMode { Cache, Decode };

// What each layer stores and how attention reads it.
struct KVConfig {
  std::vector<KVSpec> k, v;  // one per layer
  int residual = -1;         // full-precision window (newest tokens) of quantized sides; −1: each
                             // method's default (128 for kivi, as in its paper; 0 for the others);
                             // a spec's r=N overrides it for that side
  KVMode mode = KVMode::Cache;
  std::string artifacts;                        // precompute folder, or empty: compute rotations/codebooks here
  uint64_t seed = 42;                           // rotations and JL matrices (must match the artifacts')
  std::shared_ptr<const KeyCenter> key_center;  // when set, keys are stored minus these means
  std::shared_ptr<KVStats> stats;               // when set, the quantized cache adds its reconstruction and
                                                // score errors here (eval-ppl --kv-stats)

  // Every layer, keys and values, at full precision of one kind ("f32", "f16" or "bf16"): the
  // fast dense cache serves it. Empty when mixed or quantized.
  std::string uniform_full_precision() const;
  // A short description for tables: "k=turboquant_mse:bits=3 v=… (r=0, decode)" or "mixed (recipe)".
  std::string describe() const;
};

// All layers the same.
KVConfig uniform_kv_config(int n_layers, const KVSpec& k, const KVSpec& v);
// Reads a recipe (format above); UserError when its layer count differs from n_layers.
KVConfig read_kv_recipe(const std::string& path, int n_layers);
void write_kv_recipe(const std::string& path, const KVConfig& c, const std::string& comment);

}  // namespace qt::kv
