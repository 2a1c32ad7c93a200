// Runs a GGUF file through llama.cpp (node-llama-cpp's prebuilt CPU binaries) and prints what the
// GGUF tests compare with tapegrad, as one JSON object:
//   node llama_cpp.mjs <node-llama-cpp folder> <request.json>
// request: {"model": "x.gguf", "lora": "a.gguf" (optional), "prompts": [[ids]], "new_tokens": N,
//           "top": K (the K most probable next tokens at each position of each prompt),
//           "texts": ["..."] (tokenized by llama.cpp, special tokens parsed)}
// answer:  {"greedy": [[ids]], "top": [[[[id, p], ...] per position] per prompt], "tokens": [[ids]],
//           "bos": id|null, "eos": id|null, "add_bos": bool, "chat_template": "..."|null}
import {readFileSync} from "node:fs";
import {pathToFileURL} from "node:url";

const [installed, requestPath] = process.argv.slice(2);
const request = JSON.parse(readFileSync(requestPath, "utf8"));
const {getLlama, LlamaLogLevel} = await import(
    pathToFileURL(`${installed}/node_modules/node-llama-cpp/dist/index.js`).href);

const llama = await getLlama({gpu: false, build: "never", progressLogs: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: request.model});
const contextOptions = {contextSize: 512, sequences: 1, threads: 1};
if (request.lora) contextOptions.lora = {adapters: [{filePath: request.lora, scale: 1}]};
const context = await model.createContext(contextOptions);

const answer = {greedy: [], top: [], tokens: [], bos: model.tokens.bos, eos: model.tokens.eos,
                add_bos: model.tokens.shouldPrependBosToken,
                chat_template: model.fileInfo.metadata?.tokenizer?.chat_template ?? null};
for (const prompt of request.prompts ?? []) {
  // Greedy decoding: each step's most probable token, with llama.cpp's probabilities of the first.
  const sequence = context.getSequence();
  const generated = [], top = [];
  const steps = sequence.evaluateWithMetadata(prompt, {probabilities: (request.top ?? 0) > 0}, {temperature: 0});
  for await (const step of steps) {
    generated.push(step.token);
    if (step.probabilities && top.length < request.new_tokens)
      top.push([...step.probabilities.entries()].slice(0, request.top));
    if (generated.length >= request.new_tokens) break;
  }
  answer.greedy.push(generated);
  answer.top.push(top);
  sequence.dispose();
}
for (const text of request.texts ?? []) answer.tokens.push(model.tokenize(text, true));
console.log(JSON.stringify(answer));
await context.dispose();
await model.dispose();
await llama.dispose();
