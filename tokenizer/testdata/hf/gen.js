// Writes qwen3.jsonl.gz: reference ids from Hugging Face tokenizers (the Rust library, through its
// Node binding, npm "tokenizers" 0.23.2) for the Qwen3 tokenizer.json. See README.md.
//
// Each line is {"g": group, "t": text, "ids": [...]} with ids = HF encode(text,
// add_special_tokens=false): added tokens written in the text map to their ids, as Go's Encode
// does. Where the text holds added-token text, "p" holds the ids of the same tokenizer.json with
// its added_tokens removed: the text as ordinary characters, what Go's EncodePlain (used for all
// user text in scorer/prompt) must give. Lines are grouped by "g"; the first line is a header.
//
// Deterministic for a given Node (its Unicode tables decide which code points are assigned: Node
// 20.20.2 has Unicode 17.0) and tokenizers version.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { Tokenizer } = require('tokenizers');

const TJ = process.argv[2] || '/work/shared/assets/qwen-tokenizer/tokenizer.json';
const OUT = process.argv[3] || path.join(__dirname, 'qwen3.jsonl.gz');

const tok = Tokenizer.fromFile(TJ);
const tj = JSON.parse(fs.readFileSync(TJ, 'utf8'));
const ADDED = tj.added_tokens.map((a) => a.content);
tj.added_tokens = [];
const plainTok = Tokenizer.fromString(JSON.stringify(tj));

// ---- deterministic PRNG (mulberry32) ----
function rng(seed) {
  let a = seed >>> 0;
  const f = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  f.int = (n) => Math.floor(f() * n);
  f.pick = (xs) => xs[f.int(xs.length)];
  return f;
}

const cases = []; // [group, text]
const add = (g, t) => cases.push([g, t]);
const S = String.fromCodePoint;

// ---- 1. every assigned code point (bulk ideographs sampled), three contexts ----
// Assigned: not Cn and not a surrogate. Private use (uniform Co) is sampled.
const cps = [];
for (let c = 0; c <= 0x10ffff; c++) {
  if (c >= 0xd800 && c <= 0xdfff) continue;
  const s = S(c);
  if (/\p{Cn}/u.test(s)) continue;
  if (c >= 0xe000 && c <= 0xf8ff && c % 16 !== 0) continue; // BMP private use: every 16th
  if (c >= 0xf0000 && (c & 0xfff) > 0x10) continue; // planes 15/16 private use: 17 per 4096
  cps.push(c);
}
// Ideographs, Hangul syllables, Tangut and Khitan are many and uniform (Lo, no decomposition) and
// were all assigned by Unicode 15.0, which Go's tables have; "alone" takes every 5th of them, the
// other contexts every 32nd. CJK Extension I (15.1) and J (17.0) are left in full.
const bulk = (c) =>
  (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x4e00 && c <= 0x9fff) || (c >= 0xac00 && c <= 0xd7a3) ||
  (c >= 0x20000 && c <= 0x2ebef) || (c >= 0x30000 && c <= 0x323af) || (c >= 0x17000 && c <= 0x187f7) ||
  (c >= 0x18800 && c <= 0x18cd5);
const PER = 48;
function chunks(list, fn, g) {
  for (let i = 0; i < list.length; i += PER) add(g, fn(list.slice(i, i + PER).map((c) => S(c))));
}
chunks(cps.filter((c) => !bulk(c) || c % 5 === 0), (xs) => xs.join('\n'), 'cp/alone');
const sparse = cps.filter((c) => !bulk(c) || c % 32 === 0);
// "aX's": the class of X shows in the ids: a letter joins "a", a number stands alone, and anything
// else takes the apostrophe (" ?[^\s\p{L}\p{N}]+"), leaving "s" instead of the contraction "'s".
chunks(sparse, (xs) => xs.map((x) => 'a' + x + "'s").join('\n'), 'cp/after-letter');
chunks(sparse, (xs) => ' ' + xs.join(' ') + ' ', 'cp/between-spaces');

// ---- 2. mixed-script sentences ----
for (const s of [
  'Hello 世界! Привет мир. こんにちは、世界。 안녕하세요 세계! مرحبا بالعالم. שלום עולם.',
  'Der Preis beträgt 1.299,99 € (inkl. MwSt.) — 約 ¥200,000、税込。',
  'Ελληνικά και English mixed: αβγ ABC 123 ٣٤٥ ۶۷۸ ०१२ ๓๔๕',
  'हिन्दी में लिखा हुआ text और English; বাংলা লেখা; தமிழ் உரை; ગુજરાતી',
  'ภาษาไทยไม่มีช่องว่างระหว่างคำ but English does; ພາສາລາວ; ភាសាខ្មែរ; မြန်မာစာ',
  '🇨🇳🇺🇸 flags, 👨‍👩‍👧‍👦 family, 👍🏽 thumbs, ❤️‍🔥 heart on fire, 🫠 melting, #️⃣ keycap',
  'iPhone 15 Pro Max 256GB 钛金属 原色 5G手机 — ¥9,999 / $1,199',
  'Ｆｕｌｌｗｉｄｔｈ　ＡＳＣＩＩ　１２３　！？　ｶﾀｶﾅ ﾊﾝｶｸ',
  'ጤና ይስጥልኝ; Բարեւ; გამარჯობა; Сәлем; Salam; Xin chào thế giới; Zdravo; Cześć',
  'ꦧꦱꦗꦮ (Javanese), ᏣᎳᎩ (Cherokee), ᐃᓄᒃᑎᑐᑦ (Inuktitut), ᠮᠣᠩᠭᠣᠯ (Mongolian), ߒߞߏ (N\'Ko)',
  'Math: ∀x∈ℝ, x²≥0; ∑ᵢ aᵢ = ½; √2 ≈ 1.414; 𝔸𝔹ℂ 𝒳𝒴𝒵 𝟘𝟙𝟚',
  'Code: `for (int i = 0; i < n; ++i) { sum += a[i]; }` // 注释 комментарий',
  'URL https://例子.测试/路径?查询=值&x=1#片段 and mailto:user@例え.jp',
  'Garay 𐵐𐵑𐵒 𐵀𐵁 Kirat Rai 𖵀𖵁𖵂 𖵰𖵱 Ol Onal 𞓐𞓑 𞓱 Sunuwar 𑯀𑯁 𑯰 Tulu 𑎀𑎁 Todhri 𐗀𐗁',
  'Cyrillic Ᲊᲊ, Latin ꟋꟌꟍ ꟚꟛꟜ, Myanmar ext 𑛐𑛑, Outlined 𜳰𜳱 Egyptian 𓑠𓑡, Gurung Khema 𖄀𖄁',
  'Unicode 17: Sidetic 𐥀𐥁 Tolong Siki 𑶰 Beria Erfe 𖺠 Tangut 𘫳 CJK 𱍐 𲎰',
]) {
  add('mixed', s);
  add('mixed', s.toUpperCase());
  add('mixed', s.replace(/ /g, '\n'));
}

// ---- 3. long runs around BPE and pre-tokenizer boundaries ----
const lens = [1, 2, 3, 4, 5, 6, 7, 8, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 49, 63, 64, 65, 95, 96, 97,
  127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097];
const units = ['a', 'ab', 'Z', 'é', 'ß', 'я', '中', '한', 'ａ', '😀', '0', '12', '٣', ' ', '\t', '\n', '\r\n', '\r',
  '\n\n ', ' \n', '\u3000', '\u00a0', '.', '-', '=', '*', '#', '_', '~', '!?', '…', '。', '，', '\'', '\'s', '"', '/',
  '<', '|', '\u0301', '\u200b', '\u200d', '\u00ad', '\u0000'];
for (const u of units) {
  for (const n of lens) {
    const run = u.repeat(n);
    add('run', run);
    if (n === 1 || n === 48 || n === 64 || n === 256) {
      add('run', 'x ' + run + ' y');
      add('run', run + 'word');
      add('run', 'A' + run + '9');
    }
  }
}
for (const n of [1, 2, 3, 4, 16, 47, 48, 49, 64, 65, 200, 1000]) {
  add('run', ' '.repeat(n) + 'x');
  add('run', 'x' + ' '.repeat(n));
  add('run', 'x' + ' '.repeat(n) + '\n');
  add('run', 'x' + ' '.repeat(n) + '.');
  add('run', 'x' + '\t '.repeat(n) + '1');
  add('run', 'antidisestablishmentarianism'.repeat(Math.ceil(n / 10)));
  add('run', 'abcdefghijklmnopqrstuvwxyz'.repeat(Math.ceil(n / 10)).slice(0, n + 40));
  add('run', '3.14159265358979'.repeat(Math.ceil(n / 10)));
  add('run', '我们是中国人民'.repeat(Math.ceil(n / 5)));
  add('run', '-=' .repeat(n) + '\n' + '=-'.repeat(n));
}

// ---- 4. combining marks ----
const marks = ['\u0301', '\u0300', '\u0308', '\u0327', '\u0323', '\u0345', '\u031b', '\u05b0', '\u0e48', '\u093c',
  '\u3099', '\u302a', '\u0f71', '\u0f72', '\u0f74', '\u0344', '\u0f73', '\u0f75', '\u0f81', '\u1dce', '\u20d0', '\ufe20',
  '\u034f', '\u200d', '\u0e31', '\u0bcd', '\u1ab0', '\u{1d165}', '\u{1d16d}', '\u{1e944}'];
const bases = ['a', 'A', 'e', 'o', 'u', 'n', 'Ω', 'α', 'ω', 'ι', 'и', 'ا', 'क', 'ก', 'か', 'ᄀ', '1', ' ', '.', '\n', '中'];
const mr = rng(0xc0b1);
for (let i = 0; i < 400; i++) {
  let s = '';
  const parts = 1 + mr.int(4);
  for (let p = 0; p < parts; p++) {
    s += mr.pick(bases);
    const k = mr.pick([1, 1, 2, 3, 5, 8, 15, 29, 30, 31, 32, 40, 64]);
    for (let j = 0; j < k; j++) s += mr.pick(marks);
    if (mr() < 0.3) s += mr.pick([' ', '', 'x', '\n']);
  }
  add('marks', s);
}
for (const m of ['\u0301', '\u0344', '\u0f73', '\u0f75', '\u0f81', '\u0345', '\u0e48']) {
  for (const k of [1, 10, 14, 15, 16, 29, 30, 31, 32, 60, 61]) add('marks', 'a' + m.repeat(k) + ' b');
}
// Characters whose decomposition holds marks, decomposed (composition), and decomposed with an
// extra mark between base and the rest (blocking, reordering). Node's NFD (Unicode 17).
const decomposable = cps.filter((c) => S(c).normalize('NFD') !== S(c));
const nfdList = decomposable.map((c) => S(c).normalize('NFD'));
for (let i = 0; i < nfdList.length; i += 64) add('marks/nfd', nfdList.slice(i, i + 64).join(' '));
for (let i = 0; i < nfdList.length; i += 64) {
  add('marks/nfd-mark', nfdList.slice(i, i + 64).map((d) => {
    const cp = [...d];
    return cp[0] + '\u0323' + cp.slice(1).join('') + '\u0345';
  }).join(' '));
}
// Every mark between a base and U+0323 (class 220, composes with "a") or U+0301 (230): canonical
// ordering and blocking show each mark's combining class.
{
  const ms = cps.filter((c) => /\p{M}/u.test(S(c)));
  for (let i = 0; i < ms.length; i += 48) {
    add('marks/ccc', ms.slice(i, i + 48).map((c) => 'a' + S(c) + '\u0323 a' + S(c) + '\u0301 o\u0308' + S(c)).join(' '));
  }
}
// Hangul jamo: L V, L V T, LV T, and old-style jamo that do not compose.
{
  const r = rng(0x4a4d);
  for (let i = 0; i < 40; i++) {
    let s = '';
    for (let j = 0; j < 20; j++) {
      s += S(0x1100 + r.int(19)) + S(0x1161 + r.int(21));
      if (r() < 0.5) s += S(0x11a8 + r.int(27));
      if (r() < 0.2) s += r.pick(['\u302e', '\u1160', '\u115f', ' ', '\u3164', S(0x1113 + r.int(70))]);
    }
    add('marks/hangul', s);
  }
}

// ---- 5. contractions ----
const apos = ['\'', '\u2019', '\u2018', '\u02bc', '\uff07', '`', '\u00b4', '\u2032', '"'];
const suff = ['s', 't', 're', 've', 'm', 'll', 'd', 'S', 'T', 'RE', 'Re', 'rE', 'VE', 'vE', 'M', 'LL', 'lL', 'Ll', 'D',
  '\u017f', '\u017ft', 'st', 'x', 'ß', '\ufb05', '\ufb06', '\u212a', 'İ', 'ı', 'ǆ', 'll\u0301', 's\u0301', 'é', '1', ''];
for (const a of apos) {
  add('contraction', suff.map((s) => 'it' + a + s).join(' '));
  add('contraction', suff.map((s) => 'IT' + a + s + 'x').join('\n'));
  add('contraction', suff.map((s) => a + s).join(''));
  add('contraction', suff.map((s) => '9' + a + s + ' ' + a + a + s).join(' '));
}
for (const s of ["don't I'M you're we'VE they'd she'll it's 'twas rock'n'roll O'Neil", "'''s''t", "l'été c'est d'accord",
  "can't'nt'll've", "''", "'", "'s", "x'", "   's", "\n's", "a's's's's", "'ſ'ſt'ST'LL"]) add('contraction', s);

// ---- 6. added-token text inside ordinary text ----
{
  const r = rng(0x5bec);
  const ctx = ['', ' ', '\n', 'a', 'é', '中', '1', '<', '>', '|', '<|', '|>', '\'s', '  ', '\r\n'];
  for (const a of ADDED) {
    add('special', a);
    add('special', 'x' + a + 'y');
    add('special', ' ' + a + ' ');
    add('special', a + a);
    add('special', a.slice(0, -1));
    add('special', a.slice(1));
    add('special', a.toUpperCase());
    add('special', '<' + a + '>');
    add('special', a.slice(0, 3) + a + a.slice(3));
  }
  for (let i = 0; i < 200; i++) {
    let s = '';
    const k = 1 + r.int(6);
    for (let j = 0; j < k; j++) {
      s += r.pick(ctx);
      const a = r.pick(ADDED);
      s += r() < 0.7 ? a : a.slice(0, 1 + r.int(a.length - 1));
      s += r.pick(ctx);
    }
    add('special', s);
  }
  add('special', '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nJudge whether the Document meets the requirements<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
}

// ---- 7. CR/LF mixtures ----
{
  const r = rng(0xc81f);
  const p = ['\r', '\n', '\r\n', '\n\r', ' ', '  ', '\t', '\u2028', '\u2029', '\u0085', '\v', '\f', '\u00a0', '\u3000', 'a',
    'B', '1', '.', '!', '中', '\u0301', '—'];
  for (let i = 0; i < 300; i++) {
    let s = '';
    const k = 1 + r.int(24);
    for (let j = 0; j < k; j++) s += r.pick(p);
    add('crlf', s);
  }
  for (const s of ['a\r\nb', 'a\n\rb', 'a\r\rb', 'a \r\n b', 'a.\r\n', 'a.\r\n\r\n', '.\r \n', ' \r\n\t\r\n  x', 'x\r', '\r', '\r\n',
    '\n', '\n ', ' \n', 'a\r\n\u3000b', '!!\n\n\n!!', '. \n', '.\u2028\n', 'a\u0085\nb']) add('crlf', s);
}

// ---- 8. NUL and control characters ----
{
  const ctl = [];
  for (let c = 0; c < 0x20; c++) ctl.push(S(c));
  for (let c = 0x7f; c < 0xa0; c++) ctl.push(S(c));
  for (const c of ctl) {
    add('control', c);
    add('control', 'a' + c + 'b');
    add('control', ' ' + c + ' ');
    add('control', c + c + c + 'x');
    add('control', '1' + c + '.' + c + '\n');
  }
  const r = rng(0xc7c7);
  for (let i = 0; i < 100; i++) {
    let s = '';
    for (let j = 0, k = 1 + r.int(20); j < k; j++) s += r.pick([...ctl, 'a', ' ', '\n', '.', '中']);
    add('control', s);
  }
}

// ---- 9. random strings ----
{
  const r = rng(20261128);
  const pools = [
    [...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'], [...'0123456789'],
    [...'!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~'],
    [' ', ' ', '  ', '\t', '\n', '\r\n', '\r', '\n\n', ' \n', '\u00a0', '\u2009', '\u3000', '\u2028', '\u0085', '\v', '\f',
      '\u200b', '\u180e', '\u202f', '\u205f', '\u1680'],
    [...'的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经'],
    [...'ぁあいうえおかがきぎくぐけげこごアイウエオカキクケコ한국어안녕하세요'], [...'абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕ'],
    [...'αβγδεζηθικλμνξοπρστυφχψωéèêëàâäôöûüçñßøåæœÉÀÇ'],
    ['e\u0301', 'a\u0308', '\u0301', '\u0308', '\u0345', '\u0344', '\u0f73', 'n\u0303', '\u1100\u1161', 'A\u030a'],
    [...'กขคงจฉชซญดตถทนบปผพฟภมยรลวศษสหฬอฮะาิีึืุูเแโใไ่้๊๋अआइईउऊएऐओऔकखगघङचछजझ्ािीुूेैोौं'],
    [...'ابتثجحخدذرزسشصضطظعغفقكلمنهوي٠١٢٣'],
    ['😀', '🚀', '🦙', '👍🏽', '👨‍👩‍👧', '❤️', '✅', '🇨🇳', '™', '©', '°', '±', '×', '€', '½', '²', 'Ⅷ', '①', '٣', '۵', '߅', '〇'],
    ['\'s', '\'S', '\'t', '\'re', '\'RE', '\'ve', '\'m', '\'ll', '\'LL', '\'d', '\'ſ', '\'', '’s', '’'],
    ['<|im_start|>', '<|im_end|>', '<think>', '</think>', '<|endoftext|>', '<tool_call>', '<|im_start|', '<|im_', '<', '|>'],
    [...'，。、！？；：（）【】《》「」…—～'], ['\ufffd', '\ufeff', '\u200d', '\u200c', '\u00ad', '\u2060', '\u0000', '\u001b'],
    ['Hello', 'world', 'iPhone', 'USB-C', 'don\'t', 'I\'M', '3.14', '1,000', '2024-01-01', 'https://example.com/a?b=c',
      'foo_bar', 'x86_64', '@user', '#tag'],
  ];
  const anyCp = () => S(r.pick(cps));
  for (let i = 0; i < 2500; i++) {
    const k = r.pick([1, 2, 3, 5, 8, 13, 20, 40, 64]);
    const ps = [];
    for (let j = 0, m = 1 + r.int(5); j < m; j++) ps.push(r.int(pools.length + 1));
    let s = '';
    for (let j = 0; j < k; j++) {
      const p = r.pick(ps);
      s += p === pools.length ? anyCp() : r.pick(pools[p]);
      if (r() < 0.3) s += r.pick([' ', '  ', '\n', '']);
    }
    add('random', s);
  }
}

// ---- encode and write ----
const hasAdded = (s) => ADDED.some((a) => s.includes(a));
(async () => {
  const lines = [JSON.stringify({
    g: 'header', tokenizers: require('tokenizers/package.json').version, node: process.version,
    unicode: process.versions.unicode, cases: cases.length,
  })];
  const B = 256;
  for (let i = 0; i < cases.length; i += B) {
    const batch = cases.slice(i, i + B);
    const enc = await tok.encodeBatch(batch.map((c) => c[1]), { addSpecialTokens: false });
    const special = batch.map((c) => hasAdded(c[1]));
    const pl = await plainTok.encodeBatch(batch.map((c) => c[1]), { addSpecialTokens: false });
    batch.forEach(([g, t], j) => {
      const o = { g, t, ids: Array.from(enc[j].getIds()) };
      const p = Array.from(pl[j].getIds());
      if (special[j]) o.p = p;
      else if (p.join() !== o.ids.join()) throw new Error('plain differs without added text: ' + JSON.stringify(t));
      lines.push(JSON.stringify(o));
    });
  }
  const gz = zlib.gzipSync(lines.join('\n') + '\n', { level: 9 });
  fs.writeFileSync(OUT, gz);
  const counts = {};
  for (const [g] of cases) counts[g] = (counts[g] || 0) + 1;
  console.error(`${cases.length} cases, ${gz.length} bytes gzip -> ${OUT}`, counts);
})();
