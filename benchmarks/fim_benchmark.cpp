// Fill-in-the-middle throughput: how many tokens per second one data-loader thread rewrites, so it can be set beside
// what training consumes. Text files are encoded with a real tokenizer into documents of BOS text EOS, cut into
// pieces of `sample_size` tokens as sampling cuts them, and each piece is rewritten (fim_transform) at the given rate;
// before timing, the rate-0 rewrite is checked to be the identity and every rewrite to keep the piece's length.
//   fim_benchmark TOKENIZER [--rate R] [--sample-size N] [--max-bytes B] [--repeat K] [SOURCE...]
// TOKENIZER: a tokenizer.json with FIM sentinels, or without them (its first four ids are used as sentinels then:
// the cost is the same). SOURCE: text files or folders (default: the machine's license and copyright texts).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/data/corpus.h"
#include "fast_llm/data/fim.h"
#include "fast_llm/tokenizer/tokenizer.h"

using namespace fast_llm;

namespace {

struct Options {
  std::string tokenizer;
  double rate = 0.5;
  int64_t sample_size = 2049;
  int64_t max_bytes = int64_t(8) << 20;
  int repeat = 3;
  std::vector<std::string> sources;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int index = 1; index < argc; ++index) {
    const std::string argument = argv[index];
    auto value = [&]() -> std::string {
      FLM_CHECK(index + 1 < argc, "benchmark", "{} needs a value", argument);
      return argv[++index];
    };
    if (argument == "--rate") options.rate = std::stod(value());
    else if (argument == "--sample-size") options.sample_size = std::stoll(value());
    else if (argument == "--max-bytes") options.max_bytes = std::stoll(value());
    else if (argument == "--repeat") options.repeat = std::stoi(value());
    else if (options.tokenizer.empty()) options.tokenizer = argument;
    else options.sources.push_back(argument);
  }
  FLM_CHECK(!options.tokenizer.empty(), "benchmark", "usage: fim_benchmark TOKENIZER [--rate R] [--sample-size N] "
            "[--max-bytes B] [--repeat K] [SOURCE...]");
  if (options.sources.empty()) options.sources = data::default_corpus_sources();
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse(argc, argv);
    const auto tokenizer = tokenizer::Tokenizer::load(options.tokenizer);
    FLM_CHECK(tokenizer->bos_id() && tokenizer->eos_id(), "benchmark", "{}: the tokenizer needs BOS and EOS",
              options.tokenizer);

    // Pieces of sample_size tokens, from documents BOS text EOS.
    std::vector<std::vector<int64_t>> pieces;
    int64_t bytes = 0, tokens = 0;
    for (const auto& path : data::collect_corpus_files(options.sources)) {
      if (bytes >= options.max_bytes) break;
      std::ifstream stream(path, std::ios::binary);
      const std::string text{std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
      if (text.empty() || !data::looks_like_text(text)) continue;
      bytes += int64_t(text.size());
      std::vector<int64_t> document{*tokenizer->bos_id()};
      for (int32_t id : tokenizer->encode(text)) document.push_back(id);
      document.push_back(*tokenizer->eos_id());
      tokens += int64_t(document.size());
      for (size_t begin = 0; begin < document.size(); begin += size_t(options.sample_size))
        pieces.emplace_back(document.begin() + std::ptrdiff_t(begin),
                            document.begin() + std::ptrdiff_t(std::min(document.size(), begin + options.sample_size)));
    }
    FLM_CHECK(!pieces.empty(), "benchmark", "no text found in the sources");

    auto id_or = [&](const char* token, int32_t fallback) { return tokenizer->token_to_id(token).value_or(fallback); };
    data::FimSettings settings{.rate = options.rate,
                               .spm_rate = 0.5,
                               .prefix_id = id_or("<fim_prefix>", 0),
                               .middle_id = id_or("<fim_middle>", 1),
                               .suffix_id = id_or("<fim_suffix>", 2),
                               .pad_id = id_or("<fim_pad>", 3),
                               .bos_id = *tokenizer->bos_id(),
                               .eos_id = *tokenizer->eos_id()};
    data::FimSettings identity = settings;
    identity.rate = 0.0;
    for (size_t index = 0; index < pieces.size(); ++index) {
      data::FimRandom random(1, int64_t(index), 0), other(1, int64_t(index), 0);
      FLM_CHECK(data::fim_transform(pieces[index], identity, *tokenizer, random) == pieces[index], "benchmark",
                "rate 0 changed piece {}", index);
      FLM_CHECK(data::fim_transform(pieces[index], settings, *tokenizer, other).size() == pieces[index].size(),
                "benchmark", "the rewrite of piece {} changed its length", index);
    }

    std::vector<double> seconds;
    for (int round = 0; round < options.repeat; ++round) {
      const auto start = std::chrono::steady_clock::now();
      size_t checksum = 0;
      for (size_t index = 0; index < pieces.size(); ++index) {
        data::FimRandom random(uint64_t(round) + 2, int64_t(index), 0);
        checksum += size_t(data::fim_transform(pieces[index], settings, *tokenizer, random)[0]);
      }
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (checksum == size_t(-1)) std::printf("\n");  // keeps the work observable
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf("fim rate %.2f, %zu pieces of <= %lld tokens (%lld tokens, %.1f MB of text), one thread: "
                "median %.3f s, %.0f tokens/s\n",
                options.rate, pieces.size(), static_cast<long long>(options.sample_size),
                static_cast<long long>(tokens), double(bytes) / 1e6, median, double(tokens) / median);
    return 0;
  } catch (const Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
