// GGUF reader and ggml dequantization.
// References: golden files written by gguf-py (tests/golden/make_gguf_goldens.py): dequantized
// values from gguf.quants.dequantize, metadata from GGUFWriter; facts about the real model and
// the vocab files as read by gguf-py's GGUFReader; malformed files built here, byte by byte,
// following the layout of docs/spec/gguf.md §File layout (each must give a UserError naming
// the file).
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include "formats/error.h"
#include "formats/ggml_blocks.h"
#include "formats/gguf.h"
#include "formats/mapped_file.h"
#include "tests/support.h"

namespace fs = std::filesystem;
using qt::GgmlType;
using qt::GgufFile;
using qt::GgufValueType;

namespace {

std::string golden(const std::string& name) { return qt::test::source_dir() + "/tests/golden/gguf/" + name; }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---------------------------------------------------------------------------------------------
// Dequantization goldens: every type, bit-exact against gguf-py.

struct GoldenCase {
  const char* file;
  GgmlType type;
  std::vector<int64_t> torch_shape;
};

class GgufGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GgufGolden, DequantizeMatchesGgufPyBitForBit) {
  const GoldenCase& c = GetParam();
  GgufFile f = GgufFile::open(golden(c.file));
  const qt::GgufTensorInfo* x = f.find_tensor("x");
  const qt::GgufTensorInfo* e = f.find_tensor("expected");
  ASSERT_NE(x, nullptr);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(x->type, c.type);
  EXPECT_EQ(f.get_string("golden.type"), qt::ggml_type_row(uint32_t(c.type))->name);
  EXPECT_EQ(x->torch_shape(), c.torch_shape);
  ASSERT_EQ(e->type, GgmlType::F32);
  ASSERT_EQ(e->numel(), x->numel());

  std::vector<float> got = f.dequantize(*x);
  ASSERT_EQ(got.size(), size_t(x->numel()));
  size_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    float want;
    std::memcpy(&want, e->data + 4 * i, 4);
    if (f32_bits(got[i]) != f32_bits(want)) {
      if (++mismatches <= 5)
        ADD_FAILURE() << c.file << " element " << i << ": got " << got[i] << " (0x" << std::hex << f32_bits(got[i])
                      << "), gguf-py " << want << " (0x" << f32_bits(want) << std::dec << ")";
    }
  }
  EXPECT_EQ(mismatches, 0u);
  // A golden that is all zeros would prove nothing.
  size_t nonzero = 0;
  for (float v : got) nonzero += v != 0.0f;
  EXPECT_GT(nonzero, got.size() / 2);
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, GgufGolden,
    ::testing::Values(
        GoldenCase{"f32.gguf", GgmlType::F32, {4, 64}}, GoldenCase{"f16.gguf", GgmlType::F16, {4, 64}},
        GoldenCase{"bf16.gguf", GgmlType::BF16, {4, 64}}, GoldenCase{"q4_0.gguf", GgmlType::Q4_0, {4, 128}},
        GoldenCase{"q4_1.gguf", GgmlType::Q4_1, {4, 128}}, GoldenCase{"q5_0.gguf", GgmlType::Q5_0, {4, 128}},
        GoldenCase{"q5_1.gguf", GgmlType::Q5_1, {4, 128}}, GoldenCase{"q8_0.gguf", GgmlType::Q8_0, {4, 128}},
        GoldenCase{"q2_k.gguf", GgmlType::Q2_K, {3, 256}}, GoldenCase{"q3_k.gguf", GgmlType::Q3_K, {3, 256}},
        GoldenCase{"q4_k.gguf", GgmlType::Q4_K, {3, 256}}, GoldenCase{"q5_k.gguf", GgmlType::Q5_K, {3, 256}},
        GoldenCase{"q6_k.gguf", GgmlType::Q6_K, {3, 256}}, GoldenCase{"iq4_nl.gguf", GgmlType::IQ4_NL, {4, 128}}),
    [](const auto& info) {
      std::string s = info.param.file;
      return s.substr(0, s.find('.'));
    });

// Block sizes and bytes per block: ggml's type traits (ggml.h, ggml-common.h; docs/spec/gguf.md
// §Tensor types and sizes).
TEST(GgmlBlocks, TableMatchesGgml) {
  struct Row {
    uint32_t id;
    const char* name;
    int block, bytes;
  };
  const Row rows[] = {{0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},
                      {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},    {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},
                      {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
                      {14, "Q6_K", 256, 210}, {20, "IQ4_NL", 32, 18}, {24, "I8", 1, 1},       {26, "I32", 1, 4},
                      {28, "F64", 1, 8},      {30, "BF16", 1, 2}};
  for (const Row& r : rows) {
    const qt::GgmlTypeRow* t = qt::ggml_type_row(r.id);
    ASSERT_NE(t, nullptr) << r.name;
    EXPECT_STREQ(t->name, r.name);
    EXPECT_EQ(t->block_size, r.block) << r.name;
    EXPECT_EQ(t->type_size, r.bytes) << r.name;
    EXPECT_EQ(qt::ggml_type_row_by_name(r.name), t);
  }
  for (uint32_t retired : {4u, 5u, 31u, 36u, 1000u}) EXPECT_EQ(qt::ggml_type_row(retired), nullptr);
}

// ---------------------------------------------------------------------------------------------
// Metadata of every value type, as written by gguf-py.

TEST(GgufMetadata, EveryValueTypeFromGgufPy) {
  GgufFile f = GgufFile::open(golden("metadata.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.metadata().at("general.alignment").type, GgufValueType::UINT32);
  EXPECT_EQ(f.key_order().front(), "general.architecture");

  auto type_of = [&](const char* k) { return f.metadata().at(k).type; };
  EXPECT_EQ(type_of("t.u8"), GgufValueType::UINT8);
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(type_of("t.i8"), GgufValueType::INT8);
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(type_of("t.u16"), GgufValueType::UINT16);
  EXPECT_EQ(f.get_int("t.u16"), 65000);
  EXPECT_EQ(type_of("t.i16"), GgufValueType::INT16);
  EXPECT_EQ(f.get_int("t.i16"), -32000);
  EXPECT_EQ(type_of("t.u32"), GgufValueType::UINT32);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000LL);
  EXPECT_EQ(type_of("t.i32"), GgufValueType::INT32);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000LL);
  EXPECT_EQ(type_of("t.f32"), GgufValueType::FLOAT32);
  EXPECT_EQ(f.get_float("t.f32"), double(0.1f));
  EXPECT_EQ(type_of("t.bool_true"), GgufValueType::BOOL);
  EXPECT_TRUE(f.get_bool("t.bool_true"));
  EXPECT_FALSE(f.get_bool("t.bool_false"));
  EXPECT_EQ(f.get_string("t.str"), "h\xc3\xa9llo w\xc3\xb6rld");
  EXPECT_EQ(type_of("t.u64"), GgufValueType::UINT64);
  EXPECT_EQ(uint64_t(f.get_int("t.u64")), 18000000000000000000ULL);
  EXPECT_EQ(f.get_float("t.u64"), 18000000000000000000.0);
  EXPECT_EQ(type_of("t.i64"), GgufValueType::INT64);
  EXPECT_EQ(f.get_int("t.i64"), -9000000000000000000LL);
  EXPECT_EQ(type_of("t.f64"), GgufValueType::FLOAT64);
  EXPECT_EQ(f.get_float("t.f64"), 2.718281828459045);
  EXPECT_EQ(f.get_float("t.u32"), 4000000000.0);  // integers read as floats

  auto elem = [&](const char* k) {
    const qt::GgufValue& v = f.metadata().at(k);
    EXPECT_EQ(v.type, GgufValueType::ARRAY) << k;
    return v.elem_type;
  };
  EXPECT_EQ(elem("t.arr_u8"), GgufValueType::UINT8);
  EXPECT_EQ(f.get_int_array("t.arr_u8"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(elem("t.arr_i8"), GgufValueType::INT8);
  EXPECT_EQ(f.get_int_array("t.arr_i8"), (std::vector<int64_t>{-1, 0, 127}));
  EXPECT_EQ(elem("t.arr_u16"), GgufValueType::UINT16);
  EXPECT_EQ(f.get_int_array("t.arr_u16"), (std::vector<int64_t>{7, 65535}));
  EXPECT_EQ(elem("t.arr_i16"), GgufValueType::INT16);
  EXPECT_EQ(f.get_int_array("t.arr_i16"), (std::vector<int64_t>{-7, 32767}));
  EXPECT_EQ(elem("t.arr_u32"), GgufValueType::UINT32);
  EXPECT_EQ(f.get_int_array("t.arr_u32"), (std::vector<int64_t>{4294967295LL, 3}));
  EXPECT_EQ(elem("t.arr_i32"), GgufValueType::INT32);  // gguf-py: python int → INT32
  EXPECT_EQ(f.get_int_array("t.arr_i32"), (std::vector<int64_t>{-5, 6, 7}));
  EXPECT_EQ(elem("t.arr_f32"), GgufValueType::FLOAT32);
  EXPECT_EQ(f.get_float_array("t.arr_f32"), (std::vector<double>{0.5, -1.25, double(3.0e-3f)}));
  EXPECT_EQ(elem("t.arr_bool"), GgufValueType::BOOL);
  EXPECT_EQ(f.get_int_array("t.arr_bool"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(elem("t.arr_str"), GgufValueType::STRING);
  EXPECT_EQ(f.get_string_array("t.arr_str"), (std::vector<std::string>{"a", "", "\xc4\xa0t ok"}));
  EXPECT_EQ(elem("t.arr_u64"), GgufValueType::UINT64);
  EXPECT_EQ(uint64_t(f.get_int_array("t.arr_u64")[0]), 18446744073709551615ULL);
  EXPECT_EQ(elem("t.arr_i64"), GgufValueType::INT64);
  EXPECT_EQ(f.get_int_array("t.arr_i64"), (std::vector<int64_t>{INT64_MIN, 2}));
  EXPECT_EQ(elem("t.arr_f64"), GgufValueType::FLOAT64);
  EXPECT_EQ(f.get_float_array("t.arr_f64"), (std::vector<double>{1e300, -2.5}));
  EXPECT_EQ(f.metadata().at("t.arr_str").array_size(), 3u);

  // Getters: wrong kind or missing key → UserError naming the file and key.
  for (auto fn :
       std::vector<std::function<void()>>{[&] { f.get_string("t.u8"); }, [&] { f.get_int("t.str"); },
                                          [&] { f.get_int("missing.key"); }, [&] { f.get_string_array("t.arr_i32"); },
                                          [&] { f.get_float_array("t.arr_i32"); }, [&] { f.get_int_array("t.u8"); }}) {
    try {
      fn();
      ADD_FAILURE() << "expected a UserError";
    } catch (const qt::UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(golden("metadata.gguf") + ": ", 0), 0u) << e.what();
    }
  }
  EXPECT_EQ(f.get_int_or("missing.key", 42), 42);
  EXPECT_EQ(f.get_string_or("missing.key", "d"), "d");
  EXPECT_EQ(f.get_bool_or("t.bool_true", false), true);
  EXPECT_EQ(f.get_float_or("missing.key", 1.5), 1.5);

  // Tensors: numpy shape (3,2,5) is stored as ne [5,2,3]; offsets aligned to 64.
  ASSERT_EQ(f.tensors().size(), 2u);
  const auto& a = f.tensors()[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.ne, (std::vector<int64_t>{5, 2, 3}));
  EXPECT_EQ(a.torch_shape(), (std::vector<int64_t>{3, 2, 5}));
  EXPECT_EQ(a.nbytes, 120u);
  std::vector<float> av = f.dequantize(a);
  for (size_t i = 0; i < av.size(); ++i) EXPECT_EQ(av[i], float(i));
  const auto& b = *f.find_tensor("b.weight");
  EXPECT_EQ(b.type, GgmlType::F16);
  EXPECT_EQ(b.offset, 128u);
  EXPECT_EQ(b.torch_shape(), (std::vector<int64_t>{2, 32}));
  std::vector<float> bv = f.dequantize(b);
  for (size_t i = 0; i < bv.size(); ++i) EXPECT_EQ(bv[i], float(i) / 8);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

// Version 2 has the same layout as version 3 (docs/spec/gguf.md §Versions).
TEST(GgufMetadata, Version2ReadsLikeVersion3) {
  std::vector<uint8_t> bytes = read_bytes(golden("metadata.gguf"));
  ASSERT_GT(bytes.size(), 8u);
  bytes[4] = 2;
  GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "v2.gguf");
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get_int("t.i16"), -32000);
  EXPECT_EQ(f.tensors().size(), 2u);
}

// ---------------------------------------------------------------------------------------------
// Malformed files, built byte by byte.

struct Bytes {
  std::vector<uint8_t> b;
  Bytes& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Bytes& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Bytes& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& v) {
    b.insert(b.end(), v.begin(), v.end());
    return *this;
  }
};

struct TI {
  std::string name;
  std::vector<int64_t> ne;
  uint32_t type;
  uint64_t offset;
};

struct Spec {
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors, n_kv;
  std::vector<std::vector<uint8_t>> kvs;
  std::vector<TI> tensors;
  std::vector<uint8_t> data;
  uint32_t alignment = 32;
};

std::vector<uint8_t> kv_str(const std::string& k, const std::string& v) { return Bytes().str(k).u32(8).str(v).b; }
std::vector<uint8_t> kv_u32(const std::string& k, uint32_t v) { return Bytes().str(k).u32(4).u32(v).b; }

std::vector<uint8_t> build(const Spec& s) {
  Bytes o;
  o.u32(s.magic).u32(s.version);
  o.u64(s.n_tensors.value_or(s.tensors.size()));
  o.u64(s.n_kv.value_or(s.kvs.size()));
  for (auto& kv : s.kvs) o.raw(kv);
  for (auto& t : s.tensors) {
    o.str(t.name).u32(uint32_t(t.ne.size()));
    for (int64_t d : t.ne) o.u64(uint64_t(d));
    o.u32(t.type).u64(t.offset);
  }
  if (!s.tensors.empty())
    while (o.b.size() % s.alignment) o.u8(0);
  o.raw(s.data);
  return o.b;
}

// A small valid file: "a" F32 [8] at 0 (32 bytes), "b" Q8_0 [32, 2] at 32 (68 bytes, no tail
// padding, so every strict prefix of the file is truncated).
Spec valid_spec() {
  Spec s;
  s.kvs = {kv_str("general.architecture", "llama"), kv_u32("t.n", 7)};
  s.tensors = {{"a", {8}, 0, 0}, {"b", {32, 2}, 8, 32}};
  Bytes d;
  for (int i = 0; i < 8; ++i) d.u32(f32_bits(float(i) - 3.5f));
  for (int r = 0; r < 2; ++r) {
    d.u8(0x00).u8(0x3C);  // d = 1.0 in f16
    for (int j = 0; j < 32; ++j) d.u8(uint8_t(int8_t(j - 16 + r)));
  }
  s.data = d.b;
  return s;
}

class GgufBad : public ::testing::Test {
 protected:
  std::string dir_ = qt::test::temp_dir("gguf-bad");
  void TearDown() override { fs::remove_all(dir_); }

  // Opening `bytes` must throw a UserError that starts with the path and mentions `what`.
  void expect_error(const std::vector<uint8_t>& bytes, const std::string& what, const std::string& tag = "bad.gguf") {
    std::string path = dir_ + "/" + tag;
    write_bytes(path, bytes);
    try {
      GgufFile f = GgufFile::open(path);
      ADD_FAILURE() << tag << ": expected an error mentioning '" << what << "'";
    } catch (const qt::UserError& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg << "\nwanted: " << what;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
};

TEST_F(GgufBad, ValidBaseline) {
  auto bytes = build(valid_spec());
  GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(f.get_int("t.n"), 7);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.data_offset() + 32 + 68, bytes.size());
  std::vector<float> a = f.dequantize(f.tensors()[0]);
  EXPECT_EQ(a[0], -3.5f);
  EXPECT_EQ(a[7], 3.5f);
  std::vector<float> b = f.dequantize(f.tensors()[1]);
  ASSERT_EQ(b.size(), 64u);
  EXPECT_EQ(b[0], -16.0f);
  EXPECT_EQ(b[63], 16.0f);
}

TEST_F(GgufBad, EveryTruncation) {
  auto bytes = build(valid_spec());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + long(n));
    std::string name = fmt::format("cut{}", n);
    try {
      GgufFile::parse(cut.data(), cut.size(), name);
      ADD_FAILURE() << "prefix of " << n << " bytes was accepted";
    } catch (const qt::UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(name + ": ", 0), 0u) << e.what();
    }
  }
  // And through the file path too (an empty file, and one cut inside the tensor data).
  expect_error({}, "too short", "empty.gguf");
  expect_error(std::vector<uint8_t>(bytes.begin(), bytes.end() - 1), "past the end", "cut.gguf");
}

TEST_F(GgufBad, MagicAndVersion) {
  Spec s = valid_spec();
  s.magic = 0x46554746;  // "FGUF"
  expect_error(build(s), "magic");
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    s = valid_spec();
    s.version = v;
    expect_error(build(s), v == 0x03000000u ? "byte-swapped" : "version", fmt::format("v{}.gguf", v));
  }
}

TEST_F(GgufBad, CountsPastEndOfFile) {
  Spec s = valid_spec();
  s.n_tensors = 1000000;
  expect_error(build(s), "tensors");
  s = valid_spec();
  s.n_tensors = ~uint64_t(0);  // -1 as int64
  expect_error(build(s), "tensors");
  s = valid_spec();
  s.n_kv = uint64_t(1) << 62;
  expect_error(build(s), "metadata entries");
  s = valid_spec();
  s.n_kv = 3;  // one more than present: the tensor infos get read as a key
  expect_error(build(s), "");
  // Array length and string length beyond the file.
  s = valid_spec();
  s.kvs.push_back(Bytes().str("t.arr").u32(9).u32(4).u64(uint64_t(1) << 40).b);
  expect_error(build(s), "cannot fit");
  s = valid_spec();
  s.kvs.push_back(Bytes().str("t.s").u32(8).u64(1000000).b);
  expect_error(build(s), "truncated");
  s = valid_spec();
  s.kvs.push_back(Bytes().str("t.s").u32(8).u64(uint64_t(1) << 50).b);
  expect_error(build(s), "length");
}

TEST_F(GgufBad, TensorDataPastEndOfFile) {
  Spec s = valid_spec();
  s.tensors[1].ne = {32, 3};  // 102 bytes, the file holds 68
  expect_error(build(s), "past the end");
  s = valid_spec();
  s.tensors[1].ne = {32, int64_t(1) << 40};
  expect_error(build(s), "past the end");
}

TEST_F(GgufBad, OverlappingAndMisalignedOffsets) {
  Spec s = valid_spec();
  s.tensors[1].offset = 0;  // overlaps "a"
  expect_error(build(s), "expected 32");
  s = valid_spec();
  s.tensors[1].offset = 40;  // not a multiple of 32
  expect_error(build(s), "alignment");
  s = valid_spec();
  s.tensors[1].offset = 64;  // aligned but leaves a gap
  expect_error(build(s), "expected 32");
  s = valid_spec();
  s.tensors[0].offset = 32;
  expect_error(build(s), "expected 0");
}

TEST_F(GgufBad, TensorInfoChecks) {
  Spec s = valid_spec();
  s.tensors[1].type = 99;
  expect_error(build(s), "unknown ggml type 99", "type99.gguf");
  s.tensors[1].type = 4;  // retired Q4_2
  expect_error(build(s), "unknown ggml type 4", "type4.gguf");
  s = valid_spec();
  s.tensors[1].ne = {16, 4};  // Q8_0 rows must be a multiple of 32
  expect_error(build(s), "block size");
  s = valid_spec();
  s.tensors[0].ne = {8, 1, 1, 1, 1};
  expect_error(build(s), "dimensions");
  s = valid_spec();
  s.tensors[0].ne = {-8};
  expect_error(build(s), "negative");
  s = valid_spec();
  s.tensors[0].ne = {int64_t(1) << 40, int64_t(1) << 40};
  expect_error(build(s), "too many elements");
  s = valid_spec();
  s.tensors[1].name = "a";
  expect_error(build(s), "duplicate tensor name 'a'");
  s = valid_spec();
  s.tensors[1].name = std::string(64, 'n');
  expect_error(build(s), "name of 64 bytes");
}

TEST_F(GgufBad, MetadataChecks) {
  Spec s = valid_spec();
  s.kvs.push_back(kv_u32("t.n", 8));
  expect_error(build(s), "duplicate metadata key 't.n'");
  s = valid_spec();
  // ARRAY of ARRAY of UINT8.
  s.kvs.push_back(Bytes().str("t.nested").u32(9).u32(9).u64(1).u32(0).u64(1).u8(5).b);
  expect_error(build(s), "array of arrays");
  s = valid_spec();
  s.kvs.push_back(Bytes().str("t.bad").u32(13).u32(0).b);
  expect_error(build(s), "unknown value type 13");
  s = valid_spec();
  s.kvs.push_back(Bytes().str("t.bad").u32(9).u32(77).u64(0).b);
  expect_error(build(s), "unknown type 77");
  s = valid_spec();
  s.kvs.push_back(kv_u32("", 1));
  expect_error(build(s), "empty key");
  s = valid_spec();
  s.kvs.push_back(kv_u32("general.alignment", 48));
  s.alignment = 48;
  expect_error(build(s), "power of two");
  s = valid_spec();
  s.kvs.push_back(Bytes().str("general.alignment").u32(10).u64(32).b);  // UINT64
  expect_error(build(s), "expected UINT32");
}

// A larger alignment is honoured for the data section and the offsets.
TEST_F(GgufBad, CustomAlignment) {
  Spec s = valid_spec();
  s.kvs.push_back(kv_u32("general.alignment", 128));
  s.alignment = 128;
  s.tensors[1].offset = 128;
  std::vector<uint8_t> data(s.data.begin(), s.data.begin() + 32);
  data.resize(128, 0);
  data.insert(data.end(), s.data.begin() + 32, s.data.end());
  s.data = data;
  auto bytes = build(s);
  GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(f.alignment(), 128u);
  EXPECT_EQ(f.data_offset() % 128, 0u);
  EXPECT_EQ(f.dequantize(f.tensors()[1])[63], 16.0f);
  s.tensors[1].offset = 32;  // with alignment 128, "b" must sit at 128
  expect_error(build(s), "expected 128");
}

// ---------------------------------------------------------------------------------------------
// Real files. Expected values read with gguf-py's GGUFReader.

TEST(GgufReal, VocabOnlyFiles) {
  struct V {
    const char* file;
    size_t n_tokens;
    const char* model;
    const char* token1;
    int64_t n_kv;
  };
  const V files[] = {
      {"ggml-vocab-gpt-2.gguf", 50257, "gpt2", "\"", 16},
      {"ggml-vocab-llama-spm.gguf", 32000, "llama", "<s>", 22},
      {"ggml-vocab-starcoder.gguf", 49152, "gpt2", "<fim_prefix>", 19},
      {"ggml-vocab-phi-3.gguf", 32064, "llama", "<s>", 26},
      {"ggml-vocab-deepseek-coder.gguf", 32256, "gpt2", "\"", 25},
      {"ggml-vocab-falcon.gguf", 65024, "gpt2", ">>ABSTRACT<<", 18},
      {"ggml-vocab-gpt-neox.gguf", 50432, "gpt2", "<|padding|>", 17},
      {"ggml-vocab-mpt.gguf", 50432, "gpt2", "<|padding|>", 17},
      {"ggml-vocab-refact.gguf", 49216, "gpt2", "<fim_prefix>", 18},
  };
  for (const V& v : files) {
    std::string path = qt::test::data_file(std::string("tokenizer-vectors/") + v.file);
    QT_REQUIRE_FILE(path);
    GgufFile f = GgufFile::open(path);
    EXPECT_EQ(f.version(), 3u) << v.file;
    EXPECT_EQ(f.tensors().size(), 0u) << v.file;
    EXPECT_EQ(int64_t(f.metadata().size()), v.n_kv) << v.file;
    EXPECT_EQ(f.data_offset(), f.file_size()) << v.file;  // no trailing padding
    const auto& toks = f.get_string_array("tokenizer.ggml.tokens");
    EXPECT_EQ(toks.size(), v.n_tokens) << v.file;
    EXPECT_EQ(toks.at(1), v.token1) << v.file;
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), v.model) << v.file;
    EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type").size(), v.n_tokens) << v.file;
  }
}

TEST(GgufReal, SmolLM2Q41) {
  const std::string path = qt::test::model_gguf();
  QT_REQUIRE_FILE(path);
  auto t0 = std::chrono::steady_clock::now();
  GgufFile f = GgufFile::open(path);
  auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 33u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 30);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), 1536);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f.get_int("llama.vocab_size"), 49152);
  EXPECT_EQ(f.get_int("llama.rope.dimension_count"), 64);
  EXPECT_EQ(f.get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_EQ(f.get_float("llama.attention.layer_norm_rms_epsilon"), double(1e-5f));
  EXPECT_EQ(f.get_int("general.file_type"), 3);  // MOSTLY_Q4_1
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges").size(), 48900u);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);

  std::map<std::string, int> by_type;
  for (const auto& t : f.tensors()) by_type[qt::ggml_type_row(uint32_t(t.type))->name]++;
  EXPECT_EQ(by_type, (std::map<std::string, int>{{"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}}));
  // The token embedding is the one Q8_0 tensor (llama.cpp keeps it at 8 bits in Q4_1 files).
  const auto* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::Q8_0);
  EXPECT_EQ(emb->torch_shape(), (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(f.data_offset() + emb->offset, 1785664u);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, GgmlType::Q4_1);

  // Dequantize everything; values and a bit checksum from gguf-py (gguf.quants.dequantize):
  // sum over tensors t (file order, k = 1, 2, ...) of k * sum_i bits(x_t[i]) * (i % 65521 + 1),
  // mod 2^64.
  auto t2 = std::chrono::steady_clock::now();
  uint64_t total = 0;
  int64_t numel = 0;
  uint64_t k = 0;
  std::map<std::string, std::vector<float>> first;
  double dequant_ms = 0;
  for (const auto& t : f.tensors()) {
    auto d0 = std::chrono::steady_clock::now();
    std::vector<float> x = f.dequantize(t);
    dequant_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - d0).count();
    uint64_t s = 0;
    for (size_t i = 0; i < x.size(); ++i) s += uint64_t(f32_bits(x[i])) * (i % 65521 + 1);
    total += s * ++k;
    numel += int64_t(x.size());
    if (t.name == "token_embd.weight" || t.name == "blk.0.attn_q.weight" || t.name == "output_norm.weight")
      first[t.name] = std::vector<float>(x.begin(), x.begin() + 4);
  }
  auto t3 = std::chrono::steady_clock::now();
  EXPECT_EQ(numel, 134515008);
  EXPECT_EQ(total, 7763652179200950080ULL);
  EXPECT_EQ(first["token_embd.weight"], (std::vector<float>{-0.10654449462890625f, 0.032978057861328125f,
                                                            0.048198699951171875f, -0.022830963134765625f}));
  EXPECT_EQ(first["blk.0.attn_q.weight"],
            (std::vector<float>{-0.0963134765625f, 0.1573486328125f, -0.0963134765625f, -0.73046875f}));
  EXPECT_EQ(first["output_norm.weight"], (std::vector<float>{1.7578125f, 1.8203125f, 1.78125f, 1.6015625f}));
  using ms = std::chrono::duration<double, std::milli>;
  std::printf("[ info ] open %.1f ms; dequantize all %lld params %.1f ms (%.1f ms with checksum)\n",
              ms(t1 - t0).count(), (long long)numel, dequant_ms, ms(t3 - t2).count());
}

}  // namespace
