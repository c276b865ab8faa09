// A dpo micro-batch for the tests of shared prompt rows (data/shared_prompts.h), built and uploaded as training does.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/data_test_util.h"
#include "fast_llm/data/batch.h"
#include "fast_llm/engine/training/batch_uploader.h"

namespace fast_llm::layers::testing {

using data::testing::preference_document;

// `documents` packed into one micro-batch of `micro_batch_size` inputs and uploaded on `device` for a dpo loss reading
// the reference model `reference`, with the pairs' shared prompt rows left out or not. The reference's label
// log-probabilities are made up (-0.5 - 0.05 per loss row, in `reference_dtype`), the same at the same loss rows; the
// step's label and pair counts are this batch's.
inline MicroBatch dpo_micro_batch(const std::vector<data::Document>& documents, int64_t micro_batch_size,
                                  Device device, DType reference_dtype, bool share_prompt_rows) {
  const auto batch = std::make_shared<const data::Batch>(
      data::make_batch(documents, {.micro_batch_size = micro_batch_size}));
  engine::BatchUploader uploader(device, Stream{}, 1, LossRowRule::preference_spans, share_prompt_rows);
  MicroBatch micro_batch = uploader.upload(batch);
  const int64_t loss_rows = micro_batch.loss_rows.numel();
  std::vector<float> reference(static_cast<size_t>(loss_rows));
  for (size_t row = 0; row < reference.size(); ++row) reference[row] = -0.5f - 0.05f * float(row);
  micro_batch.reference_label_log_probabilities["reference"] =
      Tensor::from_values(reference, Shape{loss_rows}, reference_dtype).to(device);
  micro_batch.labels_in_step = batch->num_labels(1);
  micro_batch.preference_pairs_in_step = int64_t(batch->preference_pairs.size());
  // The upload's page-locked buffer goes with the uploader.
  synchronize_device(device);
  return micro_batch;
}

}  // namespace fast_llm::layers::testing
