// Fuzz target: an input file of `prepare gpt_memmap` (preparation/input_files.h, document_preparer.h), read record by
// record and turned into documents as the command does. The first byte picks the format (bits 0-1: JSON Lines, gzip,
// zstd, text file) and whether records carry loss-masking spans (bit 2); the rest is the file.
#include "fuzz_target.h"

#include "fast_llm/preparation/document_preparer.h"
#include "fast_llm/preparation/input_files.h"
#include "preparation/test_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace fast_llm::preparation;
  static constexpr const char* kNames[4] = {"in.jsonl", "in.jsonl.gz", "in.jsonl.zst", "in.txt"};
  const uint8_t mode = data[0];
  const auto path = fast_llm::fuzz::write_input(kNames[mode & 3], {data + 1, size - 1});
  const testing::ByteTestTokenizer tokenizer;
  DocumentOptions options;
  if ((mode & 4) != 0) options.loss_masking_spans_field = "spans";
  const DocumentPreparer preparer(tokenizer, options);
  fast_llm::fuzz::refusing_cleanly([&] {
    const std::vector<InputFile> files = resolve_input_files({path.string()});
    RecordReader reader(files);
    Record record;
    while (reader.next(record)) {
      const fast_llm::data::Document document = record.file->format == RecordFormat::text_file
                                                    ? preparer.from_text(record.text, record.location())
                                                    : preparer.from_json(record.text, record.location());
      for (const auto& span : document.loss_masking_spans)
        if (span.begin < 0 || span.end < span.begin || span.end > document.size()) __builtin_trap();
    }
  });
  return 0;
}
