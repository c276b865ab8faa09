// Per-step log numbers, gathered on the device.
#include "fast_llm/engine/training/step_records.h"

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/optimizer_ops.h"

namespace fast_llm::engine {

StepRecords::StepRecords(Device device, int64_t capacity) : device_(device), capacity_(capacity) {
  FLM_CHECK(capacity >= 1, "training", "step records need room for at least one step, got {}", capacity);
  optimizer_rows_ = Tensor::empty(Shape{capacity, kernels::optimizer_state::size}, DType::float64, device);
}

void StepRecords::record(const Tensor& optimizer_state, const layers::LossSums& losses, int64_t num_labels,
                         bool loss_scale_search, Stream stream) {
  FLM_ASSERT(optimizer_state.dtype() == DType::float64 && optimizer_state.numel() == kernels::optimizer_state::size &&
                 optimizer_state.is_contiguous() && optimizer_state.device() == device_,
             "optimizer state of shape {} on {}", optimizer_state.shape().str(), optimizer_state.device().str());
  std::vector<std::string> names;
  for (const auto& [name, sum] : losses.all()) names.push_back(name);
  if (rows_ == capacity_ || (rows_ > 0 && names != loss_names_)) drain(stream);
  if (rows_ == 0 && (names != loss_names_ || !loss_rows_.defined())) {
    loss_names_ = names;
    loss_normalizations_.clear();
    for (const std::string& name : names) loss_normalizations_.push_back(losses.normalization(name));
    const DType dtype = losses.all().empty() ? DType::float64 : losses.all().begin()->second.dtype();
    loss_rows_ = Tensor::empty(Shape{capacity_, int64_t(names.size())}, dtype, device_, stream);
  }
  optimizer_rows_.select(0, rows_).copy_bytes_from(optimizer_state, stream);
  int64_t column = 0;
  for (const auto& [name, sum] : losses.all()) {
    FLM_ASSERT(sum.dtype() == loss_rows_.dtype() && sum.numel() == 1, "loss sum {} of dtype {}", name,
               dtype_name(sum.dtype()));
    loss_rows_.select(0, rows_).slice(0, column, column + 1).copy_bytes_from(sum, stream);
    ++column;
  }
  num_labels_.push_back(num_labels);
  loss_scale_search_.push_back(loss_scale_search);
  ++rows_;
}

void StepRecords::drain(Stream stream) {
  if (rows_ == 0) return;
  // One device -> host copy per buffer, then the host waits: the only synchronisation of the training loop.
  Tensor optimizer_host = optimizer_rows_.slice(0, 0, rows_).to(Device::cpu(), stream);
  Tensor loss_host = loss_rows_.slice(0, 0, rows_).to(Device::cpu(), stream);
  const double* states = optimizer_host.data_as<double>();
  const int64_t fields = kernels::optimizer_state::size;
  for (int64_t row = 0; row < rows_; ++row) {
    Step step{.update = step_result_from_state(std::span<const double>(states + row * fields, size_t(fields))),
              .loss_sums = {},
              .loss_normalizations = loss_normalizations_,
              .num_labels = num_labels_[size_t(row)],
              .loss_scale_search = loss_scale_search_[size_t(row)]};
    for (size_t column = 0; column < loss_names_.size(); ++column)
      step.loss_sums.emplace_back(loss_names_[column], loss_host.item_as_double(std::vector<int64_t>{row, int64_t(column)}));
    host_steps_.push_back(std::move(step));
  }
  num_labels_.clear();
  loss_scale_search_.clear();
  rows_ = 0;
}

std::vector<StepRecords::Step> StepRecords::read(Stream stream) {
  drain(stream);
  return std::exchange(host_steps_, {});
}

}  // namespace fast_llm::engine
