// quanttool precompute --head-dim D --bits 1 2 3 4 --jl-dim M --seed S --out DIR: the rotations,
// JL matrices and Lloyd-Max codebooks the KV methods use, as safetensors + manifest.json
// (libquant/kv/artifacts.h), for eval-ppl/calibrate --artifacts DIR.
#include <cstdio>

#include "apps/command.h"
#include "libquant/kv/artifacts.h"

namespace qt {
namespace cmd_precompute {

const Registrar reg({"precompute", "rotation matrices, JL matrices and codebooks for the KV methods",
                     [](CLI::App& sub) -> std::function<int()> {
                       auto o = std::make_shared<kv::PrecomputeOptions>();
                       auto out = std::make_shared<std::string>();
                       sub.add_option("--head-dim", o->head_dim, "head dimension d")->required();
                       sub.add_option("--bits", o->bits, "codebook bit widths (default 1 2 3 4)");
                       sub.add_option("--jl-dim", o->jl_dim, "rows of the QJL matrix (default d)");
                       sub.add_option("--seed", o->seed, "seed (default 42; eval-ppl --kv-seed must match)");
                       sub.add_option("--out", *out, "output folder")->required();
                       return [o, out] {
                         const std::string man = kv::write_kv_artifacts(*out, *o);
                         std::fwrite(man.data(), 1, man.size(), stdout);
                         return 0;
                       };
                     }});

}  // namespace cmd_precompute
}  // namespace qt
