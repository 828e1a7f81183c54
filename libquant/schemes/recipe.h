// Recipe files: per-tensor overrides of a quantization, as JSON rules over HF tensor names.
//
//   {"rules": [
//      {"match": "model.layers.*.self_attn.*", "bits": 6},
//      {"match": "model.layers.*.mlp.*", "bits": 4},
//      {"match": "model.layers.{0,1,28,29}.*", "bits": 8, "group_size": 64},
//      {"match": "model.embed_tokens.weight", "keep": true}]}
// "match": a glob over the full HF tensor name: `*` any run of characters (dots included),
// `?` one character, `{a,b,c}` alternatives (not nested). Keys: "bits", "group_size",
// "keep" (true: leave the tensor unquantized), "comment" (ignored). Every rule whose pattern
// matches a tensor applies, in file order, so a later rule overrides an earlier one (last match
// wins; plan.h). A rule whose pattern matches no tensor of the model is an error (a typo would
// otherwise silently do nothing).
//
// Presets: recipes/NAME.json of the repository (q4-mix, q3-mix).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace qt {

struct RecipeRule {
  std::string match;
  int bits = -1, group = -1;  // -1: not set by this rule
  bool keep = false;
};

// Whether tensor name `s` matches glob `pattern` (the syntax above).
bool glob_match(std::string_view pattern, std::string_view s);

// The rules of a recipe file; UserError naming the file for unreadable JSON or a malformed rule.
std::vector<RecipeRule> read_recipe(const std::string& path);

// The file a --recipe argument names: the argument itself when it is a file or a path, else the
// preset recipes/ARG.json under `source_dir` (the tree the binary was built from) or beside the
// running binary (an installed copy). UserError when there is none.
std::string resolve_recipe(const std::string& arg, const std::string& source_dir);

}  // namespace qt
