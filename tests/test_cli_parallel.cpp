// scripts/eval_parallel.sh: a run split into parts that GNU parallel runs as local processes,
// merged with eval-ppl --merge, equals the same run made in one process — the
// recipe of docs/evaluation.md §Many machines, checked end to end on this machine.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support.h"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json load_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

TEST(EvalParallel, MergedPartsEqualOneRun) {
  const std::string model = qt::test::model_gguf(), text = qt::test::data_file("wikitext-2/wiki.test.raw");
  QT_REQUIRE_FILE(model);
  QT_REQUIRE_FILE(text);
  std::string out;
  if (qt::test::run_cmd("command -v parallel", &out) != 0) {
    if (qt::test::in_ci()) FAIL() << "GNU parallel is missing (scripts/setup.sh installs it)";
    GTEST_SKIP() << "GNU parallel is not installed";
  }
  const std::string dir = qt::test::temp_dir("par");
  const std::string args = " --model " + model + " --text " + text + " --ctx 96 --threads 1";
  // 7 chunks in 3 parts (3 + 3 + 1: the last part is shorter), two jobs at a time.
  const std::string split = "QUANTTOOL=" + qt::test::quanttool_bin() + " bash " + qt::test::source_dir() +
                            "/scripts/eval_parallel.sh --parts 3 --chunks 7 --jobs 2 --json " + dir +
                            "/merged.json --" + args;
  ASSERT_EQ(qt::test::run_cmd(split, &out), 0) << out;
  EXPECT_EQ(fs::exists(dir + "/merged.json.parts/part-6.json"), true) << out;
  ASSERT_EQ(qt::test::run_cmd(
                qt::test::quanttool_bin() + " eval-ppl" + args + " --chunks 7 --json " + dir + "/one.json", &out),
            0)
      << out;
  const json m = load_json(dir + "/merged.json"), one = load_json(dir + "/one.json");
  EXPECT_EQ(m["chunks"], 7);
  EXPECT_EQ(m["merged_parts"], 3);
  for (const char* k : {"tokens_scored", "chunks", "ctx"}) EXPECT_EQ(m[k], one[k]) << k;
  // The merge sums the same per-position terms in the same order: equal, not just close.
  for (const char* k : {"ppl", "ppl_err", "mean_nll"}) EXPECT_EQ(m[k].get<double>(), one[k].get<double>()) << k;
  EXPECT_EQ(m["running_ppl"], one["running_ppl"]);

  // A bad split is refused with one line and exit 2, before any part runs.
  EXPECT_EQ(qt::test::run_cmd("bash " + qt::test::source_dir() +
                                  "/scripts/eval_parallel.sh --parts 0 --chunks 7 --json " + dir + "/x.json --" + args,
                              &out),
            2);
  EXPECT_NE(out.find("error:"), std::string::npos) << out;
  fs::remove_all(dir);
}

}  // namespace
