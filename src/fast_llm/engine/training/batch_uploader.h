// Host batches from the data library as the layers see them (layers::MicroBatch): tokens, labels at distance 1 and
// positions int64, cu_seqlens int32, the segment lengths on the host, and the rows that carry a loss
// (layers/language_model/loss_rows.h: the head's compacted rows, found here on the host). With `share_prompt_rows` and
// the preference-span rule, a batch whose pairs repeat their prompt rows goes up as its computed rows with attention's
// maps (data/shared_prompts.h, MicroBatch::attention_rows).
//
// On the CPU the tensors wrap the batch's own vectors (no copy; the batch is kept alive by them). On a GPU each batch is
// packed into a page-locked host buffer and copied to the device with one cudaMemcpyAsync on the uploader's own stream,
// so the copy overlaps whatever the compute stream is running (the previous micro-batches or step); an event recorded
// after the copy makes the compute stream, not the host, wait for it. The device memory comes from the upload
// stream's pool and is marked as used on the compute stream, so it is reused only once the compute work queued before
// it was freed has finished.
//
// The page-locked buffers form a ring of `slots` (two steps' worth of micro-batches is plenty): a slot is refilled
// only after its previous copy finished, which the host checks with that copy's event (long done in practice, as the
// copy was queued slots uploads earlier). Buffers grow to the largest batch seen and are never freed during training
// (releasing page-locked memory waits for the device).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/data/batch.h"
#include "fast_llm/layers/context.h"
#include "fast_llm/layers/loss_row_rule.h"
#include "fast_llm/tensor/stream.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::engine {

class BatchUploader {
 public:
  // `compute_stream`: the stream the layers will read the batches on; `loss_row_rule`: the model's
  // (BaseModel::loss_row_rule), by which the loss rows are found; `share_prompt_rows`: whether the model computes
  // shared prompt rows once (BaseModel::computes_shared_prompts_once and a layout without sequence pieces).
  BatchUploader(Device device, Stream compute_stream, int slots,
                layers::LossRowRule loss_row_rule = layers::LossRowRule::labelled, bool share_prompt_rows = false);
  BatchUploader(const BatchUploader&) = delete;
  BatchUploader& operator=(const BatchUploader&) = delete;

  // The batch on the device, ready for work queued on the compute stream from now on. Refuses multi-token prediction
  // batches (predicted_tokens > 1).
  layers::MicroBatch upload(const std::shared_ptr<const data::Batch>& original);

 private:
  struct Slot {
    Tensor buffer;  // (bytes) uint8, page-locked host memory
    std::unique_ptr<Event> copied;
    bool in_flight = false;
  };

  Device device_;
  Stream compute_stream_;
  layers::LossRowRule loss_row_rule_;
  bool share_prompt_rows_;
  bool logged_shared_prompt_rows_ = false;  // the first shared batch is logged
  Stream upload_stream_;
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;
};

}  // namespace fast_llm::engine
