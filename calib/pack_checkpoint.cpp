#include "calib/pack_checkpoint.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "calib/fused_global_scale.h"
#include "formats/layouts/compressed_tensors.h"
#include "formats/layouts/ct_fp4.h"
#include "formats/layouts/quantized.h"
#include "formats/vlm.h"

namespace qt::calib {

namespace {

// One weight's quantization, shared by its stored tensors (codes, scales, biases): whichever the
// writer makes first runs it; each takes its part, and the packed result is dropped once all
// have.
class PackJob {
 public:
  // `calib` null: plain rounding (a vision tower's weights, which calibration does not see).
  PackJob(std::string name, Tensor source, SchemeParams p, const WeightCalibration* calib, int parts)
      : name_(std::move(name)), source_(std::move(source)), p_(std::move(p)), calib_(calib), left_(parts) {}

  // Part 0: codes, 1: scales, 2: biases.
  Tensor take(int part) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!packed_ && (!calib_ || !calib_->active())) {
      packed_ = quantize_tensor(source_, p_, name_);  // chunk by chunk, no fp32 copy of the whole
      release_pages(source_);
      source_ = Tensor{};
    }
    if (!packed_) {
      const int64_t rows = source_.shape[0], cols = source_.shape[1];
      // The fp32 copy goes into this thread's buffer, kept between weights (a fresh one per
      // weight spent a fifth of convert's time in page faults) unless it grew past 256 MB.
      thread_local std::vector<float> w;
      w.resize(size_t(rows * cols));
      to_f32_range(source_, 0, w.size(), w.data());
      release_pages(source_);
      std::optional<PackedTensor> c = calib_->quantize(name_, w.data(), rows, cols, p_);
      packed_ = c ? std::move(*c) : quantize_weights(w.data(), rows, cols, p_, name_);
      if (w.capacity() > (size_t(256) << 20) / sizeof(float)) std::vector<float>().swap(w);
      source_ = Tensor{};  // a deferred source (GGUF) is made once
    }
    Tensor& slot = part == 0 ? packed_->data : part == 1 ? packed_->scales : packed_->biases;
    Tensor r = std::move(slot);
    slot = Tensor{};
    if (--left_ == 0) packed_.reset();
    return r;
  }

 private:
  std::mutex mu_;
  std::string name_;
  Tensor source_;
  SchemeParams p_;
  const WeightCalibration* calib_;
  int left_;
  std::optional<PackedTensor> packed_;
};

// One weight staged for the writer: its stored tensors (codes, scales, biases and what the layout adds)
// put into `into` as deferred tensors sharing one PackJob, so the weight is quantized when the writer
// reaches the first of them. `calib` null: plain rounding. Returns the weight's entry.
QuantEntry stage_weight(const std::string& name, const Tensor& t, const SchemeParams& p, const OutputLayout& layout,
                        const WeightCalibration* calib, std::map<std::string, Tensor>& into) {
  QuantEntry q = layout.tensor_names(name);
  q.scheme = p.scheme;
  q.bits = p.bits;
  q.group_size = p.group_size;
  q.dtype = p.dtype;
  q.rows = t.shape[0];
  q.cols = t.shape[1];
  const PackedLayout lay = packed_layout(p, q.rows, q.cols);
  if (!lay.biases) q.biases.clear();
  auto job = std::make_shared<PackJob>(name, t, p, calib, lay.biases ? 3 : 2);
  auto part = [&](const TensorSpec& spec, int k) {
    return deferred_tensor(spec.dtype, spec.shape, [job, k] { return job->take(k); });
  };
  if (std::string_view(layout.name) == "compressed-tensors" && ct_fp4_format(q.scheme)) ct_fp4_names(q, name);
  if (ct_pack_quantized(q.scheme)) {  // int32 codes beside the weight's shape
    q.data = module_of(name) + ".weight_packed";
    std::vector<uint8_t> shape(16);
    const int64_t dims[2] = {q.rows, q.cols};
    std::memcpy(shape.data(), dims, 16);
    into[module_of(name) + ".weight_shape"] = Tensor::owned_bytes(DType::I64, {2}, std::move(shape));
  }
  into[q.data] = part(lay.data, 0);
  into[q.scales] = part(lay.scales, 1);
  if (lay.biases) into[q.biases] = part(*lay.biases, 2);
  if (layout.code_table_suffix) {
    const auto table = bnb_code_table(q.scheme);
    into[q.data + layout.code_table_suffix] = Tensor::from_f32({table.begin(), table.end()}, {16});
  }
  return q;
}

}  // namespace

Checkpoint pack_checkpoint(Checkpoint ck, const QuantPlan& plan, const OutputLayout& layout, WeightCalibration& calib) {
  std::map<std::string, SchemeParams> tensors = plan.tensors;
  if (calib.active())
    calib.run(ck, tensors);  // shares fused global scales after folding any smoothing
  else
    share_fused_global_scales(ck, tensors);
  nlohmann::json desc = {{"format", layout.name}, {"tensors", nlohmann::json::object()}, {"skipped", plan.skipped}};
  bool int8_act = false, fp8_act = false, e2m1_act = false;
  for (auto& [name, p] : tensors) {
    const Scheme& row = find_scheme(p.scheme);
    int8_act |= row.int8_activations();
    fp8_act |= row.kernel == KernelFamily::Fp8PerToken;
    e2m1_act |= row.round_activations != nullptr;
    const Tensor t = ck.tensors.at(name);
    ck.tensors.erase(name);
    desc["tensors"][name] = quant_entry_json(stage_weight(name, t, p, layout, &calib, ck.tensors));
  }
  // Whether any weight's kernels quantize activations (the native layout records it).
  desc["activations"] = e2m1_act              ? "e2m1-per-group-dynamic"
                        : int8_act && fp8_act ? "int8/fp8-per-token-dynamic"
                        : int8_act            ? "int8-per-token-dynamic"
                        : fp8_act             ? "fp8-per-token-dynamic"
                                              : "none";
  ck.quantization = desc;
  return ck;
}

int pack_vision_tower(Checkpoint& ck, const SchemeParams& p, const OutputLayout& layout) {
  if (!ck.multimodal) return 0;
  auto mm = std::make_shared<Multimodal>(*ck.multimodal);
  nlohmann::json entries = nlohmann::json::object();
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : mm->passthrough) {
    const bool weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    // The weights mlx's nn.quantize turns into quantized modules: Linear's and Embedding's, whose
    // rows the group divides (a convolution's kernel is not 2-D; norms are 1-D).
    if (!weight || t.shape.size() != 2 || !is_float(t.dtype) || t.shape[1] % p.group_size != 0) {
      out.emplace(name, t);
      continue;
    }
    entries[name] = quant_entry_json(stage_weight(name, t, p, layout, nullptr, out));
  }
  mm->passthrough = std::move(out);
  ck.multimodal = mm;
  ck.quantization["vision"] = entries;
  return int(entries.size());
}

}  // namespace qt::calib
