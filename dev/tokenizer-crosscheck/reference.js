// Reference encodings from HF tokenizers 0.23 (node binding), in make_fixtures.py's expected.json format.
// node ref.js <tokenizer dir> <corpus.jsonl> [fuzz_count seed]
const {Tokenizer} = require(process.env.TOKENIZERS_NODE || 'tokenizers');
const fs = require('fs');
const [dir, corpusPath, fuzzN, seedArg] = process.argv.slice(2);
const tok = Tokenizer.fromFile(dir + '/tokenizer.json');
const cases = fs.readFileSync(corpusPath, 'utf8').trim().split('\n').map(l => JSON.parse(l)).map(c =>
  ({name: c.name, text: 'text' in c ? c.text : Buffer.from(c.hex, 'hex').toString('utf8')}));
let seed = Number(seedArg || 1);
const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const pool = [' ', '  ', '\t', '\n', '\r\n', 'a', 'the', 'The', "'s", "'S", "'ll", '1', '23', '456', '.', ',', '!?', '...',
  'é', 'e\u0301', '我', '爱', '日本', '👍', '🏽', '\u200d', '👨', '▁', '<s>', '</s>', '<|endoftext|>', '<mask>', '<tool>',
  '<|begin_of_text|>', '<0x41>', '\u00a0', '\u3000', '\u0085', 'ſ', 'İ', 'ß', 'Ω', 'x', 'q', 'zz', '-', '_', '$', '\u0000',
  '\u2028', '؟', 'ب', 'हि', 'ไ', '😀', 'ﬁ', 'Å', 'ｆ', '①', '½', '٣', 'ǅ', 'ⓐ', 'Z', 'ing', 'tion', ' the', ' a'];
for (let i = 0; i < Number(fuzzN || 0); i++) {
  let s = '';
  for (let k = 0, n = 1 + Math.floor(rnd() * 12); k < n; k++) s += pool[Math.floor(rnd() * pool.length)];
  cases.push({name: 'fuzz' + i, text: s});
}
(async () => {
  const out = [];
  for (const c of cases) {
    const plain = (await tok.encode(c.text, null, {addSpecialTokens: false})).getIds();
    const special = (await tok.encode(c.text, null, {addSpecialTokens: true})).getIds();
    out.push({name: c.name, text: c.name.startsWith('fuzz') ? c.text : undefined, ids: plain, ids_with_special: special,
      decoded: await tok.decode(plain, false), decoded_with_special: await tok.decode(special, false),
      decoded_skip_special: await tok.decode(special, true),
      prefix_decoded: await tok.decode(plain.slice(0, Math.floor(plain.length / 2)), false)});
  }
  fs.writeFileSync(dir + '/expected.json', JSON.stringify({reference: 'tokenizers 0.23.2 (node)', cases: out}));
  console.log(dir, out.length, 'cases');
})();
