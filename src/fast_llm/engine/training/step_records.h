// What the training loop logs about its steps, kept on the device until it logs them.
//
// After each step the trainer hands over the optimizer's decision state and the step's loss sums (device tensors); they
// are copied device to device, on the step's stream, into one row of two device buffers (fp64 optimizer states, loss
// sums in their own dtype), and `read` brings every row since the last read to the host with one copy per buffer. That
// read is where the training loop waits for the device, so it happens only when a log line needs the numbers. When
// more steps than `capacity` pass without a read, the rows are moved to host memory first (one wait per `capacity`
// steps).
//
// The loss names are those of the first step recorded after a read; a step with other names moves the rows recorded
// so far to the host first, so rows always share one layout.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/engine/optimizer/optimizer.h"
#include "fast_llm/layers/context.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::engine {

class StepRecords {
 public:
  struct Step {
    OptimizerStepResult update;
    std::vector<std::pair<std::string, double>> loss_sums;  // by name, in the LossSums' order
    std::vector<layers::LossNormalization> loss_normalizations;  // of each loss sum, in the same order
    int64_t num_labels = 0;
    // The dynamic fp16 loss scaler could still lower its scale when the step ran: a skip of this step is the scaler
    // looking for a scale, not a sign that training diverged.
    bool loss_scale_search = false;
  };

  StepRecords(Device device, int64_t capacity);

  // Queues the copies of one step's numbers on `stream`. `optimizer_state`: (kernels::optimizer_state::size) fp64.
  // `num_labels` and `loss_scale_search` are known on the host and kept as given.
  void record(const Tensor& optimizer_state, const layers::LossSums& losses, int64_t num_labels, bool loss_scale_search,
              Stream stream);
  // Every step recorded since the last read, in order (waits for `stream`), and forgets them.
  std::vector<Step> read(Stream stream);
  int64_t pending() const { return int64_t(host_steps_.size()) + rows_; }
  int64_t capacity() const { return capacity_; }

 private:
  // Moves the device rows to host_steps_.
  void drain(Stream stream);

  Device device_;
  int64_t capacity_;
  std::vector<std::string> loss_names_;
  std::vector<layers::LossNormalization> loss_normalizations_;  // of loss_names_
  std::vector<int64_t> num_labels_;       // (rows_) of the device rows
  std::vector<bool> loss_scale_search_;  // (rows_) of the device rows
  Tensor optimizer_rows_;            // (capacity, optimizer_state::size) fp64
  Tensor loss_rows_;                 // (capacity, loss names) in the loss sums' dtype
  int64_t rows_ = 0;
  std::vector<Step> host_steps_;
};

}  // namespace fast_llm::engine
