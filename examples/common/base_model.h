// What lora_finetune (and generate) start from: a Hugging Face folder (Llama or GPT-2 of any shape, with its
// tokenizer) or a toy_transformer checkpoint (bytes as tokens), and the data files it reads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "nn/models/causal_lm.h"
#include "nn/models/pretrained.h"

namespace examples {

struct BaseModel {
  std::shared_ptr<tg::nn::CausalLM> model;  // float32, eval mode off (training)
  std::string architecture;               // "LlamaForCausalLM" or "GPT2LMHeadModel"
  bool hf_folder = false;                 // false: a toy_transformer checkpoint
  int64_t context = 0;                    // the longest sequence the model takes
  std::optional<tg::data::Tokenizer> tokenizer;  // none: bytes are the tokens
  std::vector<std::string> default_targets;      // peft's usual LoRA targets for the architecture
};

// The tokenizer of a Hugging Face folder (tg::Error naming the program and flag when it has none);
// nullopt for a toy_transformer checkpoint, whose tokens are bytes. Read before the model loads.
std::optional<tg::data::Tokenizer> load_tokenizer(const std::string& base, const char* program, const char* flag);

// A folder: config.json + weights (nn::from_pretrained with `options`), with `tokenizer`
// (load_tokenizer's). A file: a toy_transformer checkpoint of the named config ("auto": the one it
// records), moved to options' dtype and device and quantised when options.quantization asks.
// Errors name the program and its flag.
BaseModel load_base(const std::string& base, const std::string& toy_config, const char* program, const char* flag,
                    const tg::nn::PretrainedOptions& options, std::optional<tg::data::Tokenizer> tokenizer);

// The tokens of a data file by its kind: .jsonl ({"text"}, {"prompt", "completion"} or
// {"messages"} / {"conversations"}, rendered with the chat template, their system messages as
// `system_message` says), .bin (an llm.c token shard) or anything else as text
// (documents split at `separator`). Without a tokenizer (the toy) text files only, as bytes. A
// file that is not text is an error naming --`flag` and --bytes, unless allow_binary.
std::shared_ptr<const tg::data::TokenCorpus> load_corpus(const std::string& path, const std::string& flag,
                                                        const std::optional<tg::data::Tokenizer>& tokenizer,
                                                        const std::string& separator, bool allow_binary,
                                                        tg::data::SystemMessage system_message);

// The files of a Hugging Face folder that describe its tokenizer (and generation defaults),
// copied next to a merged model so transformers loads it whole.
void copy_tokenizer_files(const std::string& from_dir, const std::string& to_dir);

}  // namespace examples
