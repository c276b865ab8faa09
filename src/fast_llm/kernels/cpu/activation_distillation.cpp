// CPU reference of activation_distillation_forward_backward (kernels/activation_distillation.h): one token at a time,
// the difference and its norm in fp64 (whatever the dtypes), per-token norms summed in token order (deterministic).
#include "fast_llm/kernels/activation_distillation.h"

#include <cmath>
#include <vector>

#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

void activation_distillation_reference(const ActivationDistillationArgs& args) {
  const int64_t tokens = args.student.size(0), hidden = args.student.size(1);
  const std::vector<double> student = read_values<double>(args.student);  // (tokens, hidden)
  const std::vector<double> teacher = read_values<double>(args.teacher);  // (tokens, hidden)
  std::vector<double> norms(size_t(tokens), 0.0), grad(args.grad != nullptr ? student.size() : 0, 0.0);
#pragma omp parallel for
  for (int64_t token = 0; token < tokens; ++token) {
    double squared = 0;
    for (int64_t column = 0; column < hidden; ++column) {
      const size_t index = size_t(token * hidden + column);
      squared += (student[index] - teacher[index]) * (student[index] - teacher[index]);
    }
    const double norm = std::sqrt(squared);
    norms[size_t(token)] = norm;
    if (args.grad == nullptr || norm == 0.0) continue;
    for (int64_t column = 0; column < hidden; ++column) {
      const size_t index = size_t(token * hidden + column);
      grad[index] = args.weight * (student[index] - teacher[index]) / norm;
    }
  }
  double loss = 0;
  for (const double norm : norms) loss += norm;
  write_values<double>(args.loss_sum, std::vector<double>{loss}, /*accumulate=*/true);
  if (args.grad != nullptr) write_values<double>(*args.grad, grad, /*accumulate=*/false);
}

}  // namespace

FLM_REGISTER_KERNEL(ActivationDistillationForwardBackward, DeviceType::cpu, "reference", /*priority=*/0,
                    KernelKind::baseline, nullptr, &activation_distillation_reference,
                    "per token: the L2 norm of the difference and its gradient, in fp64");

}  // namespace fast_llm::kernels::cpu
