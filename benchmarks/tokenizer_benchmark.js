// Hugging Face's tokenizers library (npm tokenizers@0.23.2, Rust) on the same documents as tokenizer_benchmark.cpp:
// encodeBatch over all documents, timed `repeats` times after a warm-up, best wall time reported with the process's CPU
// time of that pass (all threads, process.cpuUsage). Run with
// TOKENIZERS_PARALLELISM=false for one thread (the library then encodes the batch sequentially), else it uses all
// cores (rayon).
//
//   node tokenizer_benchmark.js REFERENCES_DIR TOKENIZER_JSON TEXT_FILE [repeats]
'use strict';
const fs = require('fs');
const path = require('path');
const [referencesDir, tokenizerFile, textFile, repeatsArgument] = process.argv.slice(2);
const {Tokenizer} = require(path.resolve(referencesDir, 'node_modules', 'tokenizers'));

// Same cut as tokenizer_benchmark.cpp, on bytes.
const text = fs.readFileSync(textFile);
const documents = [];
let current = [];
let currentSize = 0;
let start = 0;
while (start < text.length) {
  let end = text.indexOf('\n\n', start);
  end = end < 0 ? text.length : end + 2;
  current.push(text.subarray(start, end));
  currentSize += end - start;
  start = end;
  if (currentSize >= 2000) {
    documents.push(Buffer.concat(current).toString('utf8'));
    current = [];
    currentSize = 0;
  }
}
if (currentSize > 0) documents.push(Buffer.concat(current).toString('utf8'));

(async () => {
  const tokenizer = Tokenizer.fromFile(tokenizerFile);
  const repeats = Math.max(1, parseInt(repeatsArgument || '3', 10));
  let best = Infinity;
  let bestCpu = 0;
  let tokens = 0;
  for (let run = 0; run <= repeats; ++run) {
    const cpuBegin = process.cpuUsage();
    const begin = process.hrtime.bigint();
    const encodings = await tokenizer.encodeBatch(documents, {addSpecialTokens: false});
    const seconds = Number(process.hrtime.bigint() - begin) / 1e9;
    const cpu = process.cpuUsage(cpuBegin);
    tokens = encodings.reduce((sum, encoding) => sum + encoding.getIds().length, 0);
    if (run > 0 && seconds < best) {
      best = seconds;
      bestCpu = (cpu.user + cpu.system) / 1e6;
    }
  }
  const threads = process.env.TOKENIZERS_PARALLELISM === 'false' ? 1 : require('os').cpus().length;
  console.log(`huggingface threads=${threads} documents=${documents.length} bytes=${text.length} tokens=${tokens} ` +
              `seconds=${best.toFixed(4)} tokens_per_second=${Math.round(tokens / best)} ` +
              `cpu_seconds=${bestCpu.toFixed(4)} tokens_per_cpu_second=${Math.round(tokens / bestCpu)}`);
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
