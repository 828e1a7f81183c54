#include "libquant/schemes/plan.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "formats/error.h"
#include "formats/layouts/quantized.h"

namespace qt {

namespace {

bool in(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

SchemeParams with_bits(SchemeParams p, int bits) {
  p.bits = bits;
  return p;
}

// Bits and group size the row supports, before any tensor is looked at.
void check_params(const SchemeParams& p, const std::string& what) {
  const Scheme& s = find_scheme(p.scheme);
  if (!in(s.bits, p.bits) || !in(s.group_sizes, p.group_size))
    user_error("{}: {} does not support {} bits with group size {} (bits: {}; group sizes: {})", what, p.scheme, p.bits,
               p.group_size, fmt::join(s.bits, ", "), fmt::join(s.group_sizes, ", "));
}

}  // namespace

std::string default_layout(const std::string& scheme) {
  if (scheme.empty()) return "hf";
  return find_scheme(scheme).layouts.front().layout;
}

QuantPlanner::QuantPlanner(const QuantRequest& r, const OutputLayout& layout, const std::string& source_dir)
    : r_(r), layout_(&layout) {
  if (r.scheme.empty()) {
    if (r.bits >= 0 || r.group >= 0 || r.embedding_bits >= 0 || r.lm_head_bits >= 0 || !r.recipe.empty() || r.strict ||
        r.untie)
      user_error("--bits, --group-size, --recipe, ...: need --scheme");
    if (layout.tensor_names) user_error("--format {} stores quantized weights: give --scheme", layout.name);
    return;
  }
  find_scheme(r.scheme);  // unknown scheme: one line listing the known ones
  if (!layout.tensor_names)
    user_error("--scheme {}: --format {} stores unquantized weights only", r.scheme, layout.name);
  base_ = default_params(stored_row(r.scheme, layout.name).name);
  if (r.bits >= 0) base_.bits = r.bits;
  if (r.group >= 0) base_.group_size = r.group;
  check_params(base_, "--bits/--group-size");
  for (int b : {r.embedding_bits, r.lm_head_bits})
    if (b >= 0) check_params(with_bits(base_, b), b == r.embedding_bits ? "--embedding-bits" : "--lm-head-bits");
  if (!r.recipe.empty()) {
    r_.recipe = resolve_recipe(r.recipe, source_dir);
    rules_ = read_recipe(r_.recipe);
    for (size_t i = 0; i < rules_.size(); ++i) {
      SchemeParams p = base_;
      if (rules_[i].bits >= 0) p.bits = rules_[i].bits;
      if (rules_[i].group >= 0) p.group_size = rules_[i].group;
      check_params(p, fmt::format("{}: rule {} ('{}')", r.recipe, i + 1, rules_[i].match));
    }
  }
  active_ = true;
}

QuantPlan QuantPlanner::plan(Checkpoint& ck) {
  const bool tied = ck.config.tie_word_embeddings;
  if (r_.lm_head_bits >= 0 && tied && !r_.untie)
    user_error(
        "--lm-head-bits: {} ties lm_head to the embedding; add --untie to write a separate "
        "lm_head.weight, or use --embedding-bits",
        ck.path);
  if (tied && r_.untie) {
    ck.tensors["lm_head.weight"] = ck.get("model.embed_tokens.weight");  // shares the storage
    ck.config.tie_word_embeddings = false;
  }
  QuantPlan out;
  std::vector<int> matched(rules_.size(), 0);
  for (auto& [name, t] : ck.tensors) {
    for (size_t i = 0; i < rules_.size(); ++i)
      if (glob_match(rules_[i].match, name)) ++matched[i];
    if (t.shape.size() != 2 || module_of(name) == name) continue;  // norms, biases
    if (layout_->float_embedding_and_head && (name == "model.embed_tokens.weight" || name == "lm_head.weight")) {
      out.skipped[name] = layout_->float_embedding_and_head;
      continue;
    }
    SchemeParams p = base_;
    bool keep = false;
    for (size_t i = 0; i < rules_.size(); ++i) {
      const RecipeRule& r = rules_[i];
      if (!glob_match(r.match, name)) continue;
      keep = r.keep;
      if (r.bits >= 0) p.bits = r.bits;
      if (r.group >= 0) p.group_size = r.group;
      if (keep) out.skipped[name] = fmt::format("kept by recipe rule {} ('{}')", i + 1, r.match);
    }
    if (name == "model.embed_tokens.weight" && r_.embedding_bits >= 0) p.bits = r_.embedding_bits, keep = false;
    if (name == "lm_head.weight" && r_.lm_head_bits >= 0) p.bits = r_.lm_head_bits, keep = false;
    if (keep) continue;
    out.skipped.erase(name);
    std::string why;
    if (!scheme_fits(p, t.shape[0], t.shape[1], &why)) {
      if (r_.strict) user_error("--strict: {} [{}, {}]: {}", name, t.shape[0], t.shape[1], why);
      out.skipped[name] = why;
      continue;
    }
    out.tensors[name] = p;
  }
  for (size_t i = 0; i < rules_.size(); ++i)
    if (!matched[i])
      user_error("{}: rule {} ('{}') matches no tensor of {}", r_.recipe, i + 1, rules_[i].match, ck.path);
  if (out.tensors.empty())
    user_error("--group-size {}: quantizes no tensor of {} ({})", base_.group_size, ck.path,
               out.skipped.empty() ? "no 2-D weights" : out.skipped.begin()->second);
  return out;
}

std::vector<std::string> plan_summary(const QuantPlan& plan) {
  std::map<std::string, int> by_params;
  for (auto& [name, p] : plan.tensors) ++by_params[fmt::format("{} {}-bit group {}", p.scheme, p.bits, p.group_size)];
  std::vector<std::string> lines;
  for (auto& [k, n] : by_params) lines.push_back(fmt::format("quantized {} tensors: {}", n, k));
  // One line per tensor, except for a reason shared by many (a mixture of experts' every expert in
  // the bnb layout: thousands of lines for a 128-expert model): one line with the count.
  std::map<std::string, std::vector<const std::string*>> by_why;
  for (auto& [name, why] : plan.skipped) by_why[why].push_back(&name);
  for (auto& [name, why] : plan.skipped) {
    const auto& names = by_why.at(why);
    if (names.size() < kSummaryCollapse)
      lines.push_back(fmt::format("left unquantized: {} ({})", name, why));
    else if (names.front() == &name)
      lines.push_back(fmt::format("left unquantized: {} tensors, {} ... {} ({})", names.size(), *names.front(),
                                  *names.back(), why));
  }
  return lines;
}

}  // namespace qt
