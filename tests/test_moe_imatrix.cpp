// A mixture of experts' importance matrices in llama.cpp's form (calib/llama_imatrix.h): llama-imatrix's
// per-expert sums and counts (tests/golden/make_imatrix_goldens.py, tiny-spm-moe: an expert the text
// never reaches) against our act-stats of the same model and text; ours written and read back; and
// a GGUF whose stacked expert tensors are quantized with each expert's own importances or GPTQ.
#include <cmath>
#include <cstring>
#include <numeric>

#include <gtest/gtest.h>

#include "calib/act_stats.h"
#include "calib/act_stats_io.h"
#include "calib/expert_prior.h"
#include "calib/llama_imatrix.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/ggml_blocks.h"
#include "formats/ggml_quantize.h"
#include "formats/gguf.h"
#include "formats/mapped_file.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace qt {
namespace {

std::string golden(const std::string& f) { return test::source_dir() + "/tests/golden/imatrix/" + f; }

std::vector<float> f32_of(const GgufTensorInfo& t) {
  std::vector<float> v(size_t(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

// The same 4 chunks of 64 tokens llama-imatrix read.
calib::ActStats ours_on(const Checkpoint& ck) {
  const std::string text = test::data_file("wikitext-2/wiki.valid.tokens.txt");
  MappedFile mf = map_file(text);
  const std::vector<int32_t> ids =
      ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), 4096), true);
  LlamaModel m(ck, Compute::F32);
  return calib::collect_act_stats(m, ids, 64, 4, ck.tokenizer->bos_id());
}

const char* const kMerged[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

// Each expert's routed tokens are llama-imatrix's counts (the router in F32 on both sides), and
// the importances read from its file (with the prior added the same way) are ours to F16 rounding
// (llama.cpp multiplies F16 weights by activations rounded to F16). Expert 3, which the text never
// reaches, gets its layer's expert average from both — where llama-quantize would use 1.
TEST(MoeImatrix, ActStatsMatchLlamaImatrixPerExpert) {
  QT_REQUIRE_FILE(test::data_file("wikitext-2/wiki.valid.tokens.txt"));
  Checkpoint ck = load_checkpoint(golden("tiny-spm-moe.gguf"));
  ASSERT_TRUE(ck.config.is_moe());
  const calib::ActStats ours = ours_on(ck);
  const GgufFile g = GgufFile::open(golden("tiny-spm-moe.imatrix.gguf"));
  calib::ActStats theirs = calib::load_act_stats(golden("tiny-spm-moe.imatrix.gguf"));
  EXPECT_EQ(theirs.expert_slices.size(), 8u);    // 3 merged weights and the router, 2 layers
  EXPECT_EQ(theirs.experts_with_few_tokens, 6);  // expert 3 twice, layer 1's expert 2 (12 tokens); gate, down
  calib::resolve_expert_slices(&theirs, ck.config);
  int zero = 0;
  for (int l = 0; l < ck.config.n_layers; ++l)
    for (const char* m : kMerged) {
      const std::string gname = "blk." + std::to_string(l) + "." + m + ".weight";
      const std::vector<float> counts = f32_of(*g.find_tensor(gname + ".counts"));
      const std::vector<float> sums = f32_of(*g.find_tensor(gname + ".in_sum2"));
      const std::vector<std::string> parts = gguf_expert_parts(gname, ck.config);
      ASSERT_EQ(parts.size(), counts.size()) << gname;
      const size_t cols = sums.size() / counts.size();
      const float total = std::accumulate(counts.begin(), counts.end(), 0.0f);
      for (size_t e = 0; e < parts.size(); ++e) {
        const calib::ChannelStats* o = ours.find(parts[e], false);
        const calib::ChannelStats* t = theirs.find(parts[e], false);
        ASSERT_NE(o, nullptr) << parts[e];
        ASSERT_NE(t, nullptr) << parts[e];
        EXPECT_EQ(o->tokens, int64_t(counts[e])) << parts[e];
        EXPECT_EQ(t->tokens, int64_t(counts[e])) << parts[e];
        ASSERT_EQ(o->sqmean.size(), cols);
        for (size_t j = 0; j < cols; ++j)
          EXPECT_NEAR(o->sqmean[j], t->sqmean[j], 5e-3 * t->sqmean[j] + 1e-6) << parts[e] << " channel " << j;
        if (counts[e] != 0) continue;
        ++zero;
        for (size_t j = 0; j < cols; ++j) {  // the layer's expert average, from the file's own sums
          double s = 0;
          for (size_t k = 0; k < counts.size(); ++k) s += sums[k * cols + j];
          EXPECT_NEAR(t->sqmean[j], s / total, 1e-6 * s / total) << parts[e] << " channel " << j;
        }
      }
    }
  EXPECT_EQ(zero, 6);  // expert 3 of both layers, three merged weights each
}

// Ours in llama.cpp's GGUF and .dat forms read back to the same importances (below); the GGUF's
// expert counts hold the prior's tokens (so llama-quantize's quotient is ours) and say so.
TEST(MoeImatrix, WrittenFilesReadBackEqual) {
  QT_REQUIRE_FILE(test::data_file("wikitext-2/wiki.valid.tokens.txt"));
  Checkpoint ck = load_checkpoint(golden("tiny-spm-moe.gguf"));
  const calib::ActStats ours = ours_on(ck);
  const std::string dir = test::temp_dir("moe_imatrix");
  calib::save_llama_imatrix_gguf(dir + "/o.gguf", ours, ck.config, 64, 4);
  calib::save_llama_imatrix_dat(dir + "/o.dat", ours, ck.config, 4);
  const GgufFile g = GgufFile::open(dir + "/o.gguf");
  EXPECT_TRUE(g.has("quanttool.expert_prior_tokens"));
  const std::vector<float> counts = f32_of(*g.find_tensor("blk.1.ffn_down_exps.weight.counts"));
  const std::vector<std::string> parts = gguf_expert_parts("blk.1.ffn_down_exps.weight", ck.config);
  ASSERT_EQ(counts.size(), parts.size());
  for (size_t e = 0; e < parts.size(); ++e)
    EXPECT_EQ(counts[e], float(ours.find(parts[e], false)->tokens + calib::kExpertPriorTokens));
  for (const char* f : {"/o.gguf", "/o.dat"}) {
    calib::ActStats back = calib::load_act_stats(dir + f);
    calib::resolve_expert_slices(&back, ck.config);
    for (auto& [name, c] : ours.linears) {
      const calib::ChannelStats* b = back.find(name, false);
      ASSERT_NE(b, nullptr) << f << " " << name;
      // An expert's count (its tokens and the prior's) is rarely a power of two, and a float
      // quotient cannot give back every float exactly: within one ulp there; dense ones exact.
      const bool expert = name.find(".experts.") != std::string::npos;
      ASSERT_EQ(b->sqmean.size(), c.sqmean.size()) << name;
      for (size_t j = 0; j < c.sqmean.size(); ++j)
        if (expert)
          EXPECT_LE(std::fabs(b->sqmean[j] - c.sqmean[j]), std::nextafter(c.sqmean[j], INFINITY) - c.sqmean[j])
              << f << " " << name << " " << j;
        else
          EXPECT_EQ(b->sqmean[j], c.sqmean[j]) << f << " " << name << " " << j;
      if (std::string(f) == "/o.gguf" && name.find(".experts.") != std::string::npos)
        EXPECT_EQ(b->tokens, c.tokens) << name;
    }
  }
  // A merged weight the model does not have is refused.
  Checkpoint dense = load_checkpoint(golden("tiny-spm.gguf"));
  calib::ActStats s = calib::load_act_stats(dir + "/o.gguf");
  EXPECT_THROW(calib::resolve_expert_slices(&s, dense.config), UserError);
}

// convert --format gguf --imatrix on a mixture of experts: every expert's slice of a stacked tensor
// is quantized with that expert's importances (the slice equals the weighted quantizer run on the
// expert alone); --gptq reaches every expert too.
TEST(MoeImatrix, GgufExpertsQuantizedWithTheirOwnImportances) {
  const std::string text = test::data_file("wikitext-2/wiki.valid.tokens.txt");
  QT_REQUIRE_FILE(text);
  const std::string bin = test::quanttool_bin(), dir = test::temp_dir("moe_imatrix_gguf");
  const std::string m = golden("tiny-spm-moe.gguf"), im = golden("tiny-spm-moe.imatrix.gguf");
  std::string out;
  ASSERT_EQ(test::run_cmd(bin + " convert --in " + m + " --out " + dir + "/q.gguf --format gguf --gguf-type q4_0 " +
                              "--imatrix " + im,
                          &out),
            0)
      << out;
  // 4 attention projections and 3 merged weights of 4 experts per layer, and the head.
  EXPECT_NE(out.find("imatrix: 33 weights quantized with importance weights"), std::string::npos) << out;
  Checkpoint ck = load_checkpoint(m, LoadMode::Deferred);
  calib::ActStats s = calib::load_act_stats(im);
  calib::resolve_expert_slices(&s, ck.config);
  const GgufFile q = GgufFile::open(dir + "/q.gguf");
  const GgufTensorInfo* t = q.find_tensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, GgmlType::Q4_0);
  const std::vector<std::string> parts = gguf_expert_parts("blk.1.ffn_down_exps.weight", ck.config);
  const std::vector<int64_t> shape = ck.tensors.at(parts[0]).shape;
  const size_t n = size_t(shape[0] * shape[1]), bytes = ggml_nbytes(GgmlType::Q4_0, n);
  std::vector<uint8_t> first;
  for (size_t e = 0; e < parts.size(); ++e) {
    const std::vector<float> w = to_f32(materialize(ck.tensors.at(parts[e])));
    std::vector<uint8_t> want(bytes);
    ggml_quantize_weighted(GgmlType::Q4_0, w.data(), shape[0], shape[1], s.find(parts[e], false)->sqmean.data(),
                           want.data());
    EXPECT_EQ(std::memcmp(t->data + e * bytes, want.data(), bytes), 0) << parts[e];
    // Another expert's importances would give other blocks (the test can tell them apart).
    if (e == 0) first = want;
    if (e == 2) {
      ggml_quantize_weighted(GgmlType::Q4_0, w.data(), shape[0], shape[1], s.find(parts[0], false)->sqmean.data(),
                             want.data());
      EXPECT_NE(std::memcmp(t->data + e * bytes, want.data(), bytes), 0);
    }
  }
  ASSERT_EQ(test::run_cmd(bin + " convert --in " + m + " --out " + dir + "/g.gguf --format gguf --gguf-type q4_0 " +
                              "--imatrix " + im + " --gptq --calib " + text + " --calib-chunks 4",
                          &out),
            0)
      << out;
  EXPECT_NE(out.find("gptq: 33 weights"), std::string::npos) << out;
  // The GPTQ file differs from the weighted rounding in the experts and decodes close to the weights.
  const GgufFile gq = GgufFile::open(dir + "/g.gguf");
  const GgufTensorInfo* gt = gq.find_tensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(gt, nullptr);
  EXPECT_NE(std::memcmp(gt->data, t->data, t->nbytes), 0);
  const std::vector<float> w0 = to_f32(materialize(ck.tensors.at(parts[0])));
  std::vector<float> d0(n);
  ggml_dequantize(*ggml_type_row(uint32_t(GgmlType::Q4_0)), gt->data, d0.data(), n / 32);
  double err = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) err += (d0[i] - w0[i]) * (d0[i] - w0[i]), ref += w0[i] * w0[i];
  EXPECT_LT(err / ref, 0.05);
}

}  // namespace
}  // namespace qt
