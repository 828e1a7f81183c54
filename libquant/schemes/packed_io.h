// The bridge from a loaded Checkpoint to the kernels: the PackedTensor of a weight that the
// checkpoint stores quantized (mlx, compressed-tensors, bnb, native folders).
#pragma once
#include <map>
#include <optional>
#include <string>

#include "formats/checkpoint.h"
#include "libquant/schemes/scheme.h"

namespace qt {

// nullopt when `weight_name` is not stored quantized; else its PackedTensor (views sharing the
// checkpoint's storage). UserError naming the file and tensor when malformed.
std::optional<PackedTensor> packed_weight(const Checkpoint& ck, const std::string& weight_name);

// The stored tensor holding a weight's codes: its own name, or another where the layout keeps it
// there (compressed-tensors pack-quantized: X.weight_packed for X.weight).
std::string stored_codes_name(const Checkpoint& ck, const std::string& weight_name);

// For every stored tensor of a described quantized weight (its codes, scales, biases), the
// weight's name (compressed-tensors' X.weight_packed / X.weight_scale / X.weight_global_scale → X.weight).
std::map<std::string, std::string> quantized_tensor_owners(const Checkpoint& ck);

// Stored bytes × 8 over the model's weights (quantized weights counted by their logical
// rows × cols; scales and biases are overhead, not weights).
double checkpoint_bits_per_weight(const Checkpoint& ck);

}  // namespace qt
