#include "formats/layouts/gguf_arch.h"

#include <cstdio>

#include "formats/error.h"

namespace qt {

namespace {

// llama.cpp's Gemma query scale (src/models/gemma2.cpp, gemma3.cpp): 1/sqrt(head_dim), or
// 1/sqrt(hidden/heads) for the 27B (46 / 62 layers). GGUF has no key for query_pre_attn_scalar.
float llama_cpp_query_scalar(const ModelConfig& c) {
  const bool big = c.n_layers == (c.arch == "gemma2" ? 46 : 62);
  return big ? float(c.hidden / c.n_heads) : float(c.head_dim);
}

// Llama, Mistral, Qwen 2/3 (TextModel.set_gguf_parameters + LlamaModel's rope.dimension_count);
// key_length / value_length only when head_dim is not hidden / heads (llama.cpp's default).
// qwen3moe (Qwen2MoeModel, a TextModel) has neither vocab_size nor rope.dimension_count.
void write_llama_keys(const ModelConfig& c, const std::string& a, GgufWriter* w) {
  const bool text_model_only = c.desc().moe && a != "llama";
  if (!text_model_only) w->add_u32(a + ".vocab_size", uint32_t(c.vocab));
  w->add_u32(a + ".context_length", uint32_t(c.max_position));
  w->add_u32(a + ".embedding_length", uint32_t(c.hidden));
  w->add_u32(a + ".block_count", uint32_t(c.n_layers));
  w->add_u32(a + ".feed_forward_length", uint32_t(c.intermediate));
  w->add_u32(a + ".attention.head_count", uint32_t(c.n_heads));
  w->add_u32(a + ".attention.head_count_kv", uint32_t(c.n_kv_heads));
  w->add_f32(a + ".rope.freq_base", c.rope_theta);
  w->add_f32(a + ".attention.layer_norm_rms_epsilon", c.rms_eps);
  if (c.head_dim != c.hidden / c.n_heads) {
    w->add_u32(a + ".attention.key_length", uint32_t(c.head_dim));
    w->add_u32(a + ".attention.value_length", uint32_t(c.head_dim));
  }
  if (!text_model_only) w->add_u32(a + ".rope.dimension_count", uint32_t(c.head_dim));
  if (c.rope_scaling.type == "linear") {
    w->add_string(a + ".rope.scaling.type", "linear");
    w->add_f32(a + ".rope.scaling.factor", c.rope_scaling.factor);
  }
}

// A mixture of experts: TextModel.set_gguf_parameters' expert_count / expert_used_count, and
// Qwen2MoeModel's expert_feed_forward_length (Mixtral's experts are feed_forward_length wide).
// llama.cpp runs every layer sparse and renormalises the top-k weights (src/models/qwen3moe.cpp,
// llama.cpp: build_moe_ffn(..., norm_w = true)); a model that does otherwise is refused.
void write_moe_keys(const ModelConfig& c, const std::string& a, const std::string& path, GgufWriter* w) {
  for (int i = 0; i < c.n_layers; ++i)
    if (!c.is_moe_layer(i))
      user_error(
          "{}: layer {} has a dense MLP (mlp_only_layers / decoder_sparse_step); llama.cpp's {} makes every "
          "layer sparse",
          path, i, a);
  if (!c.norm_topk_prob)
    user_error("{}: norm_topk_prob is false; llama.cpp's {} always renormalises the top-{} weights", path, a,
               c.n_experts_per_tok);
  if (c.is_sliding(0))
    user_error("{}: sliding_window {}; llama.cpp's {} graph has no sliding window", path, c.sliding_window, a);
  w->add_u32(a + ".expert_count", uint32_t(c.n_experts));
  w->add_u32(a + ".expert_used_count", uint32_t(c.n_experts_per_tok));
  if (a != "llama") w->add_u32(a + ".expert_feed_forward_length", uint32_t(c.moe_intermediate));
}

// Gemma2Model.set_gguf_parameters (no rope.freq_base: llama.cpp's default 10000 is Gemma 2's; we
// write it only for another value) and Gemma3Model's (rope bases of the global and the sliding
// layers, linear scaling of the global ones). Sliding layers: llama.cpp assumes every 2nd (gemma2)
// / all but every 6th (gemma3); another pattern goes in attention.sliding_window_pattern as a
// per-layer array (gguf-py add_sliding_window_pattern; llama.cpp load_swa_pattern reads it), which
// the converter does not write.
void write_gemma_keys(const ModelConfig& c, const std::string& a, GgufWriter* w) {
  const bool g2 = c.arch == "gemma2";
  if (g2) {
    w->add_u32(a + ".context_length", uint32_t(c.max_position));
    w->add_u32(a + ".embedding_length", uint32_t(c.hidden));
    w->add_u32(a + ".block_count", uint32_t(c.n_layers));
  } else {
    w->add_u32(a + ".block_count", uint32_t(c.n_layers));
    w->add_u32(a + ".context_length", uint32_t(c.max_position));
    w->add_u32(a + ".embedding_length", uint32_t(c.hidden));
  }
  w->add_u32(a + ".feed_forward_length", uint32_t(c.intermediate));
  w->add_u32(a + ".attention.head_count", uint32_t(c.n_heads));
  w->add_u32(a + ".attention.head_count_kv", uint32_t(c.n_kv_heads));
  if (!g2) {
    if (c.rope_scaling.type == "linear") {
      w->add_string(a + ".rope.scaling.type", "linear");
      w->add_f32(a + ".rope.scaling.factor", c.rope_scaling.factor);
    }
    w->add_f32(a + ".rope.freq_base", c.rope_theta);
    w->add_f32(a + ".rope.freq_base_swa", c.rope_local_theta);
  } else if (c.rope_theta != 10000.0f) {
    w->add_f32(a + ".rope.freq_base", c.rope_theta);
  }
  w->add_f32(a + ".attention.layer_norm_rms_epsilon", c.rms_eps);
  w->add_u32(a + ".attention.key_length", uint32_t(c.head_dim));
  w->add_u32(a + ".attention.value_length", uint32_t(c.head_dim));
  if (g2) w->add_f32(a + ".attn_logit_softcapping", c.attn_softcap);
  if (g2 || c.final_softcap > 0) w->add_f32(a + ".final_logit_softcapping", c.final_softcap);
  bool any = false, periodic = true;
  const int period = g2 ? 2 : 6;
  for (int i = 0; i < c.n_layers; ++i) {
    any |= c.is_sliding(i);
    periodic &= c.is_sliding(i) == (i % period < period - 1);
  }
  if (g2 || any) w->add_u32(a + ".attention.sliding_window", uint32_t(c.sliding_window));
  if ((g2 || any) && !periodic) {
    std::vector<int32_t> v;
    for (int i = 0; i < c.n_layers; ++i) v.push_back(c.is_sliding(i) ? 1 : 0);
    w->add_i32_array(a + ".attention.sliding_window_pattern", v);
  }
}

// Phi3MiniModel.set_gguf_parameters (its LongRoPE factors are not read by quanttool, so none are
// written). llama.cpp runs Phi-3 without the sliding window (src/models/phi3.cpp).
void write_phi3_keys(const ModelConfig& c, const std::string& a, GgufWriter* w) {
  w->add_u32(a + ".context_length", uint32_t(c.max_position));
  w->add_u32(a + ".rope.scaling.original_context_length", uint32_t(c.max_position));
  w->add_u32(a + ".embedding_length", uint32_t(c.hidden));
  w->add_u32(a + ".feed_forward_length", uint32_t(c.intermediate));
  w->add_u32(a + ".block_count", uint32_t(c.n_layers));
  w->add_u32(a + ".attention.head_count", uint32_t(c.n_heads));
  w->add_u32(a + ".attention.head_count_kv", uint32_t(c.n_kv_heads));
  w->add_f32(a + ".attention.layer_norm_rms_epsilon", c.rms_eps);
  w->add_u32(a + ".rope.dimension_count", uint32_t(c.hidden / c.n_heads));
  w->add_f32(a + ".rope.freq_base", c.rope_theta);
}

// GptOssModel.set_gguf_parameters (conversion/gpt_oss.py over TextModel's): YaRN's keys as
// TextModel writes them; no rope.dimension_count, key/value_length from head_dim. llama.cpp runs
// what the keys cannot say its own way, so a model that differs is refused: the SwiGLU's alpha
// 1.702 and limit 7 are hard-coded (llama-graph.cpp LLM_FFN_SWIGLU_OAI_MOE), and the sliding
// layers are the even ones unless attention.sliding_window_pattern lists them (written then, as
// for Gemma). YaRN's ramp ends are always floored / ceiled there (ggml_rope_yarn_corr_dims), so a
// config with truncate false is written as the converter writes it and llama.cpp (and our GGUF
// reader) run it truncated: said on stdout.
void write_gpt_oss_keys(const ModelConfig& c, const std::string& a, const std::string& path, GgufWriter* w) {
  if (c.swiglu_alpha != 1.702f || c.swiglu_limit != 7.0f)
    user_error("{}: swiglu_alpha {} / swiglu_limit {}; llama.cpp's gpt-oss hard-codes 1.702 and 7", path,
               c.swiglu_alpha, c.swiglu_limit);
  const RopeScaling& r = c.rope_scaling;
  if (!r.type.empty() && r.type != "yarn")
    user_error("{}: gpt_oss with rope scaling '{}' has no GGUF form here (yarn only)", path, r.type);
  if (r.type == "yarn" && r.attention_factor > 0)
    user_error("{}: YaRN attention_factor {}: llama.cpp multiplies its own mscale by it, transformers replaces it",
               path, r.attention_factor);
  if (r.type == "yarn" && !r.truncate)
    std::printf("note: YaRN truncate is false; llama.cpp always floors / ceils the ramp's ends (truncate true)\n");
  w->add_u32(a + ".block_count", uint32_t(c.n_layers));
  w->add_u32(a + ".context_length", uint32_t(c.max_position));
  w->add_u32(a + ".embedding_length", uint32_t(c.hidden));
  w->add_u32(a + ".feed_forward_length", uint32_t(c.intermediate));
  w->add_u32(a + ".attention.head_count", uint32_t(c.n_heads));
  w->add_u32(a + ".attention.head_count_kv", uint32_t(c.n_kv_heads));
  if (r.type == "yarn") {
    w->add_string(a + ".rope.scaling.type", "yarn");
    w->add_f32(a + ".rope.scaling.factor", r.factor);
    w->add_u32(a + ".rope.scaling.original_context_length", uint32_t(r.original_max_position_embeddings));
    w->add_f32(a + ".rope.scaling.yarn_beta_fast", r.beta_fast);
    w->add_f32(a + ".rope.scaling.yarn_beta_slow", r.beta_slow);
  }
  w->add_f32(a + ".rope.freq_base", c.rope_theta);
  w->add_f32(a + ".attention.layer_norm_rms_epsilon", c.rms_eps);
  w->add_u32(a + ".expert_count", uint32_t(c.n_experts));
  w->add_u32(a + ".expert_used_count", uint32_t(c.n_experts_per_tok));
  w->add_u32(a + ".attention.key_length", uint32_t(c.head_dim));
  w->add_u32(a + ".attention.value_length", uint32_t(c.head_dim));
  w->add_u32(a + ".attention.sliding_window", uint32_t(c.sliding_window));
  w->add_u32(a + ".expert_feed_forward_length", uint32_t(c.moe_intermediate));
  bool even = true;
  for (int i = 0; i < c.n_layers; ++i) even &= c.is_sliding(i) == (i % 2 == 0);
  if (!even) {
    std::vector<int32_t> v;
    for (int i = 0; i < c.n_layers; ++i) v.push_back(c.is_sliding(i) ? 1 : 0);
    w->add_i32_array(a + ".attention.sliding_window_pattern", v);
  }
}

}  // namespace

void write_gguf_arch_keys(const ModelConfig& c, uint32_t ftype, const std::string& path, GgufWriter* w) {
  const std::string a = c.desc().gguf_arch;
  if (c.desc().gemma_attention) {
    if (c.query_pre_attn_scalar != llama_cpp_query_scalar(c))
      user_error(
          "{}: query_pre_attn_scalar is {}, but llama.cpp scales {}'s queries by 1/sqrt({}) (GGUF has no key for it)",
          path, c.query_pre_attn_scalar, c.arch, llama_cpp_query_scalar(c));
    write_gemma_keys(c, a, w);
    w->add_u32("general.file_type", ftype);
    return;
  }
  if (c.desc().fused_proj) {
    if (c.head_dim != c.hidden / c.n_heads)
      user_error("{}: phi3 with head_dim {} other than hidden / heads has no GGUF form", path, c.head_dim);
    write_phi3_keys(c, a, w);
    w->add_u32("general.file_type", ftype);
    w->add_u32(a + ".attention.sliding_window", uint32_t(c.is_sliding(0) ? c.sliding_window : 0));
    return;
  }
  if (c.desc().moe && c.desc().moe->gpt_oss) {
    write_gpt_oss_keys(c, a, path, w);
    w->add_u32("general.file_type", ftype);
    return;
  }
  write_llama_keys(c, a, w);
  if (c.is_moe()) write_moe_keys(c, a, path, w);
  w->add_u32("general.file_type", ftype);
}

}  // namespace qt
