// The Dequantized rows' weights onto the GPU as stored (blockfp.h): codes and scale bytes copied,
// fp8_block's 128×128 block scales widened to fp32 and repeated per row, nvfp4's global scale per
// row; no fp32 copy of the weight anywhere.
#include <cstring>

#include "formats/error.h"
#include "libquant/cuda/blockfp.h"
#include "libquant/schemes/scheme.h"

namespace qt::cuda {

namespace {

BlockFpKind kind_of(const std::string& scheme, const std::string& path) {
  if (scheme == "nvfp4" || scheme == "nvfp4_a4") return BlockFpKind::Nvfp4;
  if (scheme == "mxfp4" || scheme == "mxfp4_a4") return BlockFpKind::Mxfp4;
  if (scheme == "fp8_block") return BlockFpKind::Fp8Block;
  user_error("{}: {} weights: not on cuda yet", path, scheme);
}

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  QT_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), b.bytes(), cudaMemcpyHostToDevice));
  return b;
}

}  // namespace

ActRound act_round_of(const Scheme& row) {
  if (!row.round_activations) return ActRound::None;
  if (row.round_activations == round_activations_nvfp4) return ActRound::Nvfp4;
  if (row.round_activations == round_activations_mxfp4) return ActRound::Mxfp4;
  if (row.round_activations == round_activations_fp8_groups) return ActRound::Fp8Groups;
  user_error("{}: its activation rounding: not on cuda yet", row.name);
}

BlockFpWeight upload_blockfp(const std::vector<const PackedTensor*>& parts, const std::string& path) {
  BlockFpWeight w;
  const std::string& scheme = parts.at(0)->params.scheme;
  w.kind = kind_of(scheme, path);
  const int64_t cols = parts[0]->cols;
  const int64_t group = w.kind == BlockFpKind::Nvfp4 ? 16 : w.kind == BlockFpKind::Mxfp4 ? 32 : 128;
  const int64_t code_bytes = w.kind == BlockFpKind::Fp8Block ? cols : cols / 2;
  if (cols <= 0 || cols % group) user_error("{}: {} weights {} columns wide: not on cuda yet", path, scheme, cols);
  std::vector<uint8_t> codes, sbytes;
  std::vector<float> sf, global;
  int64_t rows = 0;
  // fp8_block's GEMM segments (blockfp.h): block rows padded to L4 scales, cut after a partial block
  const int64_t L4 = (cols / 128 + 3) / 4 * 4;
  std::vector<float> seg;
  int64_t seg0 = 0, seg_rows = 0;
  auto close = [&] {
    if (seg_rows) w.segments.push_back({int(seg0), int(seg_rows), upload(seg)});
    seg0 += seg_rows, seg_rows = 0;
    seg.clear();
  };
  for (const PackedTensor* p : parts) {
    if (p->params.scheme != scheme || p->cols != cols)
      user_error("{}: {} and {} weights {} / {} wide stacked together: mixed layouts: not on cuda yet", path, scheme,
                 p->params.scheme, cols, p->cols);
    const int64_t r = p->rows, ng = cols / group;
    if (p->data.nbytes != size_t(r * code_bytes)) user_error("{}: a {} weight of unexpected size", path, scheme);
    codes.insert(codes.end(), p->data.data, p->data.data + p->data.nbytes);
    if (w.kind == BlockFpKind::Fp8Block) {  // [ceil(r/128), ng] → per row [r, ng]
      const std::vector<float> s = to_f32(p->scales);
      if (s.size() != size_t(((r + 127) / 128) * ng)) user_error("{}: fp8_block scales of unexpected size", path);
      for (int64_t i = 0; i < r; ++i) sf.insert(sf.end(), s.begin() + (i / 128) * ng, s.begin() + (i / 128 + 1) * ng);
      if (seg_rows % 128) close();
      for (int64_t b = 0; b < (r + 127) / 128; ++b) {
        seg.insert(seg.end(), s.begin() + b * ng, s.begin() + (b + 1) * ng);
        seg.insert(seg.end(), size_t(L4 - ng), 0.0f);
      }
      seg_rows += r;
    } else {
      if (p->scales.nbytes != size_t(r * ng)) user_error("{}: {} scales of unexpected size", path, scheme);
      sbytes.insert(sbytes.end(), p->scales.data, p->scales.data + p->scales.nbytes);
      if (w.kind == BlockFpKind::Nvfp4) {
        if (p->biases.dtype != DType::F32 || p->biases.nbytes != 4)
          user_error("{}: nvfp4 without its fp32 global scale", path);
        float gs;
        std::memcpy(&gs, p->biases.data, 4);
        global.insert(global.end(), size_t(r), gs);
      }
    }
    rows += r;
  }
  close();
  w.rows = int(rows), w.cols = int(cols);
  w.codes = upload(codes);
  w.scales = w.kind == BlockFpKind::Fp8Block ? upload(sf) : upload(sbytes);
  if (!global.empty()) w.global = upload(global);
  return w;
}

}  // namespace qt::cuda
