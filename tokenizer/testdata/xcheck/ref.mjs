// Reads JSON lines {"text": ..., "special": bool}; prints a JSON array of ids per line.
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";
import readline from "node:readline";
const tj = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const tc = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const tok = new Tokenizer(tj, tc);
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
for await (const line of rl) {
  if (!line) continue;
  const s = JSON.parse(line);
  out.push(JSON.stringify(tok.encode(s, { add_special_tokens: false }).ids));
}
process.stdout.write(out.join("\n") + "\n");
