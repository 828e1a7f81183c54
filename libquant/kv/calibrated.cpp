#include "libquant/kv/calibrated.h"

#include "formats/error.h"
#include "libquant/kv/artifacts.h"

namespace qt::kv {

std::string calibrated_prefix(const std::string& method, double bits) { return fmt::format("{}_b{}", method, bits); }

std::string calibrated_name(const std::string& prefix, int layer, Side side, int head, const std::string& table) {
  return fmt::format("{}.l{}.{}.h{}.{}", prefix, layer, side == Side::Key ? "k" : "v", head, table);
}

CalibratedTables::CalibratedTables(const KVContext& ctx, const std::string& method, double bits, Side side)
    : ctx_(ctx), prefix_(calibrated_prefix(method, bits)), side_(side) {
  what_ = fmt::format("{}:bits={} ({}, layer {})", method, bits, side_name(side), ctx.layer);
  const std::string how = fmt::format(
      "run quanttool calibrate --method kv-codebook --kv {}:bits={} --model M --text "
      "data/wikitext-2/wiki.valid.tokens.txt --out DIR, then pass --artifacts DIR",
      method, bits);
  if (!ctx.artifacts) user_error("{}: needs calibrated tables; {}", what_, how);
  while (ctx.artifacts->find(calibrated_name(prefix_, ctx.layer, side, heads_, "present"))) ++heads_;
  if (heads_ == 0) user_error("{}: --artifacts {} holds no tables for it; {}", what_, ctx.artifacts->dir(), how);
}

const std::vector<float>* CalibratedTables::find(int h, const std::string& table) const {
  return ctx_.artifacts->find(calibrated_name(prefix_, ctx_.layer, side_, h, table));
}

const std::vector<float>& CalibratedTables::get(int h, const std::string& table, long size) const {
  const std::vector<float>* t = find(h, table);
  if (!t)
    user_error("{}: --artifacts {} lacks {}", what_, ctx_.artifacts->dir(),
               calibrated_name(prefix_, ctx_.layer, side_, h, table));
  if (size >= 0 && long(t->size()) != size)
    user_error("{}: {} holds {} floats, expected {} (calibrated for another configuration?)", what_,
               calibrated_name(prefix_, ctx_.layer, side_, h, table), t->size(), size);
  return *t;
}

PerHeadCodec::PerHeadCodec(std::vector<std::unique_ptr<Codec>> heads)
    : Codec(heads.at(0)->head_dim(), heads[0]->name()), heads_(std::move(heads)) {}

}  // namespace qt::kv
