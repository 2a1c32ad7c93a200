// Tiny Llama and GPT-2 folders (random weights, save_pretrained) with the local tokenizers, for
// running lora_finetune against the cross-check tokenizers. Build against libtapegrad.a.
#include <filesystem>
#include "data/tokenizer.h"
#include "nn/models/pretrained.h"
using namespace tg;
int main(int argc, char** argv) {
  std::string root = argv[1];
  auto tl = data::Tokenizer::from_pretrained(root + "/spm_legacy");
  nn::LlamaConfig c; c.vocab_size = tl.vocab_size(); c.hidden_size = 32; c.intermediate_size = 64; c.num_hidden_layers = 2;
  c.num_attention_heads = 4; c.num_key_value_heads = 2; c.max_position_embeddings = 128;
  nn::LlamaForCausalLM llama(c); nn::save_pretrained(llama, root + "/tiny_llama");
  auto tg2 = data::Tokenizer::from_pretrained(root + "/gpt2");
  nn::GPT2Config g; g.vocab_size = tg2.vocab_size(); g.n_positions = 128; g.n_embd = 32; g.n_layer = 2; g.n_head = 4;
  g.embd_pdrop = g.attn_pdrop = g.resid_pdrop = 0;
  nn::GPT2LMHeadModel gpt(g); nn::save_pretrained(gpt, root + "/tiny_gpt2");
  for (auto [from, to] : {std::pair{"spm_legacy", "tiny_llama"}, {"gpt2", "tiny_gpt2"}})
    for (auto f : {"tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(root + "/" + from + "/" + f, root + "/" + to + "/" + f, std::filesystem::copy_options::overwrite_existing);
}
