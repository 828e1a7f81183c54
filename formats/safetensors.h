// safetensors: reader over mmap with zero-copy tensor views, atomic writer, and sharded
// checkpoints (model.safetensors.index.json). Format facts and the rules the reference reader
// (huggingface/safetensors tensor.rs) enforces: docs/spec/safetensors.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "formats/tensor.h"

namespace qt {

class SafetensorsFile {
 public:
  // Map `path` and validate it; UserError "PATH: ..." on any rule the reference enforces.
  static SafetensorsFile open(const std::string& path);
  // Validate `n` bytes at `data` (not copied: the caller keeps them alive for as long as the
  // returned tensors are used, unless `owner` is given). `name` prefixes error messages.
  static SafetensorsFile parse(const uint8_t* data, size_t n, const std::string& name,
                               std::shared_ptr<const void> owner = nullptr);

  const std::string& path() const { return path_; }
  // `__metadata__` (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensor names in file (data offset) order.
  const std::vector<std::string>& names() const { return names_; }
  // Zero-copy view; its `owner` keeps the mapping alive. UserError when missing.
  const Tensor& get(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  // Byte offset of the tensor data buffer in the file (8 + header length).
  size_t data_start() const { return data_start_; }

 private:
  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::string> names_;
  std::map<std::string, Tensor> tensors_;
  size_t data_start_ = 0;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The exact bytes of the header (8-byte length + JSON padded with spaces to a multiple of 8)
// that the reference writer produces for these tensors; the data follows in the order of
// `order` (filled with indices into `tensors`, the reference's order: dtype alignment
// descending, then name). UserError on duplicate names or a tensor whose nbytes does not
// match dtype x shape.
std::string safetensors_header(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                               std::vector<size_t>* order);

// Write one safetensors file as the reference writer would (byte-identical to
// safetensors.numpy.save_file / torch.save_file for the same tensors and metadata), to a
// temporary name in the target folder, renamed into place at the end.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A whole Hugging Face checkpoint folder's weights: either `model.safetensors` or the shards
// listed in `model.safetensors.index.json`. Tensors keep their shard's mapping alive.
struct SafetensorsDir {
  std::vector<SafetensorsFile> files;           // in shard order
  std::map<std::string, Tensor> tensors;        // name -> view
  std::map<std::string, std::string> metadata;  // __metadata__ of the first file
};
// `dir` is a folder; reads index.json when present, else model.safetensors, else the only
// *.safetensors file. UserError naming the file on a missing shard, a tensor in two shards,
// a weight_map entry that its shard lacks, or a tensor a shard has that the index omits.
SafetensorsDir load_safetensors_dir(const std::string& dir);

// Write `tensors` into `dir` as transformers' save_pretrained / huggingface_hub do: one
// `model.safetensors` (no index) when everything fits in `max_shard_bytes`, else
// `model-00001-of-0000N.safetensors` shards plus `model.safetensors.index.json` with
// metadata.total_size. Tensors keep their order; a tensor larger than the limit gets its own
// shard. `metadata` goes into every file. Every file is written under a temporary name and
// renamed only once all were written.
void write_safetensors_sharded(const std::string& dir, const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata,
                               uint64_t max_shard_bytes = 5'000'000'000ull);

}  // namespace qt
