#include "examples/common/run_report.h"

#include <cstdio>
#include <filesystem>

namespace examples {
namespace {

namespace fs = std::filesystem;

std::string duration(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char buf[64];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh %02ldm %02lds", s / 3600, s / 60 % 60, s % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm %02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  return buf;
}

std::string absolute(const std::string& p) {
  std::string a = fs::absolute(p).lexically_normal().string();
  while (a.size() > 1 && a.back() == '/') a.pop_back();
  return a;
}

}  // namespace

std::string run_report(double seconds, const RunOutputs& o) {
  const std::string base = absolute(o.base), out = absolute(o.out);
  std::string r = "finished in " + duration(seconds) + "\nuse it:\n";
  if (o.gguf) {
    r += "  llama.cpp:    llama-cli -m " + out + "/model.gguf\n";
    r += "  Ollama:       echo 'FROM " + out + "/model.gguf' > Modelfile && ollama create my-model -f Modelfile\n";
    if (o.gguf_adapter)
      r += "  the adapter:  export_gguf --model " + base + " --out base.gguf, then llama-cli -m base.gguf --lora " + out +
           "/adapter.gguf\n";
  } else if (o.hf_base) {
    r += "  llama.cpp:    add --save-gguf f16, or export_gguf --model " +
         (o.full ? out + "/model" : base + " --adapter " + out + "/adapter --merge") + " --out model.gguf\n";
  }
  if (o.full) {
    const std::string model = out + (o.hf_base ? "/model" : "/model.safetensors");
    if (o.hf_base) {
      r += "  transformers: AutoModelForCausalLM.from_pretrained(\"" + model + "\")\n";
      r += "  vLLM:         vllm serve " + model + "\n";
    }
    return r + "  tapegrad:     examples/generate --model " + model + " --prompt \"...\"\n";
  }
  const std::string adapter = out + "/adapter";
  if (o.hf_base) {
    r += "  peft:         PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(\"" + base + "\"), \"" +
         adapter + "\")\n";
    r += "  vLLM:         vllm serve " + base + " --enable-lora --lora-modules " + fs::path(out).filename().string() +
         "=" + adapter + "\n";
    if (o.merged) {
      r += "  transformers: AutoModelForCausalLM.from_pretrained(\"" + out + "/merged\")\n";
      r += "  vLLM:         vllm serve " + out + "/merged\n";
    }
  }
  r += "  tapegrad:     examples/generate --model " + base + " --adapter " + adapter + " --prompt \"...\"\n";
  if (o.merged) r += "  tapegrad:     examples/generate --model " + out + (o.hf_base ? "/merged" : "/merged.safetensors") +
                     " --prompt \"...\"\n";
  return r;
}

}  // namespace examples
