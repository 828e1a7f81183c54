// The recipe language and the quantization planner (libquant/schemes/recipe.h, plan.h), and the
// scheme rows' facts convert reads (layouts, GGUF types); convert's CLI tests cover them end to end.
#include <gtest/gtest.h>

#include <fstream>

#include <fmt/format.h>

#include "formats/error.h"
#include "formats/layouts/output_layout.h"
#include "libquant/schemes/grid.h"
#include "libquant/schemes/plan.h"
#include "tests/support.h"

using namespace qt;

TEST(Recipe, GlobMatch) {
  EXPECT_TRUE(glob_match("model.layers.*.mlp.*", "model.layers.12.mlp.down_proj.weight"));
  EXPECT_FALSE(glob_match("model.layers.*.mlp.*", "model.layers.12.self_attn.q_proj.weight"));
  EXPECT_TRUE(glob_match("model.layers.?.mlp.*", "model.layers.3.mlp.up_proj.weight"));
  EXPECT_FALSE(glob_match("model.layers.?.mlp.*", "model.layers.13.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("model.layers.{0,1,28}.*", "model.layers.28.mlp.up_proj.weight"));
  EXPECT_FALSE(glob_match("model.layers.{0,1,28}.*", "model.layers.2.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("*", "lm_head.weight"));
  EXPECT_TRUE(glob_match("lm_head.weight", "lm_head.weight"));
  EXPECT_FALSE(glob_match("lm_head.weigh", "lm_head.weight"));
}

TEST(Recipe, ReadsRulesAndRefusesBadOnes) {
  const std::string dir = test::temp_dir("recipe");
  {
    std::ofstream(dir + "/ok.json")
        << R"({"rules": [{"match": "a.*", "bits": 8, "comment": "x"}, {"match": "b", "keep": true}]})";
  }
  const std::vector<RecipeRule> r = read_recipe(dir + "/ok.json");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].match, "a.*");
  EXPECT_EQ(r[0].bits, 8);
  EXPECT_EQ(r[0].group, -1);
  EXPECT_TRUE(r[1].keep);
  { std::ofstream(dir + "/bad.json") << R"({"rules": [{"match": "a", "bitz": 8}]})"; }
  EXPECT_THROW(read_recipe(dir + "/bad.json"), UserError);
  EXPECT_THROW(read_recipe(dir + "/none.json"), UserError);
  // A preset name resolves under the source tree's recipes/.
  EXPECT_EQ(resolve_recipe("q4-mix", test::source_dir()), test::source_dir() + "/recipes/q4-mix.json");
}

TEST(SchemeRows, LayoutsAndGgufTypes) {
  for (const Scheme& s : scheme_table()) {
    ASSERT_FALSE(s.layouts.empty()) << s.name;
    for (const StoredAs& l : s.layouts) {
      EXPECT_NE(find_output_layout(l.layout), nullptr) << s.name << " " << l.layout;
      EXPECT_TRUE(std::find_if(stored_row(s.name, l.layout).layouts.begin(), stored_row(s.name, l.layout).layouts.end(),
                               [&](const StoredAs& m) { return std::string(m.layout) == l.layout; }) !=
                  stored_row(s.name, l.layout).layouts.end())
          << s.name << " is stored in " << l.layout << " as a row that layout does not store";
    }
    EXPECT_NE(s.grid.code, nullptr) << s.name;
    EXPECT_EQ(s.grid.kind == GridKind::Table, s.grid.table != nullptr) << s.name;
  }
  EXPECT_EQ(default_layout(""), "hf");
  EXPECT_EQ(default_layout("affine"), "mlx");
  EXPECT_EQ(default_layout("int8"), "compressed-tensors");
  EXPECT_EQ(default_layout("int4"), "native");
  EXPECT_EQ(default_layout("fp4"), "bnb");
  EXPECT_STREQ(stored_row("int8", "compressed-tensors").name, "int8_ct");
  EXPECT_STREQ(stored_row("int8", "native").name, "int8");
  EXPECT_THROW(stored_row("int4", "mlx"), UserError);
  EXPECT_STREQ(closest_gguf_type(find_scheme("affine"), 8), "q8_0");
  EXPECT_STREQ(closest_gguf_type(find_scheme("affine"), 5), "q5_1");
  EXPECT_STREQ(closest_gguf_type(find_scheme("affine"), -1), "q4_1");
  EXPECT_STREQ(closest_gguf_type(find_scheme("nf4"), 4), "iq4_nl");
  EXPECT_STREQ(closest_gguf_type(find_scheme("int8_ct"), 8), "q8_0");
  // The grid reads its range from the row.
  SchemeParams p = default_params("affine");
  p.bits = 3;
  EXPECT_EQ(SchemeGrid(p).qmax(), 7);
  EXPECT_EQ(SchemeGrid(default_params("int4")).qmin(), -8);
  EXPECT_EQ(SchemeGrid(default_params("int8_ct")).top(), 127.5f);
}

namespace {

Checkpoint toy_checkpoint() {
  Checkpoint ck;
  ck.path = "toy";
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    ck.tensors[name] = Tensor::from_f32(std::vector<float>(size_t(n), 0.5f), shape);
  };
  add("model.embed_tokens.weight", {64, 128});
  add("model.layers.0.self_attn.q_proj.weight", {128, 128});
  add("model.layers.0.mlp.down_proj.weight", {128, 96});  // 96: group 64 does not divide it
  add("model.layers.0.input_layernorm.weight", {128});
  add("lm_head.weight", {64, 128});
  return ck;
}

}  // namespace

TEST(QuantPlanner, RulesFlagsAndLayouts) {
  const std::string dir = test::temp_dir("plan");
  {
    std::ofstream(dir + "/r.json") << R"({"rules": [{"match": "model.layers.*", "bits": 8},
      {"match": "model.layers.0.self_attn.*", "bits": 6}, {"match": "lm_head.weight", "keep": true}]})";
  }
  QuantRequest r;
  r.scheme = "affine";
  r.recipe = dir + "/r.json";
  r.embedding_bits = 2;
  QuantPlanner planner(r, *find_output_layout("mlx"), test::source_dir());
  ASSERT_TRUE(planner.active());
  Checkpoint ck = toy_checkpoint();
  const QuantPlan plan = planner.plan(ck);
  EXPECT_EQ(plan.tensors.at("model.layers.0.self_attn.q_proj.weight").bits, 6);  // the last matching rule
  EXPECT_EQ(plan.tensors.at("model.embed_tokens.weight").bits, 2);               // the flag
  EXPECT_EQ(plan.tensors.count("lm_head.weight"), 0u);
  EXPECT_NE(plan.skipped.at("lm_head.weight").find("kept by recipe rule 3"), std::string::npos);
  EXPECT_NE(plan.skipped.at("model.layers.0.mlp.down_proj.weight").find("does not divide"), std::string::npos);
  EXPECT_EQ(plan.tensors.count("model.layers.0.input_layernorm.weight"), 0u);

  // compressed-tensors: int8 is stored as the int8_ct row, the embedding and head stay float.
  QuantRequest c;
  c.scheme = "int8";
  QuantPlanner ct(c, *find_output_layout("compressed-tensors"), test::source_dir());
  Checkpoint ck2 = toy_checkpoint();
  const QuantPlan p2 = ct.plan(ck2);
  EXPECT_EQ(p2.tensors.at("model.layers.0.self_attn.q_proj.weight").scheme, "int8_ct");
  EXPECT_EQ(p2.tensors.count("model.embed_tokens.weight"), 0u);
  EXPECT_EQ(p2.skipped.count("lm_head.weight"), 1u);

  // Bad requests, before any tensor is read.
  QuantRequest b;
  b.scheme = "int4";
  EXPECT_THROW(QuantPlanner(b, *find_output_layout("bnb"), ""), UserError);
  EXPECT_THROW(QuantPlanner(b, *find_output_layout("hf"), ""), UserError);
  b.bits = 8;
  EXPECT_THROW(QuantPlanner(b, *find_output_layout("native"), ""), UserError);
  QuantRequest none;
  none.bits = 4;
  EXPECT_THROW(QuantPlanner(none, *find_output_layout("hf"), ""), UserError);
}

// A reason shared by many tensors (bnb's float experts) is one summary line with the count.
TEST(QuantPlanner, SummaryCollapsesARepeatedReason) {
  QuantPlan plan;
  for (size_t i = 0; i < kSummaryCollapse; ++i) plan.skipped[fmt::format("e.{:03}.weight", i)] = "experts float";
  plan.skipped["lm_head.weight"] = "head float";
  const std::vector<std::string> lines = plan_summary(plan);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], fmt::format("left unquantized: {} tensors, e.000.weight ... e.{:03}.weight (experts float)",
                                  kSummaryCollapse, kSummaryCollapse - 1));
  EXPECT_EQ(lines[1], "left unquantized: lm_head.weight (head float)");
}
