// Text generation from the command line with nn::generate: a Hugging Face folder (its tokenizer
// and generation_config.json) or a toy_transformer checkpoint (bytes as tokens), with or without a
// peft adapter (applied, or merged with --merge), printing the text as the tokens come.
//
//   generate --model TinyLlama-folder --prompt "Once upon a time" --max-new-tokens 64
//   generate --model out/toy/base.safetensors --adapter out/toy/adapter --prompt "LOG 1" --temperature 0.8 --top-k 10
//   generate --model Qwen2.5-0.5B-Instruct --chat --system "Answer in one sentence."
//
// --chat talks with an instruct model through the folder's chat template: each line of stdin is a
// user turn, the whole conversation is rendered (Tokenizer::apply_chat_template, with the
// assistant's header) and the reply stops at the generation config's EOS ids (the template's end
// of turn) or the tokenizer's EOS; the reply joins the history. Ctrl-D (end of input) ends it.
//
// The continuation (or the replies) goes to stdout as it grows; what was loaded and the speed go to stderr.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "core/detail/utf8.h"
#include "examples/common/base_model.h"
#include "examples/common/flags.h"
#include "examples/common/inputs.h"
#include "examples/common/precision.h"
#include "examples/common/printable.h"
#include "examples/common/vocabulary.h"
#include "nn/generation/generation.h"
#include "peft/lora.h"
#include "tapegrad.h"

using namespace tg;

namespace {

// Prints the text as it grows, from the prompt on. Each token decodes the text again (a token
// may end inside a character, a tokenizer's decoder joins pieces and treats the first one apart),
// and what is new is printed once it cannot change: not an unfinished character at the end, and
// not a run of byte-fallback tokens ("<0xE6>", sentencepiece-style) still growing, since such a
// run decodes as a whole (a U+FFFD per token unless its bytes are valid UTF-8 together).
class TextStream {
 public:
  TextStream(const std::optional<data::Tokenizer>& tokenizer, std::vector<int32_t> prompt)
      : tokenizer_(tokenizer), ids_(std::move(prompt)) {
    print(settled());
  }
  void push(int32_t token) {
    ids_.push_back(token);
    print(settled());
  }
  void finish() {
    print(text(ids_.size()));
    std::fputs("\n", stdout);
    std::fflush(stdout);
  }

 private:
  std::string text(size_t n) const {
    const std::vector<int32_t> ids(ids_.begin(), ids_.begin() + static_cast<int64_t>(n));
    if (!tokenizer_) return std::string(ids.begin(), ids.end());  // the toy: bytes
    return examples::decode_lenient(*tokenizer_, ids);  // the model may have rows the tokenizer lacks
  }
  bool byte_token(int32_t id) const {
    std::string t;
    try {
      t = tokenizer_->id_to_token(id);
    } catch (const Error&) {
      return false;  // an id the tokenizer lacks (a padding row of the model): decodes as unknown
    }
    return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>';
  }
  std::string settled() const {
    size_t n = ids_.size();
    while (tokenizer_ && n > 0 && byte_token(ids_[n - 1])) --n;
    const std::string t = text(n);
    return t.substr(0, examples::finished_prefix(t));
  }
  void print(const std::string& t) {
    // What was shown stays; should a decode still rewrite it, show from where the two differ.
    size_t same = 0;
    while (same < shown_.size() && same < t.size() && shown_[same] == t[same]) ++same;
    if (same == t.size()) return;
    std::fputs(examples::printable(t.substr(same), /*one_line=*/false).c_str(), stdout);
    std::fflush(stdout);
    shown_ = t;
  }

  const std::optional<data::Tokenizer>& tokenizer_;
  std::vector<int32_t> ids_;
  std::string shown_;
};

// --chat: a user turn a line of stdin, each reply generated from the whole conversation rendered
// by the chat template and added to it. Ends at the end of input.
int chat_loop(nn::Module& model, const std::optional<data::Tokenizer>& tokenizer, nn::GenerationConfig cfg,
              const std::string& system, bool print_prompt, int64_t context) {
  const data::Tokenizer& tok = *tokenizer;  // --chat: a folder's
  // The template's end of turn is in generation_config.json's EOS ids; the tokenizer's EOS ends too.
  if (auto eos = tok.eos_token_id(); eos && std::find(cfg.eos_token_id.begin(), cfg.eos_token_id.end(), *eos) ==
                                                cfg.eos_token_id.end())
    cfg.eos_token_id.push_back(*eos);
  std::vector<data::ChatMessage> history;
  if (!system.empty()) history.push_back({"system", system});
  const bool terminal = isatty(STDIN_FILENO) != 0;
  if (terminal) std::fprintf(stderr, "chat: a message a line; Ctrl-D ends\n");
  std::string line;
  for (int64_t number = 1; (terminal ? std::fputs("> ", stderr) : 0, std::getline(std::cin, line)); ++number) {
    if (line.empty()) continue;
    const std::string bad = utf8::invalid_at(line);
    TG_CHECK(bad.empty(), "generate", "--chat: stdin line ", number, " is not text: ", bad,
             " (the terminal's encoding is not UTF-8?)");
    history.push_back({"user", line});
    const std::string text = tok.apply_chat_template(history, {.add_generation_prompt = true});
    const std::vector<int32_t> ids = tok.encode(text, /*add_special_tokens=*/false);  // the template writes BOS
    if (print_prompt) std::fprintf(stderr, "prompt (%zu tokens):\n%s\n", ids.size(), text.c_str());
    if (static_cast<int64_t>(ids.size()) + cfg.max_new_tokens > context)
      fail("generate", "--chat: the conversation is ", ids.size(), " tokens; with --max-new-tokens ",
           cfg.max_new_tokens, " it exceeds the model's context of ", context,
           " tokens (start a new chat, or lower --max-new-tokens)");
    auto ends_turn = [&](int32_t t) { return std::find(cfg.eos_token_id.begin(), cfg.eos_token_id.end(), t) != cfg.eos_token_id.end(); };
    TextStream stream(tokenizer, {});  // the reply alone, as it grows, without its end of turn
    std::vector<int32_t> reply = nn::generate(model, {ids}, cfg, [&](int64_t, int32_t t) {
      if (!ends_turn(t)) stream.push(t);
    })[0];
    stream.finish();
    reply.erase(reply.begin(), reply.begin() + static_cast<int64_t>(ids.size()));
    if (!reply.empty() && ends_turn(reply.back())) reply.pop_back();  // the template writes the end of turn itself
    history.push_back({"assistant", examples::decode_lenient(tok, reply)});
  }
  if (terminal) std::fputs("\n", stderr);
  return 0;
}

int run(int argc, char** argv) {
  examples::Flags flags("generate", "Continue a prompt with a Llama or GPT-2 model (a Hugging Face folder or a "
                                    "toy_transformer checkpoint), with or without a LoRA adapter.");
  flags.add("model", "out/toy/base.safetensors", "a Hugging Face model folder (config.json, weights, tokenizer) or a "
                                                 "toy_transformer checkpoint (.safetensors, bytes as tokens)")
      .add("config", "auto", "toy checkpoints only: tiny | small | bench-135m (auto: the one the checkpoint records)")
      .add("adapter", "", "a peft adapter folder (adapter_config.json + adapter_model.safetensors) to apply")
      .add("merge", "false", "merge the adapter into the base weights before generating")
      .add("prompt", "", "the text to continue")
      .add("chat", "false", "chat through the folder's chat template: user turns from stdin, one a line")
      .add("system", "", "--chat: a system message opening the conversation")
      .add("print-prompt", "false", "--chat: print each rendered prompt (to stderr) before its reply")
      .add("max-new-tokens", "64", "the most tokens to generate (fewer when an EOS comes; --chat: 512 a reply)")
      .add("temperature", "", "0: greedy; > 0: sampling at that temperature (default: the folder's "
                              "generation_config.json, else greedy)")
      .add("top-k", "", "sampling: only the k most likely tokens (0: all; default: generation_config.json, else 50)")
      .add("top-p", "", "sampling: only the most likely tokens within this probability (default: "
                        "generation_config.json, else 1)")
      .add("repetition-penalty", "", "> 1 discourages tokens already in the text (default: generation_config.json, "
                                     "else 1)")
      .add("seed", "0", "seed of the sampling draws")
      .add("device", "auto", "cpu | cuda | auto")
      .add("dtype", "f32", "f32 | bf16 (the base in bfloat16; an adapter stays float32)")
      .add("threads", "0", "CPU threads (0: all cores)");
  if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
  const Device device = examples::device_flag(flags);
  const DType dtype = examples::dtype_flag(flags);
  if (const int64_t threads = flags.integer("threads", 0, 4096); threads > 0) set_num_threads(static_cast<int>(threads));

  // Every flag and file checked before the model loads; then the folder's generation settings
  // (generation_config.json, checked too), then the flags.
  const std::string model_path = flags.str("model");
  examples::check_model_path(flags, "model");
  const bool hf_folder = std::filesystem::is_directory(model_path);
  if (!flags.str("adapter").empty()) examples::check_adapter_folder(flags.str("adapter"), "adapter");
  else if (flags.boolean("merge")) throw examples::UsageError("--merge needs an --adapter\n" + flags.usage());
  nn::GenerationConfig cfg = hf_folder ? nn::GenerationConfig::from_pretrained(model_path) : nn::GenerationConfig{};
  cfg.max_new_tokens = flags.integer("max-new-tokens", 1, INT32_MAX);
  if (flags.was_set("temperature")) {
    cfg.temperature = flags.number("temperature", 0);
    cfg.do_sample = cfg.temperature > 0;
  }
  if (flags.was_set("top-k")) cfg.top_k = flags.integer("top-k", 0, INT32_MAX);
  if (flags.was_set("top-p")) cfg.top_p = flags.number("top-p", 0, 1);
  if (flags.was_set("repetition-penalty")) cfg.repetition_penalty = flags.number("repetition-penalty", 0);
  cfg.seed = static_cast<uint64_t>(flags.integer("seed", 0));
  if (cfg.greedy() && (flags.was_set("top-k") || flags.was_set("top-p")))
    throw examples::UsageError("--top-k and --top-p are for sampling: add --temperature > 0\n" + flags.usage());
  cfg.validate();
  const bool chat = flags.boolean("chat");
  if (chat) {
    if (!flags.str("prompt").empty())
      throw examples::UsageError("--chat reads the user's turns from stdin; --prompt is for plain continuation\n");
    if (!hf_folder) throw examples::UsageError("--chat needs a Hugging Face folder with a chat template\n");
    if (!data::Tokenizer::from_pretrained(model_path).chat_template())
      throw examples::UsageError("--chat: '" + model_path + "' has no chat template (tokenizer_config.json's " +
                                 "chat_template, chat_template.jinja or chat_template.json): a base model " +
                                 "continues text, use --prompt\n");
    if (!flags.was_set("max-new-tokens")) cfg.max_new_tokens = 512;
  } else if (!flags.str("system").empty() || flags.boolean("print-prompt")) {
    throw examples::UsageError("--system and --print-prompt are for --chat\n");
  }
  if (hf_folder) examples::check_folder_vocabulary(model_path, "generate", "--model");
  examples::BaseModel base = examples::load_base(model_path, flags.str("config"), "generate", "--model");
  if (base.tokenizer)
    examples::check_vocabulary(*base.tokenizer, examples::embedding_rows(*base.model), "generate", "--model", model_path);

  nn::Module& model = *base.model;
  model.to(dtype);  // before the adapter, which then stays float32 on a bfloat16 base (as peft)
  if (!flags.str("adapter").empty()) {
    peft::load_adapter(model, flags.str("adapter"));
    if (flags.boolean("merge")) peft::merge_and_unload(model);
  }
  model.to(device);
  std::fprintf(stderr, "model: %s (%s%s), %s%s on %s, %s\n", model_path.c_str(), base.architecture.c_str(),
               base.tokenizer ? (", " + base.tokenizer->description()).c_str() : ", bytes as tokens",
               flags.str("adapter").empty() ? "no adapter" : ("adapter " + flags.str("adapter")).c_str(),
               flags.boolean("merge") ? " (merged)" : "", device.str().c_str(),
               cfg.greedy() ? "greedy" : "sampling");
  if (chat) return chat_loop(model, base.tokenizer, cfg, flags.str("system"), flags.boolean("print-prompt"), base.context);

  const std::string prompt = flags.str("prompt");
  std::vector<int32_t> ids;
  if (base.tokenizer) ids = base.tokenizer->encode(prompt);
  else
    for (unsigned char c : prompt) ids.push_back(c);  // the toy: bytes are the tokens
  if (ids.empty())
    throw examples::UsageError("--prompt gives no token" + std::string(base.tokenizer ? " (this tokenizer adds no BOS)" : "") +
                               ": give some text\n" + flags.usage());

  TextStream stream(base.tokenizer, ids);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> out = nn::generate(model, {ids}, cfg, [&](int64_t, int32_t token) { stream.push(token); })[0];
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stream.finish();
  const size_t made = out.size() - ids.size();
  std::fprintf(stderr, "%zu tokens in %.2f s (%.1f tokens/s, prompt %zu tokens included in the time)\n", made,
               seconds, static_cast<double>(made) / seconds, ids.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
