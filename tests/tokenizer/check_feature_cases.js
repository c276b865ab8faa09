// Replays the expectations of tokenizer_features_test.cpp with Hugging Face's library (tokenizers@0.23.2), to check
// once that what was worked out by hand is what the library does:
//   FAST_LLM_TOKENIZER_CASES=/tmp/cases.jsonl build/cpu/bin/tokenizer_test
//   node tests/tokenizer/check_feature_cases.js build/tokenizer_references /tmp/cases.jsonl
// Prints each disagreement and exits 1 if there is any.
'use strict';
const fs = require('fs');
const path = require('path');
const [referencesDir, casesFile] = process.argv.slice(2);
const {Tokenizer} = require(path.resolve(referencesDir, 'node_modules', 'tokenizers'));

(async () => {
  let failures = 0;
  const lines = fs.readFileSync(casesFile, 'utf8').split('\n').filter((line) => line.length > 0);
  for (const line of lines) {
    const entry = JSON.parse(line);
    const tokenizer = Tokenizer.fromFile(entry.file);
    let expected, actual, what;
    if (entry.decode_ids !== undefined) {
      what = `decode ${JSON.stringify(entry.decode_ids)}`;
      expected = entry.decoded;
      actual = await tokenizer.decode(entry.decode_ids, entry.skip_special_tokens);
    } else {
      const text = entry.text_hex !== undefined ? Buffer.from(entry.text_hex, 'hex').toString('utf8') : entry.text;
      what = `encode ${JSON.stringify(text)}`;
      expected = entry.ids;
      actual = (await tokenizer.encode(text, null, {addSpecialTokens: entry.add_special_tokens})).getIds();
    }
    if (JSON.stringify(expected) !== JSON.stringify(actual)) {
      ++failures;
      console.log(`MISMATCH ${path.basename(entry.file)} ${what}: ours ${JSON.stringify(expected)}, library ` +
                  `${JSON.stringify(actual)}`);
    }
  }
  console.log(`${lines.length - failures} of ${lines.length} cases agree`);
  process.exit(failures > 0 ? 1 : 0);
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
