// quanttool bench: this machine's peaks (--peak), the dense GEMMs over SmolLM2's shapes (--gemm),
// each GEMM printed beside the peak it is measured against, and the kernel latency table of every
// Linear kind, dense and packed (--kernel), all in one run.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/bench_decode.h"
#include "apps/command.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "libquant/bench/gemm_bench.h"
#include "libquant/bench/gemv_bench.h"
#include "libquant/bench/kernel_bench.h"
#include "libquant/bench/peak.h"
#include "libquant/cuda/backend.h"
#include "libquant/cpu_features.h"
#include "libquant/linear/linear.h"
#include "libquant/parallel.h"

namespace qt {
namespace cmd_bench {

struct BenchOpts {
  bool peak = false, gemm = false, kernel = false, gemv = false, decode = false;
  std::string device = "cpu";
  DecodeBenchOptions dec;
  std::vector<std::string> gemv_columns = {"f32", "affine8-g64", "affine4-g64", "nf4-b64"};
  std::vector<int64_t> kernel_ms = {1, 128, 1024, 4096};
  bool kernel_smollm2_only = false;
  std::vector<std::string> kernel_columns;  // empty: all
  int threads = 0;
  int64_t m = 512;
  std::string compute = "both";
  std::string level;
  std::string json_path;
};

nlohmann::json peak_json(const bench::PeakResult& r) {
  nlohmann::json j{{"unit", r.unit}, {"isa", r.isa}};
  for (auto& p : r.points) j["by_threads"][std::to_string(p.threads)] = p.value;
  return j;
}

void print_peaks(const std::vector<bench::PeakResult>& peaks, int threads) {
  std::string head = fmt::format("{:<11}{:<9}", "peak", "unit");
  for (int t = 1; t <= threads; ++t) head += fmt::format("{:>10}", fmt::format("{} thr", t));
  fmt::print("{}  instruction\n", head);
  for (auto& r : peaks) {
    std::string line = fmt::format("{:<11}{:<9}", r.name, r.unit);
    for (int t = 1; t <= threads; ++t)
      line += r.points.empty() ? fmt::format("{:>10}", "n/a") : fmt::format("{:>10.1f}", r.at(t));
    fmt::print("{}  {}\n", line, r.isa.empty() ? "(not on this CPU)" : r.isa);
  }
}

// Cider's latency table (docs/spec/int8-w8a8.md §Kernel latency shapes): its two shapes at
// M ∈ --kernel-tokens, and SmolLM2's own shapes; each cell's milliseconds and its ratio to f32;
// for the integer columns GOP/s and % of the INT8 peak.
// --kernel-columns: the columns asked for, f32 always (the ratios' reference); UserError naming
// the columns there are for one that is not.
std::vector<bench::KernelColumn> kernel_columns(const std::vector<std::string>& asked,
                                                const char* option = "--kernel-columns") {
  const auto all = bench::default_kernel_columns();
  for (auto& c : asked)
    if (std::none_of(all.begin(), all.end(), [&](auto& d) { return d.label == c; })) {
      std::string names;
      for (auto& d : all) names += (names.empty() ? "" : ", ") + d.label;
      user_error("{}: '{}' is not one of {}", option, c, names);
    }
  std::vector<bench::KernelColumn> cols;
  for (auto& c : all)
    if (asked.empty() || c.label == "f32" || std::find(asked.begin(), asked.end(), c.label) != asked.end())
      cols.push_back(c);
  return cols;
}

nlohmann::json kernel_table(const BenchOpts& o, const std::vector<bench::KernelColumn>& cols, double int8_peak) {
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> shapes;
  if (!o.kernel_smollm2_only) shapes = {{"seed", {10240, 2560}}, {"seed", {2560, 10240}}};
  for (auto& s : bench::smollm2_shapes()) shapes.push_back({"smollm2 " + s.name, {s.n, s.k}});
  const auto w8 = std::find_if(cols.begin(), cols.end(), [](auto& c) { return c.label == "w8a8"; });
  const size_t w8col = size_t(w8 - cols.begin());
  const auto rows = bench::run_kernel_bench(shapes, o.kernel_ms, cols, 0.2);
  fmt::print(
      "\nkernel latency, y[M,N] = x[M,K]·Wᵀ, ms (best of runs) and ×f32 time; w8a8 GOP/s and % of the INT8 peak\n");
  std::string head = fmt::format("{:<15}{:>6}{:>6}{:>5}", "shape", "N", "K", "M");
  for (auto& c : cols) head += fmt::format("{:>19}", c.label);
  fmt::print("{}{:>17}\n", head, "w8a8 GOP/s");
  nlohmann::json j = nlohmann::json::array();
  for (auto& r : rows) {
    std::string line = fmt::format("{:<15}{:>6}{:>6}{:>5}", r.shape, r.n, r.k, r.m);
    nlohmann::json jr{{"shape", r.shape}, {"n", r.n}, {"k", r.k}, {"m", r.m}};
    const double f32 = r.cells[0].best_s;
    for (size_t c = 0; c < cols.size(); ++c) {
      const auto& cell = r.cells[c];
      if (cell.best_s <= 0) {
        line += fmt::format("{:>19}", "n/a");
        continue;
      }
      line += fmt::format("{:>11.3f} ×{:<6.2f}", cell.best_s * 1e3, f32 > 0 ? cell.best_s / f32 : 0.0);
      jr["cells"][cols[c].label] = {
          {"ms", cell.best_s * 1e3}, {"ratio_f32", f32 > 0 ? cell.best_s / f32 : 0.0}, {"kind", cell.kind}};
    }
    const double t8 = w8col < cols.size() ? r.cells[w8col].best_s : 0.0;
    const double gops = t8 > 0 ? 2.0 * double(r.m) * double(r.n) * double(r.k) / t8 / 1e9 : 0.0;
    line += int8_peak > 0 ? fmt::format("{:>9.1f} {:>5.1f}%", gops, 100.0 * gops / int8_peak)
                          : fmt::format("{:>9.1f}", gops);
    jr["w8a8_gops"] = gops;
    fmt::print("{}\n", line);
    j.push_back(jr);
  }
  return j;
}

// One token through weights streamed from DRAM (gemv_bench.h): packed GB/s of every column on the
// Cider's two shapes, beside the memory read bandwidth measured in the same run at these threads.
nlohmann::json gemv_table(const BenchOpts& o, int threads) {
  const auto all = bench::default_kernel_columns();
  const size_t min_bytes = std::max<size_t>(4 * bench::l3_cache_bytes(), size_t(128) << 20);
  const double bw = bench::peak_mem_read(threads).at(threads);
  fmt::print(
      "\nM = 1 over {} MiB of weights per pass (≥ 4× L3), packed bytes read per second; memory read "
      "bandwidth at {} threads: {:.1f} GB/s\n",
      min_bytes >> 20, threads, bw);
  fmt::print("{:<14}{:>7}{:>7}{:>8}{:>10}{:>8}  {}\n", "column", "N", "K", "copies", "GB/s", "%bw", "kind");
  nlohmann::json j{{"mem_read_gbps", bw}, {"min_bytes", min_bytes}, {"rows", nlohmann::json::array()}};
  for (const auto& label : o.gemv_columns) {
    const auto c = *std::find_if(all.begin(), all.end(), [&](auto& d) { return d.label == label; });
    for (auto [n, k] : {std::pair<int64_t, int64_t>{10240, 2560}, {2560, 10240}}) {
      const auto r = bench::run_gemv_bench(c, n, k, min_bytes, 0.5);
      if (r.kind.empty()) {
        fmt::print("{:<14}{:>7}{:>7}{:>8}{:>10}\n", label, n, k, "", "n/a");
        continue;
      }
      const double pct = bw > 0 ? 100.0 * r.gb_per_s() / bw : 0.0;
      fmt::print("{:<14}{:>7}{:>7}{:>8}{:>10.1f}{:>7.1f}%  {}\n", label, n, k, r.copies, r.gb_per_s(), pct, r.kind);
      j["rows"].push_back({{"column", label},
                           {"n", n},
                           {"k", k},
                           {"copies", r.copies},
                           {"kind", r.kind},
                           {"gbps", r.gb_per_s()},
                           {"pct_mem_read", pct},
                           {"pass_ms", r.best_s * 1e3}});
    }
  }
  return j;
}

// --peak --device cuda: the GPU's tensor-core rates through our GEMM path, and its copy bandwidth.
int run_bench_cuda(const BenchOpts& o) {
  if (o.gemm || o.kernel || o.gemv || o.decode) user_error("--device cuda: only --peak is on cuda yet");
  if (!cuda::built()) cuda::device_info();  // the one-line "built without CUDA" error
  const cuda::DeviceInfo d = cuda::device_info();
  const cuda::GpuPeaks p = cuda::measure_peaks();
  fmt::print("device         cuda: {}\n", d.describe());
  fmt::print("bf16 GEMM      {:.1f} TFLOP/s ({}³, cuBLASLt, fp32 accumulate and output, random operands)\n",
             p.bf16_tflops, p.n);
  fmt::print("int8 GEMM      {:.1f} TOP/s ({}³, cuBLASLt, int32 accumulate and output)\n", p.int8_tops, p.n);
  fmt::print("copy           {:.1f} GB/s (1 GiB device to device, read + written)\n", p.copy_gbps);
  if (!o.json_path.empty()) {
    const nlohmann::json j = {{"device", d.describe()},
                              {"n", p.n},
                              {"bf16_tflops", p.bf16_tflops},
                              {"int8_tops", p.int8_tops},
                              {"copy_gbps", p.copy_gbps}};
    const std::string text = j.dump(2) + "\n";
    write_file_atomic(o.json_path, text.data(), text.size());
  }
  return 0;
}

int run_bench(BenchOpts o) {
  if (o.device == "cuda") return run_bench_cuda(o);
  if (!o.decode && !o.peak && !o.gemm && !o.kernel && !o.gemv) o.peak = o.gemm = true;
  if (o.threads < 0) user_error("--threads: must be positive, got {}", o.threads);
  if (o.threads > 0) set_threads(o.threads);
  const int threads = num_threads();
  if (o.m <= 0) user_error("--tokens: must be positive, got {}", o.m);
  const auto cols = kernel_columns(o.kernel_columns);  // checked before any measuring
  kernel_columns(o.gemv_columns, "--gemv-columns");
  if (!o.level.empty()) {
    KernelLevel lvl;
    if (!parse_kernel_level(o.level, &lvl))
      user_error("--kernel-level: '{}' is not one of scalar, avx2, avx512, amx", o.level);
    if (lvl > max_kernel_level())
      user_error("--kernel-level: this CPU supports at most {}", kernel_level_name(max_kernel_level()));
    set_kernel_level(lvl);
  }
  if (!o.dec.weight_act.empty() && !o.decode) user_error("--weight-act: a --decode option (give --decode)");
  if (o.decode) {  // a model's generation speed: its own run, not combined with the kernel tables
    if (o.peak || o.gemm || o.kernel || o.gemv) user_error("--decode runs alone; drop --peak/--gemm/--kernel/--gemv");
    o.dec.compute = o.compute == "both" ? "f32" : o.compute;
    const nlohmann::json j = run_bench_decode(o.dec);
    if (!o.json_path.empty()) {
      const std::string text = j.dump(2) + "\n";
      write_file_atomic(o.json_path, text.data(), text.size());
    }
    return 0;
  }
  bool do_f32 = o.compute == "both" || o.compute == "f32";
  bool do_bf16 = o.compute == "both" || o.compute == "bf16";
  if (!do_f32 && !do_bf16) user_error("--compute: '{}' is not one of f32, bf16, both", o.compute);

  nlohmann::json out{{"threads", threads}, {"kernel_level", kernel_level_name(kernel_level())}};
  fmt::print("threads {}, kernel level {}, L3 {} MiB\n", threads, kernel_level_name(kernel_level()),
             bench::l3_cache_bytes() >> 20);

  // The GEMM percentages need the peaks at the GEMM's thread count; --peak adds 1..N.
  bench::PeakResult fp32, bf16, int8;
  std::vector<bench::PeakResult> peaks;
  if (!o.kernel && !o.peak && !o.gemm) {
    // --gemv alone measures only the bandwidth it is compared with
  } else if (o.kernel && !o.peak && !o.gemm) {
    int8 = bench::peak_int8_vnni(threads);
    fmt::print("peak at {} threads: int8 VNNI {}\n", threads,
               int8.points.empty() ? std::string("n/a") : fmt::format("{:.1f} GOP/s", int8.at(threads)));
  } else if (o.peak) {
    fp32 = bench::peak_fp32_fma(threads);
    bf16 = bench::peak_bf16_dot(threads);
    int8 = bench::peak_int8_vnni(threads);
    peaks = {
        fp32, bf16, int8, bench::peak_amx_bf16(threads), bench::peak_amx_int8(threads), bench::peak_mem_read(threads)};
    print_peaks(peaks, threads);
    for (auto& r : peaks) out["peak"][r.name] = peak_json(r);
  } else {
    fp32 = bench::peak_fp32_fma(threads);
    if (do_bf16) bf16 = bench::peak_bf16_dot(threads);
    fmt::print("peak at {} threads: fp32 FMA {:.1f} GFLOP/s", threads, fp32.at(threads));
    if (do_bf16)
      fmt::print("{}", bf16.points.empty() ? std::string(", bf16 dot n/a")
                                           : fmt::format(", bf16 dot {:.1f} GFLOP/s", bf16.at(threads)));
    fmt::print("\n");
  }

  if (o.kernel) out["kernel"] = kernel_table(o, cols, int8.points.empty() ? 0.0 : int8.at(threads));
  if (o.gemv) out["gemv"] = gemv_table(o, threads);

  if (o.gemm) {
    const auto shapes = bench::smollm2_shapes();
    std::vector<bench::GemmResult> rf, rb;
    if (do_f32) rf = bench::run_gemm_bench(shapes, o.m, Compute::F32);
    if (do_bf16) rb = bench::run_gemm_bench(shapes, o.m, Compute::BF16);
    const double pf = fp32.at(threads), pb = bf16.at(threads) > 0 ? bf16.at(threads) : pf;
    auto pct = [](double v, double p) { return p > 0 ? 100.0 * v / p : 0.0; };
    fmt::print("\nGEMM y[M,N] = x[M,K]·Wᵀ, M = {} tokens, SmolLM2-135M shapes, best of runs; kernels {}\n", o.m,
               do_f32 && do_bf16 ? fmt::format("{} / {}", kernels::dense_kernel_name(Compute::F32),
                                               kernels::dense_kernel_name(Compute::BF16))
                                 : kernels::dense_kernel_name(do_f32 ? Compute::F32 : Compute::BF16));
    fmt::print("{:<8}{:>7}{:>6}{:>5}", "matrix", "N", "K", "×");
    if (do_f32) fmt::print("{:>12}{:>8}{:>10}", "f32 GFLOP/s", "%peak", "ms");
    if (do_bf16) fmt::print("{:>13}{:>8}{:>10}", "bf16 GFLOP/s", "%peak", "ms");
    fmt::print("\n");
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto& s = shapes[i];
      fmt::print("{:<8}{:>7}{:>6}{:>5}", s.name, s.n, s.k, s.count);
      nlohmann::json js{{"n", s.n}, {"k", s.k}, {"m", o.m}, {"count", s.count}};
      if (do_f32) {
        fmt::print("{:>12.1f}{:>7.1f}%{:>10.3f}", rf[i].gflops(), pct(rf[i].gflops(), pf), rf[i].best_s * 1e3);
        js["f32"] = {{"gflops", rf[i].gflops()},
                     {"pct_peak", pct(rf[i].gflops(), pf)},
                     {"best_ms", rf[i].best_s * 1e3},
                     {"median_ms", rf[i].median_s * 1e3}};
      }
      if (do_bf16) {
        fmt::print("{:>13.1f}{:>7.1f}%{:>10.3f}", rb[i].gflops(), pct(rb[i].gflops(), pb), rb[i].best_s * 1e3);
        js["bf16"] = {{"gflops", rb[i].gflops()},
                      {"pct_peak", pct(rb[i].gflops(), pb)},
                      {"best_ms", rb[i].best_s * 1e3},
                      {"median_ms", rb[i].median_s * 1e3}};
      }
      fmt::print("\n");
      out["gemm"]["shapes"][s.name] = js;
    }
    out["gemm"]["kernels"] = {{"f32", kernels::dense_kernel_name(Compute::F32)},
                              {"bf16", kernels::dense_kernel_name(Compute::BF16)}};
    fmt::print("{:<26}", "FLOP-weighted");
    if (do_f32) {
      double g = bench::weighted_gflops(rf);
      fmt::print("{:>12.1f}{:>7.1f}%{:>10}", g, pct(g, pf), "");
      out["gemm"]["f32"] = {{"weighted_gflops", g}, {"pct_peak", pct(g, pf)}, {"peak_gflops", pf}};
    }
    if (do_bf16) {
      double g = bench::weighted_gflops(rb);
      fmt::print("{:>13.1f}{:>7.1f}%{:>10}", g, pct(g, pb), "");
      out["gemm"]["bf16"] = {{"weighted_gflops", g}, {"pct_peak", pct(g, pb)}, {"peak_gflops", pb}};
    }
    fmt::print("\n");
    if (do_bf16 && bf16.points.empty())
      fmt::print("(no AVX512-BF16 here: bf16 runs on fp32 FMAs and is compared to the fp32 peak)\n");
  }

  if (!o.json_path.empty()) {
    const std::string text = out.dump(2) + "\n";
    write_file_atomic(o.json_path, text.data(), text.size());
  }
  return 0;
}

Registrar reg(
    {"bench", "measure this machine's peaks and the kernels' speed against them",
     [](CLI::App& sub) -> std::function<int()> {
       auto o = std::make_shared<BenchOpts>();
       sub.add_flag(
           "--peak", o->peak,
           "FP32 FMA, BF16 dot, INT8 VNNI, AMX BF16 / INT8 tile peaks and memory read bandwidth, for 1..N threads");
       sub.add_flag("--gemm", o->gemm, "dense GEMMs over SmolLM2's Linear shapes, with % of the measured peak");
       sub.add_flag("--kernel", o->kernel,
                    "latency table of every Linear kind (dense, W8A8, W4A8, affine, NF4) on Cider's two kernel latency "
                    "shapes and SmolLM2's");
       sub.add_option("--kernel-tokens", o->kernel_ms, "M values of the --kernel table (default 1 128 1024 4096)");
       sub.add_option("--kernel-columns", o->kernel_columns,
                      "columns of the --kernel table (default all; f32 is always measured)");
       sub.add_flag("--kernel-smollm2-only", o->kernel_smollm2_only, "--kernel on SmolLM2's shapes only");
       sub.add_flag("--gemv", o->gemv,
                    "one token through weights streamed from DRAM (≥ 4× L3 of copies): packed GB/s against the "
                    "measured memory bandwidth");
       sub.add_option("--gemv-columns", o->gemv_columns,
                      "columns of --gemv (default f32 affine8-g64 affine4-g64 nf4-b64)");
       sub.add_flag("--decode", o->decode,
                    "a model's prefill and token-by-token decode speed (--model, --prompt, --gen, --kv-k, --kv-v)");
       sub.add_option("--model", o->dec.model, "--decode: GGUF file or HF / quantized folder");
       sub.add_option("--text", o->dec.text, "--decode: the prompt's text (default data/wikitext-2/wiki.test.raw)");
       sub.add_option("--prompt", o->dec.prompt, "--decode: prompt tokens (default 512)");
       sub.add_option("--gen", o->dec.gen, "--decode: generated tokens (default 128)");
       sub.add_option("--ubatch", o->dec.ubatch, "--decode: prefill batch (default 512)");
       sub.add_option("--kv-k", o->dec.kv_k, "--decode: key cache method (default f16)");
       sub.add_option("--kv-v", o->dec.kv_v, "--decode: value cache method (default f16)");
       sub.add_option("--artifacts", o->dec.artifacts, "--decode: precompute folder for the KV methods");
       sub.add_option("--weight-act", o->dec.weight_act,
                      "--decode: int8 (affine 4-bit layers and GGUF blocks: tokens to int8 per group, llama.cpp's "
                      "arithmetic) or int8-token; default: fp32 tokens")
           ->check(CLI::IsMember({"int8", "int8-token"}));
       sub.add_option("--threads", o->threads, "threads (default: all cores)");
       sub.add_option("--device", o->device, "cpu (default) or cuda (--peak only: the GPU's GEMM rates)")
           ->check(CLI::IsMember({"cpu", "cuda"}));
       sub.add_option("--tokens", o->m, "rows M of the GEMMs (default 512, a prefill chunk)");
       sub.add_option("--compute", o->compute, "f32, bf16 or both (default both)");
       sub.add_option("--kernel-level", o->level, "force a lower kernel level: scalar, avx2, avx512, amx");
       sub.add_option("--json", o->json_path, "write the results as JSON to FILE");
       return [o] { return run_bench(*o); };
     }});

}  // namespace cmd_bench
}  // namespace qt
