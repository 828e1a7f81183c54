// Comparisons of a GGUF file we wrote with the reference tool's (llama.cpp's converter or
// llama-quantize) for the GGUF goldens' tests.
#pragma once
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "formats/gguf.h"

namespace qt::test {

// Every tensor of `want` is in `got` with the same shape, type and bytes, and no other; the same
// alignment.
inline void expect_same_tensors(const GgufFile& got, const GgufFile& want, const std::string& what) {
  EXPECT_EQ(got.tensors().size(), want.tensors().size()) << what;
  EXPECT_EQ(got.alignment(), want.alignment()) << what;
  for (auto& w : want.tensors()) {
    const GgufTensorInfo* t = got.find_tensor(w.name);
    if (!t) {
      ADD_FAILURE() << what << ": missing tensor " << w.name;
      continue;
    }
    EXPECT_EQ(t->ne, w.ne) << what << ": " << w.name;
    EXPECT_EQ(int(t->type), int(w.type)) << what << ": " << w.name;
    ASSERT_EQ(t->nbytes, w.nbytes) << what << ": " << w.name;
    if (w.name == "rope_freqs.weight") {
      // convert_hf_to_gguf.py computes the llama3 divisors in float32 torch, we in double: the
      // last bit may differ (the golden's are the float64 ones rounded once).
      const std::vector<float> a = got.dequantize(*t), b = want.dequantize(w);
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_NEAR(a[i], b[i], 1e-6 * std::fabs(b[i])) << what << ": rope_freqs " << i;
      continue;
    }
    EXPECT_EQ(std::memcmp(t->data, w.data, w.nbytes), 0) << what << ": bytes of " << w.name;
  }
}

// The architecture keys (`<arch>.*`, general.architecture, general.file_type): the same set, the
// same values.
inline void expect_same_arch_keys(const GgufFile& got, const GgufFile& want, const std::string& what) {
  const std::string arch = want.get_string("general.architecture") + ".";
  auto keys = [&](const GgufFile& g) {
    std::map<std::string, const GgufValue*> m;
    for (auto& [k, v] : g.metadata())
      if (k.rfind(arch, 0) == 0 || k == "general.architecture" || k == "general.file_type") m[k] = &v;
    return m;
  };
  const auto a = keys(got), b = keys(want);
  EXPECT_EQ(a.size(), b.size()) << what;
  for (auto& [k, w] : b) {
    auto it = a.find(k);
    if (it == a.end()) {
      ADD_FAILURE() << what << ": missing key " << k;
      continue;
    }
    EXPECT_EQ(int(it->second->type), int(w->type)) << what << ": " << k;
    EXPECT_EQ(it->second->i, w->i) << what << ": " << k;
    EXPECT_EQ(it->second->f, w->f) << what << ": " << k;
    EXPECT_EQ(it->second->s, w->s) << what << ": " << k;
  }
}

}  // namespace qt::test
