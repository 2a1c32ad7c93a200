// What the decoder-stack families (nn/models/decoder.h) write alike to GGUF: llama.cpp's tensor
// names for transformers' parameters and the keys every such architecture reads. Internal to nn/.
#pragma once

#include <string>

#include "nn/models/decoder.h"
#include "nn/models/gguf.h"
#include "nn/models/llama.h"

namespace tg::nn::detail {

// "<arch>.<key>".
inline std::string gguf_key(const std::string& arch, const std::string& key) { return arch + "." + key; }

// The decoder's tensors (a tied head written once, as token_embd; LoRA weights left to the
// adapter's file; a sparse MoE block's experts stacked as ffn_{gate,up,down}_exps and its router
// as ffn_gate_inp in F32, with expert_count and expert_used_count) and its sizes, eps and RoPE
// base under `arch`. permute_qk: llama.cpp's "llama" architecture rotates adjacent pairs, so
// q_proj's and k_proj's rows are reordered per head. tg::Error naming a parameter llama.cpp has no
// tensor for.
GgufModel decoder_gguf(const DecoderForCausalLM& model, const std::string& arch, bool permute_qk);

// RoPE scaling as llama.cpp reads it for `arch`: linear and yarn as keys, Llama 3.1's ramp as the
// rope_freqs tensor (with_rope_freqs), dynamic NTK as nothing (it changes nothing within
// max_position_embeddings). tg::Error naming the rope_type llama.cpp cannot take for `arch`.
void add_rope_scaling(GgufModel& out, const DecoderSpec& spec, bool with_rope_freqs);

// llama.cpp's "llama" architecture (Llama, Mistral, Mixtral): q and k rows reordered, Llama 3.1's
// rope_freqs, and Mistral v0.1's window as the context length (llama.cpp's llama has no window).
GgufModel llama_architecture_gguf(const DecoderForCausalLM& model, const LlamaConfig& c);

}  // namespace tg::nn::detail
