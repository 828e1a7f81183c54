// The CUDA backend in a build without CUDA (QT_CUDA off): no device, and every use is a
// one-line UserError (exit 2), never a CPU fallback.
#include "formats/error.h"
#include "libquant/cuda/backend.h"

namespace qt::cuda {

namespace {
[[noreturn]] void no_cuda() {
  user_error("--device cuda: this quanttool was built without CUDA (configure with cmake -DQT_CUDA=ON)");
}
}  // namespace

struct GpuModel::Impl {};

bool built() { return false; }
int device_count() { return 0; }
std::string DeviceInfo::describe() const { return name; }
DeviceInfo device_info(int) { no_cuda(); }
void check_supported(const Checkpoint&) { no_cuda(); }
GpuModel::GpuModel(Checkpoint&&, bool, const std::vector<int>&) { no_cuda(); }
std::string GpuModel::describe_stages() const { no_cuda(); }
GpuModel::~GpuModel() = default;
const ModelConfig& GpuModel::config() const { no_cuda(); }
size_t GpuModel::weight_bytes() const { no_cuda(); }
std::string GpuModel::kind() const { no_cuda(); }
int auto_batch(const GpuModel&, int) { no_cuda(); }
int pipeline_micro_batch(const GpuModel&, int, int) { no_cuda(); }
void set_kv(GpuModel&, const kv::KVConfig&) { no_cuda(); }
void check_kv(const kv::KVConfig&, int, const std::vector<float>&) { no_cuda(); }
std::unique_ptr<ChunkScorer> make_scorer(GpuModel&, int, GpuModel*) { no_cuda(); }
PplResult evaluate_perplexity(GpuModel&, const std::vector<int32_t>&, const PplOptions&, int, const ProgressFn&,
                              GpuModel*) {
  no_cuda();
}
std::vector<float> forward_logits(GpuModel&, const std::vector<int32_t>&) { no_cuda(); }

GpuPeaks measure_peaks(int) { no_cuda(); }

namespace testing {
std::vector<uint8_t> kv_encode(const kv::KVSpec&, bool, const kv::KVConfig&, const std::vector<float>&, int, int) {
  no_cuda();
}
std::vector<float> kv_decode(const kv::KVSpec&, bool, const kv::KVConfig&, const std::vector<float>&, int, int) {
  no_cuda();
}
std::vector<float> kv_attention(const kv::KVConfig&, const std::vector<float>&, const std::vector<float>&,
                                const std::vector<float>&, int, int, int, int, int, float, const std::vector<float>&,
                                int) {
  no_cuda();
}
std::vector<float> rmsnorm(const std::vector<float>&, const std::vector<float>&, int, int, float) { no_cuda(); }
std::vector<float> rope_split(const std::vector<float>&, int, int, int, int, int, const std::vector<float>&,
                              const std::vector<float>&) {
  no_cuda();
}
std::vector<float> swiglu(const std::vector<float>&, int, int) { no_cuda(); }
std::vector<float> gemm_bf16(const std::vector<float>&, int, int, const std::vector<float>&, int) { no_cuda(); }
std::vector<float> attention(const std::vector<float>&, const std::vector<float>&, const std::vector<float>&, int, int,
                             int, int, int, float, bool, int, float, const std::vector<float>&, int) {
  no_cuda();
}
float attention_ms(int, int, int, int, int, int, int) { no_cuda(); }
Q8 rmsnorm_q8(const std::vector<float>&, const std::vector<float>&, int, int, float) { no_cuda(); }
std::vector<int32_t> gemm_i8(const std::vector<int8_t>&, int, int, const std::vector<int8_t>&, int) { no_cuda(); }
std::vector<float> dequant(const std::vector<int32_t>&, int, int, const std::vector<float>&, const std::vector<float>&,
                           std::vector<float>, bool) {
  no_cuda();
}
Q8 swiglu_q8(const std::vector<int32_t>&, int, int, const std::vector<float>&, const std::vector<float>&) { no_cuda(); }
Q8 residual_rmsnorm_q8(const std::vector<int32_t>&, const std::vector<float>&, const std::vector<float>&,
                       std::vector<float>&, const std::vector<float>&, int, int, float) {
  no_cuda();
}
Q8 quant_rows(const std::vector<float>&, int, int) { no_cuda(); }
std::vector<float> rope_split_q8(const std::vector<int32_t>&, const std::vector<float>&, const std::vector<float>&, int,
                                 int, int, int, int, const std::vector<float>&, const std::vector<float>&) {
  no_cuda();
}
std::vector<int32_t> gemm_i8_tuned(const std::vector<int8_t>&, int, int, const std::vector<int8_t>&, int, int*) {
  no_cuda();
}
F8 rmsnorm_f8(const std::vector<float>&, const std::vector<float>&, int, int, float) { no_cuda(); }
F8 quant_rows_f8(const std::vector<float>&, int, int) { no_cuda(); }
std::vector<float> gemm_f8(const std::vector<uint8_t>&, int, int, const std::vector<uint8_t>&, int) { no_cuda(); }
bool q8_fused_available() { return false; }
std::vector<float> gemm_q8_swiglu(const std::vector<int8_t>&, int, int, const std::vector<float>&,
                                  const std::vector<int8_t>&, int, const std::vector<float>&) {
  no_cuda();
}
std::vector<float> gemm_f8_swiglu(const std::vector<uint8_t>&, int, int, const std::vector<float>&,
                                  const std::vector<uint8_t>&, int, const std::vector<float>&) {
  no_cuda();
}
float q8_swiglu_ms(bool, bool, int, int, int, int) { no_cuda(); }
std::vector<float> gemm_q8_rope(const std::vector<int8_t>&, int, int, const std::vector<float>&,
                                const std::vector<int8_t>&, int, const std::vector<float>&, int, int, int,
                                const std::vector<float>&, const std::vector<float>&) {
  no_cuda();
}
std::vector<float> gemm_f8_rope(const std::vector<uint8_t>&, int, int, const std::vector<float>&,
                                const std::vector<uint8_t>&, int, const std::vector<float>&, int, int, int,
                                const std::vector<float>&, const std::vector<float>&) {
  no_cuda();
}
float q8_rope_ms(bool, bool, int, int, int, int, int, int) { no_cuda(); }
F8 swiglu_f8(const std::vector<float>&, int, int, const std::vector<float>&, const std::vector<float>&) { no_cuda(); }
std::vector<float> dequant_f8(const std::vector<float>&, int, int, const std::vector<float>&, const std::vector<float>&,
                              std::vector<float>, bool) {
  no_cuda();
}
std::vector<float> affine_dequant(const std::vector<uint8_t>&, const std::vector<float>&, const std::vector<float>&,
                                  int, int, int, int, int) {
  no_cuda();
}
std::vector<float> blockfp_dequant(const std::vector<const PackedTensor*>&) { no_cuda(); }
void force_fp8_block_decode(GpuModel&) { no_cuda(); }
void force_unfused_gate_up(GpuModel&) { no_cuda(); }
void force_unfused_qkv(GpuModel&) { no_cuda(); }
bool runs_q8_rope(GpuModel&) { no_cuda(); }
bool runs_q8_swiglu(GpuModel&) { no_cuda(); }
std::vector<float> round_activations(const Scheme&, const std::vector<float>&, int, int, int) { no_cuda(); }
F8 quantize_fp8_groups(const std::vector<float>&, int, int) { no_cuda(); }
std::vector<float> gemm_fp8_block(const std::vector<const PackedTensor*>&, const std::vector<float>&, int,
                                  const std::vector<float>&) {
  no_cuda();
}
std::vector<KldToken> kld_rows(const std::vector<float>&, const std::vector<float>&, int, int,
                               const std::vector<int32_t>&) {
  no_cuda();
}
std::vector<double> token_nll(const std::vector<float>&, int, int, const std::vector<int32_t>&) { no_cuda(); }
}  // namespace testing

}  // namespace qt::cuda
