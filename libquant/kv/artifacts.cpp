#include "libquant/kv/artifacts.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/mapped_file.h"
#include "formats/safetensors.h"
#include "libquant/kv/codec.h"

namespace qt::kv {

std::string codebook_name(int density, int bits, double param) {
  switch (Density(density)) {
    case Density::Gaussian: return fmt::format("codebook.gaussian_b{}", bits);
    case Density::Laplacian: return fmt::format("codebook.laplacian_b{}", bits);
    case Density::Sphere: return fmt::format("codebook.sphere_d{}_b{}", int(param), bits);
    case Density::PolarAngle: return fmt::format("codebook.polar_l{}_b{}", int(param), bits);
  }
  return "";
}

namespace {

Tensor f32_tensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  return Tensor::from_f32(v, std::move(shape));
}

void add_codebook(NamedTensors& out, const KVContext& ctx, Density d, int bits, double param) {
  const auto cb = ctx.codebook(d, bits, param);
  const std::string n = codebook_name(int(d), bits, param);
  out.emplace_back(n + ".centroids", f32_tensor(cb.c, {int64_t(cb.c.size())}));
  out.emplace_back(n + ".thresholds", f32_tensor(cb.t, {int64_t(cb.t.size())}));
  out.emplace_back(n + ".mse", f32_tensor({cb.mse}, {1}));
}

}  // namespace

std::string write_kv_artifacts(const std::string& dir, const PrecomputeOptions& o) {
  const int d = o.head_dim, m = o.jl_dim > 0 ? o.jl_dim : o.head_dim;
  if (d < 4 || d > 1024) user_error("--head-dim {}: must be between 4 and 1024", d);
  if (m < 1 || m > 16 * 1024) user_error("--jl-dim {}: must be between 1 and 16384", m);
  if (o.bits.empty()) user_error("--bits: give at least one bit width");
  for (int b : o.bits)
    if (b < 1 || b > 8) user_error("--bits {}: codebooks are made for 1 to 8 bits", b);
  KVContext ctx;  // no artifacts: computes everything
  ctx.head_dim = d;
  ctx.seed = o.seed;

  std::map<std::string, NamedTensors> files;
  NamedTensors& rot = files["rotations.safetensors"];
  rot.emplace_back("rotation.dense", f32_tensor(ctx.rotation("dense").matrix(), {d, d}));
  if ((d & (d - 1)) == 0) rot.emplace_back("rotation.wht_signs", f32_tensor(ctx.rotation("wht").matrix(), {d}));
  NamedTensors& jl = files["jl.safetensors"];
  jl.emplace_back(fmt::format("jl.qjl_m{}", m), f32_tensor(ctx.jl(m, SeedUse::JL), {m, d}));
  jl.emplace_back("jl.prod", f32_tensor(ctx.jl(d, SeedUse::ProdJL), {d, d}));
  NamedTensors& cbs = files["codebooks.safetensors"];
  for (int b : o.bits) {
    add_codebook(cbs, ctx, Density::Sphere, b, d);
    add_codebook(cbs, ctx, Density::Gaussian, b, 0);
    add_codebook(cbs, ctx, Density::Laplacian, b, 0);
    for (int l = 2; l <= 4; ++l) add_codebook(cbs, ctx, Density::PolarAngle, b, l);
  }

  std::filesystem::create_directories(dir);
  nlohmann::ordered_json man;
  man["format"] = "quanttool-kv-artifacts";
  man["version"] = 1;
  man["head_dim"] = d;
  man["seed"] = o.seed;
  man["jl_dim"] = m;
  man["bits"] = o.bits;
  for (auto& [f, ts] : files) {
    std::vector<std::string> names;
    for (auto& [n, t] : ts) names.push_back(n);
    man["files"][f] = names;
    write_safetensors(dir + "/" + f, ts, {{"format", "quanttool-kv-artifacts"}});
  }
  const std::string s = man.dump(2) + "\n";
  write_file_atomic(dir + "/manifest.json", s.data(), s.size());
  return s;
}

std::shared_ptr<const Artifacts> Artifacts::load(const std::string& dir, int head_dim, uint64_t seed) {
  const std::string mp = dir + "/manifest.json";
  if (!std::filesystem::is_regular_file(mp))
    user_error("--artifacts {}: no manifest.json (made by quanttool precompute?)", dir);
  MappedFile mf = map_file(mp);
  nlohmann::json man;
  try {
    man = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(mf.data), mf.size));
  } catch (const std::exception& e) {
    user_error("--artifacts {}: manifest.json is not JSON ({})", dir, e.what());
  }
  if (man.value("format", "") != "quanttool-kv-artifacts")
    user_error("--artifacts {}: not a quanttool KV artifacts folder", dir);
  if (man.value("head_dim", 0) != head_dim)
    user_error("--artifacts {}: made for head dimension {}, the model has {}", dir, man.value("head_dim", 0), head_dim);
  if (man.value("seed", uint64_t(0)) != seed)
    user_error("--artifacts {}: made with seed {}, this run uses {} (--kv-seed)", dir, man.value("seed", uint64_t(0)),
               seed);
  auto a = std::make_shared<Artifacts>();
  a->dir_ = dir;
  for (auto& [f, names] : man["files"].items()) {
    SafetensorsFile sf = SafetensorsFile::open(dir + "/" + f);
    for (auto& n : names) a->t_[n.get<std::string>()] = to_f32(sf.get(n.get<std::string>()));
  }
  return a;
}

const std::vector<float>* Artifacts::find(const std::string& name) const {
  auto it = t_.find(name);
  return it == t_.end() ? nullptr : &it->second;
}

}  // namespace qt::kv
