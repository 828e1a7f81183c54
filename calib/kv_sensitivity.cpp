#include "calib/kv_sensitivity.h"

#include <cmath>

#include "formats/error.h"
#include "libquant/eval/kld.h"
#include "libquant/eval/perplexity.h"

namespace qt::calib {

KvSensitivity measure_kv_sensitivity(LlamaModel& model, const std::vector<int32_t>& tokens,
                                     const KvSensitivityOptions& o, const std::function<void(int, int)>& progress) {
  const ModelConfig& c = model.config();
  const ChunkPlan P = plan_chunks(PplMethod::Llama, o.ctx, int64_t(tokens.size()), o.chunks);
  if (P.n_chunks <= 0) user_error("calibrate: no chunk to measure on");
  const int V = c.vocab, L = c.n_layers;
  const int64_t rows = int64_t(P.n_chunks) * P.n_scored;

  auto config_with = [&](int layer, int side) {
    kv::KVConfig cfg = kv::uniform_kv_config(L, kv::parse_kv_spec("f16", "kv"), kv::parse_kv_spec("f16", "kv"));
    if (layer >= 0) (side == 0 ? cfg.k : cfg.v)[layer] = o.reference;
    cfg.residual = o.residual;
    cfg.mode = kv::KVMode::Decode;
    cfg.seed = o.seed;
    cfg.artifacts = o.artifacts;
    return cfg;
  };
  // Logits of every scored row of every chunk under one cache configuration, handed to `use`.
  std::vector<float> logits(size_t(P.n_scored) * V);
  auto run = [&](const kv::KVConfig& cfg, const std::function<void(int chunk, const float* lg)>& use) {
    auto cache = model.make_cache(P.ctx, cfg);
    std::vector<int32_t> chunk(P.ctx);
    for (int ci = 0; ci < P.n_chunks; ++ci) {
      cache->clear();
      std::copy(tokens.begin() + int64_t(ci) * P.ctx, tokens.begin() + int64_t(ci + 1) * P.ctx, chunk.begin());
      if (o.bos_id >= 0) chunk[0] = o.bos_id;
      const float* h = model.forward_hidden(chunk.data(), P.ctx, 0, *cache);
      model.output_head(h + int64_t(P.first) * c.hidden, P.n_scored, logits.data());
      use(ci, logits.data());
    }
  };

  std::vector<float> base(size_t(rows) * V);
  KvSensitivity s;
  double nll = 0;
  run(config_with(-1, 0), [&](int ci, const float* lg) {
    std::copy(lg, lg + size_t(P.n_scored) * V, base.begin() + size_t(ci) * P.n_scored * V);
    for (int r = 0; r < P.n_scored; ++r)
      nll += token_nll(lg + size_t(r) * V, V, tokens[int64_t(ci) * P.ctx + P.first + r + 1]);
  });
  s.base_ppl = std::exp(nll / double(rows));
  s.rows = rows;
  int done = 1;
  const int total = 2 * L + 1;
  if (progress) progress(done, total);
  for (int side = 0; side < 2; ++side)
    for (int l = 0; l < L; ++l) {
      double kl = 0;
      run(config_with(l, side), [&](int ci, const float* lg) {
        std::vector<double> per(P.n_scored);
#pragma omp parallel for schedule(dynamic, 8)
        for (int r = 0; r < P.n_scored; ++r) {
          const int64_t row = int64_t(ci) * P.n_scored + r;
          per[r] = kld_token(base.data() + size_t(row) * V, lg + size_t(r) * V, V,
                             tokens[int64_t(ci) * P.ctx + P.first + r + 1])
                       .kld;
        }
        for (double x : per) kl += x;  // fixed order
      });
      (side == 0 ? s.k : s.v).push_back(kl / double(rows));
      if (progress) progress(++done, total);
    }
  return s;
}

}  // namespace qt::calib
