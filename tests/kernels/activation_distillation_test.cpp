// Tests of the CPU reference activation_distillation_forward_backward (kernels/cpu/activation_distillation.cpp): the
// loss against the sum of per-token L2 norms written here, the gradient against fp64 finite differences, a student
// equal to its teacher (loss 0, gradient 0), float32 against float64, errors.
#include "fast_llm/kernels/activation_distillation.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

double naive_loss(const std::vector<double>& student, const std::vector<double>& teacher, int64_t hidden) {
  double total = 0;
  for (size_t token = 0; token < student.size() / size_t(hidden); ++token) {
    double squared = 0;
    for (int64_t column = 0; column < hidden; ++column) {
      const double difference = student[token * size_t(hidden) + size_t(column)] -
                                teacher[token * size_t(hidden) + size_t(column)];
      squared += difference * difference;
    }
    total += std::sqrt(squared);
  }
  return total;
}

double run(const Tensor& student, const Tensor& teacher, Tensor* grad, double weight = 1.0) {
  Tensor loss_sum = filled(Shape{1}, DType::float64, 0.0);
  activation_distillation_forward_backward(
      {.student = student, .teacher = teacher, .loss_sum = loss_sum, .grad = grad, .weight = weight});
  return values_of(loss_sum)[0];
}

TEST(ActivationDistillationReference, MatchesFormulaAndFiniteDifferences) {
  const int64_t tokens = 5, hidden = 4;
  Tensor student = random_tensor(Shape{tokens, hidden}, DType::float64, 81);
  const Tensor teacher = random_tensor(Shape{tokens, hidden}, DType::float64, 82);
  Tensor grad = filled(Shape{tokens, hidden}, DType::float64, 9.0);
  const double loss = run(student, teacher, &grad, 0.3);
  const std::vector<double> teacher_values = values_of(teacher);
  auto objective = [&] { return naive_loss(values_of(student), teacher_values, hidden); };
  EXPECT_NEAR(loss, objective(), 1e-12);
  std::vector<double> expected = finite_difference_gradient(student, objective);
  for (double& value : expected) value *= 0.3;
  expect_near(grad, expected, 1e-9, 1e-7, "grad");
}

TEST(ActivationDistillationReference, StudentEqualToTeacher) {
  const Tensor student = random_tensor(Shape{3, 6}, DType::float64, 83);
  Tensor grad = filled(Shape{3, 6}, DType::float64, 9.0);
  EXPECT_EQ(run(student, student, &grad), 0.0);
  for (double value : values_of(grad)) EXPECT_EQ(value, 0.0);
}

TEST(ActivationDistillationReference, Float32MatchesFloat64AndErrors) {
  const Tensor student = random_tensor(Shape{4, 5}, DType::float64, 84);
  const Tensor teacher = random_tensor(Shape{4, 5}, DType::float32, 85);
  Tensor grad64 = filled(Shape{4, 5}, DType::float64, 0.0), grad32 = filled(Shape{4, 5}, DType::float32, 0.0);
  EXPECT_NEAR(run(converted(student, DType::float32), teacher, &grad32), run(student, teacher, &grad64), 1e-5);
  expect_near(grad32, values_of(grad64), 1e-6, 1e-5, "grad");
  const Tensor other = random_tensor(Shape{4, 6}, DType::float64, 86);
  expect_error([&] { run(student, other, nullptr); }, "teacher");
}

}  // namespace
}  // namespace fast_llm::kernels
