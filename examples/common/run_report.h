// The lines lora_finetune prints when a run ends: how long it took, and the commands that use what
// it wrote (llama.cpp and Ollama, peft, vLLM, transformers on a merged or fully trained folder,
// examples/generate).
#pragma once

#include <string>

namespace examples {

struct RunOutputs {
  std::string base;          // --base as given
  std::string out;           // --out
  bool hf_base = false;      // a Hugging Face folder (else a toy checkpoint)
  bool full = false;         // <out>/model instead of an adapter
  bool merged = false;       // <out>/merged too
  bool gguf = false;         // <out>/model.gguf
  bool gguf_adapter = false; // <out>/adapter.gguf (after LoRA of no expert weights)
};

// "finished in 3m 12s\nuse it:\n  peft: ...": paths made absolute, so the lines work from anywhere.
std::string run_report(double seconds, const RunOutputs& outputs);

}  // namespace examples
