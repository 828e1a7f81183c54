// safetensors reader/writer against files the reference libraries wrote
// (tests/golden/make_safetensors_goldens.py: safetensors.torch.save_file, huggingface_hub
// save_torch_state_dict, and safetensors.deserialize's verdicts on edge cases).
#include "formats/safetensors.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "tests/support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using qt::DType;
using qt::NamedTensors;
using qt::SafetensorsFile;
using qt::Tensor;
using qt::UserError;

namespace {

std::string golden(const std::string& rel) { return qt::test::source_dir() + "/tests/golden/safetensors/" + rel; }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

std::vector<uint8_t> unhex(const std::string& h) {
  std::vector<uint8_t> out(h.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  return out;
}

std::vector<uint8_t> bytes_of(const Tensor& t) { return {t.data, t.data + t.nbytes}; }

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A safetensors file from a header string and data bytes; hlen overrides the length field.
std::vector<uint8_t> st_bytes(const std::string& header, const std::string& data = "",
                              std::optional<uint64_t> hlen = std::nullopt) {
  uint64_t n = hlen ? *hlen : header.size();
  std::string s;
  for (int i = 0; i < 8; ++i) s += char(uint8_t(n >> (8 * i)));
  s += header;
  s += data;
  return {s.begin(), s.end()};
}

// Open `bytes` as a file; returns the UserError message ("" when it was accepted).
std::string open_error(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_bytes(path, bytes);
  try {
    SafetensorsFile f = SafetensorsFile::open(path);
    for (auto& n : f.names()) (void)f.get(n);
    return "";
  } catch (const UserError& e) {
    return e.what();
  }
}

}  // namespace

// Every tensor of a file the Python library wrote: dtype, shape, raw bytes and values as the
// script stored them; names in data order; __metadata__.
TEST(Safetensors, ReadsPythonWrittenFile) {
  json ref = read_json(golden("read.json"));
  SafetensorsFile f = SafetensorsFile::open(golden("read.safetensors"));
  std::map<std::string, std::string> meta = ref["metadata"];
  EXPECT_EQ(f.metadata(), meta);
  std::vector<std::string> order = ref["data_order"];
  EXPECT_EQ(f.names(), order);
  ASSERT_EQ(f.tensors().size(), ref["tensors"].size());
  for (auto& [name, r] : ref["tensors"].items()) {
    SCOPED_TRACE(name);
    const Tensor& t = f.get(name);
    EXPECT_EQ(qt::dtype_name(t.dtype), r["dtype"].get<std::string>());
    EXPECT_EQ(t.shape, r["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(bytes_of(t), unhex(r["hex"]));
    const json& v = r["values"];
    ASSERT_EQ(int64_t(v.size()), t.numel());
    switch (t.dtype) {
      case DType::F32:
      case DType::F16:
      case DType::BF16: {
        if (t.numel() == 0) break;  // (to_f32 memcpy's from a null vector: UBSan)
        std::vector<float> x = qt::to_f32(t);
        for (size_t i = 0; i < x.size(); ++i) {
          EXPECT_EQ(x[i], float(v[i].get<double>())) << i;
          EXPECT_EQ(std::signbit(x[i]), std::signbit(v[i].get<double>())) << i;
        }
        break;
      }
      case DType::F64:
        for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.as<double>()[i], v[i].get<double>()) << i;
        break;
      case DType::I8:
        for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.as<int8_t>()[i], v[i].get<int64_t>());
        break;
      case DType::U8:
      case DType::BOOL:
        for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.as<uint8_t>()[i], v[i].get<int64_t>());
        break;
      case DType::I16:
        for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.as<int16_t>()[i], v[i].get<int64_t>());
        break;
      case DType::I32:
        for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.as<int32_t>()[i], v[i].get<int64_t>());
        break;
      case DType::I64:
        for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.as<int64_t>()[i], v[i].get<int64_t>());
        break;
      default: break;  // F8: raw bytes checked above
    }
  }
}

// Views point into the caller's buffer (no copy) and a copied Tensor keeps an mmap alive.
TEST(Safetensors, ZeroCopyViews) {
  std::vector<uint8_t> b = read_bytes(golden("read.safetensors"));
  SafetensorsFile f = SafetensorsFile::parse(b.data(), b.size(), "mem");
  const Tensor& t = f.get("i32");
  EXPECT_GE(t.data, b.data() + f.data_start());
  EXPECT_LE(t.data + t.nbytes, b.data() + b.size());
  Tensor kept;
  {
    SafetensorsFile g = SafetensorsFile::open(golden("read.safetensors"));
    kept = g.get("i32");
  }
  ASSERT_TRUE(kept.owner);
  EXPECT_EQ(bytes_of(kept), bytes_of(t));
  try {
    (void)f.get("nope");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("mem: no tensor named 'nope'"), std::string::npos) << e.what();
  }
}

// Our writer reproduces the Python library's bytes: tensor order (dtype alignment, then name),
// compact JSON with serde's escapes, space padding to 8. Input order deliberately scrambled.
TEST(Safetensors, WriterMatchesPythonBytes) {
  std::string ref_path = golden("write_ref.safetensors");
  std::vector<uint8_t> ref = read_bytes(ref_path);
  SafetensorsFile f = SafetensorsFile::open(ref_path);
  NamedTensors in;
  for (auto it = f.names().rbegin(); it != f.names().rend(); ++it) in.emplace_back(*it, f.get(*it));
  std::swap(in[1], in[4]);
  std::map<std::string, std::string> meta{{"format", "pt"}};

  std::vector<size_t> order;
  std::string header = qt::safetensors_header(in, meta, &order);
  ASSERT_LE(header.size(), ref.size());
  EXPECT_EQ(header, std::string(ref.begin(), ref.begin() + header.size()));
  EXPECT_EQ(header.size() % 8, 0u);

  std::string dir = qt::test::temp_dir("st_write");
  std::string out = dir + "/out.safetensors";
  qt::write_safetensors(out, in, meta);
  EXPECT_EQ(read_bytes(out), ref);
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"out.safetensors"});  // no temporary left
}

// huggingface_hub's split (a tensor over the limit gets a shard of its own, listed before the
// open shard) and file naming; our shard bytes equal its; the index agrees; round trip.
TEST(Safetensors, ShardedMatchesHuggingfaceHub) {
  json ord = read_json(golden("sharded/order.json"));
  qt::SafetensorsDir ref = qt::load_safetensors_dir(golden("sharded"));
  ASSERT_EQ(ref.files.size(), 3u);
  EXPECT_EQ(ref.metadata.at("format"), "pt");
  NamedTensors in;
  for (auto& name : ord["order"]) {
    ASSERT_TRUE(ref.tensors.count(name)) << name;
    EXPECT_EQ(bytes_of(ref.tensors.at(name)), unhex(ord["hex"][name.get<std::string>()])) << name;
    in.emplace_back(name, ref.tensors.at(name));
  }
  EXPECT_EQ(ref.tensors.size(), in.size());

  std::string dir = qt::test::temp_dir("st_shard");
  qt::write_safetensors_sharded(dir, in, {{"format", "pt"}}, ord["max_shard_size"].get<uint64_t>());
  std::vector<std::string> want = files_in(golden("sharded"));
  want.erase(std::find(want.begin(), want.end(), "order.json"));
  ASSERT_EQ(files_in(dir), want);
  for (auto& f : want) {
    if (f.ends_with(".safetensors")) {
      EXPECT_EQ(read_bytes(dir + "/" + f), read_bytes(golden("sharded/" + f))) << f;
    }
  }
  json ours = read_json(dir + "/model.safetensors.index.json");
  json theirs = read_json(golden("sharded/model.safetensors.index.json"));
  EXPECT_EQ(ours["weight_map"], theirs["weight_map"]);
  EXPECT_EQ(ours["metadata"]["total_size"], theirs["metadata"]["total_size"]);
  EXPECT_EQ(ours["metadata"]["total_parameters"].get<int64_t>(), 30 + 30 + 75 + 25 + 80);

  qt::SafetensorsDir back = qt::load_safetensors_dir(dir);
  ASSERT_EQ(back.tensors.size(), in.size());
  for (auto& [n, t] : in) {
    EXPECT_EQ(bytes_of(back.tensors.at(n)), bytes_of(t)) << n;
    EXPECT_EQ(back.tensors.at(n).shape, t.shape) << n;
    EXPECT_EQ(back.tensors.at(n).dtype, t.dtype) << n;
  }

  // Everything fits: one model.safetensors, no index, and the old shards are gone.
  qt::write_safetensors_sharded(dir, in, {{"format", "pt"}}, 1000);
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"model.safetensors"});
  std::string single = qt::test::temp_dir("st_single") + "/x.safetensors";
  qt::write_safetensors(single, in, {{"format", "pt"}});
  EXPECT_EQ(read_bytes(dir + "/model.safetensors"), read_bytes(single));
  EXPECT_EQ(qt::load_safetensors_dir(dir).tensors.size(), in.size());
}

// Each edge case: accepted exactly when the reference reader accepted it (cases.json), apart
// from two serde artifacts we refuse on purpose; a refusal is a UserError naming the file.
TEST(Safetensors, AgreesWithReferenceOnEdgeCases) {
  json cases = read_json(golden("cases.json"))["cases"];
  ASSERT_GE(cases.size(), 40u);
  std::string dir = qt::test::temp_dir("st_cases");
  for (auto& [name, c] : cases.items()) {
    std::string path = dir + "/" + name + ".safetensors";
    std::string err = open_error(path, unhex(c["hex"]));
    bool ref_ok = c["reference"] == "ok";
    bool want_ok = c.contains("quanttool") ? c["quanttool"] == "ok" : ref_ok;
    EXPECT_EQ(err.empty(), want_ok) << name << ": ours '" << err << "' reference '" << c["reference"].get<std::string>()
                                    << "'";
    if (!err.empty()) {
      EXPECT_EQ(err.rfind(path + ": ", 0), 0u) << err;
      EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    }
  }
}

// Malformed files the reference reader rejects (docs/spec/safetensors.md §Reader rules), generated
// here: each must give an error naming the file and the problem.
TEST(Safetensors, MalformedFilesNameFileAndProblem) {
  std::string dir = qt::test::temp_dir("st_bad");
  const std::string u8a = R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]})";
  std::vector<uint8_t> good = st_bytes("{" + u8a + "}", "xy");
  std::vector<uint8_t> truncated(good.begin(), good.end() - 1);
  std::vector<uint8_t> tiny(good.begin(), good.begin() + 5);
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    const char* expect;  // substring of the message
  };
  std::string bad_utf8 = "{\"\xff\":{}}";
  Case cases[] = {
      {"tiny", tiny, "too short"},
      {"truncated", truncated, "past the end of the data buffer"},
      {"hlen_eof", st_bytes("{" + u8a + "}", "xy", 500), "runs past the end of the file"},
      {"hlen_big", st_bytes("{" + u8a + "}", "xy", 100'000'001), "exceeds the 100000000-byte limit"},
      {"json", st_bytes("{\"a\":{", ""), "not valid JSON"},
      {"utf8", st_bytes(bad_utf8, ""), "not valid UTF-8"},
      {"array", st_bytes("[1,2]", ""), "not a JSON object"},
      {"dtype", st_bytes(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", "xy"), "unknown dtype \"Q4\""},
      {"size", st_bytes(R"({"a":{"dtype":"F16","shape":[3],"data_offsets":[0,2]}})", "xy"), "needs 6 bytes"},
      {"overlap",
       st_bytes(
           R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
           "xyz"),
       "overlap"},
      {"gap",
       st_bytes(
           R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}})",
           "xyz"),
       "gap"},
      {"range", st_bytes(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", "xy"),
       "past the end of the data buffer"},
      {"trailing", st_bytes("{" + u8a + "}", "xyz"), "trailing bytes"},
      {"overflow", st_bytes(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", ""),
       "overflows"},
      {"meta", st_bytes(R"({"__metadata__":{"k":[]},)" + u8a + "}", "xy"), "__metadata__ value of 'k' is not a string"},
  };
  for (auto& c : cases) {
    std::string path = dir + "/" + c.name + ".safetensors";
    std::string err = open_error(path, c.bytes);
    EXPECT_EQ(err.rfind(path + ": ", 0), 0u) << c.name << ": " << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
  }
  EXPECT_EQ(open_error(dir + "/good.safetensors", good), "");
}

// Failed writes leave nothing behind and never clobber an existing file.
TEST(Safetensors, FailedWritesLeaveNothing) {
  std::string dir = qt::test::temp_dir("st_fail");
  Tensor ok = Tensor::from_f32({1, 2, 3, 4}, {2, 2});
  Tensor bad = ok;
  bad.shape = {3, 2};  // 24 bytes expected, 16 present
  std::string path = dir + "/m.safetensors";
  qt::write_safetensors(path, {{"w", ok}});
  std::vector<uint8_t> before = read_bytes(path);

  try {
    qt::write_safetensors(path, {{"w", ok}, {"v", bad}});
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": tensor 'v': 16 bytes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"m.safetensors"});

  EXPECT_THROW(qt::write_safetensors(path, {{"w", ok}, {"w", ok}}), UserError);  // duplicate name
  EXPECT_THROW(qt::write_safetensors(dir + "/missing/m.safetensors", {{"w", ok}}), UserError);
  EXPECT_THROW(qt::write_safetensors(path + "/under_a_file.safetensors", {{"w", ok}}), UserError);
  EXPECT_EQ(read_bytes(path), before);

  // Sharded: the bad tensor is in the last shard; the shards before it are not left behind.
  std::string sdir = qt::test::temp_dir("st_fail_shard");
  EXPECT_THROW(qt::write_safetensors_sharded(sdir, {{"a", ok}, {"b", ok}, {"c", bad}}, {}, 16), UserError);
  EXPECT_TRUE(files_in(sdir).empty());
}

// Sharded reading refuses an index that does not match its shards.
TEST(Safetensors, BadIndexNamesTheFile) {
  std::string dir = qt::test::temp_dir("st_badindex");
  Tensor ok = Tensor::from_f32({1, 2}, {2});
  qt::write_safetensors(dir + "/s1.safetensors", {{"a", ok}});
  qt::write_safetensors(dir + "/s2.safetensors", {{"a", ok}, {"b", ok}});
  auto index = [&](const std::string& text) { std::ofstream(dir + "/model.safetensors.index.json") << text; };
  auto err = [&]() -> std::string {
    try {
      qt::load_safetensors_dir(dir);
      return "";
    } catch (const UserError& e) {
      return e.what();
    }
  };
  index(R"({"weight_map":{"a":"s1.safetensors","b":"s3.safetensors"}})");
  EXPECT_NE(err().find("s3.safetensors"), std::string::npos) << err();
  EXPECT_NE(err().find("missing"), std::string::npos) << err();
  index(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  EXPECT_NE(err().find("also in shard"), std::string::npos) << err();
  index(R"({"weight_map":{"c":"s1.safetensors"}})");
  EXPECT_NE(err().find("tensor 'c'"), std::string::npos) << err();
  index(R"({"weight_map":{"a":"../s1.safetensors"}})");
  EXPECT_NE(err().find("not a file in this folder"), std::string::npos) << err();
  index(R"({"weight_map":)");
  EXPECT_NE(err().find("model.safetensors.index.json: not valid JSON"), std::string::npos) << err();
  index(R"({"weight_map":{"a":"s1.safetensors"}})");
  EXPECT_EQ(err(), "");
}
