// The architecture keys of a GGUF export, per family, as llama.cpp's convert_hf_to_gguf.py writes
// them (TextModel.set_gguf_parameters and the families' overrides: conversion/gemma.py Gemma2Model,
// Gemma3Model; conversion/phi.py Phi3MiniModel; conversion/gpt_oss.py GptOssModel), and the checks that the file will mean to llama.cpp
// what the model means (src/models/<arch>.cpp load_arch_hparams). formats/layouts/gguf.cpp writes
// the rest (names, tensors, tokenizer).
#pragma once
#include <cstdint>

#include "formats/gguf_writer.h"
#include "formats/model_config.h"

namespace qt {

// `<arch>.*` keys and general.file_type (`ftype`, a llama_ftype). UserError naming `path` for a
// model llama.cpp would run differently (a Gemma whose query_pre_attn_scalar is not the one
// llama.cpp derives).
void write_gguf_arch_keys(const ModelConfig& c, uint32_t ftype, const std::string& path, GgufWriter* w);

}  // namespace qt
