#include "formats/gpt_oss_experts.h"

#include <cmath>

#include "formats/error.h"

namespace qt {

namespace {

// E2M1: sign, 2 exponent bits, 1 mantissa bit (transformers' FP4_VALUES, in code order).
constexpr float kE2M1[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// A weight of the fused layout as fp32 [E, rows, cols] in Linear orientation (rows = out):
// from MXFP4 (stored [E, out, in/32, 16]: already out-major) or from a float tensor stored
// [E, cols, rows] (transposed).
std::vector<float> expert_weight(std::map<std::string, Tensor>& t, const std::string& name, int64_t E, int64_t rows,
                                 int64_t cols, const std::string& path) {
  auto f = t.find(name);
  if (f != t.end()) {
    if (!is_float(f->second.dtype) || f->second.shape != std::vector<int64_t>{E, cols, rows})
      user_error("{}: tensor {} has shape {}, expected [{}, {}, {}]", path, name, shape_text(f->second.shape), E, cols,
                 rows);
    std::vector<float> src = to_f32(f->second), out(src.size());
    for (int64_t e = 0; e < E; ++e)
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 0; r < rows; ++r)
          out[size_t((e * rows + r) * cols + c)] = src[size_t((e * cols + c) * rows + r)];
    t.erase(f);
    return out;
  }
  auto b = t.find(name + "_blocks"), s = t.find(name + "_scales");
  if (b == t.end() || s == t.end()) user_error("{}: missing tensor {}", path, name);
  if (cols % 32) user_error("{}: {} has {} columns, not a multiple of the MXFP4 block of 32", path, name, cols);
  const int64_t G = cols / 32;
  if (b->second.dtype != DType::U8 || b->second.shape != std::vector<int64_t>{E, rows, G, 16})
    user_error("{}: tensor {}_blocks has shape {}, expected U8 [{}, {}, {}, 16]", path, name,
               shape_text(b->second.shape), E, rows, G);
  if (s->second.dtype != DType::U8 || s->second.shape != std::vector<int64_t>{E, rows, G})
    user_error("{}: tensor {}_scales has shape {}, expected U8 [{}, {}, {}]", path, name, shape_text(s->second.shape),
               E, rows, G);
  const Tensor bt = materialize(b->second), st = materialize(s->second);
  std::vector<float> out = mxfp4_dequantize(bt.as<uint8_t>(), st.as<uint8_t>(), E * rows, G);
  t.erase(b);
  t.erase(s);
  return out;
}

std::vector<float> take_f32(std::map<std::string, Tensor>& t, const std::string& name, std::vector<int64_t> shape,
                            const std::string& path) {
  auto it = t.find(name);
  if (it == t.end()) user_error("{}: missing tensor {}", path, name);
  if (!is_float(it->second.dtype) || it->second.shape != shape)
    user_error("{}: tensor {} has shape {}, expected {}", path, name, shape_text(it->second.shape), shape_text(shape));
  std::vector<float> v = to_f32(it->second);
  t.erase(it);
  return v;
}

}  // namespace

std::vector<float> mxfp4_dequantize(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t groups) {
  std::vector<float> out(size_t(rows * groups * 32));
#pragma omp parallel for schedule(static) if (rows * groups >= 4096)
  for (int64_t g = 0; g < rows * groups; ++g) {
    const int e = int(scales[g]) - 127;  // torch.ldexp(value, e)
    const uint8_t* b = blocks + g * 16;
    float* o = out.data() + g * 32;
    for (int i = 0; i < 16; ++i) {
      o[2 * i] = std::ldexp(kE2M1[b[i] & 0x0F], e);
      o[2 * i + 1] = std::ldexp(kE2M1[b[i] >> 4], e);
    }
  }
  return out;
}

void split_gpt_oss_experts(const ModelConfig& c, std::map<std::string, Tensor>& tensors, const std::string& path) {
  const int64_t E = c.n_experts, I = c.moe_intermediate, H = c.hidden;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    if (tensors.count(p + "0.gate_proj.weight")) continue;  // already split (a folder we wrote)
    std::vector<float> gu = expert_weight(tensors, p + "gate_up_proj", E, 2 * I, H, path);
    std::vector<float> dn = expert_weight(tensors, p + "down_proj", E, H, I, path);
    std::vector<float> gub = take_f32(tensors, p + "gate_up_proj_bias", {E, 2 * I}, path);
    std::vector<float> dnb = take_f32(tensors, p + "down_proj_bias", {E, H}, path);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + std::to_string(e) + ".";
      std::vector<float> g(size_t(I * H)), u(size_t(I * H)), gb(static_cast<size_t>(I)), ub(static_cast<size_t>(I));
      for (int64_t r = 0; r < I; ++r) {  // gate: rows 0, 2, 4, ...; up: rows 1, 3, 5, ...
        const float* src = gu.data() + (e * 2 * I + 2 * r) * H;
        std::copy(src, src + H, g.begin() + r * H);
        std::copy(src + H, src + 2 * H, u.begin() + r * H);
        gb[size_t(r)] = gub[size_t(e * 2 * I + 2 * r)];
        ub[size_t(r)] = gub[size_t(e * 2 * I + 2 * r + 1)];
      }
      tensors[x + "gate_proj.weight"] = Tensor::from_f32(std::move(g), {I, H});
      tensors[x + "up_proj.weight"] = Tensor::from_f32(std::move(u), {I, H});
      tensors[x + "gate_proj.bias"] = Tensor::from_f32(std::move(gb), {I});
      tensors[x + "up_proj.bias"] = Tensor::from_f32(std::move(ub), {I});
      tensors[x + "down_proj.weight"] =
          Tensor::from_f32(std::vector<float>(dn.begin() + e * H * I, dn.begin() + (e + 1) * H * I), {H, I});
      tensors[x + "down_proj.bias"] =
          Tensor::from_f32(std::vector<float>(dnb.begin() + e * H, dnb.begin() + (e + 1) * H), {H});
    }
  }
}

void fuse_gpt_oss_experts(const ModelConfig& c, std::map<std::string, Tensor>& tensors) {
  const int64_t E = c.n_experts, I = c.moe_intermediate, H = c.hidden;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    auto first = tensors.find(p + "0.gate_proj.weight");
    // quantized experts (native, compressed-tensors) stay per expert, as the quantized readers take them
    if (first == tensors.end() || !is_float(first->second.dtype)) continue;
    std::vector<float> gu(size_t(E * H * 2 * I)), gub(size_t(E * 2 * I)), dn(size_t(E * I * H)), dnb(size_t(E * H));
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + std::to_string(e) + ".";
      auto take = [&](const std::string& name) {
        auto it = tensors.find(x + name);
        if (it == tensors.end()) user_error("gpt_oss: missing tensor {}{}", x, name);
        if (!is_float(it->second.dtype)) user_error("gpt_oss: {}{} is quantized, expert 0 is not", x, name);
        std::vector<float> v = to_f32(it->second);
        tensors.erase(it);
        return v;
      };
      const std::vector<float> g = take("gate_proj.weight"), u = take("up_proj.weight"), d = take("down_proj.weight");
      const std::vector<float> gb = take("gate_proj.bias"), ub = take("up_proj.bias"), db = take("down_proj.bias");
      for (int64_t r = 0; r < I; ++r) {  // [E, H, 2I]: gate in even columns, up in odd
        for (int64_t h = 0; h < H; ++h) {
          gu[size_t((e * H + h) * 2 * I + 2 * r)] = g[size_t(r * H + h)];
          gu[size_t((e * H + h) * 2 * I + 2 * r + 1)] = u[size_t(r * H + h)];
        }
        gub[size_t(e * 2 * I + 2 * r)] = gb[size_t(r)];
        gub[size_t(e * 2 * I + 2 * r + 1)] = ub[size_t(r)];
      }
      for (int64_t h = 0; h < H; ++h) {  // [E, I, H] from [H, I]
        for (int64_t i = 0; i < I; ++i) dn[size_t((e * I + i) * H + h)] = d[size_t(h * I + i)];
        dnb[size_t(e * H + h)] = db[size_t(h)];
      }
    }
    tensors[p + "gate_up_proj"] = Tensor::from_f32(std::move(gu), {E, H, 2 * I});
    tensors[p + "gate_up_proj_bias"] = Tensor::from_f32(std::move(gub), {E, 2 * I});
    tensors[p + "down_proj"] = Tensor::from_f32(std::move(dn), {E, I, H});
    tensors[p + "down_proj_bias"] = Tensor::from_f32(std::move(dnb), {E, H});
  }
}

std::shared_ptr<const SafetensorsDir> gpt_oss_mxfp4_source(const Checkpoint& ck) {
  if (ck.source_kind != "hf" || !ck.config.desc().moe || !ck.config.desc().moe->gpt_oss) return nullptr;
  auto st = std::make_shared<SafetensorsDir>(load_safetensors_dir(ck.path));
  return st->tensors.count("model.layers.0.mlp.experts.down_proj_blocks") ? st : nullptr;
}

std::vector<uint8_t> gpt_oss_mxfp4_ggml_blocks(const SafetensorsDir& src, const ModelConfig& c,
                                               const std::string& hf_name) {
  // model.layers.L.mlp.experts.E.<proj>.weight
  const size_t k = hf_name.find(".mlp.experts.");
  const size_t e0 = k + 13, e1 = hf_name.find('.', e0);
  if (k == std::string::npos || e1 == std::string::npos) throw std::logic_error("not an expert weight: " + hf_name);
  const std::string prefix = hf_name.substr(0, k + 13), proj = hf_name.substr(e1 + 1);
  const int64_t e = std::stoll(hf_name.substr(e0, e1 - e0));
  const bool down = proj == "down_proj.weight";
  const int64_t E = c.n_experts, rows = down ? c.hidden : c.moe_intermediate;
  const int64_t fused_rows = down ? rows : 2 * rows, G = (down ? c.moe_intermediate : c.hidden) / 32;
  const std::string base = prefix + (down ? "down_proj" : "gate_up_proj");
  const Tensor b = materialize(src.tensors.at(base + "_blocks")), s = materialize(src.tensors.at(base + "_scales"));
  if (b.numel() != E * fused_rows * G * 16 || s.numel() != E * fused_rows * G)
    user_error("{}: {}_blocks / _scales do not hold [{}, {}, {}] blocks", hf_name, base, E, fused_rows, G);
  const int64_t step = down ? 1 : 2, first = proj == "up_proj.weight" ? 1 : 0;
  std::vector<uint8_t> out(size_t(rows * G * 17));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t at = (e * fused_rows + first + step * r) * G + g;
      const uint8_t* q = b.as<uint8_t>() + at * 16;
      uint8_t* y = out.data() + (r * G + g) * 17;
      y[0] = s.as<uint8_t>()[at];
      auto code = [q](int i) { return (q[i / 2] >> (4 * (i & 1))) & 0x0F; };
      for (int j = 0; j < 16; ++j) y[1 + j] = uint8_t(code(j) | (code(j + 16) << 4));
    }
  return out;
}

}  // namespace qt
