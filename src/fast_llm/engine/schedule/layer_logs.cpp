#include "fast_llm/engine/schedule/layer_logs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/core/half.h"

namespace fast_llm::engine {

namespace {

// Python's str() of a tuple of ints: "(4, 8)", "(4,)".
std::string python_tuple(const Shape& dims) {
  if (dims.rank() == 1) return fmt::format("({},)", dims[0]);
  return fmt::format("({})", fmt::join(dims, ", "));
}

// The values of `tensor` (row-major order) as doubles, read on the host.
std::vector<double> host_values(const Tensor& tensor) {
  FLM_CHECK(tensor.is_contiguous(), "logging", "tensor logs read contiguous tensors only");
  const Tensor host = tensor.device().is_cuda() ? tensor.to(Device::cpu()) : tensor;
  std::vector<double> values(size_t(host.numel()));
  for (size_t i = 0; i < values.size(); ++i) switch (host.dtype()) {
      case DType::float32: values[i] = host.data_as<float>()[i]; break;
      case DType::float64: values[i] = host.data_as<double>()[i]; break;
      case DType::bfloat16: values[i] = to_float(host.data_as<bfloat16>()[i]); break;
      case DType::float16: values[i] = to_float(host.data_as<float16>()[i]); break;
      case DType::int32: values[i] = double(host.data_as<int32_t>()[i]); break;
      case DType::int64: values[i] = double(host.data_as<int64_t>()[i]); break;
      case DType::uint8: values[i] = double(host.data_as<uint8_t>()[i]); break;
      case DType::uint16: values[i] = double(host.data_as<uint16_t>()[i]); break;
      case DType::uint32: values[i] = double(host.data_as<uint32_t>()[i]); break;
    }
  return values;
}

}  // namespace

std::string format_number(double value) {
  const double digits = value == 0.0 ? 0.0 : std::log10(std::fabs(value));
  if (std::isfinite(digits) && std::floor(digits) > -3 && std::floor(digits) < 7) return fmt::format("{:.4f}", value);
  return fmt::format("{:.3e}", value);
}

std::string describe_tensor(const std::string& name, const Tensor& tensor, int level) {
  FLM_CHECK(level >= 1, "logging", "tensor log level {} (must be at least 1)", level);
  const Shape shape = tensor.shape().rank() == 0 ? Shape{1} : tensor.shape();
  const Shape strides = tensor.shape().rank() == 0 ? Shape{1} : tensor.strides();
  struct Column {
    std::string prefix;  // empty for the name
    std::string value;
    size_t width;
  };
  std::vector<Column> columns{{"", name, 50},
                              {"shape", python_tuple(shape), 18},
                              {"dtype", std::string(dtype_name(tensor.dtype())), 9},
                              {"device", tensor.device().str(), 7}};
  if (level >= 2) {
    const std::vector<double> values = host_values(tensor);
    double sum = 0.0;
    for (double value : values) sum += value;
    const double mean = values.empty() ? std::nan("") : sum / double(values.size());
    double squares = 0.0;
    for (double value : values) squares += (value - mean) * (value - mean);
    const double deviation = values.size() > 1 ? std::sqrt(squares / double(values.size() - 1)) : std::nan("");
    columns.push_back({"mu", format_number(mean), 10});
    columns.push_back({"std", format_number(deviation), 10});
    columns.push_back({"stride", python_tuple(strides), 20});
    if (level >= 3) {
      const int64_t target = int64_t(1) << std::min(level - 3, 40);
      int64_t step = std::max<int64_t>(int64_t(values.size()) / target, 1);
      auto divides_a_dimension = [&](int64_t candidate) {
        for (int64_t size : shape)
          if (size > 1 && candidate % size == 0) return true;
        return false;
      };
      while (step > 1 && divides_a_dimension(step)) --step;
      std::vector<std::string> samples;
      for (int64_t index = 0; index < target * step && index < int64_t(values.size()) && samples.size() < 8;
           index += step)
        samples.push_back(fmt::format("{:10s}", format_number(values[size_t(index)])));
      columns.push_back({fmt::format("{:21s}", fmt::format("samples (step={})", step)),
                         fmt::format(" ({})", fmt::join(samples, ",")), samples.size() * 11 + 3});
    }
  }
  std::string line;
  size_t width = 0;
  for (const Column& column : columns) {
    const std::string prefix = column.prefix.empty() ? "" : " " + column.prefix + "=";
    width += column.width + prefix.size() + 1;
    line = fmt::format("{:{}s}", line + prefix + column.value, width);
  }
  return line;
}

}  // namespace fast_llm::engine
