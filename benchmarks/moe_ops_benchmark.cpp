// MoE ops benchmark: the mixture-of-experts ops of kernels/moe.h through their dispatch path on the GPU (the `fused`
// CUDA variants of kernels/cuda/moe.cu) at issue 20's two shapes, in bf16 activations:
//   mixtral-tiny  16384 tokens, 8 experts top-2,   hidden 1024, intermediate 3584 (one layer of 4 x 4096 tokens)
//   fine-grained   8192 tokens, 64 experts top-8,  hidden 2048, intermediate 1024 (one layer of 2 x 4096 tokens)
// Each op is timed with CUDA events on the compute stream (3 warm-up runs, the median of `iterations`, 20 by
// default) and printed with the bytes it must move and the bandwidth that achieves. Sinkhorn routing (training) is
// timed with its host synchronisations, as a step would see it.
//
// Then the per-expert gemm loop of the layer's first projection (out_e = x_e W1_e^T on views of the permuted buffer
// and of the weight, one gemm per expert), five ways: the same row counts every run (the gemm's plans cached); new row
// counts every run as exact-size problems, autotuning off (a new cuBLASLt plan per expert and run) and on (a plan and a
// synchronising tuning run each); and new row counts as `ragged` gemms (as layers/mlp/mixture_of_experts.cpp runs
// them: one plan per power-of-two bucket of rows), autotuning off and on. The time between CUDA events includes the
// GPU's idle gaps while the host makes plans.
//
// Before timing, the whole op chain (route, dispatch map, permute, scale, unpermute, scale backward, route backward)
// runs on a small odd shape (67 tokens, 12 experts top-3, hidden 40, intermediate 24) on the GPU and with the CPU
// references on the same inputs: expert numbers, offsets and rows must match exactly, the rest within 1e-2 (bf16)
// or 1e-4 (fp32) relative error of the norm; on a mismatch nothing is timed and the exit status is 1.
//
//   moe_ops_benchmark [iterations]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "fast_llm/core/random.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/gemm.h"
#include "fast_llm/kernels/moe.h"
#include "fast_llm/tensor/tensor.h"

#include "device_timing.h"

namespace fast_llm {
namespace {

using kernels::KernelSelection;
using kernels::MoeRouting;
using kernels::kernel_selection;
using kernels::set_kernel_selection;

struct MoeShape {
  std::string name;
  int64_t tokens, routed;
  int top_k;
  int64_t hidden, intermediate;
};

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, float low, float high, Device device) {
  std::vector<float> values(size_t(shape.numel()));
  for (size_t index = 0; index < values.size(); ++index)
    values[index] = low + (high - low) * random_uniform(seed, index);
  const Tensor host = Tensor::from_values(values, shape, dtype);
  return device.is_cpu() ? host : host.to(device);
}

// The op chain's tensors on one device, from the same seeds on every device. With `random_rows` false the large
// (rows, width) operands are constants instead (their values do not change the ops' times; random ones would take
// seconds on the host at the benchmark's shapes); the logits are random either way, so the routing is realistic.
struct Chain {
  Tensor logits, experts, scores, counts, aux, z, offsets, rows;
  Tensor x, permuted, expert_output, y, activations, scaled;
  Tensor grad_scaled, grad_activations, grad_scores, grad_logits;
};

Chain make_chain(const MoeShape& s, Device device, bool random_rows = true) {
  const int64_t slots = s.top_k, rows = s.tokens * slots;
  const Stream stream{};
  auto empty = [&](const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype, device, stream); };
  auto rows_tensor = [&](const Shape& shape, uint64_t seed) {
    if (random_rows) return random_tensor(shape, DType::bfloat16, seed, -1, 1, device);
    Tensor tensor = empty(shape, DType::bfloat16);
    kernels::fill({.tensor = tensor, .value = 0.25 + 0.125 * double(seed % 4)});
    return tensor;
  };
  Chain c;
  c.logits = random_tensor(Shape{s.tokens, s.routed}, DType::float32, 1, -3, 3, device);
  c.experts = empty(Shape{s.tokens, slots}, DType::int32);
  c.scores = empty(Shape{s.tokens, slots}, DType::float32);
  c.counts = empty(Shape{s.routed}, DType::float32);
  const float zero[1] = {0.0f};
  c.aux = Tensor::from_values(zero, Shape{1}).to(device);
  c.z = Tensor::from_values(zero, Shape{1}).to(device);
  c.offsets = empty(Shape{s.routed + 1}, DType::int32);
  c.rows = empty(Shape{s.tokens, slots}, DType::int32);
  c.x = rows_tensor(Shape{s.tokens, s.hidden}, 4);
  c.permuted = empty(Shape{rows, s.hidden}, DType::bfloat16);
  c.expert_output = rows_tensor(Shape{rows, s.hidden}, 5);
  c.y = empty(Shape{s.tokens, s.hidden}, DType::bfloat16);
  c.activations = rows_tensor(Shape{rows, s.intermediate}, 6);
  c.scaled = empty(Shape{rows, s.intermediate}, DType::bfloat16);
  c.grad_scaled = rows_tensor(Shape{rows, s.intermediate}, 7);
  c.grad_activations = empty(Shape{rows, s.intermediate}, DType::bfloat16);
  c.grad_scores = empty(Shape{s.tokens, slots}, DType::float32);
  c.grad_logits = empty(Shape{s.tokens, s.routed}, DType::float32);
  return c;
}

void route_forward(const MoeShape& s, Chain& c, MoeRouting routing = MoeRouting::top_k_softmax) {
  const bool aux = routing == MoeRouting::top_k_softmax;
  kernels::moe_route_forward({.logits = c.logits, .experts = c.experts, .scores = c.scores, .top_k = s.top_k,
                              .routing = routing, .training = true, .expert_counts = &c.counts,
                              .load_balancing_loss_sum = aux ? &c.aux : nullptr, .z_loss_sum = &c.z,
                              .loss_weight = 1.0});
}
void dispatch_map(Chain& c) {
  kernels::moe_dispatch_map({.experts = c.experts, .expert_offsets = c.offsets, .rows = c.rows});
}
void permute(Chain& c) { kernels::moe_permute({.input = c.x, .rows = c.rows, .output = c.permuted}); }
void unpermute(Chain& c) { kernels::moe_unpermute({.input = c.expert_output, .rows = c.rows, .output = c.y}); }
void scale_rows(Chain& c) {
  kernels::moe_scale_rows({.input = c.activations, .rows = c.rows, .scores = c.scores, .output = c.scaled});
}
void scale_rows_backward(Chain& c) {
  kernels::moe_scale_rows_backward({.grad_output = c.grad_scaled, .input = c.activations, .rows = c.rows,
                                    .scores = c.scores, .grad_input = c.grad_activations,
                                    .grad_scores = c.grad_scores});
}
void route_backward(const MoeShape& s, Chain& c) {
  kernels::moe_route_backward({.logits = c.logits, .experts = c.experts, .grad_scores = c.grad_scores,
                               .grad_logits = c.grad_logits, .top_k = s.top_k, .load_balancing_gradient = 0.08,
                               .z_loss_gradient = 0.001, .expert_counts = &c.counts});
}

void run_chain(const MoeShape& s, Chain& c) {
  route_forward(s, c);
  dispatch_map(c);
  permute(c);
  scale_rows(c);
  unpermute(c);
  scale_rows_backward(c);
  route_backward(s, c);
}

std::vector<double> host_values(const Tensor& tensor) {
  const Tensor host = tensor.to(Device::cpu());
  std::vector<double> values;
  std::vector<int64_t> index(size_t(host.rank()), 0);
  for (int64_t linear = 0; linear < host.numel(); ++linear) {
    int64_t rest = linear;
    for (int dim = host.rank() - 1; dim >= 0; --dim) {
      index[size_t(dim)] = rest % host.size(dim);
      rest /= host.size(dim);
    }
    values.push_back(host.item_as_double(index));
  }
  return values;
}

// Whether the GPU chain agrees with the CPU references on a small shape; prints each disagreement.
bool check_against_reference() {
  const MoeShape small{.name = "small", .tokens = 67, .routed = 12, .top_k = 3, .hidden = 40, .intermediate = 24};
  Chain cpu = make_chain(small, Device::cpu()), gpu = make_chain(small, Device::cuda(0));
  run_chain(small, cpu);
  run_chain(small, gpu);
  synchronize_device(Device::cuda(0));
  struct Output {
    const char* name;
    Tensor Chain::*tensor;
    double tolerance;  // 0: exact
  };
  const Output outputs[] = {{"experts", &Chain::experts, 0},
                            {"expert_offsets", &Chain::offsets, 0},
                            {"rows", &Chain::rows, 0},
                            {"permuted", &Chain::permuted, 0},
                            {"scores", &Chain::scores, 1e-4},
                            {"expert_counts", &Chain::counts, 0},
                            {"load_balancing_loss_sum", &Chain::aux, 1e-4},
                            {"z_loss_sum", &Chain::z, 1e-4},
                            {"scaled", &Chain::scaled, 1e-2},
                            {"unpermuted", &Chain::y, 1e-2},
                            {"grad_activations", &Chain::grad_activations, 1e-2},
                            {"grad_scores", &Chain::grad_scores, 1e-4},
                            {"grad_logits", &Chain::grad_logits, 1e-4}};
  bool agree = true;
  for (const Output& output : outputs) {
    const std::vector<double> expected = host_values(cpu.*output.tensor), actual = host_values(gpu.*output.tensor);
    double error = 0, norm = 0;
    for (size_t index = 0; index < expected.size(); ++index) {
      error += (actual[index] - expected[index]) * (actual[index] - expected[index]);
      norm += expected[index] * expected[index];
    }
    const double relative = norm > 0 ? std::sqrt(error / norm) : std::sqrt(error);
    if (!(relative <= output.tolerance)) {
      std::printf("check: %s differs from the CPU reference (relative error of the norm %.3g, allowed %.3g)\n",
                  output.name, relative, output.tolerance);
      agree = false;
    }
  }
  return agree;
}

// (experts + 1) row offsets of `rows` rows over `experts` experts: random cut points from `seed` (fewer than
// `experts` distinct ones leave some experts empty, as routing does).
std::vector<int64_t> random_offsets(int64_t rows, int64_t experts, uint64_t seed) {
  std::vector<int64_t> offsets(size_t(experts) + 1, 0);
  for (int64_t expert = 1; expert < experts; ++expert)
    offsets[size_t(expert)] = int64_t(random_uniform(seed, uint64_t(expert)) * float(rows)) % (rows + 1);
  offsets[size_t(experts)] = rows;
  std::sort(offsets.begin(), offsets.end());
  return offsets;
}

// One gemm per expert with rows: out_e = x_e W1_e^T.
void expert_gemms(const Tensor& permuted, const Tensor& weight, Tensor& hidden, const std::vector<int64_t>& offsets,
                  int64_t width, bool ragged) {
  for (size_t expert = 0; expert + 1 < offsets.size(); ++expert) {
    if (offsets[expert + 1] == offsets[expert]) continue;
    Tensor out = hidden.slice(0, offsets[expert], offsets[expert + 1]);
    kernels::gemm({.a = permuted.slice(0, offsets[expert], offsets[expert + 1]),
                   .b = weight.slice(0, int64_t(expert) * width, int64_t(expert + 1) * width),
                   .out = out,
                   .transpose_b = true,
                   .ragged = ragged ? kernels::GemmRagged::m : kernels::GemmRagged::none});
  }
}

// The expert gemm loop at shape `s` (gated: 2 x intermediate columns), the three ways of the file's comment.
void time_expert_gemms(const MoeShape& s, int iterations) {
  const Device device = Device::cuda(0);
  const int64_t rows = s.tokens * s.top_k, width = 2 * s.intermediate;
  // Constant operands: the values do not change a gemm's time, and random ones would take seconds on the host.
  Tensor permuted = Tensor::empty(Shape{rows, s.hidden}, DType::bfloat16, device);
  Tensor weight = Tensor::empty(Shape{s.routed * width, s.hidden}, DType::bfloat16, device);
  kernels::fill({.tensor = permuted, .value = 0.5});
  kernels::fill({.tensor = weight, .value = 0.01});
  Tensor hidden = Tensor::empty(Shape{rows, width}, DType::bfloat16, device);
  const double flops = 2.0 * double(rows) * double(width) * double(s.hidden);
  const KernelSelection initial = kernel_selection();
  uint64_t seed = 1000;
  const std::vector<int64_t> fixed = random_offsets(rows, s.routed, seed);
  struct Way {
    const char* name;
    bool fresh, autotune, ragged;
  };
  for (const Way& way : {Way{"expert gemms, same row counts", false, true, false},
                         Way{"expert gemms, new row counts, no autotune", true, false, false},
                         Way{"expert gemms, new row counts, autotune", true, true, false},
                         Way{"ragged gemms, new row counts, no autotune", true, false, true},
                         Way{"ragged gemms, new row counts, autotune", true, true, true}}) {
    KernelSelection selection = initial;
    selection.autotune = way.autotune;
    set_kernel_selection(selection);
    const auto run = [&] {
      expert_gemms(permuted, weight, hidden, way.fresh ? random_offsets(rows, s.routed, ++seed) : fixed, width,
                   way.ragged);
    };
    const double ms = benchmarks::median_ms(run, 3, iterations);
    std::printf("%-44s %12.1f %12s %10s  %.1f TFLOP/s\n", way.name, ms * 1e3, "-", "-", flops / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
  set_kernel_selection(initial);
}

int run_benchmark(int iterations) {
  if (cuda_devices().empty()) {
    std::fprintf(stderr, "moe_ops_benchmark needs a CUDA device\n");
    return 1;
  }
  std::printf("%s\n", device_info(Device::cuda(0)).name.c_str());
  if (!check_against_reference()) {
    std::printf("the CUDA MoE ops disagree with the CPU references: nothing timed\n");
    return 1;
  }
  const std::vector<MoeShape> shapes = {
      {.name = "mixtral-tiny", .tokens = 16384, .routed = 8, .top_k = 2, .hidden = 1024, .intermediate = 3584},
      {.name = "fine-grained", .tokens = 8192, .routed = 64, .top_k = 8, .hidden = 2048, .intermediate = 1024}};
  for (const MoeShape& s : shapes) {
    std::printf("\n%s: tokens %lld, %lld experts top-%d, hidden %lld, intermediate %lld (bf16 activations)\n",
                s.name.c_str(), static_cast<long long>(s.tokens), static_cast<long long>(s.routed), s.top_k,
                static_cast<long long>(s.hidden), static_cast<long long>(s.intermediate));
    std::printf("%-44s %12s %12s %10s\n", "op", "median us", "MB moved", "GB/s");
    Chain c = make_chain(s, Device::cuda(0), /*random_rows=*/false);
    run_chain(s, c);
    const double rows = double(s.tokens * s.top_k), bf16 = 2.0;
    const double logits = double(s.tokens * s.routed) * 4.0, slot_ints = rows * 4.0;
    struct Case {
      std::string name;
      std::function<void()> run;
      double bytes;
    };
    const std::vector<Case> cases = {
        {"moe_route_forward (top_k_softmax, losses)", [&] { route_forward(s, c); }, logits + 2 * slot_ints},
        {"moe_route_forward (sinkhorn, training)", [&] { route_forward(s, c, MoeRouting::sinkhorn); },
         logits + 2 * slot_ints},
        {"moe_route_backward", [&] { route_backward(s, c); }, 2 * logits + 2 * slot_ints},
        {"moe_dispatch_map", [&] { dispatch_map(c); }, 2 * slot_ints},
        {"moe_permute (hidden)", [&] { permute(c); },
         (double(s.tokens) + rows) * double(s.hidden) * bf16 + slot_ints},
        {"moe_unpermute (hidden)", [&] { unpermute(c); },
         (double(s.tokens) + rows) * double(s.hidden) * bf16 + slot_ints},
        {"moe_scale_rows (intermediate)", [&] { scale_rows(c); },
         2 * rows * double(s.intermediate) * bf16 + 2 * slot_ints},
        {"moe_scale_rows_backward (intermediate)", [&] { scale_rows_backward(c); },
         3 * rows * double(s.intermediate) * bf16 + 3 * slot_ints}};
    for (const Case& op : cases) {
      const double ms = benchmarks::median_ms(op.run, 3, iterations);
      std::printf("%-44s %12.1f %12.1f %10.0f\n", op.name.c_str(), ms * 1e3, op.bytes / 1e6,
                  op.bytes / (ms * 1e-3) / 1e9);
      std::fflush(stdout);
    }
    time_expert_gemms(s, iterations);
  }
  return 0;
}

}  // namespace
}  // namespace fast_llm

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 20;
  if (argc > 2 || iterations <= 0) {
    std::fprintf(stderr, "usage: moe_ops_benchmark [iterations]\n");
    return 2;
  }
  try {
    return fast_llm::run_benchmark(iterations);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "moe_ops_benchmark: %s\n", error.what());
    return 1;
  }
}
