// The tokenizer against the model's embedding: a tokenizer with ids beyond the embedding's rows
// would fail at the first step (or generate garbage); a smaller one is fine (Qwen and Llama-3
// folders pad the embedding), but the ids it lacks must not reach decode.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "nn/module.h"

namespace examples {

// The rows of the model's input embedding (its vocabulary), read from its named parameters.
int64_t embedding_rows(const tg::nn::Module& model);
// config.json's vocab_size in a Hugging Face folder (nullopt without one): known before loading.
std::optional<int64_t> config_vocab_size(const std::string& folder);

// tg::Error naming `program`, `flag` and `path`, both sizes and transformers'
// resize_token_embeddings when the tokenizer has ids the model's `rows` lack.
void check_vocabulary(const tg::data::Tokenizer& tokenizer, int64_t rows, const std::string& program,
                      const std::string& flag, const std::string& path);

// Before the model loads: a folder's tokenizer against its config.json's vocab_size (as
// check_vocabulary; nothing to check without a vocab_size).
void check_folder_vocabulary(const std::string& folder, const std::string& program, const std::string& flag);

// decode(ids, skip_special_tokens) where an id the tokenizer lacks (the model's padding rows)
// decodes as U+FFFD, the unknown piece (shown even when special tokens are skipped).
std::string decode_lenient(const tg::data::Tokenizer& tokenizer, std::span<const int32_t> ids,
                           bool skip_special_tokens = true);

}  // namespace examples
