// A tokenizer as llama.cpp reads it from a GGUF file (docs/gguf.md): the tokenizer.ggml.* keys
// and tokenizer.chat_template, as llama.cpp's convert_hf_to_gguf.py writes them.
//   byte-level BPE (GPT-2, Llama 3, Qwen2):      model "gpt2", the merges, and the pre-tokenizer
//                                                 llama.cpp names "gpt-2", "llama-bpe", "qwen2", ...
//   SentencePiece (tokenizer.model, or a tokenizer.json BPE with byte fallback: Llama 2, Mistral,
//   Gemma, Phi-3):                               model "llama", a score and a type per token
// with bos / eos / pad / unk ids, add_bos / add_eos as the tokenizer adds them, and the token types
// (normal, control, user-defined, byte, unknown, unused).
#pragma once

#include <cstdint>
#include <string>

#include "data/tokenizer.h"
#include "io/gguf.h"
#include "io/json.h"

namespace tg::data {

// `vocab_size` is the model's (its embedding's rows): the token list is padded to it with
// "[PAD<id>]" tokens of type unused, as llama.cpp's converter pads it. tg::Error, naming what, for a
// tokenizer with more tokens than that or one llama.cpp has no tokenizer for.
gguf::Metadata gguf_tokenizer_metadata(const Tokenizer& tokenizer, int64_t vocab_size);

// llama.cpp's name for a byte-level tokenizer.json's pre_tokenizer (tokenizer.ggml.pre: the
// converter finds it by hashing the tokenizer's output on a fixed text; here by the pre-tokenizer's
// own regex, so a retrained vocabulary keeps it): "gpt-2", "llama-bpe" ("smaug-bpe" without
// ignore_merges), "qwen2". tg::Error naming the pre-tokenizer for any other.
std::string llama_cpp_pre_tokenizer(const json::Value& pre_tokenizer, bool ignore_merges);

}  // namespace tg::data
