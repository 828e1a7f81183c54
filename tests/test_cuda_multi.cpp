// A model split into pipeline stages (eval-ppl --device cuda:0,1; libquant/cuda/pipeline.cpp):
// the stages see the fp32 residual stream one device would, so with the same chunks per forward
// the logits and every token's NLL are bitwise those of one device. "cuda:0,0" (two stages on
// one GPU) runs the whole hand-over — events, inbox, peer copy — on a one-GPU machine; the
// two-device case runs where the machine has two.
#include "libquant/cuda/device_list.h"
#include "tests/cuda_support.h"

namespace qt {
namespace {

using namespace cudatest;

std::string golden_dir(const std::string& arch) { return test::source_dir() + "/tests/golden/logits/tiny-" + arch; }

// dir on `devices` against dir on device 0 alone: logits of one sequence, and eval-ppl's NLL
// with `batch` chunks per forward (per micro-batch on the pipeline) — bitwise equal.
void expect_same_as_one_device(const std::string& dir, const std::vector<int>& devices, int batch) {
  const auto ids = random_ids(40, 21);
  cuda::GpuModel one(load_checkpoint(dir));
  cuda::GpuModel split(load_checkpoint(dir), true, devices);
  ASSERT_EQ(split.stages(), int(devices.size()));
  EXPECT_EQ(split.kind(), one.kind());
  // a tied bf16 table is the last stage's head and, apart, the first stage's embedding
  EXPECT_GE(split.weight_bytes(), one.weight_bytes()) << split.describe_stages();
  const auto a = cuda::forward_logits(one, ids), b = cuda::forward_logits(split, ids);
  ASSERT_EQ(a.size(), b.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  EXPECT_EQ(differ, 0u) << "logits differ in " << differ << " of " << a.size() << " (" << split.describe_stages()
                        << ")";

  const auto text = random_ids(11 * 16 + 3, 22);
  PplOptions po;
  po.ctx = 16;
  po.bos_id = 1;
  po.keep_tokens = true;
  const PplResult want = cuda::evaluate_perplexity(one, text, po, batch);
  const PplResult got = cuda::evaluate_perplexity(split, text, po, batch);  // 11 chunks: a short last micro-batch
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  for (size_t i = 0; i < got.tokens.size(); ++i) ASSERT_EQ(got.tokens[i].nll, want.tokens[i].nll) << i;
  EXPECT_EQ(got.ppl, want.ppl);
  std::printf("%s on %s: PPL %.6f, bitwise that of one device\n", dir.c_str(), split.describe_stages().c_str(),
              got.ppl);
}

TEST(CudaMulti, TwoStagesOnOneGpuMatchOneDevice) {
  QT_REQUIRE_GPU();
  for (const char* arch : {"llama3", "gemma2", "qwen3-moe"}) {
    SCOPED_TRACE(arch);
    expect_same_as_one_device(golden_dir(arch), {0, 0}, 3);
  }
}

TEST(CudaMulti, W8A8StagesOnOneGpuMatchOneDevice) {
  QT_REQUIRE_GPU();
  const std::string dir = test::temp_dir("cuda-multi-w8a8") + "/m";
  std::string out;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + tiny_dir() + " --out " + dir +
                              " --scheme int8 --group-size 0",
                          &out),
            0)
      << out;
  expect_same_as_one_device(dir, {0, 0}, 2);
  // qwen3-moe has three layers: three stages of one layer each (the W8A8 residual fused across
  // layers ends at every stage)
  const std::string moe = test::temp_dir("cuda-multi-moe-w8a8") + "/m";
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + golden_dir("qwen3-moe") + " --out " + moe +
                              " --scheme int8 --group-size 0",
                          &out),
            0)
      << out;
  expect_same_as_one_device(moe, {0, 0, 0}, 4);
}

TEST(CudaMulti, TwoDevices) {
  QT_REQUIRE_GPU();
  if (cuda::device_count() < 2) GTEST_SKIP() << "one CUDA device: the two-device pipeline runs on a machine with two";
  expect_same_as_one_device(golden_dir("llama3"), {0, 1}, 3);
  expect_same_as_one_device(golden_dir("qwen3-moe"), {0, 1}, 2);
}

TEST(CudaMulti, DeviceListsParse) {
  EXPECT_EQ(cuda::parse_device_list("cuda"), std::vector<int>{0});
  EXPECT_TRUE(cuda::is_cuda_device("cuda:0,1"));
  EXPECT_FALSE(cuda::is_cuda_device("cudax"));
  for (const char* bad : {"cuda:", "cuda:0,", "cuda:a", "cuda:0;1", "cuda:,1", "cuda:1234"})
    EXPECT_THROW(cuda::parse_device_list(bad), UserError) << bad;
  EXPECT_THROW(cuda::parse_device_list("cuda:" + std::to_string(cuda::device_count())), UserError);
  if (cuda::device_count() > 0) {
    EXPECT_EQ(cuda::parse_device_list("cuda:0,0"), (std::vector<int>{0, 0}));
  }
}

// The command line: a device the machine does not have, and what the pipeline does not run, are
// one error line and exit 2 (before the model is read).
TEST(CudaMulti, EvalPplRefusals) {
  QT_REQUIRE_GPU();
  const std::string base = test::quanttool_bin() + " eval-ppl --model " + tiny_dir() + " --text " + test::source_dir() +
                           "/data/wikitext-2/wiki.test.raw --chunks 2 --ctx 16 ";
  for (const std::string& extra :
       std::vector<std::string>{"--device cuda:0,99", "--device cuda:0,x", "--device cuda:0,0 --kv kivi:bits=4",
                                "--device cuda:0,0 --kl-base-model " + tiny_dir()}) {
    std::string out;
    EXPECT_EQ(test::run_cmd(base + extra, &out), 2) << extra << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << extra << ": " << out;
    EXPECT_EQ(out.rfind("error: ", 0), 0u) << extra << ": " << out;
  }
}

}  // namespace
}  // namespace qt
