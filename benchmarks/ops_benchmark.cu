// ops benchmark: the memory-bound ops of a Llama training step (norms, alone and in the residual form that folds a
// skip connection into them, rotary, SwiGLU, embedding, cross-entropy, Adam alone and writing the bf16 weights, the
// fp32 -> bf16 weight cast that replaces, squared norm, residual axpy, dropout), each through its dispatch path on
// the GPU (the highest-priority CUDA variant: `fused`), at the shape of Llama-3.2-1B: tokens 16384, hidden 2048,
// intermediate 8192, vocab 128256, 32 heads, 8 key-value heads, head size 64, and the model's 1,235,814,400
// parameters for the optimizer ops. cross_entropy_forward_backward is timed with every CUDA variant (listed highest
// priority first: the first is what dispatch runs), so that one run compares them, at the Llama head above and at
// SmolLM2's (2 x tokens, vocab 49152).
//
//   ops_benchmark [tokens [iterations [hidden]]] [--sustained [seconds]]
//
// --sustained adds, per op, its time, energy and power when run back to back for `seconds` (1) after half a second of
// heat (benchmarks/sustained_energy.h): what a memory-bound op costs at the power cap a training step runs at.
//
// `hidden` replaces the hidden size alone (576: SmolLM2-135M's, with tokens 32768; 3072: Llama-3.2-3B's, with 8192),
// for the ops over (tokens, hidden) activations: the norms, the embedding, the residual adds and dropout.
//
// Every op is first run on a small odd shape (67 tokens, hidden 264, vocab 1003, ...) on the GPU and with the CPU
// reference on the same inputs, and its outputs compared (relative error of the norm: 1e-2 for bf16 outputs, 1e-4
// for fp32 ones); an op that disagrees is reported and not timed, and the program exits with status 1. Then each op
// is timed with CUDA events on the compute stream: 3 warm-up runs, the median of `iterations` (20) runs, printed with
// the bytes the op must move (each input read once, each output written once) and the bandwidth that achieves.
// Inputs are random (Philox, generated on the GPU); ops that work in place keep working on their previous result.
//
// Needs a GPU; the H200's HBM3e peaks at about 4.8 TB/s.

// fmt 9 turns FMT_CONSTEXPR off under nvcc but keeps C++20 constexpr functions that need it; gcc builds have it on.
#ifndef FMT_USE_CONSTEXPR
#define FMT_USE_CONSTEXPR 1
#endif

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/core/half.h"
#include "fast_llm/core/random.h"
#include "fast_llm/kernels/activation.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/cross_entropy.h"
#include "fast_llm/kernels/embedding.h"
#include "fast_llm/kernels/normalization.h"
#include "fast_llm/kernels/optimizer_ops.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/kernels/rotary.h"
#include "fast_llm/tensor/tensor.h"

#include "device_timing.h"
#include "sustained_energy.h"

namespace fast_llm {
namespace {

using TensorMap = std::map<std::string, Tensor>;
using namespace kernels;

// ---------------------------------------------------------------------------------------------------------------------
// Random inputs, generated on the GPU (the largest, the logits, have 2.1 billion elements).

template <class T>
__global__ void uniform_kernel(T* data, int64_t count, uint64_t seed, float low, float high) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const float value = low + (high - low) * random_uniform(seed, uint64_t(i));
    if constexpr (std::is_same_v<T, float>)
      data[i] = value;
    else
      data[i] = to_bfloat16(value);
  }
}

// Integers in [0, range); with `masked_every` > 0, every masked_every-th one is -100 (a masked label).
__global__ void index_kernel(int64_t* data, int64_t count, uint64_t seed, int64_t range, int64_t masked_every) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t value = int64_t(double(random_uniform(seed, uint64_t(i))) * double(range));
    data[i] = masked_every > 0 && i % masked_every == masked_every - 1 ? -100 : value < range ? value : range - 1;
  }
}

constexpr unsigned kFillBlocks = 4096, kFillThreads = 256;

Tensor uniform(const Shape& shape, DType dtype, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  const Device device = Device::cuda(0);
  Tensor tensor = Tensor::empty(shape, dtype, device);
  const cudaStream_t stream = static_cast<cudaStream_t>(compute_stream(device).handle);
  if (dtype == DType::float32)
    uniform_kernel<<<kFillBlocks, kFillThreads, 0, stream>>>(tensor.data_as<float>(), tensor.numel(), seed, low, high);
  else
    uniform_kernel<<<kFillBlocks, kFillThreads, 0, stream>>>(tensor.data_as<bfloat16>(), tensor.numel(), seed, low,
                                                             high);
  FLM_CUDA_CHECK(cudaGetLastError());
  return tensor;
}

Tensor indices(int64_t count, uint64_t seed, int64_t range, int64_t masked_every = 0) {
  const Device device = Device::cuda(0);
  Tensor tensor = Tensor::empty(Shape{count}, DType::int64, device);
  const cudaStream_t stream = static_cast<cudaStream_t>(compute_stream(device).handle);
  index_kernel<<<kFillBlocks, kFillThreads, 0, stream>>>(tensor.data_as<int64_t>(), count, seed, range, masked_every);
  FLM_CUDA_CHECK(cudaGetLastError());
  return tensor;
}

Tensor filled_float(float value) {
  Tensor host = Tensor::empty(Shape{1}, DType::float32);
  *host.data_as<float>() = value;
  return host.to(Device::cuda(0));
}

// ---------------------------------------------------------------------------------------------------------------------
// The ops.

struct Dims {
  int64_t tokens, hidden, intermediate, vocab, heads, groups, head_size, parameters;
  int64_t smollm2_tokens, smollm2_vocab;  // the second language-model head timed for cross-entropy
};

struct OpCase {
  std::string name;
  std::function<TensorMap(const Dims&)> create;  // inputs and outputs on the GPU
  std::function<void(TensorMap&)> run;           // through dispatch: the device of the tensors picks the variant
  std::vector<std::string> outputs;              // compared with the CPU reference
  std::function<double(const Dims&, const TensorMap&)> bytes;
};

constexpr double kBf16 = 2, kFp32 = 4, kInt64 = 8;

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  cases.push_back(
      {.name = "rms_norm_forward",
       .create = [](const Dims& d) {
         return TensorMap{{"input", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 1, -2, 2)},
                          {"weight", uniform(Shape{d.hidden}, DType::bfloat16, 2)},
                          {"output", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 3)},
                          {"inverse_rms", uniform(Shape{d.tokens}, DType::float32, 4)}};
       },
       .run = [](TensorMap& t) {
         rms_norm_forward({.input = t["input"], .weight = &t["weight"], .output = t["output"],
                           .inverse_rms = t["inverse_rms"]});
       },
       .outputs = {"output", "inverse_rms"},
       .bytes = [](const Dims& d, const TensorMap&) {
         return 2 * kBf16 * d.tokens * d.hidden + kBf16 * d.hidden + kFp32 * d.tokens;
       }});
  cases.push_back(
      {.name = "rms_norm_backward",
       .create = [](const Dims& d) {
         return TensorMap{{"grad_output", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 5)},
                          {"input", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 6, -2, 2)},
                          {"weight", uniform(Shape{d.hidden}, DType::bfloat16, 7)},
                          {"inverse_rms", uniform(Shape{d.tokens}, DType::float32, 8, 0.5, 2)},
                          {"grad_input", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 9)},
                          {"grad_weight", uniform(Shape{d.hidden}, DType::float32, 10)}};
       },
       .run = [](TensorMap& t) {
         rms_norm_backward({.grad_output = t["grad_output"], .input = t["input"], .weight = &t["weight"],
                            .inverse_rms = t["inverse_rms"], .grad_input = t["grad_input"],
                            .grad_weight = &t["grad_weight"]});
       },
       .outputs = {"grad_input", "grad_weight"},
       .bytes = [](const Dims& d, const TensorMap&) {
         return 3 * kBf16 * d.tokens * d.hidden + kBf16 * d.hidden + kFp32 * d.tokens + 2 * kFp32 * d.hidden;
       }});
  // The residual form replaces an axpy (3 passes) and the norm: the forward moves 4 passes instead of 5, the backward
  // 4 instead of 6. Compare with rms_norm_* plus "axpy (residual, bf16)".
  cases.push_back(
      {.name = "rms_norm_forward (residual)",
       .create = [](const Dims& d) {
         return TensorMap{{"input", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 50, -2, 2)},
                          {"residual", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 51, -2, 2)},
                          {"weight", uniform(Shape{d.hidden}, DType::bfloat16, 52)},
                          {"sum", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 53)},
                          {"output", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 54)},
                          {"inverse_rms", uniform(Shape{d.tokens}, DType::float32, 55)}};
       },
       .run = [](TensorMap& t) {
         rms_norm_forward({.input = t["input"], .weight = &t["weight"], .output = t["output"],
                           .inverse_rms = t["inverse_rms"], .residual = &t["residual"], .sum = &t["sum"]});
       },
       .outputs = {"sum", "output", "inverse_rms"},
       .bytes = [](const Dims& d, const TensorMap&) {
         return 4 * kBf16 * d.tokens * d.hidden + kBf16 * d.hidden + kFp32 * d.tokens;
       }});
  cases.push_back(
      {.name = "rms_norm_backward (residual)",
       .create = [](const Dims& d) {
         return TensorMap{{"grad_output", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 56)},
                          {"input", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 57, -2, 2)},
                          {"weight", uniform(Shape{d.hidden}, DType::bfloat16, 58)},
                          {"inverse_rms", uniform(Shape{d.tokens}, DType::float32, 59, 0.5, 2)},
                          {"grad_residual", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 60)},
                          {"grad_input", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 61)},
                          {"grad_weight", uniform(Shape{d.hidden}, DType::float32, 62)}};
       },
       .run = [](TensorMap& t) {
         rms_norm_backward({.grad_output = t["grad_output"], .input = t["input"], .weight = &t["weight"],
                            .inverse_rms = t["inverse_rms"], .grad_input = t["grad_input"],
                            .grad_weight = &t["grad_weight"], .grad_residual = &t["grad_residual"]});
       },
       .outputs = {"grad_input", "grad_weight"},
       .bytes = [](const Dims& d, const TensorMap&) {
         return 4 * kBf16 * d.tokens * d.hidden + kBf16 * d.hidden + kFp32 * d.tokens + 2 * kFp32 * d.hidden;
       }});
  cases.push_back(
      {.name = "layer_norm_forward",
       .create = [](const Dims& d) {
         return TensorMap{{"input", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 11, -2, 2)},
                          {"weight", uniform(Shape{d.hidden}, DType::bfloat16, 12)},
                          {"bias", uniform(Shape{d.hidden}, DType::bfloat16, 13)},
                          {"output", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 14)},
                          {"mean", uniform(Shape{d.tokens}, DType::float32, 15)},
                          {"inverse_std", uniform(Shape{d.tokens}, DType::float32, 16)}};
       },
       .run = [](TensorMap& t) {
         layer_norm_forward({.input = t["input"], .weight = &t["weight"], .bias = &t["bias"], .output = t["output"],
                             .mean = t["mean"], .inverse_std = t["inverse_std"]});
       },
       .outputs = {"output", "mean", "inverse_std"},
       .bytes = [](const Dims& d, const TensorMap&) {
         return 2 * kBf16 * d.tokens * d.hidden + 2 * kBf16 * d.hidden + 2 * kFp32 * d.tokens;
       }});
  cases.push_back(
      {.name = "layer_norm_backward",
       .create = [](const Dims& d) {
         return TensorMap{{"grad_output", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 17)},
                          {"input", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 18, -2, 2)},
                          {"weight", uniform(Shape{d.hidden}, DType::bfloat16, 19)},
                          {"mean", uniform(Shape{d.tokens}, DType::float32, 20, -0.5, 0.5)},
                          {"inverse_std", uniform(Shape{d.tokens}, DType::float32, 21, 0.5, 2)},
                          {"grad_input", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 22)},
                          {"grad_weight", uniform(Shape{d.hidden}, DType::float32, 23)},
                          {"grad_bias", uniform(Shape{d.hidden}, DType::float32, 24)}};
       },
       .run = [](TensorMap& t) {
         layer_norm_backward({.grad_output = t["grad_output"], .input = t["input"], .weight = &t["weight"],
                              .mean = t["mean"], .inverse_std = t["inverse_std"], .grad_input = t["grad_input"],
                              .grad_weight = &t["grad_weight"], .grad_bias = &t["grad_bias"]});
       },
       .outputs = {"grad_input", "grad_weight", "grad_bias"},
       .bytes = [](const Dims& d, const TensorMap&) {
         return 3 * kBf16 * d.tokens * d.hidden + kBf16 * d.hidden + 2 * kFp32 * d.tokens + 4 * kFp32 * d.hidden;
       }});
  for (const bool key : {false, true}) {
    cases.push_back(
        {.name = key ? "rotary_apply (key)" : "rotary_apply (query)",
         .create = [key](const Dims& d) {
           const int64_t heads = key ? d.groups : d.heads;
           return TensorMap{{"tensor", uniform(Shape{d.tokens, heads, d.head_size}, DType::bfloat16, 25, -2, 2)},
                            {"cos", uniform(Shape{d.tokens, d.head_size / 2}, DType::float32, 26)},
                            {"sin", uniform(Shape{d.tokens, d.head_size / 2}, DType::float32, 27)}};
         },
         .run = [](TensorMap& t) { rotary_apply({.tensor = t["tensor"], .cos = t["cos"], .sin = t["sin"]}); },
         .outputs = {"tensor"},
         .bytes = [key](const Dims& d, const TensorMap&) {
           const int64_t heads = key ? d.groups : d.heads;
           return 2 * kBf16 * d.tokens * heads * d.head_size + 2 * kFp32 * d.tokens * (d.head_size / 2);
         }});
  }
  cases.push_back(
      {.name = "activation_forward (swiglu)",
       .create = [](const Dims& d) {
         return TensorMap{{"input", uniform(Shape{d.tokens, 2 * d.intermediate}, DType::bfloat16, 28, -3, 3)},
                          {"output", uniform(Shape{d.tokens, d.intermediate}, DType::bfloat16, 29)}};
       },
       .run = [](TensorMap& t) {
         activation_forward({.type = ActivationType::silu, .gated = true, .input = t["input"], .output = t["output"]});
       },
       .outputs = {"output"},
       .bytes = [](const Dims& d, const TensorMap&) { return 3 * kBf16 * d.tokens * d.intermediate; }});
  cases.push_back(
      {.name = "activation_backward (swiglu)",
       .create = [](const Dims& d) {
         return TensorMap{{"grad_output", uniform(Shape{d.tokens, d.intermediate}, DType::bfloat16, 30)},
                          {"input", uniform(Shape{d.tokens, 2 * d.intermediate}, DType::bfloat16, 31, -3, 3)},
                          {"grad_input", uniform(Shape{d.tokens, 2 * d.intermediate}, DType::bfloat16, 32)}};
       },
       .run = [](TensorMap& t) {
         activation_backward({.type = ActivationType::silu, .gated = true, .grad_output = t["grad_output"],
                              .input = t["input"], .grad_input = t["grad_input"]});
       },
       .outputs = {"grad_input"},
       .bytes = [](const Dims& d, const TensorMap&) { return 5 * kBf16 * d.tokens * d.intermediate; }});
  cases.push_back(
      {.name = "embedding_forward",
       .create = [](const Dims& d) {
         return TensorMap{{"indices", indices(d.tokens, 33, d.vocab)},
                          {"weight", uniform(Shape{d.vocab, d.hidden}, DType::bfloat16, 34)},
                          {"output", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 35)}};
       },
       .run = [](TensorMap& t) {
         embedding_forward({.indices = t["indices"], .weight = t["weight"], .output = t["output"]});
       },
       .outputs = {"output"},
       .bytes = [](const Dims& d, const TensorMap&) {
         return kInt64 * d.tokens + 2 * kBf16 * d.tokens * d.hidden;
       }});
  cases.push_back(
      {.name = "embedding_backward",
       .create = [](const Dims& d) {
         return TensorMap{{"indices", indices(d.tokens, 36, d.vocab)},
                          {"grad_output", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 37)},
                          {"grad_weight", uniform(Shape{d.vocab, d.hidden}, DType::float32, 38)}};
       },
       .run = [](TensorMap& t) {
         embedding_backward({.indices = t["indices"], .grad_output = t["grad_output"], .grad_weight = t["grad_weight"]});
       },
       .outputs = {"grad_weight"},
       .bytes = [](const Dims& d, const TensorMap& t) {
         // The rows of grad_weight that some token touches are read and written once.
         const Tensor host = t.at("indices").to(Device::cpu());
         const int64_t* data = host.data_as<int64_t>();
         const std::set<int64_t> rows(data, data + host.numel());
         return kInt64 * d.tokens + kBf16 * d.tokens * d.hidden + 2 * kFp32 * double(rows.size()) * d.hidden;
       }});
  // Every CUDA variant at two heads; on CPU tensors (the check against the reference) the run dispatches.
  struct Head {
    const char* model;
    int64_t Dims::*tokens;
    int64_t Dims::*vocab;
  };
  for (const Head head : {Head{"Llama", &Dims::tokens, &Dims::vocab},
                          Head{"SmolLM2", &Dims::smollm2_tokens, &Dims::smollm2_vocab}}) {
    for (const auto& variant : OpRegistry<CrossEntropyForwardBackward>::instance().variants()) {
      if (variant.info.device != DeviceType::cuda) continue;
      cases.push_back(
          {.name = fmt::format("cross_entropy {} [{}]", head.model, variant.info.variant),
           .create = [head](const Dims& d) {
             const int64_t tokens = d.*head.tokens, vocab = d.*head.vocab;
             return TensorMap{{"logits", uniform(Shape{tokens, vocab}, DType::bfloat16, 39, -8, 8)},
                              {"labels", indices(tokens, 40, vocab, /*masked_every=*/20)},
                              {"label_loss_sum", filled_float(0.25f)},
                              {"z_loss_sum", filled_float(0.5f)}};
           },
           .run = [variant = &variant](TensorMap& t) {
             const CrossEntropyArgs args{.logits = t["logits"], .labels = t["labels"],
                                         .label_loss_sum = t["label_loss_sum"], .z_loss_sum = &t["z_loss_sum"],
                                         .grad_logits = &t["logits"], .label_weight = 1.0 / 16384,
                                         .z_loss_weight = 1e-4};
             if (t["logits"].device().is_cuda())
               variant->run(args);
             else
               cross_entropy_forward_backward(args);
           },
           .outputs = {"logits", "label_loss_sum", "z_loss_sum"},
           .bytes = [head](const Dims& d, const TensorMap&) {
             const double tokens = double(d.*head.tokens), vocab = double(d.*head.vocab);
             return 2 * kBf16 * tokens * vocab + kInt64 * tokens;
           }});
    }
  }
  cases.push_back(
      {.name = "adam_step",
       .create = [](const Dims& d) {
         return TensorMap{{"parameters", uniform(Shape{d.parameters}, DType::float32, 41)},
                          {"gradients", uniform(Shape{d.parameters}, DType::float32, 42, -3, 3)},
                          {"exp_avg", uniform(Shape{d.parameters}, DType::float32, 43, -0.1, 0.1)},
                          {"exp_avg_sq", uniform(Shape{d.parameters}, DType::float32, 44, 1e-4, 1e-2)}};
       },
       .run = [](TensorMap& t) {
         adam_step({.parameters = t["parameters"], .gradients = t["gradients"], .exp_avg = t["exp_avg"],
                    .exp_avg_sq = t["exp_avg_sq"], .learning_rate = 3e-4, .beta_1 = 0.9, .beta_2 = 0.95,
                    .epsilon = 1e-8, .weight_decay = 0.1, .step = 10, .grad_scale = 0.5});
       },
       .outputs = {"parameters", "exp_avg", "exp_avg_sq"},
       .bytes = [](const Dims& d, const TensorMap&) { return 7 * kFp32 * d.parameters; }});
  // The bf16 weights refreshed from the fp32 master weights: in Adam's pass (2 more bytes written per parameter), or
  // by the separate cast it replaces (4 read, 2 written).
  cases.push_back(
      {.name = "adam_step + bf16 weights",
       .create = [](const Dims& d) {
         return TensorMap{{"parameters", uniform(Shape{d.parameters}, DType::float32, 41)},
                          {"gradients", uniform(Shape{d.parameters}, DType::float32, 42, -3, 3)},
                          {"exp_avg", uniform(Shape{d.parameters}, DType::float32, 43, -0.1, 0.1)},
                          {"exp_avg_sq", uniform(Shape{d.parameters}, DType::float32, 44, 1e-4, 1e-2)},
                          {"compute_weights", uniform(Shape{d.parameters}, DType::bfloat16, 49)}};
       },
       .run = [](TensorMap& t) {
         adam_step({.parameters = t["parameters"], .gradients = t["gradients"], .exp_avg = t["exp_avg"],
                    .exp_avg_sq = t["exp_avg_sq"], .learning_rate = 3e-4, .beta_1 = 0.9, .beta_2 = 0.95,
                    .epsilon = 1e-8, .weight_decay = 0.1, .step = 10, .grad_scale = 0.5,
                    .compute_weights = &t["compute_weights"]});
       },
       .outputs = {"parameters", "exp_avg", "exp_avg_sq", "compute_weights"},
       .bytes = [](const Dims& d, const TensorMap&) { return (7 * kFp32 + kBf16) * d.parameters; }});
  cases.push_back(
      {.name = "cast (fp32 -> bf16 weights)",
       .create = [](const Dims& d) {
         return TensorMap{{"source", uniform(Shape{d.parameters}, DType::float32, 50)},
                          {"destination", uniform(Shape{d.parameters}, DType::bfloat16, 51)}};
       },
       .run = [](TensorMap& t) { cast({.source = t["source"], .destination = t["destination"]}); },
       .outputs = {"destination"},
       .bytes = [](const Dims& d, const TensorMap&) { return (kFp32 + kBf16) * d.parameters; }});
  cases.push_back(
      {.name = "squared_norm",
       .create = [](const Dims& d) {
         return TensorMap{{"input", uniform(Shape{d.parameters}, DType::float32, 45)}, {"result", filled_float(1.5f)}};
       },
       .run = [](TensorMap& t) { squared_norm({.input = t["input"], .result = t["result"]}); },
       .outputs = {"result"},
       .bytes = [](const Dims& d, const TensorMap&) { return kFp32 * d.parameters; }});
  cases.push_back(
      {.name = "axpy (residual, bf16)",
       .create = [](const Dims& d) {
         return TensorMap{{"input", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 46)},
                          {"output", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 47)}};
       },
       .run = [](TensorMap& t) { axpy({.input = t["input"], .output = t["output"], .alpha = 1.0}); },
       .outputs = {"output"},
       .bytes = [](const Dims& d, const TensorMap&) { return 3 * kBf16 * d.tokens * d.hidden; }});
  cases.push_back(
      {.name = "dropout (bf16, p=0.1)",
       .create = [](const Dims& d) {
         return TensorMap{{"tensor", uniform(Shape{d.tokens, d.hidden}, DType::bfloat16, 48)}};
       },
       .run = [](TensorMap& t) { dropout({.tensor = t["tensor"], .probability = 0.1, .seed = 1234}); },
       .outputs = {"tensor"},
       .bytes = [](const Dims& d, const TensorMap&) { return 2 * kBf16 * d.tokens * d.hidden; }});
  return cases;
}

// ---------------------------------------------------------------------------------------------------------------------
// Checking and timing.

std::vector<double> host_values(const Tensor& tensor) {
  const Tensor host = tensor.to(Device::cpu());
  std::vector<double> values(size_t(host.numel()));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (host.dtype()) {
      case DType::float32: values[i] = host.data_as<float>()[i]; break;
      case DType::bfloat16: values[i] = to_float(host.data_as<bfloat16>()[i]); break;
      case DType::int64: values[i] = double(host.data_as<int64_t>()[i]); break;
      default: throw Error("ops_benchmark", fmt::format("no comparison for dtype {}", dtype_name(host.dtype())));
    }
  }
  return values;
}

// Runs `op` on a small shape on the GPU and on the CPU (the reference) from the same inputs; true if they agree.
bool check_against_reference(const OpCase& op, const Dims& small) {
  TensorMap gpu = op.create(small);
  TensorMap cpu;
  for (const auto& [name, tensor] : gpu) {
    Tensor copy = tensor.to(Device::cpu());  // waits for the generation kernels
    cpu[name] = copy;
  }
  op.run(gpu);
  op.run(cpu);
  synchronize_device(Device::cuda(0));
  bool agree = true;
  for (const std::string& name : op.outputs) {
    const std::vector<double> actual = host_values(gpu.at(name)), expected = host_values(cpu.at(name));
    double error = 0, norm = 0;
    int64_t nan_mismatches = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
      if (std::isnan(actual[i]) || std::isnan(expected[i])) {
        nan_mismatches += std::isnan(actual[i]) != std::isnan(expected[i]);
        continue;
      }
      error += (actual[i] - expected[i]) * (actual[i] - expected[i]);
      norm += expected[i] * expected[i];
    }
    const double relative = std::sqrt(error) / std::max(std::sqrt(norm), 1e-30);
    const double tolerance = gpu.at(name).dtype() == DType::bfloat16 ? 1e-2 : 1e-4;
    if (relative > tolerance || nan_mismatches > 0) {
      std::printf("  CHECK FAILED %s output %s: relative error %.3g (tolerance %.0e), %lld NaN mismatches\n",
                  op.name.c_str(), name.c_str(), relative, tolerance, static_cast<long long>(nan_mismatches));
      agree = false;
    }
  }
  return agree;
}

using benchmarks::median_ms;

int run_benchmark(int64_t tokens, int iterations, int64_t hidden, double sustained_seconds) {
  if (cuda_devices().empty()) {
    std::fprintf(stderr, "ops_benchmark needs a CUDA device\n");
    return 1;
  }
  const Dims full{.tokens = tokens, .hidden = hidden, .intermediate = 8192, .vocab = 128256, .heads = 32, .groups = 8,
                  .head_size = 64, .parameters = 1235814400, .smollm2_tokens = 2 * tokens, .smollm2_vocab = 49152};
  const Dims small{.tokens = 67, .hidden = 264, .intermediate = 392, .vocab = 1003, .heads = 4, .groups = 2,
                   .head_size = 64, .parameters = 100003, .smollm2_tokens = 35, .smollm2_vocab = 4099};
  std::printf("%s; tokens %lld, hidden %lld, intermediate %lld, vocab %lld, heads %lld / %lld x %lld, "
              "parameters %lld; SmolLM2 head: tokens %lld, vocab %lld\n",
              device_info(Device::cuda(0)).name.c_str(), static_cast<long long>(full.tokens),
              static_cast<long long>(full.hidden), static_cast<long long>(full.intermediate),
              static_cast<long long>(full.vocab), static_cast<long long>(full.heads),
              static_cast<long long>(full.groups), static_cast<long long>(full.head_size),
              static_cast<long long>(full.parameters), static_cast<long long>(full.smollm2_tokens),
              static_cast<long long>(full.smollm2_vocab));
  std::printf("%-32s %12s %12s %10s\n", "op", "median us", "MB moved", "GB/s");
  bool all_agree = true;
  for (const OpCase& op : op_cases()) {
    if (!check_against_reference(op, small)) {
      all_agree = false;
      std::printf("%-32s %12s\n", op.name.c_str(), "not timed");
      continue;
    }
    TensorMap tensors = op.create(full);
    const double bytes = op.bytes(full, tensors);
    const double ms = median_ms([&] { op.run(tensors); }, 3, iterations);
    std::printf("%-32s %12.1f %12.1f %10.0f", op.name.c_str(), ms * 1e3, bytes / 1e6, bytes / (ms * 1e-3) / 1e9);
    if (sustained_seconds > 0) {
      const benchmarks::SustainedResult held = benchmarks::sustained([&] { op.run(tensors); }, ms, sustained_seconds);
      std::printf(" | sustained %10.1f us %7.0f GB/s %9.5f J %5.0f W %5.0f MHz (%lld runs)%s%s", held.ms_per_run * 1e3,
                  bytes / (held.ms_per_run * 1e-3) / 1e9, held.joules_per_run, held.watts, held.sm_clock_mhz,
                  static_cast<long long>(held.runs), held.note.empty() ? "" : " ", held.note.c_str());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return all_agree ? 0 : 1;
}

}  // namespace
}  // namespace fast_llm

int main(int argc, char** argv) {
  const fast_llm::benchmarks::SustainedCommandLine command =
      fast_llm::benchmarks::parse_sustained_command_line(argc, argv);
  const std::vector<std::string>& positional = command.positional;
  const int64_t tokens = positional.size() > 0 ? std::atoll(positional[0].c_str()) : 16384;
  const int iterations = positional.size() > 1 ? std::atoi(positional[1].c_str()) : 20;
  const int64_t hidden = positional.size() > 2 ? std::atoll(positional[2].c_str()) : 2048;
  if (tokens <= 0 || iterations <= 0 || hidden <= 0 || positional.size() > 3 || std::isnan(command.seconds)) {
    std::fprintf(stderr, "usage: ops_benchmark [tokens [iterations [hidden]]] [--sustained [seconds, at most 600]]\n");
    return 2;
  }
  try {
    return fast_llm::run_benchmark(tokens, iterations, hidden, command.seconds);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ops_benchmark: %s\n", error.what());
    return 1;
  }
}
