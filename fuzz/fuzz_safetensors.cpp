// libFuzzer target for the safetensors reader: any input either parses, with every tensor's
// bytes inside the input, or is refused with a UserError. Anything else (a crash, a sanitizer
// report, another exception) is a bug.
#include <cstddef>
#include <cstdint>

#include "formats/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    qt::SafetensorsFile f = qt::SafetensorsFile::parse(data, size, "fuzz");
    uint64_t sum = 0;
    for (const std::string& name : f.names()) {
      const qt::Tensor& t = f.get(name);
      if (t.data < data || t.nbytes > size || t.data + t.nbytes > data + size) __builtin_trap();
      if (uint64_t(t.numel()) * uint64_t(qt::dtype_bits(t.dtype)) != uint64_t(t.nbytes) * 8) __builtin_trap();
      for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];  // touch every byte (ASan checks)
    }
    for (auto& [k, v] : f.metadata()) sum += k.size() + v.size();
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const qt::UserError&) {
  }
  return 0;
}
