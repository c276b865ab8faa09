// Tokenizer throughput: encodes a text file's documents with our tokenizer on 1 thread and on all cores (encode_batch)
// and prints tokens/s; benchmarks/tokenizer_benchmark.sh runs it beside Hugging Face's library (Node, encodeBatch) on
// the same documents and the same machine.
//
//   tokenizer_benchmark TOKENIZER TEXT_FILE [repeats]
//
// Documents: the file cut at blank lines, pieces joined until each is at least 2000 bytes (tokenizer_benchmark.js
// cuts the same way, so both sides count the same tokens; the total is printed to check it). Each configuration is
// timed `repeats` times (default 3) after one warm-up pass; the best wall time is reported, with the process's CPU time
// of that pass (all threads): on a machine shared with other work, tokens per CPU second is the steadier figure.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/tokenizer/tokenizer.h"

namespace {

std::vector<std::string> read_documents(const std::string& file) {
  std::ifstream stream(file, std::ios::binary);
  if (!stream) throw fast_llm::Error("benchmark", fmt::format("{}: cannot open", file));
  std::stringstream buffer;
  buffer << stream.rdbuf();
  const std::string text = buffer.str();
  std::vector<std::string> documents;
  std::string current;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n\n", start);
    end = end == std::string::npos ? text.size() : end + 2;
    current.append(text, start, end - start);
    start = end;
    if (current.size() >= 2000) documents.push_back(std::move(current)), current.clear();
  }
  if (!current.empty()) documents.push_back(std::move(current));
  return documents;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tokenizer_benchmark TOKENIZER TEXT_FILE [repeats]\n");
    return 2;
  }
  try {
    const auto tokenizer = fast_llm::tokenizer::Tokenizer::load(argv[1]);
    const auto documents = read_documents(argv[2]);
    const int repeats = argc > 3 ? std::max(1, std::atoi(argv[3])) : 3;
    std::vector<std::string_view> views(documents.begin(), documents.end());
    size_t bytes = 0;
    for (const auto& document : documents) bytes += document.size();
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (const int threads : {1, cores}) {
      size_t tokens = 0;
      double best = 1e30, best_cpu = 0;
      const auto cpu_seconds = [] {
        timespec time;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time);
        return time.tv_sec + time.tv_nsec * 1e-9;
      };
      for (int run = 0; run <= repeats; ++run) {
        const double cpu_start = cpu_seconds();
        const auto start = std::chrono::steady_clock::now();
        const auto ids = tokenizer->encode_batch(views, false, threads);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double cpu = cpu_seconds() - cpu_start;
        tokens = 0;
        for (const auto& document_ids : ids) tokens += document_ids.size();
        if (run > 0 && seconds < best) best = seconds, best_cpu = cpu;  // run 0 warms the caches and the pages
      }
      std::printf("fast-llm threads=%d documents=%zu bytes=%zu tokens=%zu seconds=%.4f tokens_per_second=%.0f "
                  "cpu_seconds=%.4f tokens_per_cpu_second=%.0f\n",
                  threads, documents.size(), bytes, tokens, best, tokens / best, best_cpu, tokens / best_cpu);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  return 0;
}
