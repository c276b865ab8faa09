// loss_op_io (benchmarks/loss_op_io.cpp) as tools/loss_torch_check.py uses it: the process is run on safetensors files
// written here, and its outputs are read back. Values worked by hand on tiny inputs (a uniform row: loss log 3, softmax
// 1/3; the distillation term against a teacher of (1/4, 1/2, 1/4)), the metric sums of a policy op, and bad input:
// each refusal exits 1 and names the tensor, key or variant.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "fast_llm/engine/checkpoint/safetensors.h"
#include "fast_llm/kernels/policy_gradient.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm {
namespace {

namespace fs = std::filesystem;

struct ProcessResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

class LossOpIo : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() /
              ("fast_llm_loss_op_io_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(folder_);
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  // Writes `tensors` (contiguous CPU tensors) as `name` in the test's folder.
  fs::path inputs(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& tensors) {
    std::vector<engine::SafetensorsEntry> entries;
    for (const auto& [tensor_name, tensor] : tensors)
      entries.push_back(
          {.name = tensor_name, .dtype = tensor.dtype(), .shape = tensor.shape(), .values = [tensor] { return tensor; }});
    engine::write_safetensors(folder_ / name, entries);
    return folder_ / name;
  }

  ProcessResult run(const std::string& arguments) {
    const std::string command = std::string("\"") + FAST_LLM_LOSS_OP_IO + "\" " + arguments + " 2>&1";
    ProcessResult result;
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return result;
    char buffer[512];
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) result.output += buffer;
    const int status = pclose(pipe);
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
  }

  fs::path folder_;
};

Tensor float64_tensor(const std::vector<float>& values, const Shape& shape) {
  return Tensor::from_values(values, shape, DType::float64);
}

std::vector<double> values_of(const engine::SafetensorsFile& file, const std::string& name) {
  const Tensor tensor = file.read(name, DType::float64);
  const double* data = tensor.data_as<double>();
  return std::vector<double>(data, data + tensor.numel());
}

TEST_F(LossOpIo, CrossEntropyOfAUniformRowByHand) {
  // Row 0: three equal logits, label 2: loss log 3, z-loss (log 3)^2, gradient (1/3, 1/3, -2/3) times label_weight
  // plus z_loss_weight 2 log 3 / 3. Row 1 is masked: nothing added, gradient 0.
  const fs::path input = inputs("in.safetensors", {{"logits", float64_tensor({0, 0, 0, 5, -1, 2}, Shape{2, 3})},
                                                   {"labels", Tensor::from_indices(std::vector<int64_t>{2, -100},
                                                                                    DType::int64)}});
  const ProcessResult result = run(fmt::format("cross_entropy {} {} label_weight=0.5 z_loss_weight=0.1", input.string(),
                                     (folder_ / "out.safetensors").string()));
  ASSERT_EQ(result.status, 0) << result.output;
  const engine::SafetensorsFile output(folder_ / "out.safetensors");
  const double log3 = std::log(3.0);
  EXPECT_NEAR(values_of(output, "loss_sum")[0], log3, 1e-12);
  EXPECT_NEAR(values_of(output, "z_loss_sum")[0], log3 * log3, 1e-12);
  const std::vector<double> grad = values_of(output, "grad_logits");
  const double z_term = 0.1 * 2.0 * log3 / 3.0;
  const std::vector<double> expected = {0.5 / 3 + z_term, 0.5 / 3 + z_term, -1.0 / 3 + z_term, 0, 0, 0};
  for (size_t index = 0; index < expected.size(); ++index) EXPECT_NEAR(grad[index], expected[index], 1e-12) << index;
  EXPECT_EQ(output.metadata().at("variant"), "cross_entropy_forward_backward:cpu:reference");
}

TEST_F(LossOpIo, DistillationTermByHand) {
  // Row 0: three equal logits (q = 1/3 each), label 2, teacher logits (0, log 2, 0) (p = 1/4, 1/2, 1/4): the
  // distillation's cross_entropy -sum p log q = log 3, its gradient weight (q - p) = 2 (1/12, -1/6, 1/12), added to the
  // label loss's 0.5 (1/3, 1/3, -2/3). Row 1 is masked: nothing added, gradient 0.
  const double log2 = std::log(2.0), log3 = std::log(3.0);
  const fs::path input = inputs(
      "in.safetensors",
      {{"logits", float64_tensor({0, 0, 0, 5, -1, 2}, Shape{2, 3})},
       {"target_logits", float64_tensor({0, float(log2), 0, 1, 2, 3}, Shape{2, 3})},
       {"labels", Tensor::from_indices(std::vector<int64_t>{2, -100}, DType::int64)}});
  const ProcessResult result = run(fmt::format("distillation_term {} {} label_weight=0.5 weight=2", input.string(),
                                               (folder_ / "out.safetensors").string()));
  ASSERT_EQ(result.status, 0) << result.output;
  const engine::SafetensorsFile output(folder_ / "out.safetensors");
  EXPECT_NEAR(values_of(output, "loss_sum")[0], log3, 1e-12);
  EXPECT_NEAR(values_of(output, "z_loss_sum")[0], log3 * log3, 1e-12);
  const std::vector<double> grad = values_of(output, "grad_logits");
  const std::vector<double> expected = {1.0 / 3, -1.0 / 6, -1.0 / 6, 0, 0, 0};
  // log 2 went through a float: p is (1/4, 1/2, 1/4) to 1e-7.
  for (size_t index = 0; index < expected.size(); ++index) EXPECT_NEAR(grad[index], expected[index], 1e-7) << index;
  EXPECT_EQ(output.metadata().at("variant"), "cross_entropy_forward_backward:cpu:reference");
}

TEST_F(LossOpIo, GrpoWritesTheLossAndEveryMetricSum) {
  // One document of two labels whose old log-probabilities are the new ones (log 1/2: two equal logits): ratio 1, no
  // clipping, loss -(a_0 + a_1), KL 0; a third, masked row adds nothing.
  const fs::path input = inputs(
      "in.safetensors",
      {{"logits", float64_tensor({1, 1, 0, 0, 3, 4}, Shape{3, 2})},
       {"labels", Tensor::from_indices(std::vector<int64_t>{0, 1, -100}, DType::int64)},
       {"advantages", Tensor::from_values(std::vector<float>{0.5f, 1.5f, 9.0f}, Shape{3})},
       {"old_log_probabilities", Tensor::from_values(std::vector<float>{-0.6931472f, -0.6931472f, 0.0f}, Shape{3})},
       {"label_documents", Tensor::from_indices(std::vector<int64_t>{0, 0, 0}, DType::int32)}});
  const ProcessResult result =
      run(fmt::format("grpo {} {} num_documents=1", input.string(), (folder_ / "out.safetensors").string()));
  ASSERT_EQ(result.status, 0) << result.output;
  const engine::SafetensorsFile output(folder_ / "out.safetensors");
  EXPECT_NEAR(values_of(output, "loss_sum")[0], -2.0, 1e-6);
  const std::vector<double> metrics = values_of(output, "metric_sums");
  ASSERT_EQ(metrics.size(), size_t(kernels::kPolicyMetricCount));
  EXPECT_NEAR(metrics[size_t(kernels::PolicyMetric::ratio_new_old)], 1.0, 1e-6);
  EXPECT_NEAR(metrics[size_t(kernels::PolicyMetric::advantage)], 1.0, 1e-7);
  EXPECT_NEAR(metrics[size_t(kernels::PolicyMetric::entropy)], std::log(2.0), 1e-12);
  EXPECT_EQ(metrics[size_t(kernels::PolicyMetric::num_tokens)], 2.0);
  EXPECT_EQ(metrics[size_t(kernels::PolicyMetric::num_segments)], 1.0);
  EXPECT_EQ(output.metadata().at("metric_names").substr(0, 13), "new_logprobs,");
}

TEST_F(LossOpIo, BadInputIsRefusedNamingWhatIsWrong) {
  const Tensor logits = float64_tensor({0, 1, 2, 3}, Shape{2, 2});
  const std::string out = (folder_ / "out.safetensors").string();
  const fs::path no_labels = inputs("no_labels.safetensors", {{"logits", logits}});
  const fs::path int32_labels = inputs(
      "int32_labels.safetensors",
      {{"logits", logits}, {"labels", Tensor::from_indices(std::vector<int64_t>{0, 1}, DType::int32)}});
  const fs::path short_labels = inputs(
      "short_labels.safetensors",
      {{"logits", logits}, {"labels", Tensor::from_indices(std::vector<int64_t>{0}, DType::int64)}});
  const fs::path good = inputs(
      "good.safetensors",
      {{"logits", logits}, {"labels", Tensor::from_indices(std::vector<int64_t>{0, 1}, DType::int64)}});

  const std::vector<std::pair<std::string, std::string>> cases = {
      {fmt::format("cross_entropy {} {}", no_labels.string(), out), "no tensor 'labels'"},
      {fmt::format("cross_entropy {} {}", int32_labels.string(), out), "'labels' has dtype I32, expected I64"},
      {fmt::format("cross_entropy {} {}", short_labels.string(), out), "'labels' has shape [1], expected [2]"},
      {fmt::format("distillation {} {}", good.string(), out), "no tensor 'target_logits'"},
      {fmt::format("distillation_term {} {}", good.string(), out), "no tensor 'target_logits'"},
      {fmt::format("cross_entropy {} {} label_wieght=2", good.string(), out), "key 'label_wieght' is not a parameter"},
      {fmt::format("cross_entropy {} {} label_weight=two", good.string(), out), "label_weight=two: expected a finite"},
      {fmt::format("cross_entropy {} {} variant=nonexistent", good.string(), out), "no variant named 'nonexistent'"},
      {fmt::format("grpo {} {}", good.string(), out), "no tensor 'advantages'"},
      {fmt::format("softmax {} {}", good.string(), out), "unknown op 'softmax'"},
      {fmt::format("cross_entropy {} {}", (folder_ / "missing.safetensors").string(), out), "missing.safetensors"}};
  for (const auto& [arguments, message] : cases) {
    const ProcessResult result = run(arguments);
    EXPECT_EQ(result.status, 1) << arguments << "\n" << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos) << arguments << "\n" << result.output;
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(run("cross_entropy only_two_arguments").status, 2);
}

}  // namespace
}  // namespace fast_llm
