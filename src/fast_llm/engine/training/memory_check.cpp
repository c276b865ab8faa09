// The memory check at the start of a run.
#include "fast_llm/engine/training/memory_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/data/dataset.h"
#include "fast_llm/engine/training/metrics.h"
#include "fast_llm/tensor/allocator.h"

namespace fast_llm::engine {
namespace {

constexpr double kMebibyte = 1024.0 * 1024.0;

std::string mebibytes(int64_t bytes) { return format_with_commas(double(bytes) / kMebibyte, 2) + " MiB"; }

int64_t sum(const std::vector<MemoryEstimate::Part>& parts) {
  int64_t total = 0;
  for (const auto& part : parts) total += part.bytes;
  return total;
}

// Entries of the document order a sampling of `num_samples` samples walks through: whole epochs of the dataset's
// documents (the last one only partly used, but built whole). Zero when the dataset is known only once sampled.
int64_t document_order_entries(const config::Dynamic<data::DatasetConfig>& dataset,
                               const data::SamplingParameters& parameters, int64_t num_samples) {
  const auto* indexed = dataset.as<data::IndexedDatasetConfig>();
  if (!indexed || dataset.is<data::DatasetFromFileConfig>()) return 0;
  const std::shared_ptr<data::IndexedDataset> built = indexed->build();
  const int64_t tokens = std::max<int64_t>(1, built->num_tokens());
  // Without truncation a sample may waste up to a document's worth of padding: count whole samples of tokens.
  const double sampled = double(num_samples) * double(parameters.sample_size());
  const double epochs = std::ceil(sampled / double(tokens)) + (parameters.truncate_documents ? 0 : 1);
  return int64_t(epochs * double(built->num_documents()));
}

}  // namespace

int64_t sampling_index_bytes(const config::Dynamic<data::DatasetConfig>& dataset,
                             const data::SamplingParameters& parameters, int64_t num_samples) {
  if (dataset.is<data::RandomDatasetConfig>()) return 0;
  if (const auto* blended = dataset.as<data::BlendedDatasetConfig>()) {
    // Each dataset samples one more than its share (BlendedDatasetConfig); the blend keeps a dataset index (int32)
    // and a sample index (int64) per sample.
    int64_t bytes = num_samples * 12;
    for (size_t index = 0; index < blended->datasets.size(); ++index) {
      const int64_t share = int64_t(std::ceil(blended->weights[index] * double(num_samples))) + 1;
      bytes += sampling_index_bytes(blended->datasets[index], parameters, share);
    }
    return bytes;
  }
  // Fill-in-the-middle rewrites samples as they are read: the index is the wrapped dataset's.
  if (const auto* fim = dataset.as<data::FimDatasetConfig>())
    return sampling_index_bytes(fim->dataset, parameters, num_samples);
  const int64_t entries = 2 * num_samples + 1 + document_order_entries(dataset, parameters, num_samples);
  return 2 * 8 * entries;
}

void check_memory(const MemoryEstimate& estimate, Device device, bool every_rank) {
  auto describe = [](const std::vector<MemoryEstimate::Part>& parts) {
    std::string text;
    for (const auto& part : parts) text += fmt::format("\n  {}: {}", part.what, mebibytes(part.bytes));
    return text;
  };
  auto check = [&](Device where, const std::vector<MemoryEstimate::Part>& parts, std::string_view memory) {
    const std::optional<AvailableMemory> available = available_memory(where);
    if (!available) return;
    // Memory the caching allocator already holds is free for this run too.
    const AllocatorStats held = allocator_for(where).stats();
    const int64_t usable = int64_t(available->bytes) + int64_t(held.reserved_bytes - held.allocated_bytes);
    const int64_t needed = sum(parts);
    const std::string line = fmt::format("Estimated {}: {} of {} available ({}):{}", memory, mebibytes(needed),
                                         mebibytes(usable), available->source, describe(parts));
    if (every_rank)
      log_info("{}", line);
    else
      log_main("{}", line);
    if (needed <= usable) return;
    throw Error("memory",
                fmt::format("this run needs about {} of {} and {} has {} ({}); the estimate:{}\nLower "
                            "data.micro_batch_size, the model size or the number of training steps, or run "
                            "where there is more memory",
                            mebibytes(needed), memory, where.str(), mebibytes(usable), available->source,
                            describe(parts)));
  };
  if (device.is_cpu()) {
    std::vector<MemoryEstimate::Part> all = estimate.device;
    all.insert(all.end(), estimate.host.begin(), estimate.host.end());
    check(device, all, "host memory");
    return;
  }
  check(device, estimate.device, "device memory");
  check(Device::cpu(), estimate.host, "host memory");
}

}  // namespace fast_llm::engine
