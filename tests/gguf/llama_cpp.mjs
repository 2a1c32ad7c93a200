// Runs GGUF files through llama.cpp (node-llama-cpp's prebuilt CPU binaries) and prints what the
// GGUF tests compare with tapegrad, as one JSON object:
//   node llama_cpp.mjs <node-llama-cpp folder> <request.json>
// request: {"runs": [run, ...]}, each run
//   {"model": "x.gguf", "lora": "a.gguf" (optional), "prompts": [[ids]], "new_tokens": N,
//    "top": K (the K most probable next tokens at each greedy step),
//    "texts": ["..."] (tokenized by llama.cpp, special tokens parsed)}
// answer:  {"runs": [{"greedy": [[ids]], "top": [[[[id, p], ...] per step] per prompt],
//            "tokens": [[ids]], "bos": id|null, "eos": id|null, "add_bos": bool,
//            "chat_template": "..."|null}, ...]}
import {readFileSync} from "node:fs";
import {pathToFileURL} from "node:url";

const [installed, requestPath] = process.argv.slice(2);
const request = JSON.parse(readFileSync(requestPath, "utf8"));
const {getLlama, LlamaLogLevel} = await import(
    pathToFileURL(`${installed}/node_modules/node-llama-cpp/dist/index.js`).href);
const llama = await getLlama({gpu: false, build: "never", progressLogs: false, logLevel: LlamaLogLevel.error});

async function run(r) {
  const model = await llama.loadModel({modelPath: r.model});
  // The KV cache in F32 (llama.cpp's default is F16, which would round every key and value).
  const options = {contextSize: 512, sequences: 1, threads: 1, flashAttention: false,
                   experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"};
  if (r.lora) options.lora = {adapters: [{filePath: r.lora, scale: 1}]};
  const context = await model.createContext(options);
  const answer = {greedy: [], top: [], tokens: [], bos: model.tokens.bos, eos: model.tokens.eos,
                  add_bos: model.tokens.shouldPrependBosToken,
                  chat_template: model.fileInfo.metadata?.tokenizer?.chat_template ?? null};
  for (const prompt of r.prompts ?? []) {
    // Greedy decoding (temperature 0), with llama.cpp's probabilities at each step.
    const sequence = context.getSequence();
    const generated = [], top = [];
    const steps = sequence.evaluateWithMetadata(prompt, {probabilities: (r.top ?? 0) > 0}, {temperature: 0});
    for await (const step of steps) {
      generated.push(step.token);
      if (step.probabilities) top.push([...step.probabilities.entries()].slice(0, r.top));
      if (generated.length >= r.new_tokens) break;
    }
    answer.greedy.push(generated);
    answer.top.push(top);
    sequence.dispose();
  }
  for (const text of r.texts ?? []) answer.tokens.push(model.tokenize(text, true));
  await context.dispose();
  await model.dispose();
  return answer;
}

const runs = [];
for (const r of request.runs) runs.push(await run(r));
console.log(JSON.stringify({runs}));
await llama.dispose();
