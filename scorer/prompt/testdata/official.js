// Writes official.jsonl.gz: Qwen3-Reranker prompts as the model card's transformers example
// builds them (Qwen/Qwen3-Reranker-0.6B README: format_instruction, process_inputs), with
// Hugging Face tokenizers 0.23.2 and the Qwen3 tokenizer.json:
//
//   prefix_tokens + tokenizer(body, truncation, max_length=L - len(prefix) - len(suffix)) + suffix_tokens
//   body = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"
//
// (truncation keeps the body's first tokens: Qwen3's tokenizer_config sets no truncation_side).
// No case holds added-token text in user strings: there the card's tokenizer call makes control
// tokens of it and our builder, by design, does not.
//
//   cd tokenizer/testdata/hf && npm install && cd - &&
//   NODE_PATH=tokenizer/testdata/hf/node_modules node scorer/prompt/testdata/official.js \
//     /work/shared/assets/qwen-tokenizer/tokenizer.json
const {Tokenizer} = require('tokenizers');
const fs = require('fs'), zlib = require('zlib'), path = require('path');
const t = Tokenizer.fromFile(process.argv[2]);
const prefix = '<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n';
const suffix = '<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n';
const def = 'Given a web search query, retrieve relevant passages that answer the query';
const enc = async s => Array.from((await t.encode(s, undefined, {addSpecialTokens: false})).getIds());

// Deterministic cases: fixed ones for the edges, then seeded random product-like text.
let seed = 12345;
const rnd = n => { seed = (seed * 1103515245 + 12345) % 2147483648; return Math.floor(seed / 65536) % n; };
const words = ['Apple', 'iPhone', '15', 'Pro', '256GB', '苹果手机', '官方正品', '😀', '👍🏽', 'Café', 'naïve',
  'e\u0301', '  ', '\n', '\n\n', '\t', ' - ', '...', '!!!', "'s", "don't", "I'M", '1234567', '3.14', '$19.99',
  '<b>', '</b>', '&amp;', 'https://x.com/a?b=c', '한국어', 'العربية', 'हिन्दी', 'ﬁ', 'Ａ', '\u00a0', '\u3000',
  '\u200b', 'ZWJ\u200d', '\r\n', ' ', '<|im', 'think>', '|>'];
const text = n => { let s = ''; for (let i = 0; i < n; i++) s += words[rnd(words.length)] + [' ', '', ' ', '\n'][rnd(4)]; return s; };
const cases = [
  {i: '', q: 'What is the capital of China?', d: 'The capital of China is Beijing.', max: 0},
  {i: '', q: 'Explain gravity', d: 'Gravity is a force that attracts two bodies towards each other.', max: 0},
  {i: '', q: 'q', d: '', max: 0},
  {i: '', q: 'q', d: ' leading space', max: 0},
  {i: '', q: 'q', d: '\nnewline first', max: 0},
  {i: '', q: 'q', d: "'s contraction first", max: 0},
  {i: '', q: 'q', d: 'trailing newline\n', max: 0},
  {i: '', q: '北京 天气', d: '今天北京晴，最高气温 25℃。', max: 0},
  {i: '', q: 'cafe\u0301', d: 'Cafe\u0301 (NFD) and ﬁ ligature', max: 0},
  {i: 'Given a product search query, find matching items', q: '  spaced query  ', d: 'doc', max: 0},
  {i: '', q: 'q', d: 'word '.repeat(60), max: 100},
  {i: '', q: 'q', d: '中文'.repeat(80), max: 90},
];
for (let k = 0; k < 28; k++) {
  cases.push({i: ['', 'Given a product search query, find matching items', 'multi\nline instr '][rnd(3)],
    q: text(1 + rnd(6)).trim() || 'q', d: text(rnd(200)), max: [0, 200, 300, 500][rnd(4)]});
}
(async () => {
  const P = await enc(prefix), S = await enc(suffix);
  const lines = [];
  for (const c of cases) {
    let body = await enc(`<Instruct>: ${c.i || def}\n<Query>: ${c.q}\n<Document>: ${c.d}`);
    const cut = c.max > 0 && body.length > c.max - P.length - S.length;
    if (c.max > 0) body = body.slice(0, c.max - P.length - S.length);
    lines.push(JSON.stringify({i: c.i, q: c.q, d: c.d, max: c.max, cut, ids: P.concat(body, S)}));
  }
  fs.writeFileSync(path.join(__dirname, 'official.jsonl.gz'), zlib.gzipSync(lines.join('\n') + '\n', {level: 9}));
})();
