// GPTQ in ggml's block types (calib/gptq_ggml.h), against references outside the sweep: the
// type's own reference quantizer and a brute-force nearest value under the block's scales, the
// type's dequantizer on the written blocks, and plain rounding's output error on correlated inputs.
#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "calib/gptq_ggml.h"
#include "formats/checkpoint.h"
#include "formats/ggml_quantize.h"
#include "formats/layouts/gguf.h"
#include "tests/support.h"

namespace qt {
namespace {

const GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0,   GgmlType::Q4_1,   GgmlType::Q5_0,
                           GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::Q2_K,
                           GgmlType::Q3_K, GgmlType::Q4_K,   GgmlType::Q5_K,   GgmlType::Q6_K};

const char* name(GgmlType t) { return ggml_type_row(uint32_t(t))->name; }

std::vector<float> decode(GgmlType t, const std::vector<uint8_t>& b, size_t n) {
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(t));
  std::vector<float> v(n);
  row.to_float(b.data(), v.data(), n / size_t(row.block_size));
  return v;
}

// The value nearest to x among every code of the block's element j, each decoded by the type's
// dequantizer with the block's scale fields kept (all codes set to c).
float nearest_by_brute_force(GgmlType t, const uint8_t* block, int j, float x) {
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(t));
  const GgmlCodeRange cr = ggml_code_range(t);
  std::vector<uint8_t> b(block, block + row.type_size), L(size_t(row.block_size));
  std::vector<float> v(size_t(row.block_size));
  float best = 0, dist = INFINITY;
  for (int c = cr.lo; c <= cr.hi; ++c) {
    std::fill(L.begin(), L.end(), uint8_t(c));
    ggml_pack_codes(t, L.data(), b.data());
    row.to_float(b.data(), v.data(), 1);
    if (std::fabs(x - v[size_t(j)]) < dist) dist = std::fabs(x - v[size_t(j)]), best = v[size_t(j)];
  }
  return best;
}

TEST(GgmlCodes, PackingTheReferenceCodesAgainGivesTheSameBlock) {
  // Codes read back from a reference block by brute force and packed under its scales: the same bytes.
  for (GgmlType t : kTypes) {
    const GgmlTypeRow& row = *ggml_type_row(uint32_t(t));
    const std::vector<float> x = test::randn(size_t(row.block_size), 7);
    std::vector<uint8_t> ref(size_t(row.type_size));
    ggml_quantize_block(t, x.data(), nullptr, ref.data());
    const std::vector<float> v = decode(t, ref, x.size());
    const GgmlCodeRange cr = ggml_code_range(t);
    std::vector<uint8_t> L(x.size()), b(ref), all(x.size());
    std::vector<float> d(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      for (int c = cr.lo; c <= cr.hi; ++c) {
        std::fill(all.begin(), all.end(), uint8_t(c));
        ggml_pack_codes(t, all.data(), b.data());
        row.to_float(b.data(), d.data(), 1);
        if (d[j] == v[j]) {
          L[j] = uint8_t(c);
          break;
        }
      }
    }
    ggml_pack_codes(t, L.data(), b.data());
    EXPECT_EQ(b, ref) << name(t);
  }
}

// A Hessian with no interaction between inputs: GPTQ has no error to spread, so every weight is
// the nearest value under the block's scales, which are the reference rule's.
TEST(GptqGgml, IdentityHessianIsPlainRoundingUnderTheSameScales) {
  const int64_t rows = 2, cols = 512;
  const std::vector<float> w = test::randn(size_t(rows * cols), 11);
  std::vector<float> I(size_t(cols * cols), 0.0f);
  for (int64_t j = 0; j < cols; ++j) I[size_t(j * cols + j)] = 1.0f;
  const calib::GptqOptions opt;
  const calib::GptqHessian h = calib::prepare_gptq_hessian(I, cols, opt);
  for (GgmlType t : kTypes) {
    const GgmlTypeRow& row = *ggml_type_row(uint32_t(t));
    const std::vector<uint8_t> q = calib::gptq_quantize_ggml(t, w.data(), rows, cols, h, opt);
    const std::vector<float> v = decode(t, q, w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      const uint8_t* block = q.data() + i / size_t(row.block_size) * size_t(row.type_size);
      ASSERT_EQ(v[i], nearest_by_brute_force(t, block, int(i % size_t(row.block_size)), w[i])) << name(t) << " " << i;
    }
    // The K-quants' reference rule codes to the nearest value under its stored scales too: the
    // same bytes as llama-quantize's.
    if (row.block_size == 256) {
      std::vector<uint8_t> ref(q.size());
      ggml_quantize(t, w.data(), w.size(), ref.data());
      EXPECT_EQ(q, ref) << name(t);
    }
  }
}

// Inputs x = z·A (correlated channels), H = Σ xᵀx.
struct Layer {
  int64_t rows = 8, cols = 256, n = 512;
  std::vector<float> X, W, H;
  Layer() {
    const std::vector<float> z = test::randn(size_t(n * cols), 3), A = test::randn(size_t(cols * cols), 4, 0.15f);
    X.assign(size_t(n * cols), 0.0f);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t k = 0; k < cols; ++k) {
        float s = z[size_t(t * cols + k)];
        for (int64_t j = 0; j < cols; j += 8) s += z[size_t(t * cols + j)] * A[size_t(j * cols + k)];
        X[size_t(t * cols + k)] = s * (1.0f + float(k % 7));  // uneven channel scales, as real activations
      }
    W = test::randn(size_t(rows * cols), 5, 0.05f);
    H.assign(size_t(cols * cols), 0.0f);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < cols; ++i)
        for (int64_t j = 0; j < cols; ++j) H[size_t(i * cols + j)] += X[size_t(t * cols + i)] * X[size_t(t * cols + j)];
  }
  // ||X (W − Ŵ)ᵀ||².
  double output_error(const std::vector<float>& Wq) const {
    double e = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t k = 0; k < cols; ++k)
          s += double(X[size_t(t * cols + k)]) * (W[size_t(r * cols + k)] - Wq[size_t(r * cols + k)]);
        e += s * s;
      }
    return e;
  }
};

TEST(GptqGgml, DecodesToTheSweptValuesAndBeatsPlainRoundingOnCorrelatedInputs) {
  const Layer L;
  for (bool weighted : {false, true}) {
    calib::GptqOptions opt;
    opt.weighted_groups = weighted;
    const calib::GptqHessian h = calib::prepare_gptq_hessian(L.H, L.cols, opt);
    for (GgmlType t : kTypes) {
      std::vector<float> deq, swept;
      const std::vector<uint8_t> q =
          calib::gptq_quantize_ggml(t, L.W.data(), L.rows, L.cols, h, opt, &deq, nullptr, &swept);
      // The file's values are exactly those the sweep chose (and the type's dequantizer reads them).
      ASSERT_EQ(deq, swept) << name(t);
      ASSERT_EQ(decode(t, q, L.W.size()), deq) << name(t);
      std::vector<uint8_t> rtn(q.size());
      ggml_quantize(t, L.W.data(), L.W.size(), rtn.data());
      const double e_gptq = L.output_error(deq), e_rtn = L.output_error(decode(t, rtn, L.W.size()));
      EXPECT_LT(e_gptq, 0.9 * e_rtn) << name(t) << (weighted ? " weighted" : "");
    }
  }
}

// The writer's path for blocks made beforehand (--gptq): given the blocks of the checkpoint's rows,
// it reorders llama's Q/K rows itself; here the blocks are plain rounding, so the file must be the
// one the writer makes on its own.
TEST(GptqGgml, PrecomputedBlocksGiveTheWritersOwnFile) {
  const Checkpoint ck = load_checkpoint(test::source_dir() + "/tests/golden/logits/tiny-llama3");
  const std::string dir = test::temp_dir("gptq_ggml");
  for (const char* t : {"q4_0", "q8_0"}) {
    GgufExportOptions opt;
    opt.gguf_type = t;
    std::map<std::string, std::vector<uint8_t>> blocks;
    for (auto& [hf, type] : gguf_weight_types(ck, opt)) {
      const std::vector<float> w = to_f32(ck.get(hf));
      blocks[hf].resize(ggml_nbytes(type, w.size()));
      ggml_quantize(type, w.data(), w.size(), blocks[hf].data());
    }
    ASSERT_FALSE(blocks.empty());
    write_gguf_file(ck, dir + "/own.gguf", opt);
    opt.packed = [&](const std::string& hf) { return &blocks.at(hf); };
    write_gguf_file(ck, dir + "/pre.gguf", opt);
    auto bytes = [](const std::string& p) {
      std::ifstream f(p, std::ios::binary);
      return std::vector<char>(std::istreambuf_iterator<char>(f), {});
    };
    EXPECT_EQ(bytes(dir + "/own.gguf"), bytes(dir + "/pre.gguf")) << t;
  }
}

}  // namespace
}  // namespace qt
