#include "libquant/cuda/gemm_lt.h"
#include "libquant/cuda/profile.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace qt::cuda {

namespace {
constexpr size_t kWorkspace = size_t(64) << 20;  // cuBLASLt's recommendation for Hopper is 32 MiB+

// The largest power of two up to 256 that divides every address.
int common_alignment(const void* a, const void* b, const void* c) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(c);
  int al = 256;
  while (al > 1 && x % uintptr_t(al)) al /= 2;
  return al;
}
}  // namespace

GemmLt::GemmLt() {
  QT_CUBLAS_CHECK(cublasLtCreate(&h_));
  ws_.resize(kWorkspace);
}

GemmLt::~GemmLt() {
  for (auto& [k, p] : plans_) destroy(p);
  for (auto& [k, b] : block_plans_) destroy(b.p);
  if (h_) cublasLtDestroy(h_);
}

void GemmLt::destroy(Plan& p) {
  for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c})
    if (l) cublasLtMatrixLayoutDestroy(l);
  if (p.op) cublasLtMatmulDescDestroy(p.op);
}

cublasLtMatmulPreference_t GemmLt::preference(int align) const {
  cublasLtMatmulPreference_t pref;
  QT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = ws_.bytes();
  QT_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  if (align < 256) {
    const uint32_t al = uint32_t(align);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      QT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al)));
  }
  return pref;
}

GemmLt::Plan& GemmLt::plan(int out, int in, int n, cudaDataType_t y_type, cudaDataType_t ab_type, int align,
                           bool rows) {
  const Key key{out, in, n, int(y_type), int(ab_type), align, rows};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p;
  const bool i8 = ab_type == CUDA_R_8I;
  QT_CUBLAS_CHECK(
      cublasLtMatmulDescCreate(&p.op, i8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F, i8 ? CUDA_R_32I : CUDA_R_32F));
  const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  QT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof(T)));
  QT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof(N)));
  // FP8 (per-tensor-scaled E4M3, FP8_DYNAMIC) accumulates as the FP8 tensor cores do, without
  // cuBLASLt's promotion of partial sums to fp32: as vLLM's FP8 GEMMs on Hopper (CUTLASS's
  // FP8FastAccum schedule, csrc/quantization/cutlass_w8a8/c3x/scaled_mm_sm90_fp8_dispatch.cuh), so
  // what an FP8 model served there computes, and as the fused CUTLASS GEMMs here (cutlass_q8.cuh);
  // 7% faster on the 8B shape, PPL within the CPU's spread (results/fp8.md).
  if (ab_type == CUDA_R_8F_E4M3) {
    const int8_t fast = 1;
    QT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  }
  QT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab_type, in, out, in));
  QT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab_type, in, n, in));
  QT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, y_type, out, n, out));
  cublasLtMatmulPreference_t pref = preference(align);
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  QT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h_, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0)
    throw std::runtime_error(std::string("cuBLASLt found no algorithm for a ") +
                             (i8                          ? "int8"
                              : ab_type == CUDA_R_8F_E4M3 ? "fp8"
                                                          : "bf16") +
                             " GEMM");
  p.algo = res.algo;
  if (profile_requested()) {  // the heuristic's pick, for QT_CUDA_PROFILE's reader
    int32_t id = 0, splitk = 0;
    uint32_t tile = 0, stages = 0;
    size_t got = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &got);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &got);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &got);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &got);
    std::fprintf(stderr, "lt plan %s %dx%d n=%d align %d: algo %d tile %u stages %u split-k %d\n",
                 i8                          ? "int8"
                 : ab_type == CUDA_R_8F_E4M3 ? "fp8"
                                             : "bf16",
                 out, in, n, align, int(id), tile, stages, int(splitk));
  }
  return plans_.emplace(key, p).first->second;
}

void GemmLt::run(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, cudaDataType_t y_type,
                 bool accumulate, cudaStream_t s) {
  if (n <= 0) return;
  if (accumulate && y_type != CUDA_R_32F) throw std::logic_error("GemmLt: accumulate needs an fp32 output");
  Plan& p = plan(out, in, n, y_type, CUDA_R_16BF, common_alignment(W, X, Y));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  QT_CUBLAS_CHECK(
      cublasLtMatmul(h_, p.op, &alpha, W, p.a, X, p.b, &beta, Y, p.c, Y, p.c, &p.algo, ws_.get(), ws_.bytes(), s));
}

void GemmLt::run_rows(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, float* Y,
                      cudaStream_t s) {
  if (n <= 0) return;
  Plan& p = plan(out, in, (n + 255) / 256 * 256, CUDA_R_32F, CUDA_R_16BF, common_alignment(W, X, Y), true);
  const uint64_t cols = uint64_t(n);
  QT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(p.b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  QT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(p.c, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  const float alpha = 1.0f, beta = 0.0f;
  QT_CUBLAS_CHECK(
      cublasLtMatmul(h_, p.op, &alpha, W, p.a, X, p.b, &beta, Y, p.c, Y, p.c, &p.algo, ws_.get(), ws_.bytes(), s));
}

void GemmLt::run_rows8(const void* W, int out, int in, const void* X, int n, void* Y, bool fp8, cudaStream_t s) {
  if (n <= 0) return;
  Plan& p = plan(out, in, (n + 255) / 256 * 256, fp8 ? CUDA_R_32F : CUDA_R_32I, fp8 ? CUDA_R_8F_E4M3 : CUDA_R_8I,
                 common_alignment(W, X, Y), true);
  const uint64_t cols = uint64_t(n);
  QT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(p.b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  QT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(p.c, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  const int32_t ia = 1, ib = 0;
  const float fa = 1.0f, fb = 0.0f;
  const void* alpha = fp8 ? static_cast<const void*>(&fa) : &ia;
  const void* beta = fp8 ? static_cast<const void*>(&fb) : &ib;
  QT_CUBLAS_CHECK(
      cublasLtMatmul(h_, p.op, alpha, W, p.a, X, p.b, beta, Y, p.c, Y, p.c, &p.algo, ws_.get(), ws_.bytes(), s));
}

}  // namespace qt::cuda

namespace qt::cuda {

void GemmLt::run_i8(const int8_t* W, int out, int in, const int8_t* X, int n, int32_t* Y, cudaStream_t s) {
  if (n <= 0) return;
  Plan& p = plan(out, in, n, CUDA_R_32I, CUDA_R_8I);
  const int32_t alpha = 1, beta = 0;
  QT_CUBLAS_CHECK(
      cublasLtMatmul(h_, p.op, &alpha, W, p.a, X, p.b, &beta, Y, p.c, Y, p.c, &p.algo, ws_.get(), ws_.bytes(), s));
}

// The sums in the FP8 tensor cores' own accumulation (plan(): CUBLASLT_MATMUL_DESC_FAST_ACCUM).
void GemmLt::run_f8(const void* W, int out, int in, const void* X, int n, float* Y, cudaStream_t s) {
  if (n <= 0) return;
  Plan& p = plan(out, in, n, CUDA_R_32F, CUDA_R_8F_E4M3);
  const float alpha = 1.0f, beta = 0.0f;
  QT_CUBLAS_CHECK(
      cublasLtMatmul(h_, p.op, &alpha, W, p.a, X, p.b, &beta, Y, p.c, Y, p.c, &p.algo, ws_.get(), ws_.bytes(), s));
}

}  // namespace qt::cuda

namespace qt::cuda {

int GemmLt::tune(const void* W, int out, int in, const void* X, int n, void* Y, cudaDataType_t y_type,
                 cudaDataType_t ab_type, cudaStream_t s, int candidates, float* first_ms, float* best_ms) {
  if (n <= 0) return 0;
  Plan& p = plan(out, in, n, y_type, ab_type);
  const bool i8 = ab_type == CUDA_R_8I;
  cublasLtMatmulPreference_t pref = preference(256);  // plan()'s default alignment
  std::vector<cublasLtMatmulHeuristicResult_t> res(size_t(std::max(1, candidates)));
  int found = 0;
  QT_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(h_, p.op, p.a, p.b, p.c, p.c, pref, int(res.size()), res.data(), &found));
  cublasLtMatmulPreferenceDestroy(pref);
  const int32_t ia = 1, ib = 0;
  const float fa = 1.0f, fb = 0.0f;
  const void* alpha = i8 ? static_cast<const void*>(&ia) : &fa;
  const void* beta = i8 ? static_cast<const void*>(&ib) : &fb;
  cudaEvent_t e0, e1;
  QT_CUDA_CHECK(cudaEventCreate(&e0));
  QT_CUDA_CHECK(cudaEventCreate(&e1));
  const int reps = 3;
  int best = -1;
  float best_t = 0, first_t = 0;
  for (int i = 0; i < found; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    auto go = [&] {
      return cublasLtMatmul(h_, p.op, alpha, W, p.a, X, p.b, beta, Y, p.c, Y, p.c, &res[i].algo, ws_.get(), ws_.bytes(),
                            s);
    };
    if (go() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up (and: does it run at all)
    QT_CUDA_CHECK(cudaEventRecord(e0, s));
    for (int r = 0; r < reps; ++r) QT_CUBLAS_CHECK(go());
    QT_CUDA_CHECK(cudaEventRecord(e1, s));
    QT_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    QT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    ms /= reps;
    if (i == 0) first_t = ms;
    if (best < 0 || ms < best_t) best = i, best_t = ms;
  }
  QT_CUDA_CHECK(cudaEventDestroy(e0));
  QT_CUDA_CHECK(cudaEventDestroy(e1));
  if (best < 0) return 0;
  // keep the heuristic's choice unless another is faster by more than the timing's noise (1%)
  if (best != 0 && first_t > 0 && best_t > 0.99f * first_t) best = 0, best_t = first_t;
  p.algo = res[size_t(best)].algo;
  if (first_ms) *first_ms = first_t;
  if (best_ms) *best_ms = best_t;
  return best;
}

}  // namespace qt::cuda

namespace qt::cuda {

// One plan per shape, as plan() makes them, with the block scale modes set on its descriptor (W
// is cuBLAS's A, X its B) and the scale pointers set per call. The heuristic is asked once; a
// shape it refuses stays refused. beta = 1 (accumulate) reads C = D in fp32, as run's residual add.
bool GemmLt::run_block_f8(const void* W, int out, int in, const float* w_scales, const void* X, int n,
                          const float* x_scales, float* Y, int ldy, bool accumulate, cudaStream_t s) {
  if (n <= 0) return true;
  if (out % 16 || in % 128 || n % 4 || ldy < out) return false;
  const int align = common_alignment(W, X, Y);
  const BlockKey key{out, in, n, ldy, align, accumulate};
  auto it = block_plans_.find(key);
  if (it == block_plans_.end()) {
    BlockPlan b;
    Plan& p = b.p;
    QT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
    QT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof(T)));
    QT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof(N)));
    const int32_t ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    QT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof(ma)));
    QT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof(mb)));
    QT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)));
    QT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)));
    QT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, in, out, in));
    QT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, in, n, in));
    QT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, out, n, ldy));
    cublasLtMatmulPreference_t pref = preference(align);
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    // an unsupported scale-mode combination is reported as a status, not as zero results
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h_, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    b.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (b.ok) p.algo = res.algo;
    if (profile_requested())
      std::fprintf(stderr, "lt fp8 block %dx%d n=%d ldy=%d%s: %s\n", out, in, n, ldy, accumulate ? " +=" : "",
                   b.ok ? "cuBLASLt runs it" : "refused (the bf16 decode runs it)");
    it = block_plans_.emplace(key, b).first;
  }
  BlockPlan& b = it->second;
  if (!b.ok) return false;
  Plan& p = b.p;
  QT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)));
  QT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(h_, p.op, &alpha, W, p.a, X, p.b, &beta, Y, p.c, Y, p.c, &p.algo, ws_.get(), ws_.bytes(), s);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {  // refused at launch: nothing ran
    b.ok = false;
    return false;
  }
  QT_CUBLAS_CHECK(st);
  return true;
}

}  // namespace qt::cuda
