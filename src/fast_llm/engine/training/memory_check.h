// The memory a training run will need, estimated before it allocates anything big, against what the machine has: a run
// that cannot fit stops at start-up with both numbers instead of failing out of memory after minutes of work.
//
// On the run's device (host memory for a CPU run):
//   - each stage's flat buffers, exactly as the multi-stage layout allocates them (stage_buffer_bytes), and the
//     optimizer's table of learning rates (one fp64 per step);
//   - activations: the peak of this rank's steps of the schedule (engine/schedule/activation_memory.h), from what
//     each layer keeps and works with on this rank's layout (TrainerSections::activations; GPT's is derived in
//     models/gpt/training.h): only the stages this pipeline rank runs, as many micro-batches of them as its steps
//     keep at once (the breadth-first micro-batches on its early stages), the tensor rank's share, the pieces of
//     micro_batch_splits and sequence-data parallelism, and the head's logits on the rank running the head only;
//   - on a CPU run with data-parallel ranks, Gloo's reduce-scatter scratch (a copy of the largest stage's gradients).
// In host memory:
//   - the sampling index of each dataset the run samples (data/sampling.h): a start and an offset per sample, and the
//     document order over the epochs the samples walk through, counted twice (the index is copied when it is written
//     to the cache). The order needs the datasets' document and token counts: it is counted for memmap,
//     concatenated, slice and blended datasets; a `file` dataset is known only when it is sampled, so only its
//     per-sample part is counted.
// Available: available_memory (core/device.h: MemAvailable, or the GPU's free memory) plus what the caching allocator
// holds unused. The check refuses a run whose estimate exceeds it; where the system does not say, it checks nothing.
// What a rank then really allocates is compared with its estimate at each log (Trainer: a warning when it went beyond).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/data/config.h"
#include "fast_llm/data/sampling.h"

namespace fast_llm::engine {

struct MemoryEstimate {
  struct Part {
    std::string what;  // e.g. "activations of 1 micro-batch of 4,096 tokens"
    int64_t bytes = 0;
  };
  std::vector<Part> device;  // on the run's device
  std::vector<Part> host;    // in host memory (where everything goes on a CPU run)
};

// Bytes of the sampling index of `num_samples` samples of `dataset` (the rules above).
int64_t sampling_index_bytes(const config::Dynamic<data::DatasetConfig>& dataset,
                             const data::SamplingParameters& parameters, int64_t num_samples);

// Throws Error("memory", ...) listing the parts, their sum and what is available, when the sum exceeds what is
// available on `device` (and, for a GPU run, when the host parts exceed the host's). The estimate is logged on rank 0,
// or on every rank with `every_rank` (the ranks of a model-parallel layout each estimate their own share).
void check_memory(const MemoryEstimate& estimate, Device device, bool every_rank = false);

}  // namespace fast_llm::engine
