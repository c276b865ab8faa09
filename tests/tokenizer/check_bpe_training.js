// Checks a tokenizer trained by our BPE trainer against Hugging Face's library (tokenizers@0.23.2), with the files
// that bpe_trainer_test writes when FAST_LLM_BPE_AGREEMENT_DIR is set (ctest bpe_training_agrees):
//   1. The library's own BpeTrainer (its default: no special tokens, the characters seen, 30000 entries at most),
//      trained on corpus.txt with our file's pre-tokenizer, gives the same vocabulary and the same merges in the same
//      order as trained_like_library.json, which our trainer made from the same lines.
//   2. The library loads our tokenizer.json (special tokens, full byte alphabet) and gives, for each line of
//      encoded.jsonl, the ids our loader gave (with special tokens: BOS first), and decodes them back to the line.
// Prints each disagreement and exits 1 if there is any.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const [referencesDir, folder] = process.argv.slice(2);
const {Tokenizer} = require(path.resolve(referencesDir, 'node_modules', 'tokenizers'));

(async () => {
  let failures = 0;
  const fail = (message) => {
    ++failures;
    console.log(message);
  };

  // 1. Training. The library reads the file line by line (each line with its "\n"), as our trainer was given it.
  const ours = JSON.parse(fs.readFileSync(path.join(folder, 'trained_like_library.json'), 'utf8'));
  const retrained = Tokenizer.fromFile(path.join(folder, 'trained_like_library.json'));
  retrained.train([path.join(folder, 'corpus.txt')]);
  const saved = path.join(os.tmpdir(), `fast_llm_bpe_library_${process.pid}.json`);
  retrained.save(saved);
  const library = JSON.parse(fs.readFileSync(saved, 'utf8'));
  fs.unlinkSync(saved);
  const ourVocab = Object.entries(ours.model.vocab);
  const libraryVocab = Object.entries(library.model.vocab);
  if (ourVocab.length !== libraryVocab.length)
    fail(`vocabulary sizes differ: ours ${ourVocab.length}, library ${libraryVocab.length}`);
  for (const [token, id] of ourVocab) {
    if (library.model.vocab[token] !== id) {
      fail(`token ${JSON.stringify(token)}: ours id ${id}, library ${library.model.vocab[token]}`);
      break;
    }
  }
  const mergeText = (merge) => (Array.isArray(merge) ? merge.join(' ') : merge);
  const count = Math.max(ours.model.merges.length, library.model.merges.length);
  for (let rank = 0; rank < count; ++rank) {
    const a = ours.model.merges[rank], b = library.model.merges[rank];
    if (a === undefined || b === undefined || mergeText(a) !== mergeText(b)) {
      fail(`merge ${rank} of ${ours.model.merges.length} (library: ${library.model.merges.length}): ours ` +
           `${JSON.stringify(a)}, library ${JSON.stringify(b)}`);
      break;
    }
  }
  console.log(`training: ${ours.model.merges.length} merges, ${ourVocab.length} tokens compared`);

  // 2. Encoding and decoding our production-style file.
  const tokenizer = Tokenizer.fromFile(path.join(folder, 'tokenizer.json'));
  const lines = fs.readFileSync(path.join(folder, 'encoded.jsonl'), 'utf8').split('\n').filter((l) => l.length > 0);
  for (const line of lines) {
    const entry = JSON.parse(line);
    const ids = (await tokenizer.encode(entry.text, null, {addSpecialTokens: true})).getIds();
    if (JSON.stringify(ids) !== JSON.stringify(entry.ids)) {
      fail(`encode ${JSON.stringify(entry.text)}: ours ${JSON.stringify(entry.ids)}, library ${JSON.stringify(ids)}`);
      continue;
    }
    const decoded = await tokenizer.decode(ids.slice(1), false);
    if (decoded !== entry.text) fail(`decode of ${JSON.stringify(entry.text)}: library ${JSON.stringify(decoded)}`);
  }
  console.log(`encoding: ${lines.length} lines compared`);
  console.log(failures === 0 ? 'all agree' : `${failures} disagreements`);
  process.exit(failures > 0 ? 1 : 0);
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
