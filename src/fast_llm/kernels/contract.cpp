#include "fast_llm/kernels/contract.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "fast_llm/core/error.h"

namespace fast_llm::kernels {

void OpContract::on_device(std::string_view name, const Tensor& tensor) const {
  FLM_CHECK(tensor.defined(), op_, "{} is undefined", name);
  FLM_CHECK(tensor.device() == device_, op_, "{} is on {}, expected {}", name, tensor.device().str(), device_.str());
}

void OpContract::rank(std::string_view name, const Tensor& tensor, int rank, std::string_view layout) const {
  on_device(name, tensor);
  FLM_CHECK(tensor.rank() == rank, op_, "{} has shape {}, expected {}", name, tensor.shape().str(), layout);
}

void OpContract::shape(std::string_view name, const Tensor& tensor, const Shape& expected) const {
  on_device(name, tensor);
  FLM_CHECK(tensor.shape() == expected, op_, "{} has shape {}, expected {}", name, tensor.shape().str(),
            expected.str());
}

void OpContract::shape(std::string_view name, const Tensor* tensor, const Shape& expected) const {
  if (tensor != nullptr) shape(name, *tensor, expected);
}

void OpContract::floating(std::string_view name, const Tensor& tensor) const {
  dtype(name, tensor, {DType::float32, DType::float64, DType::bfloat16, DType::float16});
}

void OpContract::dtype(std::string_view name, const Tensor& tensor, std::initializer_list<DType> supported) const {
  const bool found = std::find(supported.begin(), supported.end(), tensor.dtype()) != supported.end();
  if (found) return;
  std::string names;
  for (const DType dtype : supported) names += fmt::format("{}{}", names.empty() ? "" : ", ", dtype_name(dtype));
  FLM_CHECK(found, op_, "{} has dtype {}; supported: {}", name, dtype_name(tensor.dtype()), names);
}

void OpContract::same_dtype(std::string_view name, const Tensor& tensor, std::string_view reference_name,
                            const Tensor& reference) const {
  FLM_CHECK(tensor.dtype() == reference.dtype(), op_, "{} has dtype {}, {} has {}; they must match", name,
            dtype_name(tensor.dtype()), reference_name, dtype_name(reference.dtype()));
}

void OpContract::contiguous(std::string_view name, const Tensor& tensor) const {
  FLM_CHECK(tensor.is_contiguous(), op_, "{} is not contiguous (shape {}, strides {})", name, tensor.shape().str(),
            tensor.strides().str());
}

void OpContract::loss_sum(std::string_view name, const Tensor& tensor) const {
  shape(name, tensor, Shape{1});
  dtype(name, tensor, {DType::float32, DType::float64});
}

void OpContract::loss_sum(std::string_view name, const Tensor* tensor) const {
  if (tensor != nullptr) loss_sum(name, *tensor);
}

int64_t check_head_loss_operands(const OpContract& contract, const Tensor& logits, const Tensor& labels,
                                 const Tensor& loss_sum, const Tensor* grad_logits) {
  contract.rank("logits", logits, 2, "(tokens, vocab)");
  contract.floating("logits", logits);
  FLM_CHECK(logits.size(1) > 0, contract.op(), "logits has shape {}: the vocabulary is empty", logits.shape().str());
  contract.shape("labels", labels, Shape{logits.size(0)});
  contract.dtype("labels", labels, {DType::int64});
  contract.loss_sum("loss_sum", loss_sum);
  if (grad_logits != nullptr) {
    contract.shape("grad_logits", *grad_logits, logits.shape());
    contract.same_dtype("grad_logits", *grad_logits, "logits", logits);
  }
  return logits.size(0);
}

}  // namespace fast_llm::kernels
