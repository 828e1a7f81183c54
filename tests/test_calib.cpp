// Calibration: reverse water-filling against its closed form (docs/spec/calibration.md
// §Per-layer bit allocation) and the
// `calibrate --method kv-sensitivity` command end to end (its recipe is what eval-ppl takes).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "calib/bit_allocation.h"
#include "formats/error.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;

TEST(WaterFill, UnclampedMatchesClosedForm) {
  // b_i = b̄ + (ln w_i − mean ln w)/ln β; with β = 4 and w = σ² that is ½ log₂(σ_i²/geomean σ²).
  const std::vector<double> w = {1, 4, 16, 0.25};
  const auto b = calib::water_fill(w, 3, 4, 0, 8);
  double ml = 0;
  for (double x : w) ml += std::log(x) / 4;
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(b[i], 3 + (std::log(w[i]) - ml) / std::log(4.0), 1e-12);
  EXPECT_NEAR(b[2] - b[0], 2.0, 1e-12);  // 16× the sensitivity: 2 more bits at β = 4
}

TEST(WaterFill, ClampsAndKeepsTheBudget) {
  const std::vector<double> w = {1e-6, 1, 1, 1e6};
  const auto b = calib::water_fill(w, 2.5, 4, 1, 4);
  EXPECT_DOUBLE_EQ(b[0], 1);
  EXPECT_DOUBLE_EQ(b[3], 4);
  EXPECT_NEAR(std::accumulate(b.begin(), b.end(), 0.0) / 4, 2.5, 1e-12);
  EXPECT_NEAR(b[1], 2.5, 1e-12);  // the free layers share what is left equally (equal weights)
}

TEST(WaterFill, IntegerBitsMeetTheBudgetByMarginalGain) {
  const std::vector<double> w = {1, 2, 3, 5, 8, 13, 21, 34};
  for (double budget : {2.0, 2.5, 3.0, 3.25}) {
    const auto b = calib::allocate_bits(w, budget, 3.5, {1, 2, 3, 4});
    EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), std::lround(budget * 8)) << budget;
    for (size_t i = 1; i < b.size(); ++i) EXPECT_GE(b[i], b[i - 1]) << "more sensitive, never fewer bits";
  }
  // Equal sensitivities: as even as integers allow.
  const auto e = calib::allocate_bits(std::vector<double>(6, 1.0), 2.5, 4, {2, 3, 4});
  EXPECT_EQ(std::count(e.begin(), e.end(), 2), 3);
  EXPECT_EQ(std::count(e.begin(), e.end(), 3), 3);
  EXPECT_THROW(calib::allocate_bits(w, 5, 4, {1, 2, 3, 4}), UserError);
  EXPECT_THROW(calib::allocate_bits({1, 0}, 2, 4, {1, 2, 3, 4}), UserError);
}

TEST(CalibrateCli, KvSensitivityWritesARecipeEvalPplTakes) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string dir = test::temp_dir("calib-kv");
  const std::string valid = test::data_file("wikitext-2/wiki.valid.tokens.txt");
  std::string out;
  ASSERT_EQ(
      test::run_cmd(test::quanttool_bin() + " calibrate --method kv-sensitivity --model " + test::model_gguf() +
                        " --text " + valid + " --kv turboquant_mse:bits=2 --budget 2.5 --ctx 64 --chunks 1 --out " +
                        dir + "/r.json --json " + dir + "/s.json",
                    &out),
      0)
      << out;
  nlohmann::json r = nlohmann::json::parse(std::ifstream(dir + "/r.json"));
  nlohmann::json s = nlohmann::json::parse(std::ifstream(dir + "/s.json"));
  ASSERT_EQ(r["k"].size(), 30u);
  ASSERT_EQ(r["v"].size(), 30u);
  int total = 0;
  for (int b : s["bits"]) total += b;
  EXPECT_EQ(total, 150);  // 60 sides at 2.5 bits on average
  // More sensitive sides never get fewer bits than less sensitive ones.
  std::vector<double> kld = s["kld_keys"].get<std::vector<double>>();
  for (double x : s["kld_values"]) kld.push_back(x);
  for (size_t i = 0; i < kld.size(); ++i)
    for (size_t j = 0; j < kld.size(); ++j)
      if (kld[i] > kld[j]) EXPECT_GE(s["bits"][i].get<int>(), s["bits"][j].get<int>());
  for (double x : kld) EXPECT_GT(x, 0);  // every layer's 2-bit cache moves the distribution
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " eval-ppl --model " + test::model_gguf() + " --text " +
                              test::data_file("wikitext-2/wiki.test.raw") + " --ctx 64 --chunks 1 --kv-recipe " + dir +
                              "/r.json",
                          &out),
            0)
      << out;
  EXPECT_NE(out.find("per-layer recipe"), std::string::npos) << out;
  // bad input: one line, exit code 2, no recipe
  for (std::string bad : {" --kv nosuch", " --kv turboquant_mse:bits=2 --bits 7", " --kv f16"}) {
    EXPECT_EQ(test::run_cmd(test::quanttool_bin() + " calibrate --method kv-sensitivity --model " + test::model_gguf() +
                                " --text " + valid + " --budget 2 --out " + dir + "/bad.json" + bad,
                            &out),
              2)
        << bad << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
  EXPECT_FALSE(fs::exists(dir + "/bad.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qt
