// attention benchmark: every CUDA variant of attention_forward / attention_backward but the plain `reference`
// (`wgmma`, `flash`, ...; listed highest priority first: the first is what dispatch runs), causal, bf16, on packed
// documents:
//   (a) 8 documents x 2048, 9 heads in 3 groups, head_size 64
//   (b) 4 x 4096, 32 heads in 8 groups, head_size 64
//   (c) 2 x 4096, 24 heads in 8 groups, head_size 128
//   (d) mixed lengths 4096, 2048, 1024, 512, 300, 150, 50, 10, 2 (8192 tokens), 32 heads in 8 groups, head_size 128
//   (e) as (c) with a 1024-token window
//
//   attention_benchmark [iterations] [--sustained [seconds]]
//
// --sustained adds, per op, its time, energy, power and SM clock when run back to back for `seconds` (1) after half a
// second of heat (benchmarks/sustained_energy.h): the rates at the power cap a training step runs at, and the energy
// per FLOP, to set beside a gemm's (gemm_benchmark --sustained).
//
// Each (case, variant) is first checked on a small shape (documents 300, 77, 1; the case's heads and head_size) against
// the CPU reference on the same inputs (forward output and logsumexp, backward dQ / dK / dV; relative error of the
// norm within 1e-2); one that disagrees is reported and not timed, and the program exits with status 1. Then each op is timed
// with CUDA events on the compute stream: 3 warm-up runs, the median of `iterations` (20) runs. FLOPs count only the
// allowed (query, key) pairs: forward 4 heads head_size pairs (two products), backward 2.5 times that (five products,
// as flash-attention reports it). benchmarks/torch_attention.py measures PyTorch's flash SDPA on the same shapes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/core/half.h"
#include "fast_llm/kernels/attention.h"
#include "fast_llm/tensor/stream.h"
#include "fast_llm/tensor/tensor.h"

#include "device_timing.h"
#include "sustained_energy.h"

namespace fast_llm {
namespace {

using namespace kernels;

struct Case {
  std::string name;
  std::vector<int64_t> document_lengths;
  int64_t heads, groups, head_size;
  std::optional<int64_t> window;

  int64_t tokens() const { return std::accumulate(document_lengths.begin(), document_lengths.end(), int64_t(0)); }
  int64_t longest() const { return *std::max_element(document_lengths.begin(), document_lengths.end()); }
  // Allowed (query, key) pairs of one head: causal, within the window.
  double pairs() const {
    double total = 0;
    for (int64_t length : document_lengths)
      for (int64_t query = 0; query < length; ++query)
        total += double(window ? std::min(query + 1, *window) : query + 1);
    return total;
  }
  double forward_flops() const { return 4.0 * double(heads * head_size) * pairs(); }
};

// A bf16 tensor of uniform values in [low, high) from a fixed seed, on `device`.
Tensor random_bf16(const Shape& shape, uint64_t seed, float low, float high, Device device) {
  Tensor host = Tensor::empty(shape, DType::bfloat16);
  bfloat16* data = host.data_as<bfloat16>();
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < host.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float unit = float(state >> 40) / float(1 << 24);
    data[i] = to_bfloat16(low + (high - low) * unit);
  }
  return device.is_cpu() ? host : host.to(device);
}

Tensor cu_seqlens_of(const std::vector<int64_t>& lengths, Device device) {
  Tensor host = Tensor::empty(Shape{int64_t(lengths.size()) + 1}, DType::int32);
  int32_t* data = host.data_as<int32_t>();
  data[0] = 0;
  for (size_t i = 0; i < lengths.size(); ++i) data[i + 1] = data[i] + int32_t(lengths[i]);
  return device.is_cpu() ? host : host.to(device);
}

// The tensors of one problem on one device.
struct Problem {
  Tensor query, key, value, cu_seqlens, output, logsumexp, grad_output, grad_query, grad_key, grad_value;
  int64_t max_seqlen;
  double softmax_scale;
  std::optional<int64_t> window;

  AttentionForwardArgs forward() {
    return {.query = query, .key = key, .value = value, .cu_seqlens = cu_seqlens, .max_seqlen = max_seqlen,
            .output = output, .logsumexp = logsumexp, .softmax_scale = softmax_scale, .causal = true,
            .window_size = window, .stream = {}};
  }
  AttentionBackwardArgs backward() {
    return {.grad_output = grad_output, .query = query, .key = key, .value = value, .output = output,
            .logsumexp = logsumexp, .cu_seqlens = cu_seqlens, .max_seqlen = max_seqlen, .grad_query = grad_query,
            .grad_key = grad_key, .grad_value = grad_value, .softmax_scale = softmax_scale, .causal = true,
            .window_size = window, .stream = {}};
  }
};

Problem make_problem(const Case& c, const std::vector<int64_t>& lengths, Device device) {
  const int64_t tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  const Shape query_shape{tokens, c.heads, c.head_size}, key_shape{tokens, c.groups, c.head_size};
  return Problem{.query = random_bf16(query_shape, 1, -2, 2, device),
                 .key = random_bf16(key_shape, 2, -2, 2, device),
                 .value = random_bf16(key_shape, 3, -2, 2, device),
                 .cu_seqlens = cu_seqlens_of(lengths, device),
                 .output = Tensor::empty(query_shape, DType::bfloat16, device),
                 .logsumexp = Tensor::empty(Shape{c.heads, tokens}, DType::float32, device),
                 .grad_output = random_bf16(query_shape, 4, -1, 1, device),
                 .grad_query = Tensor::empty(query_shape, DType::bfloat16, device),
                 .grad_key = Tensor::empty(key_shape, DType::bfloat16, device),
                 .grad_value = Tensor::empty(key_shape, DType::bfloat16, device),
                 .max_seqlen = *std::max_element(lengths.begin(), lengths.end()),
                 .softmax_scale = 1.0 / std::sqrt(double(c.head_size)),
                 .window = c.window};
}

std::vector<double> host_values(const Tensor& tensor) {
  const Tensor host = tensor.to(Device::cpu());
  std::vector<double> values(size_t(host.numel()));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = host.dtype() == DType::float32 ? host.data_as<float>()[i] : to_float(host.data_as<bfloat16>()[i]);
  return values;
}

bool agree(const std::string& what, const Tensor& actual_tensor, const Tensor& expected_tensor) {
  const std::vector<double> actual = host_values(actual_tensor), expected = host_values(expected_tensor);
  double error = 0, norm = 0;
  int64_t non_finite = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i]) || !std::isfinite(expected[i])) {
      non_finite += std::isfinite(actual[i]) != std::isfinite(expected[i]);
      continue;
    }
    error += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    norm += expected[i] * expected[i];
  }
  const double relative = std::sqrt(error) / std::max(std::sqrt(norm), 1e-30);
  if (relative <= 1e-2 && non_finite == 0) return true;
  std::printf("  CHECK FAILED %s: relative error %.3g (tolerance 1e-2), %lld non-finite mismatches\n", what.c_str(),
              relative, static_cast<long long>(non_finite));
  return false;
}

// The CUDA variants of `Op` worth timing (all but the plain `reference`), highest priority first: the first one that
// supports a problem is the one dispatch runs.
template <class Op>
std::vector<const KernelVariant<typename Op::Args>*> timed_variants() {
  std::vector<const KernelVariant<typename Op::Args>*> variants;
  for (const auto& variant : OpRegistry<Op>::instance().variants())
    if (variant.info.device == DeviceType::cuda && variant.info.variant != "reference") variants.push_back(&variant);
  return variants;
}

// One forward variant against the CPU reference, on a small shape with the case's heads and head size.
bool check_forward(const Case& c, const KernelVariant<AttentionForwardArgs>& variant) {
  const std::vector<int64_t> lengths{300, 77, 1};
  Problem gpu = make_problem(c, lengths, Device::cuda(0));
  Problem cpu = make_problem(c, lengths, Device::cpu());
  variant.run(gpu.forward());
  attention_forward(cpu.forward());
  synchronize_device(Device::cuda(0));
  const std::string what = c.name + " " + variant.info.variant + " forward";
  bool ok = agree(what + " output", gpu.output, cpu.output);
  return agree(what + " logsumexp", gpu.logsumexp, cpu.logsumexp) && ok;
}

// One backward variant; both backward passes start from the reference forward's output and logsumexp.
bool check_backward(const Case& c, const KernelVariant<AttentionBackwardArgs>& variant) {
  const std::vector<int64_t> lengths{300, 77, 1};
  Problem gpu = make_problem(c, lengths, Device::cuda(0));
  Problem cpu = make_problem(c, lengths, Device::cpu());
  attention_forward(cpu.forward());
  gpu.output = cpu.output.to(Device::cuda(0));
  gpu.logsumexp = cpu.logsumexp.to(Device::cuda(0));
  variant.run(gpu.backward());
  attention_backward(cpu.backward());
  synchronize_device(Device::cuda(0));
  const std::string what = c.name + " " + variant.info.variant + " backward";
  bool ok = agree(what + " grad_query", gpu.grad_query, cpu.grad_query);
  ok = agree(what + " grad_key", gpu.grad_key, cpu.grad_key) && ok;
  return agree(what + " grad_value", gpu.grad_value, cpu.grad_value) && ok;
}

using benchmarks::median_ms;
using benchmarks::sustained;
using benchmarks::SustainedResult;

int run_benchmark(int iterations, double sustained_seconds) {
  if (cuda_devices().empty()) {
    std::fprintf(stderr, "attention_benchmark needs a CUDA device\n");
    return 1;
  }
  const std::vector<Case> cases{
      {"(a) 8x2048 h9/3 d64", std::vector<int64_t>(8, 2048), 9, 3, 64, std::nullopt},
      {"(b) 4x4096 h32/8 d64", std::vector<int64_t>(4, 4096), 32, 8, 64, std::nullopt},
      {"(c) 2x4096 h24/8 d128", std::vector<int64_t>(2, 4096), 24, 8, 128, std::nullopt},
      {"(d) mixed 8192 h32/8 d128", {4096, 2048, 1024, 512, 300, 150, 50, 10, 2}, 32, 8, 128, std::nullopt},
      {"(e) 2x4096 h24/8 d128 w1024", std::vector<int64_t>(2, 4096), 24, 8, 128, 1024},
  };
  std::printf("%s; bf16, causal\n", device_info(Device::cuda(0)).name.c_str());
  std::printf("%-30s %-10s %-9s %10s %10s\n", "case", "variant", "direction", "ms", "TF/s");
  bool all_agree = true;
  const auto report = [&](const Case& c, const std::string& variant, const char* direction, bool ok,
                          const std::function<void()>& run, double flops) {
    if (!ok) {
      all_agree = false;
      std::printf("%-30s %-10s %-9s %10s\n", c.name.c_str(), variant.c_str(), direction, "not timed");
      return;
    }
    const double ms = median_ms(run, 3, iterations);
    std::printf("%-30s %-10s %-9s %10.3f %10.1f", c.name.c_str(), variant.c_str(), direction, ms,
                flops / (ms * 1e-3) / 1e12);
    if (sustained_seconds > 0) {
      const SustainedResult held = sustained(run, ms, sustained_seconds);
      std::printf(" | sustained %8.3f ms %7.1f TF/s %8.4f J %6.0f W %6.0f MHz %6.2f pJ/FLOP (%lld runs)%s%s",
                  held.ms_per_run, flops / (held.ms_per_run * 1e-3) / 1e12, held.joules_per_run, held.watts,
                  held.sm_clock_mhz, held.joules_per_run / flops * 1e12, static_cast<long long>(held.runs),
                  held.note.empty() ? "" : " ", held.note.c_str());
    }
    std::printf("\n");
    std::fflush(stdout);
  };
  for (const Case& c : cases) {
    Problem problem = make_problem(c, c.document_lengths, Device::cuda(0));
    for (const auto* variant : timed_variants<AttentionForward>()) {
      if (variant->supports && variant->supports(problem.forward())) continue;
      report(c, variant->info.variant, "forward", check_forward(c, *variant),
             [&] { variant->run(problem.forward()); }, c.forward_flops());
    }
    for (const auto* variant : timed_variants<AttentionBackward>()) {
      if (variant->supports && variant->supports(problem.backward())) continue;
      report(c, variant->info.variant, "backward", check_backward(c, *variant),
             [&] { variant->run(problem.backward()); }, 2.5 * c.forward_flops());
    }
  }
  return all_agree ? 0 : 1;
}

}  // namespace
}  // namespace fast_llm

int main(int argc, char** argv) {
  const fast_llm::benchmarks::SustainedCommandLine command =
      fast_llm::benchmarks::parse_sustained_command_line(argc, argv);
  const int iterations = command.positional.empty() ? 20 : std::atoi(command.positional[0].c_str());
  if (iterations <= 0 || command.positional.size() > 1 || std::isnan(command.seconds)) {
    std::fprintf(stderr, "usage: attention_benchmark [iterations] [--sustained [seconds, at most 600]]\n");
    return 2;
  }
  try {
    return fast_llm::run_benchmark(iterations, command.seconds);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "attention_benchmark: %s\n", error.what());
    return 1;
  }
}
