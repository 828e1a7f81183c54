// llama.cpp's importance-matrix files (calib/llama_imatrix.h): what llama-imatrix wrote
// (tests/golden/make_imatrix_goldens.py) reads to the values in it, ours read back to the same
// importances, and our act-stats on the same model and text match llama-imatrix's.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "calib/act_stats.h"
#include "calib/act_stats_io.h"
#include "calib/llama_imatrix.h"
#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "formats/mapped_file.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace qt {
namespace {

std::string golden(const std::string& f) { return test::source_dir() + "/tests/golden/imatrix/" + f; }

std::string hf_of(const std::string& g) { return g == "output.weight" ? "lm_head.weight" : gguf_to_hf_name(g); }

// Every entry's importance equals llama-quantize's quotient, read by gguf-py (expected.json).
void expect_values(const calib::ActStats& s, const nlohmann::json& want) {
  ASSERT_EQ(s.linears.size(), want.size());
  for (auto& [g, v] : want.items()) {
    const calib::ChannelStats* c = s.find(hf_of(g), false);
    ASSERT_NE(c, nullptr) << g;
    ASSERT_EQ(c->sqmean.size(), v.size()) << g;
    for (size_t j = 0; j < v.size(); ++j) ASSERT_EQ(c->sqmean[j], v[j].get<float>()) << g << " channel " << j;
    EXPECT_TRUE(c->absmax.empty()) << g;
  }
}

TEST(LlamaImatrix, ReadsLlamaImatrixGguf) {
  const nlohmann::json want = test::read_json(golden("expected.json"));
  const calib::ActStats s = calib::load_act_stats(golden("tiny-spm.imatrix.gguf"));
  expect_values(s, want["gguf"]);
  EXPECT_EQ(s.tokens, 256);  // 4 chunks of 64
  EXPECT_EQ(s.text, "wiki.valid.tokens.txt");
  EXPECT_FALSE(s.has_absmax());
}

TEST(LlamaImatrix, ReadsLegacyDat) {
  const nlohmann::json want = test::read_json(golden("expected.json"));
  const calib::ActStats s = calib::load_act_stats(golden("tiny-spm.imatrix.dat"));
  expect_values(s, want["dat"]);
  EXPECT_EQ(s.text, "wiki.valid.tokens.txt");
}

// Ours, written from llama-imatrix's values, has llama-imatrix's keys and tensors and reads back
// to the same importances exactly, in both forms.
TEST(LlamaImatrix, WrittenFilesReadBackEqual) {
  const std::string dir = test::temp_dir("imatrix_rt");
  const calib::ActStats src = calib::load_act_stats(golden("tiny-spm.imatrix.gguf"));
  const ModelConfig c = load_checkpoint(golden("tiny-spm.gguf")).config;
  calib::save_llama_imatrix_gguf(dir + "/x.gguf", src, c, 64, 4);
  calib::save_llama_imatrix_dat(dir + "/x.dat", src, c, 4);
  const nlohmann::json want = test::read_json(golden("expected.json"));
  expect_values(calib::load_act_stats(dir + "/x.gguf"), want["gguf"]);
  expect_values(calib::load_act_stats(dir + "/x.dat"), want["gguf"]);

  const GgufFile ours = GgufFile::open(dir + "/x.gguf"), theirs = GgufFile::open(golden("tiny-spm.imatrix.gguf"));
  EXPECT_EQ(ours.key_order(), theirs.key_order());
  EXPECT_EQ(ours.get_string("general.type"), "imatrix");
  for (const char* k : {"imatrix.chunk_count", "imatrix.chunk_size"})
    EXPECT_EQ(ours.get_int(k), theirs.get_int(k)) << k;
  EXPECT_EQ(ours.get_string_array("imatrix.datasets"), theirs.get_string_array("imatrix.datasets"));
  ASSERT_EQ(ours.tensors().size(), theirs.tensors().size());
  for (size_t i = 0; i < ours.tensors().size(); ++i) {
    const GgufTensorInfo &a = ours.tensors()[i], &b = theirs.tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.ne, b.ne) << a.name;
    EXPECT_EQ(a.type, b.type) << a.name;
  }
  // Counts are the tokens; each sum is the count times the importance, to float rounding.
  for (const GgufTensorInfo& t : ours.tensors()) {
    const std::vector<float> a = ours.dequantize(t), b = theirs.dequantize(*theirs.find_tensor(t.name));
    for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-6 * std::abs(b[j]) + 1e-30) << t.name;
  }
}

// Phi-3 keeps q/k/v and gate/up fused in GGUF: one entry each (attn_qkv, ffn_up), read back to
// every projection; a tied head is token_embd.weight.
TEST(LlamaImatrix, FusedAndTiedNames) {
  const ModelConfig c = load_checkpoint(test::source_dir() + "/tests/golden/logits/tiny-phi3").config;
  calib::ActStats s;
  s.tokens = 128;
  s.text = "t";
  const char* parts[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                         "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                         "mlp.down_proj.weight"};
  for (int l = 0; l < c.n_layers; ++l)
    for (const char* p : parts) {
      const bool wide = std::string(p) == "mlp.down_proj.weight";
      const std::string n = "model.layers." + std::to_string(l) + "." + p;
      // Projections of one input share its statistics, as collect_act_stats records them.
      const float v = std::string(p).find("self_attn.") == 0 && std::string(p) != "self_attn.o_proj.weight" ? 1.5f
                      : std::string(p) == "mlp.gate_proj.weight" || std::string(p) == "mlp.up_proj.weight"
                          ? 2.5f
                          : 0.25f + float(l);
      s.linears[n].sqmean.assign(size_t(wide ? c.intermediate : c.hidden), v);
    }
  s.linears["lm_head.weight"].sqmean.assign(size_t(c.hidden), 3.0f);
  const std::string dir = test::temp_dir("imatrix_names");
  calib::save_llama_imatrix_gguf(dir + "/p.gguf", s, c, 64, 2);
  const GgufFile f = GgufFile::open(dir + "/p.gguf");
  EXPECT_NE(f.find_tensor("blk.0.attn_qkv.weight.in_sum2"), nullptr);
  EXPECT_NE(f.find_tensor("blk.1.ffn_up.weight.in_sum2"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight.in_sum2"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate.weight.in_sum2"), nullptr);
  EXPECT_NE(f.find_tensor("output.weight.in_sum2"), nullptr);
  EXPECT_EQ(f.tensors().size(), size_t(2 * (4 * c.n_layers + 1)));
  const calib::ActStats r = calib::load_act_stats(dir + "/p.gguf");
  EXPECT_EQ(r.linears.size(), s.linears.size());
  for (auto& [n, st] : s.linears) EXPECT_EQ(r.find(n, false)->sqmean, st.sqmean) << n;

  ModelConfig tied = c;
  tied.tie_word_embeddings = true;
  calib::save_llama_imatrix_gguf(dir + "/t.gguf", s, tied, 64, 2);
  EXPECT_NE(GgufFile::open(dir + "/t.gguf").find_tensor("token_embd.weight.in_sum2"), nullptr);
  EXPECT_EQ(calib::load_act_stats(dir + "/t.gguf").find("model.embed_tokens.weight", true)->sqmean,
            s.linears.at("lm_head.weight").sqmean);
}

// Our activation statistics of the same model over the same tokens are llama-imatrix's, up to
// rounding: llama.cpp multiplies an F16 weight by the activations rounded to F16 (the CPU
// backend's vec_dot_type), we in F32; and it sums in float, we in double.
TEST(LlamaImatrix, ActStatsMatchLlamaImatrix) {
  const std::string text = test::data_file("wikitext-2/wiki.valid.tokens.txt");
  QT_REQUIRE_FILE(text);
  Checkpoint ck = load_checkpoint(golden("tiny-spm.gguf"));
  MappedFile mf = map_file(text);
  const std::vector<int32_t> ids =
      ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), 4096), true);
  const int32_t bos = ck.tokenizer->bos_id();
  calib::ActStats ours;
  {
    LlamaModel m(ck, Compute::F32);
    ours = calib::collect_act_stats(m, ids, 64, 4, bos);
  }
  const calib::ActStats theirs = calib::load_act_stats(golden("tiny-spm.imatrix.gguf"));
  EXPECT_EQ(ours.tokens, theirs.tokens);
  // Ours through both llama.cpp forms and back: the same importances, bit for bit.
  const std::string dir = test::temp_dir("imatrix_ours");
  calib::save_llama_imatrix_gguf(dir + "/o.gguf", ours, ck.config, 64, 4);
  calib::save_llama_imatrix_dat(dir + "/o.dat", ours, ck.config, 4);
  for (const char* f : {"/o.gguf", "/o.dat"}) {
    const calib::ActStats back = calib::load_act_stats(dir + f);
    EXPECT_EQ(back.linears.size(), ours.linears.size()) << f;
    for (auto& [name, c] : back.linears) EXPECT_EQ(c.sqmean, ours.find(name, false)->sqmean) << f << " " << name;
  }
  for (auto& [name, c] : theirs.linears) {
    const calib::ChannelStats* o = ours.find(name, false);
    ASSERT_NE(o, nullptr) << name;
    ASSERT_EQ(o->sqmean.size(), c.sqmean.size()) << name;
    for (size_t j = 0; j < c.sqmean.size(); ++j)
      EXPECT_NEAR(o->sqmean[j], c.sqmean[j], 5e-3 * c.sqmean[j] + 1e-6) << name << " channel " << j;
  }
}

// The CLI: calibrate --format gguf|dat writes llama.cpp's files; convert --imatrix takes
// llama-imatrix's; a llama.cpp imatrix cannot serve --smooth (no max |x|); bad files exit 2.
TEST(LlamaImatrix, Cli) {
  const std::string text = test::data_file("wikitext-2/wiki.valid.tokens.txt");
  QT_REQUIRE_FILE(text);
  const std::string bin = test::quanttool_bin(), dir = test::temp_dir("imatrix_cli"), m = golden("tiny-spm.gguf");
  std::string out;
  for (const char* f : {"gguf", "dat"}) {
    const std::string o = dir + "/ours." + f;
    ASSERT_EQ(test::run_cmd(bin + " calibrate --method act-stats --model " + m + " --text " + text +
                                " --ctx 64 --chunks 4 --threads 2 --format " + f + " --out " + o,
                            &out),
              0)
        << out;
    const calib::ActStats s = calib::load_act_stats(o);
    EXPECT_EQ(s.linears.size(), 15u) << f;
    EXPECT_EQ(s.text, "wiki.valid.tokens.txt");
  }
  for (const char* f : {"tiny-spm.imatrix.gguf", "tiny-spm.imatrix.dat"}) {
    ASSERT_EQ(test::run_cmd(bin + " convert --in " + m + " --out " + dir + "/q.gguf --force --format gguf " +
                                "--gguf-type q4_0 --imatrix " + golden(f),
                            &out),
              0)
        << out;
    // 14 projections and the head; the untied embedding is a lookup table with no statistics
    // (llama-imatrix records none for token_embd either), so it is quantized without weights.
    EXPECT_NE(out.find("imatrix: 15 weights quantized with importance weights"), std::string::npos) << out;
  }
  std::ofstream(dir + "/junk.dat") << "not an imatrix at all, just some text";
  const std::string bad[] = {
      " convert --in " + m + " --out " + dir + "/b.gguf --format gguf --gguf-type q4_0 --imatrix " + dir + "/junk.dat",
      " convert --in " + m + " --out " + dir + "/b.gguf --format gguf --gguf-type q4_0 --imatrix " + m,
      " convert --in " + m + " --out " + dir + "/b --scheme affine --bits 4 --group-size 32 --smooth " +
          golden("tiny-spm.imatrix.gguf"),
      " calibrate --method act-stats --model " + m + " --text " + text + " --format npz --out " + dir + "/b.npz",
  };
  for (const std::string& b : bad) {
    EXPECT_EQ(test::run_cmd(bin + b, &out), 2) << b << "\n" << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << b << "\n" << out;
  }
}

}  // namespace
}  // namespace qt
