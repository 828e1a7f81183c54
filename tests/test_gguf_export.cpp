// GGUF export against gguf-py (tests/golden/make_gguf_export_goldens.py):
//  - IQ4_NL (our scale search): never worse than round-to-nearest per block; with --imatrix's
//    importance, every block type's weighted error never worse than the reference block's;
//  - ggml_quantize's bytes equal gguf.quants.quantize's (ggml's reference quantizers, what
//    llama-quantize runs for these types without an imatrix) for every type, on random rows and
//    hand-made blocks (ties at .5, zero and constant blocks, negative absmax, subnormal scales);
//  - `convert --format gguf` of the tiny models gives the file gguf.GGUFWriter writes for them as
//    convert_hf_to_gguf.py would: same metadata values, same tensors (names, shapes, types,
//    bytes; Q/K permuted, rope_freqs for llama3);
//  - K-quants (Q2_K..Q6_K) and IQ4_XS (no gguf-py quantizer): `convert` of a bare llama gives the
//    bytes of `llama-quantize --pure` (fallback types included); --imatrix never worse per
//    super-block; every llama-quantize mix (q2_k_mix, q3_k_s/m/l, q4_k_s/m, q5_k_s/m, q6_k_mix,
//    iq4_xs_mix): its bytes (bare llama) and per-tensor types (SmolLM2); --tensor-type likewise;
//  - SmolLM2 (GGUF source, and its HF export as source): tokenizer.ggml.* and the architecture
//    keys equal the source GGUF's, which convert_hf_to_gguf.py wrote;
//  - streaming: converting SmolLM2 to a 540 MB F32 GGUF peaks below 0.75x of the output (a writer
//    holding the output would be above 1x);
//  - bad input and a disk that fills: exit 2, one line, nothing written.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

#include "formats/checkpoint.h"
#include "formats/ggml_quantize.h"
#include "formats/gguf.h"
#include "formats/tokenizer/tokenizer.h"
#include "tests/gguf_compare.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;

std::string golden(const std::string& name) { return test::source_dir() + "/tests/golden/gguf_export/" + name; }
std::string tiny(const std::string& name) { return test::source_dir() + "/tests/golden/logits/" + name; }

int qt_run(const std::string& args, std::string* out) { return test::run_cmd(test::quanttool_bin() + " " + args, out); }

TEST(GgufExport, RtnBytesEqualGgufPy) {
  GgufFile g = GgufFile::open(golden("rtn.gguf"));
  const GgufTensorInfo* x = g.find_tensor("x");
  ASSERT_TRUE(x);
  const std::vector<float> v = g.dequantize(*x);
  int checked = 0;
  for (const char* name : {"f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}) {
    const GgufTensorInfo* want = g.find_tensor(name);
    ASSERT_TRUE(want) << name;
    ASSERT_TRUE(ggml_can_quantize(want->type)) << name;
    std::vector<uint8_t> got(ggml_nbytes(want->type, v.size()));
    ASSERT_EQ(got.size(), want->nbytes) << name;
    ggml_quantize(want->type, v.data(), v.size(), got.data());
    size_t first_diff = got.size();
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want->data[i]) {
        first_diff = i;
        break;
      }
    EXPECT_EQ(first_diff, got.size()) << name << ": first differing byte (block "
                                      << first_diff / ggml_type_row(uint32_t(want->type))->type_size << ")";
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

// IQ4_NL is our scale search, not llama.cpp's: per block its squared error is at most the
// round-to-nearest rule's (gguf-py's table, the golden "iq4_nl_rtn"), and well below it overall.
TEST(GgufExport, Iq4NlSearchBeatsRoundToNearest) {
  GgufFile g = GgufFile::open(golden("rtn.gguf"));
  const std::vector<float> x = g.dequantize(*g.find_tensor("x"));
  const std::vector<float> rtn = g.dequantize(*g.find_tensor("iq4_nl_rtn"));
  std::vector<uint8_t> q(ggml_nbytes(GgmlType::IQ4_NL, x.size()));
  ggml_quantize(GgmlType::IQ4_NL, x.data(), x.size(), q.data());
  std::vector<float> ours(x.size());
  ggml_dequantize(*ggml_type_row(uint32_t(GgmlType::IQ4_NL)), q.data(), ours.data(), x.size() / 32);
  double total_ours = 0, total_rtn = 0;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    double eo = 0, er = 0;
    for (size_t j = b * 32; j < b * 32 + 32; ++j) {
      eo += double(x[j] - ours[j]) * (x[j] - ours[j]);
      er += double(x[j] - rtn[j]) * (x[j] - rtn[j]);
    }
    EXPECT_LE(eo, er * (1 + 1e-6) + 1e-30) << "block " << b;
    total_ours += eo, total_rtn += er;
  }
  std::printf("IQ4_NL squared error: ours %.6g, round-to-nearest %.6g (%.3fx)\n", total_ours, total_rtn,
              total_ours / total_rtn);
  EXPECT_LT(total_ours, 0.95 * total_rtn);
}

// x ([rows, cols], column j of importance imp[j]) quantized with the importances to ref's type:
// per block, its importance-weighted error is at most that of ref (in g); returns the totals
// (ours, ref's).
std::pair<double, double> weighted_errors(const std::vector<float>& x, int64_t rows, int64_t cols,
                                          const std::vector<float>& imp, const GgufFile& g, const GgufTensorInfo& ref,
                                          const std::string& what) {
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(ref.type));
  const size_t bs = size_t(row.block_size);
  const std::vector<float> r = g.dequantize(ref);
  std::vector<uint8_t> q(ref.nbytes);
  ggml_quantize_weighted(ref.type, x.data(), rows, cols, imp.data(), q.data());
  std::vector<float> ours(x.size());
  ggml_dequantize(row, q.data(), ours.data(), x.size() / bs);
  double tot_o = 0, tot_r = 0;
  for (size_t b = 0; b < x.size() / bs; ++b) {
    double eo = 0, er = 0;
    for (size_t j = b * bs; j < b * bs + bs; ++j) {
      const double w = imp[j % size_t(cols)];
      eo += w * (x[j] - ours[j]) * (x[j] - ours[j]);
      er += w * (x[j] - r[j]) * (x[j] - r[j]);
    }
    EXPECT_LE(eo, er * (1 + 1e-9) + 1e-30) << what << " block " << b;
    tot_o += eo, tot_r += er;
  }
  return {tot_o, tot_r};
}

// --imatrix: per block, the importance-weighted error of ggml_quantize_weighted is at most that of
// the reference blocks (gguf-py's bytes; for IQ4_NL round-to-nearest), and clearly below overall.
TEST(GgufExport, ImatrixWeightedErrorBelowReference) {
  GgufFile g = GgufFile::open(golden("rtn.gguf"));
  const GgufTensorInfo* xi = g.find_tensor("x");
  const std::vector<float> x = g.dequantize(*xi), imp = g.dequantize(*g.find_tensor("imp"));
  const int64_t rows = xi->ne[1], cols = xi->ne[0];
  ASSERT_EQ(int64_t(imp.size()), cols);
  for (const char* name : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl_rtn"}) {
    const GgufTensorInfo* ref = g.find_tensor(name);
    ASSERT_TRUE(ref) << name;
    const auto [tot_o, tot_r] = weighted_errors(x, rows, cols, imp, g, *ref, name);
    std::printf("%s: weighted error %.4g vs reference %.4g (%.3fx)\n", name, tot_o, tot_r, tot_o / tot_r);
    EXPECT_LT(tot_o, 0.9 * tot_r) << name;
  }
}

// Every key of `want` in `got` with the same type and value (float arrays exactly).
void expect_same_metadata(const GgufFile& got, const GgufFile& want, const std::string& what) {
  for (auto& [key, w] : want.metadata()) {
    auto it = got.metadata().find(key);
    if (it == got.metadata().end()) {
      ADD_FAILURE() << what << ": missing key " << key;
      continue;
    }
    const GgufValue& v = it->second;
    EXPECT_EQ(int(v.type), int(w.type)) << what << ": " << key;
    EXPECT_EQ(int(v.elem_type), int(w.elem_type)) << what << ": " << key;
    EXPECT_EQ(v.i, w.i) << what << ": " << key;
    EXPECT_EQ(v.f, w.f) << what << ": " << key;
    EXPECT_EQ(v.s, w.s) << what << ": " << key;
    EXPECT_EQ(v.ai, w.ai) << what << ": " << key;
    EXPECT_EQ(v.af, w.af) << what << ": " << key;
    EXPECT_EQ(v.as, w.as) << what << ": " << key;
  }
}

TEST(GgufExport, TinyModelsAreWhatGgufPyWrites) {
  const std::string tmp = test::temp_dir("gguf_export_tiny");
  const std::pair<const char*, const char*> cases[] = {
      {"tiny-llama3", "f16"},  {"tiny-llama3", "bf16"}, {"tiny-llama3", "q8_0"}, {"tiny-llama3", "q4_0"},
      {"tiny-llama3", "q4_1"}, {"tiny-llama3", "q5_0"}, {"tiny-llama3", "q5_1"}, {"tiny-qwen2", "f16"},
      {"tiny-qwen3", "q8_0"},  {"tiny-qwen3", "q5_1"},
  };
  for (auto [model, type] : cases) {
    const std::string what = std::string(model) + "." + type, out = tmp + "/" + what + ".gguf";
    std::string log;
    ASSERT_EQ(qt_run("convert --in " + tiny(model) + " --out " + out + " --format gguf --gguf-type " + type, &log), 0)
        << log;
    GgufFile got = GgufFile::open(out), want = GgufFile::open(golden(what + ".gguf"));
    EXPECT_EQ(got.version(), 3u);
    expect_same_metadata(got, want, what);
    // The tiny models have no tokenizer: no key beyond the golden's.
    EXPECT_EQ(got.metadata().size(), want.metadata().size()) << what;
    test::expect_same_tensors(got, want, what);
  }
}

// The converter's llama3 file reads back to the folder: rope_freqs.weight (4 divisors for head_dim
// 8, one of them in the smooth band) becomes llama3 scaling that gives the same RoPE, so the bf16
// file's logits are the folder's, and transformers' (logits.json) to float tolerance.
TEST(GgufExport, Llama3FileReadsBackToTheFoldersLogits) {
  const Checkpoint g = load_checkpoint(golden("tiny-llama3.bf16.gguf")), h = load_checkpoint(tiny("tiny-llama3"));
  EXPECT_EQ(g.config.rope_scaling.type, "llama3");
  EXPECT_EQ(g.config.rope_scaling.factor, h.config.rope_scaling.factor);
  const nlohmann::json gold = test::read_json(tiny("tiny-llama3") + "/logits.json");
  const std::vector<int32_t> ids = gold["ids"].get<std::vector<int32_t>>();
  const int n = int(ids.size());
  const std::vector<float> got = test::fp32_logits(g, ids, n);
  EXPECT_EQ(test::max_abs_diff(got, test::fp32_logits(h, ids, n)), 0.0);
  EXPECT_LT(test::max_abs_diff(got, gold["logits"].get<std::vector<float>>()), 1e-4);
}

// K-quants and IQ4_XS: `convert --gguf-type q4_k|...|iq4_xs` of the bare llama kq.f32.gguf gives the
// tensors `llama-quantize --pure` wrote for it (ggml's quantize_row_q{2..6}_K_ref, quantize_iq4_xs;
// hand-made super-blocks in token_embd), with llama.cpp's fallback type for the weights whose rows 256 does not divide
// (attn_output, ffn_down: 32 columns), and llama-quantize's general.file_type.
TEST(GgufExport, KQuantsEqualLlamaQuantize) {
  const std::string tmp = test::temp_dir("gguf_export_kq");
  const std::tuple<const char*, GgmlType, uint32_t> cases[] = {
      {"q4_k", GgmlType::Q5_0, 15}, {"q5_k", GgmlType::Q5_1, 17}, {"q6_k", GgmlType::Q8_0, 18},
      {"q2_k", GgmlType::Q4_0, 10}, {"q3_k", GgmlType::Q4_0, 12}, {"iq4_xs", GgmlType::IQ4_NL, 30}};
  for (auto [type, fallback, ftype] : cases) {
    const std::string out = tmp + "/" + type + ".gguf";
    std::string log;
    ASSERT_EQ(
        qt_run("convert --in " + golden("kq.f32.gguf") + " --out " + out + " --format gguf --gguf-type " + type, &log),
        0)
        << log;
    EXPECT_NE(log.find("2 weights with rows not a multiple of 256 stored as " +
                       std::string(ggml_type_row(uint32_t(fallback))->name)),
              std::string::npos)
        << log;
    GgufFile got = GgufFile::open(out), want = GgufFile::open(golden(std::string("kq.") + type + ".gguf"));
    test::expect_same_tensors(got, want, type);
    EXPECT_EQ(int(got.find_tensor("blk.0.ffn_down.weight")->type), int(fallback)) << type;
    EXPECT_EQ(want.metadata().at("general.file_type").i, int64_t(ftype)) << type;
    EXPECT_EQ(got.metadata().at("general.file_type").i, int64_t(ftype)) << type;
  }
}

// Every llama.cpp mix (--gguf-type q4_k_m, q2_k_mix, iq4_xs_mix, ...). On kq.f32.gguf (1 layer,
// untied) the bytes and file_type of `llama-quantize ... Q4_K_M|Q2_K|IQ4_XS|...`; on SmolLM2 (30
// layers, tied, 576 columns) the type of every tensor llama-quantize chose
// (smollm2.<type>.types.txt), which exercises the layer rules and the fallbacks.
const char* const kMixes[] = {"q4_k_m", "q5_k_m", "q3_k_m", "q2_k_mix", "q3_k_s",
                              "q3_k_l", "q4_k_s", "q5_k_s", "q6_k_mix", "iq4_xs_mix"};

// SmolLM2 converted with `args` has, for every tensor, the type that golden(types) lists.
void expect_smollm2_types(const std::string& args, const std::string& types, const std::string& out) {
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + test::model_gguf() + " --out " + out + " --format gguf " + args, &log), 0) << log;
  GgufFile got = GgufFile::open(out);
  std::ifstream f(golden(types));
  std::string name, tname;
  int n = 0;
  while (f >> name >> tname) {
    const GgufTensorInfo* t = got.find_tensor(name);
    if (!t) {
      ADD_FAILURE() << types << ": missing " << name;
      continue;
    }
    EXPECT_EQ(ggml_type_row(uint32_t(t->type))->name, tname) << types << ": " << name;
    ++n;
  }
  EXPECT_EQ(n, 272) << types;
  EXPECT_EQ(got.tensors().size(), size_t(n)) << types;
}

TEST(GgufExport, KMixesEqualLlamaQuantize) {
  const std::string tmp = test::temp_dir("gguf_export_kmix");
  for (const char* type : kMixes) {
    const std::string out = tmp + "/" + type + ".gguf";
    std::string log;
    ASSERT_EQ(
        qt_run("convert --in " + golden("kq.f32.gguf") + " --out " + out + " --format gguf --gguf-type " + type, &log),
        0)
        << log;
    GgufFile got = GgufFile::open(out), want = GgufFile::open(golden(std::string("kq.") + type + ".gguf"));
    test::expect_same_tensors(got, want, type);
    EXPECT_EQ(got.metadata().at("general.file_type").i, want.metadata().at("general.file_type").i) << type;
    const std::string t = type;
    if (t == "q4_k_m" || t == "q5_k_m" || t == "q3_k_m")
      EXPECT_EQ(int(got.find_tensor("blk.0.attn_v.weight")->type), int(t == "q3_k_m" ? GgmlType::Q5_K : GgmlType::Q6_K))
          << type;
  }
  QT_REQUIRE_FILE(test::model_gguf());
  for (const std::string type : kMixes) {
    if (type == "q6_k_mix") continue;  // on these architectures the same as q6_k
    expect_smollm2_types("--gguf-type " + type, "smollm2." + type + ".types.txt", tmp + "/smol." + type + ".gguf");
  }
}

// --tensor-type REGEX=TYPE as llama-quantize's: the first pattern found in the name wins (lower-cased
// first), over the mix; the fallback still applies; an overridden attn_v is not counted by the mix's
// layer rule, so on SmolLM2 the Q4_K_M rule picks other attn_v layers after four overridden ones.
TEST(GgufExport, TensorTypeEqualsLlamaQuantize) {
  const std::string tmp = test::temp_dir("gguf_export_tt"), out = tmp + "/kq.gguf";
  std::string log;
  ASSERT_EQ(
      qt_run("convert --in " + golden("kq.f32.gguf") + " --out " + out +
                 " --format gguf --gguf-type q4_k_m --tensor-type attn_q=q8_0 --tensor-type 'FFN_(UP|GATE)=iq4_xs'"
                 " --tensor-type ffn=q4_0 --tensor-type 'output\\.weight=Q5_K'",
             &log),
      0)
      << log;
  EXPECT_NE(log.find("(6 set by --tensor-type)"), std::string::npos) << log;
  test::expect_same_tensors(GgufFile::open(out), GgufFile::open(golden("kq.q4_k_m.tensor-type.gguf")), "tensor-type");
  QT_REQUIRE_FILE(test::model_gguf());
  expect_smollm2_types("--gguf-type q4_k_m --tensor-type 'blk\\.[0-3]\\.attn_v=q8_0' --tensor-type token_embd=q6_k",
                       "smollm2.q4_k_m.tensor-type.types.txt", tmp + "/smol.gguf");
}

// K-quants with --imatrix: per super-block, the importance-weighted error of
// ggml_quantize_weighted is at most that of llama-quantize's reference block (kq.<type>.gguf's
// token_embd, 32 rows of 256 with hand-made super-blocks; importance: rtn.gguf's "imp").
TEST(GgufExport, KQuantsImatrixWeightedErrorBelowReference) {
  GgufFile src = GgufFile::open(golden("kq.f32.gguf")), r = GgufFile::open(golden("rtn.gguf"));
  const GgufTensorInfo* xi = src.find_tensor("token_embd.weight");
  const std::vector<float> x = src.dequantize(*xi), imp = r.dequantize(*r.find_tensor("imp"));
  const int64_t rows = xi->ne[1], cols = xi->ne[0];
  ASSERT_EQ(int64_t(imp.size()), cols);
  for (const char* type : {"q4_k", "q5_k", "q6_k", "q2_k", "q3_k", "iq4_xs"}) {
    GgufFile g = GgufFile::open(golden(std::string("kq.") + type + ".gguf"));
    const GgufTensorInfo* ref = g.find_tensor("token_embd.weight");
    ASSERT_EQ(ggml_type_row(uint32_t(ref->type))->block_size, 256) << type;
    const auto [tot_o, tot_r] = weighted_errors(x, rows, cols, imp, g, *ref, type);
    std::printf("%s: weighted error %.4g vs reference %.4g (%.3fx)\n", type, tot_o, tot_r, tot_o / tot_r);
    EXPECT_LT(tot_o, 0.95 * tot_r) << type;
    // Without importance: the reference bytes themselves.
    std::vector<uint8_t> q(ref->nbytes);
    ggml_quantize(ref->type, x.data(), x.size(), q.data());
    EXPECT_EQ(std::memcmp(q.data(), ref->data, ref->nbytes), 0) << type;
  }
}

// tokenizer_to_gguf gives back the tokenizer.ggml.* that llama.cpp's own vocabulary files hold
// (data/tokenizer-vectors, written by convert_hf_to_gguf.py): SentencePiece (llama-spm, phi-3) and
// byte-level BPE of several pre-tokenizers.
TEST(GgufExport, TokenizerKeysEqualLlamaCppVocabFiles) {
  for (const char* name : {"llama-spm", "phi-3", "gpt-2", "falcon", "deepseek-coder", "mpt", "refact", "starcoder"}) {
    const std::string path = test::data_file(std::string("tokenizer-vectors/ggml-vocab-") + name + ".gguf");
    QT_REQUIRE_FILE(path);
    GgufFile g = GgufFile::open(path);
    const GgufTokenizerMeta m = tokenizer_to_gguf(*tokenizer_from_gguf(g));
    EXPECT_EQ(m.model, g.get_string("tokenizer.ggml.model")) << name;
    EXPECT_EQ(m.pre, g.get_string_or("tokenizer.ggml.pre", "default")) << name;
    const auto& tokens = g.get_string_array("tokenizer.ggml.tokens");
    ASSERT_EQ(m.tokens.size(), tokens.size()) << name;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (!tokens[i].empty()) {
        ASSERT_EQ(m.tokens[i], tokens[i]) << name << " token " << i;
      }
    }
    if (g.has("tokenizer.ggml.token_type")) {
      const auto& tt = g.get_int_array("tokenizer.ggml.token_type");
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (tt[i] >= 1 && tt[i] <= 6) {
          ASSERT_EQ(m.token_type[i], tt[i]) << name << " type " << i;
        }
      }
    }
    if (g.has("tokenizer.ggml.scores")) {
      const auto& sc = g.get_float_array("tokenizer.ggml.scores");
      ASSERT_EQ(m.scores.size(), sc.size()) << name;
      for (size_t i = 0; i < sc.size(); ++i) ASSERT_EQ(m.scores[i], float(sc[i])) << name << " score " << i;
    }
    if (g.has("tokenizer.ggml.merges")) {
      const auto& mg = g.get_string_array("tokenizer.ggml.merges");
      ASSERT_EQ(m.merges.size(), mg.size()) << name;
      for (size_t i = 0; i < mg.size(); ++i) {
        if (mg[i].find(' ', 1) != std::string::npos) {
          ASSERT_EQ(m.merges[i], mg[i]) << name << " merge " << i;
        }
      }
    }
    for (auto [key, v] : {std::pair<const char*, int32_t>{"tokenizer.ggml.bos_token_id", m.bos},
                          {"tokenizer.ggml.eos_token_id", m.eos},
                          {"tokenizer.ggml.unknown_token_id", m.unk},
                          {"tokenizer.ggml.padding_token_id", m.pad}}) {
      if (g.has(key) && g.get_int(key) < int64_t(tokens.size())) {
        EXPECT_EQ(v, g.get_int(key)) << name << " " << key;
      }
    }
    if (g.has("tokenizer.ggml.add_bos_token")) {
      EXPECT_EQ(m.add_bos, g.get_bool("tokenizer.ggml.add_bos_token")) << name;
    }
    if (g.has("tokenizer.ggml.add_space_prefix")) {
      EXPECT_EQ(m.add_space_prefix, g.get_bool("tokenizer.ggml.add_space_prefix") ? 1 : 0) << name;
    }
  }
}

// The tokenizer and architecture keys that convert_hf_to_gguf.py wrote into the SmolLM2 GGUF.
void expect_smollm2_keys(const GgufFile& got, const GgufFile& src, const std::string& what) {
  for (const char* k : {"general.architecture",
                        "llama.block_count",
                        "llama.context_length",
                        "llama.embedding_length",
                        "llama.feed_forward_length",
                        "llama.attention.head_count",
                        "llama.attention.head_count_kv",
                        "llama.rope.freq_base",
                        "llama.attention.layer_norm_rms_epsilon",
                        "llama.vocab_size",
                        "llama.rope.dimension_count",
                        "tokenizer.ggml.model",
                        "tokenizer.ggml.pre",
                        "tokenizer.ggml.tokens",
                        "tokenizer.ggml.token_type",
                        "tokenizer.ggml.merges",
                        "tokenizer.ggml.bos_token_id",
                        "tokenizer.ggml.eos_token_id",
                        "tokenizer.ggml.unknown_token_id",
                        "tokenizer.ggml.padding_token_id",
                        "tokenizer.ggml.add_bos_token",
                        "tokenizer.chat_template"}) {
    ASSERT_TRUE(src.has(k)) << k;
    const GgufValue& w = src.metadata().at(k);
    ASSERT_TRUE(got.has(k)) << what << ": missing " << k;
    const GgufValue& v = got.metadata().at(k);
    EXPECT_EQ(int(v.type), int(w.type)) << what << ": " << k;
    EXPECT_EQ(v.i, w.i) << what << ": " << k;
    EXPECT_EQ(v.f, w.f) << what << ": " << k;
    EXPECT_EQ(v.s, w.s) << what << ": " << k;
    EXPECT_EQ(v.ai, w.ai) << what << ": " << k;
    EXPECT_EQ(v.as, w.as) << what << ": " << k;
  }
}

TEST(GgufExport, SmolLM2TokenizerAndArchKeysEqualConvertHfToGguf) {
  const std::string model = test::model_gguf();
  QT_REQUIRE_FILE(model);
  const std::string tmp = test::temp_dir("gguf_export_smol"), a = tmp + "/a.gguf", hf = tmp + "/hf",
                    b = tmp + "/b.gguf";
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + model + " --out " + a + " --format gguf --gguf-type q8_0", &log), 0) << log;
  GgufFile src = GgufFile::open(model);
  expect_smollm2_keys(GgufFile::open(a), src, "from GGUF");
  // Through a Hugging Face folder: the tokenizer comes from tokenizer.json (pre name from its regexes).
  ASSERT_EQ(qt_run("convert --in " + model + " --out " + hf + " --dtype bf16", &log), 0) << log;
  ASSERT_EQ(qt_run("convert --in " + hf + " --out " + b + " --format gguf --gguf-type q8_0", &log), 0) << log;
  expect_smollm2_keys(GgufFile::open(b), src, "from tokenizer.json");
  // The tensors too: Q8_0 of bf16-rounded weights differs from a's, but the token embedding's
  // rows are the same modulo bf16; the 1-D norms are bf16-exact copies of the source's.
  GgufFile fb = GgufFile::open(b);
  const GgufTensorInfo* nb = fb.find_tensor("output_norm.weight");
  const GgufTensorInfo* ns = src.find_tensor("output_norm.weight");
  ASSERT_TRUE(nb && ns);
  std::vector<float> vb = fb.dequantize(*nb), vs = src.dequantize(*ns);
  ASSERT_EQ(vb.size(), vs.size());
  for (size_t i = 0; i < vb.size(); ++i) EXPECT_NEAR(vb[i], vs[i], std::fabs(vs[i]) / 128) << i;
}

TEST(GgufExport, BadInputExit2NothingWritten) {
  const std::string tmp = test::temp_dir("gguf_export_bad"), out = tmp + "/o.gguf";
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {"--in " + tiny("tiny-llama3") + " --gguf-type iq2_xs", "unknown type 'iq2_xs'"},
      {"--in " + tiny("tiny-llama3") + " --gguf-type f16 --imatrix x.safetensors", "is not quantized"},
      {"--in " + tiny("tiny-llama3") + " --gguf-type q4_0 --gptq", "--gptq"},
      {"--in " + tiny("tiny-qwen2") + " --gguf-type q8_0", "model.embed_tokens.weight"},
      // 48 columns: neither Q4_K's 256 nor its fallback Q5_0's 32 divides them.
      {"--in " + tiny("tiny-qwen2") + " --gguf-type q4_k", "not a multiple of Q5_0's block of 32"},
      {"--in " + tiny("tiny-llama3") + " --scheme nf4", "closest GGUF type is --gguf-type iq4_nl"},
      {"--in " + tiny("tiny-llama3") + " --scheme int8", "closest GGUF type is --gguf-type q8_0"},
      {"--in " + tiny("tiny-llama3") + " --dtype f16", "--dtype"},
      {"--in " + tiny("tiny-llama3") + " --gguf-type q8_0 --tensor-type attn_q", "expected REGEX=TYPE"},
      {"--in " + tiny("tiny-llama3") + " --gguf-type q8_0 --tensor-type 'attn(=q8_0'", "bad regular expression"},
      {"--in " + tiny("tiny-llama3") + " --gguf-type q8_0 --tensor-type attn=iq2_xs", "unwritable type 'iq2_xs'"},
      {"--in " + tiny("tiny-llama3") + " --gguf-type f16 --tensor-type attn=q8_0", "needs a quantized --gguf-type"},
  };
  for (const Case& c : cases) {
    std::string log;
    EXPECT_EQ(qt_run("convert --format gguf --out " + out + " " + c.args, &log), 2) << c.args << "\n" << log;
    EXPECT_NE(log.find(c.expect), std::string::npos) << c.args << "\n" << log;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
    EXPECT_FALSE(fs::exists(out)) << c.args;
    EXPECT_EQ(std::distance(fs::directory_iterator(tmp), fs::directory_iterator()), 0) << c.args;
  }
  std::string log;
  EXPECT_EQ(qt_run("convert --out " + out + " --in " + tiny("tiny-llama3") + " --gguf-type q8_0", &log), 2) << log;
  EXPECT_NE(log.find("needs --format gguf"), std::string::npos) << log;
}

TEST(GgufExport, FullDiskExit2LeavingNothing) {
  const std::string tmp = test::temp_dir("gguf_export_full");
  std::string log;
  // ulimit -f (KiB): the 47 KB f16 file cannot be written; the writer sees EFBIG.
  const int rc = test::run_cmd("bash -c 'ulimit -f 16; " + test::quanttool_bin() + " convert --in " +
                                   tiny("tiny-llama3") + " --out " + tmp + "/o.gguf --format gguf --gguf-type f16'",
                               &log);
  EXPECT_EQ(rc, 2) << log;
  EXPECT_NE(log.find("File too large"), std::string::npos) << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_TRUE(fs::is_empty(tmp)) << "left behind in " << tmp;
}

TEST(GgufExport, PeakMemoryIsAFractionOfTheOutput) {
  const std::string model = test::model_gguf();
  QT_REQUIRE_FILE(model);
  const std::string tmp = test::temp_dir("gguf_export_mem"), out = tmp + "/f32.gguf";
  // wait4: this child's own peak (getrusage(RUSAGE_CHILDREN) would include earlier tests' children
  // when the whole executable runs in one process).
  const std::string cmd = "exec " + test::quanttool_bin() + " convert --in " + model + " --out " + out +
                          " --format gguf --gguf-type f32 --threads 2 > /dev/null";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  ASSERT_EQ(wait4(pid, &status, 0, &ru), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd;
  const double peak = double(ru.ru_maxrss) * 1024, out_bytes = double(fs::file_size(out));
  std::printf("f32 GGUF %.0f MB: peak RSS %.0f MB\n", out_bytes / 1e6, peak / 1e6);
  EXPECT_LT(peak, 0.75 * out_bytes);  // the largest tensor (embedding, 113 MB) is held twice at most
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace qt
