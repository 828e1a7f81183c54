// `convert --scheme` end to end through the quanttool binary on the tiny test models:
//  - mlx: the folder's config.json quantization blocks and every tensor's dtype, shape and bytes
//    (crc32) equal what mlx_lm's quantize_model + save_config write for the same model and
//    per-layer override (golden: tests/golden/make_quant_export_goldens.py);
//  - reading back: load_checkpoint recognizes the folder, packed_weight returns the stored bytes
//    (compared with quantize_weights of the source weights), unquantized weights give nullopt;
//  - group sizes that do not fit, --strict, and every bad input: exit 2, one line, nothing written.
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "calib/act_stats.h"
#include "calib/act_stats_io.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "libquant/schemes/packed_io.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string tiny(const std::string& name) { return test::source_dir() + "/tests/golden/logits/" + name; }

using test::read_json;

int qt_run(const std::string& args, std::string* out) { return test::run_cmd(test::quanttool_bin() + " " + args, out); }

uint32_t crc_bytes(const Tensor& t) {
  return uint32_t(crc32(0, reinterpret_cast<const Bytef*>(t.data), uInt(t.nbytes)));
}

std::string mlx_dtype(DType t) {
  switch (t) {
    case DType::BF16: return "bfloat16";
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::U32: return "uint32";
    default: return dtype_name(t);
  }
}

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  std::string p = dir + "/" + name;
  std::ofstream(p) << text;
  return p;
}

TEST(ConvertQuant, MlxFolderIsWhatMlxLmWrites) {
  const std::string tmp = test::temp_dir("cvq_mlx"), out = tmp + "/m";
  const std::string recipe =
      write_file(tmp, "r.json", R"({"rules": [{"match": "model.layers.0.mlp.down_proj.weight", "bits": 8}]})");
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + tiny("tiny-llama3") + " --out " + out +
                       " --scheme affine --bits 4 --group-size 32 --dtype bf16 --recipe " + recipe,
                   &log),
            0)
      << log;
  const json g = read_json(test::source_dir() + "/tests/golden/quant_export/golden.json")["mlx_tiny_llama3_g32_b4"];
  const json cfg = read_json(out + "/config.json");
  EXPECT_EQ(cfg["quantization"], g["quantization"]);
  EXPECT_EQ(cfg["quantization_config"], g["quantization_config"]);

  SafetensorsFile st = SafetensorsFile::open(out + "/model.safetensors");
  EXPECT_EQ(st.metadata().at("format"), "mlx");
  std::set<std::string> ours, want;
  for (auto& [name, t] : st.tensors()) ours.insert(name);
  for (auto& [name, w] : g["tensors"].items()) want.insert(name);
  EXPECT_EQ(ours, want);
  for (auto& [name, w] : g["tensors"].items()) {
    SCOPED_TRACE(name);
    if (!st.has(name)) continue;
    const Tensor& t = st.get(name);
    EXPECT_EQ(mlx_dtype(t.dtype), w["dtype"].get<std::string>());
    EXPECT_EQ(t.shape, w["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(crc_bytes(t), w["crc32"].get<uint32_t>());
  }

  // inspect: the summary by role with the recipe's exception.
  ASSERT_EQ(qt_run("inspect " + out, &log), 0) << log;
  EXPECT_NE(log.find("quantization  mlx: 16 weights quantized, 0 stored unquantized"), std::string::npos) << log;
  EXPECT_NE(log.find("except model.layers.0.mlp.down_proj.weight: affine 8-bit, group 32"), std::string::npos) << log;
}

// The stored bytes are quantize_weights of the source's weights, under the packed_layout shapes.
void expect_round_trip(const std::string& src_dir, const std::string& out, int expect_quantized) {
  Checkpoint src = load_checkpoint(src_dir);
  Checkpoint ck = load_checkpoint(out);
  int n = 0;
  for (auto& [name, t] : src.tensors) {
    SCOPED_TRACE(name);
    auto p = packed_weight(ck, name);
    if (!p) {
      if (is_float(ck.get(name).dtype)) continue;
      ADD_FAILURE() << "packed codes without a PackedTensor";
      continue;
    }
    ++n;
    std::vector<float> w = to_f32(t);
    // A stored tensor-level scale (nvfp4's global scale, shared by fused projections) is the
    // one the codes were made under.
    SchemeParams rp = p->params;
    if (find_scheme(rp.scheme).tensor_scale) std::memcpy(&rp.global_scale, p->biases.data, 4);
    PackedTensor ref = quantize_weights(w.data(), t.shape[0], t.shape[1], rp);
    ASSERT_EQ(p->data.nbytes, ref.data.nbytes);
    EXPECT_EQ(0, std::memcmp(p->data.data, ref.data.data, ref.data.nbytes));
    EXPECT_EQ(0, std::memcmp(p->scales.data, ref.scales.data, ref.scales.nbytes));
    if (ref.biases.data) {
      EXPECT_EQ(0, std::memcmp(p->biases.data, ref.biases.data, ref.biases.nbytes));
    }
    EXPECT_EQ(p->data.shape, ref.data.shape);
  }
  EXPECT_EQ(n, expect_quantized);
  EXPECT_FALSE(packed_weight(ck, "model.norm.weight"));
}

TEST(ConvertQuant, MlxReadsBackToTheSameBytes) {
  const std::string tmp = test::temp_dir("cvq_rt"), out = tmp + "/m";
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + tiny("tiny-llama3") + " --out " + out +
                       " --scheme affine --bits 3 --group-size 32 --dtype bf16",
                   &log),
            0)
      << log;
  Checkpoint ck = load_checkpoint(out);
  EXPECT_EQ(ck.source_kind, "mlx");
  EXPECT_EQ(ck.quantization["format"], "mlx");
  expect_round_trip(tiny("tiny-llama3"), out, 16);
}

TEST(ConvertQuant, NativeInt4AndInt8ReadBack) {
  const std::string tmp = test::temp_dir("cvq_native");
  for (std::string args : {"--scheme int4 --group-size 0", "--scheme int8 --format native --group-size 0"}) {
    SCOPED_TRACE(args);
    const std::string out = tmp + "/n" + std::to_string(args.size());
    std::string log;
    ASSERT_EQ(qt_run("convert --in " + tiny("tiny-llama3") + " --out " + out + " " + args, &log), 0) << log;
    const json q = read_json(out + "/config.json")["quantization_config"];
    EXPECT_EQ(q["quant_method"], "quanttool");
    EXPECT_EQ(q["activations"], "int8-per-token-dynamic");
    EXPECT_EQ(load_checkpoint(out).source_kind, "native");
    expect_round_trip(tiny("tiny-llama3"), out, 16);
  }
}

// compressed-tensors: the config is the package's own QuantizationConfig for the W8A8 preset.
TEST(ConvertQuant, CompressedTensorsConfigIsThePackages) {
  const std::string tmp = test::temp_dir("cvq_ct"), out = tmp + "/c";
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + tiny("tiny-llama3") + " --out " + out + " --scheme int8 --dtype bf16", &log), 0)
      << log;
  const json g = read_json(test::source_dir() + "/tests/golden/quant_export/golden.json")["ct_w8a8_config"];
  EXPECT_EQ(read_json(out + "/config.json")["quantization_config"], g["channel"]);
  Checkpoint ck = load_checkpoint(out);
  EXPECT_EQ(ck.source_kind, "compressed-tensors");
  EXPECT_EQ(ck.get("model.layers.0.mlp.up_proj.weight_scale").shape, (std::vector<int64_t>{64, 1}));
  expect_round_trip(tiny("tiny-llama3"), out, 14);  // Linear layers only: no embedding, no lm_head
}

// W4A16 (`--scheme int4_ct`): compressed-tensors' pack-quantized layout, as llm-compressor's
// W4A16 preset writes it for vLLM: the package's own config (golden from the package), int32
// weight_packed [out, in/8] + weight_scale + weight_shape (int64 [out, in]) per Linear, no X.weight;
// the codes read back equal quantize_weights of the source (whose bytes the package's compressor
// gives, tests/test_schemes.cpp), and the model evaluates.
TEST(ConvertQuant, CompressedTensorsW4A16IsPackQuantized) {
  const std::string tmp = test::temp_dir("cvq_ct4"), out = tmp + "/c";
  std::string log;
  ASSERT_EQ(
      qt_run("convert --in " + tiny("tiny-llama3") + " --out " + out + " --scheme int4_ct --group-size 32 --dtype bf16",
             &log),
      0)
      << log;
  EXPECT_EQ(read_json(out + "/config.json")["quantization_config"],
            read_json(test::source_dir() + "/tests/golden/quant_export/ct_w4a16_config.json"));
  SafetensorsDir st = load_safetensors_dir(out);
  const std::string m = "model.layers.1.mlp.down_proj";
  ASSERT_TRUE(st.tensors.count(m + ".weight_packed"));
  EXPECT_FALSE(st.tensors.count(m + ".weight"));
  EXPECT_EQ(st.tensors.at(m + ".weight_packed").dtype, DType::I32);
  EXPECT_EQ(st.tensors.at(m + ".weight_packed").shape, (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(st.tensors.at(m + ".weight_scale").shape, (std::vector<int64_t>{32, 2}));
  const Tensor& shape = st.tensors.at(m + ".weight_shape");
  ASSERT_EQ(shape.dtype, DType::I64);
  EXPECT_EQ(std::vector<int64_t>(shape.as<int64_t>(), shape.as<int64_t>() + 2), (std::vector<int64_t>{32, 64}));
  Checkpoint ck = load_checkpoint(out);
  EXPECT_EQ(ck.source_kind, "compressed-tensors");
  expect_round_trip(tiny("tiny-llama3"), out, 14);
  ASSERT_EQ(qt_run("inspect " + out, &log), 0) << log;
  EXPECT_NE(log.find("int4_ct 4-bit, group 32"), std::string::npos) << log;
}

// FP8_DYNAMIC (`--scheme fp8`): compressed-tensors' float-quantized layout with the package's own
// config (golden from the package), F8_E4M3 weight + weight_scale [out, 1] in the weights' dtype;
// the codes read back equal quantize_weights of the source (the package's compressor gives those
// bytes: tests/test_schemes.cpp), the model evaluates, and what we do not run is refused.
TEST(ConvertQuant, CompressedTensorsFp8IsFloatQuantized) {
  const std::string tmp = test::temp_dir("cvq_fp8"), out = tmp + "/c";
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + tiny("tiny-llama3") + " --out " + out + " --scheme fp8 --dtype bf16", &log), 0)
      << log;
  EXPECT_EQ(read_json(out + "/config.json")["quantization_config"],
            read_json(test::source_dir() + "/tests/golden/quant_export/ct_fp8_dynamic_config.json"));
  SafetensorsDir st = load_safetensors_dir(out);
  const std::string m = "model.layers.1.mlp.down_proj";
  EXPECT_EQ(st.tensors.at(m + ".weight").dtype, DType::F8_E4M3);
  EXPECT_EQ(st.tensors.at(m + ".weight").shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(st.tensors.at(m + ".weight_scale").dtype, DType::BF16);
  EXPECT_EQ(st.tensors.at(m + ".weight_scale").shape, (std::vector<int64_t>{32, 1}));
  EXPECT_EQ(load_checkpoint(out).source_kind, "compressed-tensors");
  expect_round_trip(tiny("tiny-llama3"), out, 14);
  ASSERT_EQ(qt_run("inspect " + out, &log), 0) << log;
  EXPECT_NE(log.find("fp8"), std::string::npos) << log;
  for (const char* bad : {"--scheme fp8 --group-size 128", "--scheme fp8 --format mlx", "--scheme fp8 --bits 4"}) {
    EXPECT_EQ(qt_run("convert --in " + tiny("tiny-llama3") + " --out " + tmp + "/bad " + bad, &log), 2) << bad;
    EXPECT_NE(log.find("error:"), std::string::npos) << log;
  }
  // Folders of other FP8 schemes are refused, not computed another way: weight blocks other than
  // FP8_BLOCK's 128×128 (tests/test_fp8_block.cpp), and float weights without dynamic fp8 activations.
  const json cfg = read_json(out + "/config.json");
  for (int k = 0; k < 2; ++k) {
    json c = cfg;
    json& g = c["quantization_config"]["config_groups"]["group_0"];
    if (k == 0) {
      g["weights"]["strategy"] = "block";
      g["weights"]["block_structure"] = {64, 64};
    } else {
      g["input_activations"] = nullptr;
    }
    write_file(out, "config.json", c.dump());
    EXPECT_EQ(qt_run("inspect " + out, &log), 2) << k;
    EXPECT_NE(log.find("error:"), std::string::npos) << log;
  }
}

// NVFP4 / MXFP4 (`--scheme nvfp4`, `nvfp4_a4`, `mxfp4`, `mxfp4_a4`): the package's nvfp4- / mxfp4-
// pack-quantized layout with its own preset config (goldens from the package), weight_packed U8
// [out, in/2], E4M3 or E8M0 weight_scale, NVFP4's F32 weight_global_scale; read back to the bytes
// quantize_weights gives (the package's compressor gives those: tests/test_fp4_ct.cpp).
TEST(ConvertQuant, CompressedTensorsFp4IsThePackagesPreset) {
  const std::string tmp = test::temp_dir("cvq_fp4");
  const std::pair<const char*, const char*> rows[] = {
      {"nvfp4", "nvfp4a16"}, {"nvfp4_a4", "nvfp4"}, {"mxfp4", "mxfp4a16"}, {"mxfp4_a4", "mxfp4"}};
  for (auto [row, preset] : rows) {
    SCOPED_TRACE(row);
    const std::string out = tmp + "/" + row;
    std::string log;
    ASSERT_EQ(
        qt_run("convert --in " + tiny("tiny-llama3") + " --out " + out + " --scheme " + row + " --dtype bf16", &log), 0)
        << log;
    EXPECT_EQ(read_json(out + "/config.json")["quantization_config"],
              read_json(test::source_dir() + "/tests/golden/quant_export/ct_" + preset + "_config.json"));
    SafetensorsDir st = load_safetensors_dir(out);
    const std::string m = "model.layers.1.mlp.down_proj";
    const bool nv = std::string(row).rfind("nvfp4", 0) == 0;
    EXPECT_FALSE(st.tensors.count(m + ".weight"));
    EXPECT_EQ(st.tensors.at(m + ".weight_packed").dtype, DType::U8);
    EXPECT_EQ(st.tensors.at(m + ".weight_packed").shape, (std::vector<int64_t>{32, 32}));
    EXPECT_EQ(st.tensors.at(m + ".weight_scale").dtype, nv ? DType::F8_E4M3 : DType::U8);
    EXPECT_EQ(st.tensors.at(m + ".weight_scale").shape, (std::vector<int64_t>{32, nv ? 4 : 2}));
    EXPECT_EQ(st.tensors.count(m + ".weight_global_scale"), nv ? 1u : 0u);
    if (nv) EXPECT_EQ(st.tensors.at(m + ".weight_global_scale").dtype, DType::F32);
    EXPECT_EQ(load_checkpoint(out).source_kind, "compressed-tensors");
    expect_round_trip(tiny("tiny-llama3"), out, 14);
  }
}

// vLLM fuses q|k|v and gate|up into one weight with one NVFP4 global scale: each member's stored
// weight_global_scale is the smallest of the members' own (llm-compressor's
// update_fused_layer_weight_global_scales); the codes are quantize_weights' under it
// (expect_round_trip); o_proj and down_proj keep their own. With --imatrix the members still
// share one, searched within the octave below that minimum.
TEST(ConvertQuant, Nvfp4FusedProjectionsShareTheSmallestGlobalScale) {
  const std::string tmp = test::temp_dir("cvq_fused");
  Checkpoint src = load_checkpoint(tiny("tiny-llama3"));
  const SchemeParams p = test::scheme_params("nvfp4", 4, 16, DType::BF16);
  auto own = [&](const std::string& name) {
    const std::vector<float> w = to_f32(src.get(name));
    return find_scheme("nvfp4").tensor_scale(w.data(), int64_t(w.size()), p);
  };
  // Statistics for --imatrix (the tiny model has no tokenizer to calibrate with): mean squares
  // spread over two decades per input channel.
  calib::ActStats stats;
  stats.tokens = 64;
  stats.text = "synthetic";
  for (auto& [name, t] : src.tensors)
    if (name.rfind("model.layers.", 0) == 0 && t.shape.size() == 2) {
      calib::ChannelStats& c = stats.linears[name];
      c.absmax.assign(size_t(t.shape[1]), 1.0f);
      for (int64_t j = 0; j < t.shape[1]; ++j) c.sqmean.push_back(std::pow(10.0f, float(j % 7) / 3.0f));
      c.tokens = 64;
    }
  calib::save_act_stats(tmp + "/stats.safetensors", stats);
  std::string log;
  for (const std::string flags : {std::string(""), " --imatrix " + tmp + "/stats.safetensors"}) {
    SCOPED_TRACE(flags);
    const std::string out = tmp + (flags.empty() ? "/rtn" : "/imatrix");
    ASSERT_EQ(
        qt_run("convert --in " + tiny("tiny-llama3") + " --out " + out + " --scheme nvfp4 --dtype bf16" + flags, &log),
        0)
        << log;
    SafetensorsDir st = load_safetensors_dir(out);
    auto stored = [&](const std::string& name) {
      float g;
      std::memcpy(&g, st.tensors.at(name.substr(0, name.size() - 7) + ".weight_global_scale").data, 4);
      return g;
    };
    const std::vector<std::vector<std::string>> fused = {{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                                                         {"mlp.gate_proj", "mlp.up_proj"},
                                                         {"self_attn.o_proj"},
                                                         {"mlp.down_proj"}};
    for (int l = 0; l < src.config.n_layers; ++l)
      for (const auto& group : fused) {
        float want = INFINITY;
        for (const std::string& m : group)
          want = std::min(want, own("model.layers." + std::to_string(l) + "." + m + ".weight"));
        const float first = stored("model.layers." + std::to_string(l) + "." + group[0] + ".weight");
        for (const std::string& m : group) {
          const float got = stored("model.layers." + std::to_string(l) + "." + m + ".weight");
          if (flags.empty()) EXPECT_EQ(got, want) << l << " " << m;
          // --imatrix searches the shared scale over the octave below that minimum.
          EXPECT_EQ(got, first) << l << " " << m;
          if (!flags.empty()) EXPECT_TRUE(got <= want && got > want / 2) << l << " " << m << " " << got << " " << want;
        }
      }
    if (flags.empty()) expect_round_trip(tiny("tiny-llama3"), out, 14);
  }
}

TEST(ConvertQuant, GroupThatDoesNotFitIsLeftUnquantized) {
  // tiny-llama3: hidden 32, intermediate 64. Group 64 fits only down_proj's 64-wide rows.
  const std::string tmp = test::temp_dir("cvq_skip"), out = tmp + "/m";
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + tiny("tiny-llama3") + " --out " + out + " --scheme affine --group-size 64", &log),
            0)
      << log;
  EXPECT_NE(log.find("left unquantized: model.layers.0.mlp.up_proj.weight (group size 64 does not divide"),
            std::string::npos)
      << log;
  ASSERT_EQ(qt_run("inspect " + out, &log), 0) << log;
  EXPECT_NE(log.find("2 weights quantized, 14 stored unquantized"), std::string::npos) << log;
  EXPECT_NE(log.find("unquantized model.embed_tokens.weight: group size 64 does not divide"), std::string::npos) << log;
  expect_round_trip(tiny("tiny-llama3"), out, 2);
}

TEST(ConvertQuant, BadInputExits2AndWritesNothing) {
  const std::string tmp = test::temp_dir("cvq_bad");
  const std::string nomatch =
      write_file(tmp, "nomatch.json", R"({"rules": [{"match": "model.layers.9.*", "bits": 8}]})");
  const std::string badkey = write_file(tmp, "badkey.json", R"({"rules": [{"match": "*", "bitz": 8}]})");
  const std::string badbits = write_file(tmp, "badbits.json", R"({"rules": [{"match": "*", "bits": 7}]})");
  const std::string llama = " --in " + tiny("tiny-llama3") + " --out " + tmp + "/out ";
  const std::string qwen = " --in " + tiny("tiny-qwen2") + " --out " + tmp + "/out ";  // tied
  const std::vector<std::pair<std::string, std::string>> cases = {
      {llama + "--scheme affine --bits 7", "does not support 7 bits"},
      {llama + "--scheme affine --group-size 48", "group size 48"},
      {llama + "--scheme affine --group-size 128", "quantizes no tensor"},
      {llama + "--scheme affine --group-size 64 --strict", "--strict"},
      {llama + "--scheme affine --recipe " + nomatch, "matches no tensor"},
      {llama + "--scheme affine --recipe " + badkey, "unknown or mistyped key \"bitz\""},
      {llama + "--scheme affine --recipe " + badbits, "does not support 7 bits"},
      {llama + "--scheme q9", "unknown scheme 'q9'"},
      {llama + "--scheme affine --format gguf2", "unknown output layout 'gguf2'"},
      {llama + "--scheme nf4 --format mlx", "cannot be written as --format mlx"},
      {llama + "--scheme affine --format hf", "--format hf stores unquantized"},
      {llama + "--format mlx", "give --scheme"},
      {llama + "--bits 4", "need --scheme"},
      {qwen + "--scheme affine --group-size 32 --lm-head-bits 8", "--untie"},
  };
  for (auto& [args, msg] : cases) {
    SCOPED_TRACE(args);
    std::string log;
    EXPECT_EQ(qt_run("convert" + args, &log), 2) << log;
    EXPECT_NE(log.find(msg), std::string::npos) << log;
    EXPECT_FALSE(fs::exists(tmp + "/out"));
    for (auto& e : fs::directory_iterator(tmp)) EXPECT_EQ(e.path().extension(), ".json") << "left behind: " << e.path();
  }
}

// SmolLM2 (tied; the tiny tied model's 48-wide rows fit no affine group).
TEST(ConvertQuant, TiedModelUntieAndEmbeddingBits) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string tmp = test::temp_dir("cvq_tied"), out = tmp + "/m";
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + test::model_gguf() + " --out " + out +
                       " --scheme affine --bits 2 --embedding-bits 8 --lm-head-bits 6 --untie --dtype bf16",
                   &log),
            0)
      << log;
  Checkpoint ck = load_checkpoint(out);
  EXPECT_FALSE(ck.config.tie_word_embeddings);
  auto e = packed_weight(ck, "model.embed_tokens.weight");
  auto h = packed_weight(ck, "lm_head.weight");
  ASSERT_TRUE(e && h);
  EXPECT_EQ(e->params.bits, 8);
  EXPECT_EQ(h->params.bits, 6);
}

}  // namespace
}  // namespace qt

namespace qt {
namespace {

// bnb: every quantized Linear stores what bitsandbytes' QuantState.as_dict(packed=True) gives
// transformers (golden: tests/golden/make_bnb_export_golden.py) — the same companion keys, the
// quant_state JSON blob byte for byte, the code table — and reads back to the same codes.
TEST(ConvertQuant, BnbFolderIsWhatBitsandbytesWrites) {
  const json g = read_json(test::source_dir() + "/tests/golden/quant_export/bnb.json");
  for (std::string type : {"nf4", "fp4"}) {
    SCOPED_TRACE(type);
    const std::string tmp = test::temp_dir("cvq_bnb_" + type), out = tmp + "/b";
    std::string log;
    ASSERT_EQ(qt_run("convert --in " + tiny("tiny-llama3") + " --out " + out + " --scheme " + type +
                         " --group-size 64 --dtype bf16",
                     &log),
              0)
        << log;
    const json q = read_json(out + "/config.json")["quantization_config"];
    EXPECT_EQ(q["quant_method"], "bitsandbytes");
    EXPECT_EQ(q["bnb_4bit_quant_type"], type);
    EXPECT_EQ(q["bnb_4bit_compute_dtype"], "bfloat16");
    SafetensorsDir st = load_safetensors_dir(out);
    const std::string w = "model.layers.0.mlp.up_proj.weight";
    const json& gt = g[type];
    for (auto& key : gt["keys"]) EXPECT_TRUE(st.tensors.count(w + "." + key.get<std::string>())) << key;
    const Tensor& blob = st.tensors.at(w + "." + gt["blob_key"].get<std::string>());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(blob.data), blob.nbytes), gt["blob"].get<std::string>());
    const Tensor& qm = st.tensors.at(w + ".quant_map");
    ASSERT_EQ(qm.numel(), 16);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(qm.as<float>()[i], gt["quant_map"][i].get<float>()) << i;
    EXPECT_EQ(st.tensors.at(w + ".absmax").shape, gt["absmax_shape"].get<std::vector<int64_t>>());
    Checkpoint ck = load_checkpoint(out);
    EXPECT_EQ(ck.source_kind, "bnb");
    expect_round_trip(tiny("tiny-llama3"), out, 14);  // Linear layers only
  }
}

}  // namespace
}  // namespace qt
