// libFuzzer target for the GGUF reader: parse arbitrary bytes, then dequantize every tensor.
// Only UserError may escape the library; anything else (a crash, a sanitizer report, another
// exception type) is a bug.
#include <cstddef>
#include <cstdint>

#include "formats/error.h"
#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    qt::GgufFile f = qt::GgufFile::parse(data, size, "fuzz");
    for (const auto& t : f.tensors()) {
      const qt::GgmlTypeRow* row = qt::ggml_type_row(uint32_t(t.type));
      // Skip types we cannot dequantize and tensors too big to allocate (the data is in the
      // input, so this only skips large all-in-file tensors; parse already checked bounds).
      if (!row || !row->to_float || t.numel() > (int64_t(1) << 24)) continue;
      std::vector<float> x = f.dequantize(t);
      if (!x.empty() && x.size() != size_t(t.numel())) __builtin_trap();
    }
    // Exercise the getters on whatever keys exist.
    for (const auto& [k, v] : f.metadata()) {
      try {
        if (v.type == qt::GgufValueType::STRING)
          (void)f.get_string(k);
        else if (v.type == qt::GgufValueType::ARRAY)
          (void)v.array_size();
        else
          (void)f.get_float(k);
      } catch (const qt::UserError&) {
      }
    }
  } catch (const qt::UserError&) {
  }
  return 0;
}
