#include "fast_llm/layers/mlp/mixture_of_experts.h"

#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/core/error.h"
#include "fast_llm/core/random.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/gemm.h"
#include "fast_llm/layers/common/dropout.h"
#include "fast_llm/layers/common/parameter_settings.h"
#include "fast_llm/layers/mlp/mlp.h"

namespace fast_llm::layers {

namespace {

// The jitter's random stream, as the block's dropouts number theirs (layers/common/dropout.h).
constexpr uint64_t kJitterPurpose = 1;

const MoeMlpConfig& supported_config(const MoeMlpConfig& config) {
  auto refuse = [&](std::string_view field, std::string_view what) {
    throw NotSupportedError("layers", fmt::format("{}: {} is not supported by the mixture of experts",
                                                  config.field_path(field), what));
  };
  if (config.pre_norm) refuse("pre_norm", "normalization inside the MLP");
  if (config.post_norm) refuse("post_norm", "normalization inside the MLP");
  if (config.router_normalization) refuse("router_normalization", "a router input normalization");
  if (config.router_scale.enabled.value_or(false)) refuse("router_scale", "a learned router input scale");
  if (config.router_per_expert_scale.enabled.value_or(false))
    refuse("router_per_expert_scale", "a learned per-expert score scale");
  if (config.layer_1.bias.enabled.value_or(false) || config.layer_2.bias.enabled.value_or(false))
    throw NotSupportedError(
        "layers", fmt::format("{}: the mixture of experts has no biases; set add_linear_biases: false (and leave "
                              "layer_1.bias / layer_2.bias disabled)",
                              config.field_path("add_linear_biases")));
  FLM_ASSERT(config.activation.has_value(), "{}: activation is resolved at validation", config.path());
  return config;
}

LinearOptions expert_options(const LinearConfig& config, int64_t input_size, int64_t output_size,
                             bool transposed_weight, int64_t hidden_size, double lr_scale) {
  return {.input_size = input_size,
          .output_size = output_size,
          .bias = false,
          .transposed_weight = transposed_weight,
          .weight = parameter_settings(config.weight, default_weight_initialization(hidden_size),
                                       combine_lr_scales(lr_scale, config.lr_scale))};
}

kernels::MoeRouting kernel_routing(RoutingType routing) {
  return routing == RoutingType::sinkhorn ? kernels::MoeRouting::sinkhorn : kernels::MoeRouting::top_k_softmax;
}

}  // namespace

MoeMlp::MoeMlp(std::string name, const MoeMlpConfig& config, int64_t hidden_size, double lr_scale)
    : MlpBase(std::move(name)),
      hidden_size_(hidden_size),
      intermediate_size_(supported_config(config).intermediate_size),
      gated_(config.gated),
      activation_(kernel_activation(*config.activation)),
      recompute_level_(config.recompute_level),
      experts_(config.experts),
      shared_experts_(config.shared_experts),
      routed_experts_(config.experts - config.shared_experts),
      top_k_(config.experts_per_token),
      routing_(kernel_routing(config.routing)),
      auxiliary_loss_coefficient_(config.auxiliary_loss_coefficient),
      z_loss_coefficient_(config.z_loss_coefficient),
      router_input_scale_(config.router_input_scale),
      jitter_eps_(config.jitter_eps),
      router_(child_name("router"),
              expert_options(config.router, hidden_size, config.experts - config.shared_experts,
                             /*transposed_weight=*/false, hidden_size, combine_lr_scales(lr_scale, config.lr_scale))),
      layer_1_(child_name("layer_1"),
               expert_options(config.layer_1, hidden_size,
                              int64_t(config.experts) * (config.gated ? 2 : 1) * config.intermediate_size,
                              /*transposed_weight=*/false, hidden_size, combine_lr_scales(lr_scale, config.lr_scale))),
      layer_2_(child_name("layer_2"),
               expert_options(config.layer_2, int64_t(config.experts) * config.intermediate_size, hidden_size,
                              /*transposed_weight=*/true, hidden_size, combine_lr_scales(lr_scale, config.lr_scale))) {
  add_child(router_);
  add_child(layer_1_);
  add_child(layer_2_);
}

MoeMlp::MoeMlp(const MoeMlpConfig& config, const SublayerArguments& arguments)
    : MoeMlp(arguments.name, config, arguments.hidden_size, arguments.lr_scale) {
  if (arguments.lora == nullptr) return;
  for (auto [field, layer] : {std::pair<std::string_view, const LinearConfig*>{"router", &config.router},
                              {"layer_1", &config.layer_1},
                              {"layer_2", &config.layer_2}})
    if (layer->apply_peft.value_or(false))
      throw NotSupportedError("layers", fmt::format("{}: LoRA on the mixture of experts' {} is not supported",
                                                    layer->field_path("apply_peft"), field));
}

FLM_REGISTER_SUBLAYER(MlpBase, MoeMlp, MoeMlpConfig, "moe");

int64_t MoeMlp::matmul_weight_count() const {
  const int64_t per_expert = hidden_size_ * (gated_ ? 2 : 1) * intermediate_size_ + intermediate_size_ * hidden_size_;
  return int64_t(routed_experts_) * hidden_size_ + slots() * per_expert;
}

Tensor MoeMlp::forward(LayerContext& context, const Tensor& input) {
  return saved_.keep(context, [&](Saved* saved) { return forward(context, input, saved); });
}

Tensor MoeMlp::backward(LayerContext& context, const Tensor& grad_output) {
  return backward(context, grad_output, saved_.take(context.batch.index, name()));
}

DType MoeMlp::logits_dtype(DType compute_dtype) const {
  return compute_dtype == DType::float64 ? DType::float64 : DType::float32;
}

Tensor MoeMlp::router_logits(const Tensor& input, Stream stream) {
  Tensor logits = Tensor::empty(Shape{input.size(0), routed_experts_}, logits_dtype(input.dtype()), input.device(),
                                stream);
  kernels::gemm({.a = input,
                 .b = router_.weight().weight,
                 .out = logits,
                 .transpose_b = true,
                 .alpha = router_input_scale_,
                 .stream = stream});
  return logits;
}

Tensor MoeMlp::jitter_factors(const LayerContext& context, int64_t tokens, DType dtype) const {
  const uint64_t seed = dropout_seed(context.dropout_seed, name(), kJitterPurpose);
  std::vector<float> factors(size_t(tokens * routed_experts_));
  for (size_t index = 0; index < factors.size(); ++index)
    factors[index] = float(1.0 - jitter_eps_ + 2.0 * jitter_eps_ * double(random_uniform(seed, uint64_t(index))));
  return Tensor::from_values(factors, Shape{tokens * routed_experts_, 1}, dtype).to(context.device, context.stream);
}

void MoeMlp::multiply_by_jitter(Tensor& values, const Tensor& factors, Stream stream) const {
  // The element-wise product as moe_scale_rows of (tokens * routed) rows of width 1, in their own order.
  const int64_t count = values.numel();
  std::vector<int64_t> identity(static_cast<size_t>(count));
  for (int64_t index = 0; index < count; ++index) identity[size_t(index)] = index;
  Tensor rows = Tensor::from_indices(identity, DType::int32, values.device(), stream).reshape(Shape{count, 1});
  Tensor column = values.reshape(Shape{count, 1});
  kernels::moe_scale_rows({.input = column, .rows = rows, .scores = factors, .output = column, .stream = stream});
}

Tensor MoeMlp::permute(const Tensor& input, const Tensor& rows, Stream stream) const {
  Tensor permuted = Tensor::empty(Shape{rows.numel(), input.size(1)}, input.dtype(), input.device(), stream);
  kernels::moe_permute({.input = input, .rows = rows, .output = permuted, .stream = stream});
  return permuted;
}

Tensor MoeMlp::expert_rows(const Tensor& buffer, const std::vector<int64_t>& offsets, int64_t expert) {
  return buffer.slice(0, offsets[size_t(expert)], offsets[size_t(expert) + 1]);
}

Tensor MoeMlp::expert_weight(const Tensor& weight, int64_t rows_per_expert, int64_t expert) {
  return weight.slice(0, expert * rows_per_expert, (expert + 1) * rows_per_expert);
}

Tensor MoeMlp::first_projection(const Tensor& permuted, const std::vector<int64_t>& offsets, Stream stream) {
  const int64_t width = (gated_ ? 2 : 1) * intermediate_size_;
  Tensor hidden = Tensor::empty(Shape{permuted.size(0), width}, permuted.dtype(), permuted.device(), stream);
  for (int64_t expert = 0; expert < experts_; ++expert) {
    if (offsets[size_t(expert) + 1] == offsets[size_t(expert)]) continue;
    Tensor out = expert_rows(hidden, offsets, expert);
    kernels::gemm({.a = expert_rows(permuted, offsets, expert),
                   .b = expert_weight(layer_1_.weight().weight, width, expert),
                   .out = out,
                   .transpose_b = true,
                   .ragged = kernels::GemmRagged::m,
                   .stream = stream});
  }
  return hidden;
}

Tensor MoeMlp::activate(const Tensor& hidden, Stream stream) const {
  return activate_mlp_hidden(hidden, intermediate_size_, activation_, gated_, stream);
}

Tensor MoeMlp::scaled(const Tensor& activated, const Tensor& rows, const Tensor& scores, Stream stream) const {
  Tensor output = Tensor::empty(activated.shape(), activated.dtype(), activated.device(), stream);
  kernels::moe_scale_rows({.input = activated, .rows = rows, .scores = scores, .output = output, .stream = stream});
  return output;
}

Tensor MoeMlp::forward(const LayerContext& context, const Tensor& input, Saved* saved) {
  FLM_ASSERT(input.rank() == 2 && input.size(1) == hidden_size_, "{}: input {} for hidden size {}", name(),
             input.shape().str(), hidden_size_);
  const Stream stream = context.stream;
  const Device device = input.device();
  const int64_t tokens = input.size(0), slots = this->slots();

  // Routing, and this micro-batch's share of the step's mean losses.
  Tensor logits = router_logits(input, stream);
  Tensor jitter;
  if (context.training && jitter_eps_ > 0.0) {
    jitter = jitter_factors(context, tokens, logits.dtype());
    multiply_by_jitter(logits, jitter, stream);
  }
  Tensor experts = Tensor::empty(Shape{tokens, slots}, DType::int32, device, stream);
  Tensor scores = Tensor::empty(Shape{tokens, slots}, logits.dtype(), device, stream);
  Tensor expert_counts = Tensor::empty(Shape{int64_t(routed_experts_)}, DType::float32, device, stream);
  Tensor* load_balancing_sum = nullptr;
  Tensor* z_loss_sum = nullptr;
  if (context.losses != nullptr) {
    if (routing_ == kernels::MoeRouting::top_k_softmax)
      load_balancing_sum = &context.losses->get("load_balancing_loss", device, LossNormalization::normalized);
    if (z_loss_coefficient_ > 0.0)
      z_loss_sum = &context.losses->get("router_z_loss", device, LossNormalization::normalized);
  }
  kernels::moe_route_forward({.logits = logits,
                              .experts = experts,
                              .scores = scores,
                              .top_k = top_k_,
                              .shared_experts = shared_experts_,
                              .routing = routing_,
                              .training = context.training,
                              .expert_counts = &expert_counts,
                              .load_balancing_loss_sum = load_balancing_sum,
                              .z_loss_sum = z_loss_sum,
                              .loss_weight = 1.0 / double(std::max<int64_t>(context.micro_batches_in_step, 1)),
                              .stream = stream});
  Tensor offsets_tensor = Tensor::empty(Shape{int64_t(experts_) + 1}, DType::int32, device, stream);
  Tensor rows = Tensor::empty(Shape{tokens, slots}, DType::int32, device, stream);
  kernels::moe_dispatch_map({.experts = experts, .expert_offsets = offsets_tensor, .rows = rows, .stream = stream});
  // The per-expert gemms need the row counts on the host: the layer's one small device -> host copy.
  const Tensor host_offsets = offsets_tensor.to(Device::cpu(), stream);
  std::vector<int64_t> offsets(size_t(experts_) + 1);
  for (int64_t expert = 0; expert <= experts_; ++expert)
    offsets[size_t(expert)] = host_offsets.data_as<int32_t>()[expert];

  // Experts.
  Tensor permuted = permute(input, rows, stream);
  Tensor hidden = first_projection(permuted, offsets, stream);
  Tensor activated = activate(hidden, stream);
  Tensor expert_output = Tensor::empty(Shape{tokens * slots, hidden_size_}, input.dtype(), device, stream);
  {
    Tensor scaled_rows = scaled(activated, rows, scores, stream);
    for (int64_t expert = 0; expert < experts_; ++expert) {
      if (offsets[size_t(expert) + 1] == offsets[size_t(expert)]) continue;
      Tensor out = expert_rows(expert_output, offsets, expert);
      kernels::gemm({.a = expert_rows(scaled_rows, offsets, expert),
                     .b = expert_weight(layer_2_.weight().weight, intermediate_size_, expert),
                     .out = out,
                     .ragged = kernels::GemmRagged::m,
                     .stream = stream});
    }
  }
  Tensor output = Tensor::empty(Shape{tokens, hidden_size_}, input.dtype(), device, stream);
  kernels::moe_unpermute({.input = expert_output, .rows = rows, .output = output, .stream = stream});

  if (saved != nullptr) {
    *saved = Saved{.input = input,
                   .logits = std::move(logits),
                   .jitter = std::move(jitter),
                   .experts = std::move(experts),
                   .scores = std::move(scores),
                   .expert_counts = std::move(expert_counts),
                   .rows = std::move(rows),
                   .offsets = std::move(offsets),
                   .permuted = recompute_level_ == MlpRecomputeLevel::none ||
                                       recompute_level_ == MlpRecomputeLevel::activation
                                   ? std::move(permuted)
                                   : Tensor(),
                   .hidden = recompute_level_ == MlpRecomputeLevel::full ? Tensor() : std::move(hidden),
                   .activated = recompute_level_ == MlpRecomputeLevel::none ? std::move(activated) : Tensor()};
  }
  return output;
}

Tensor MoeMlp::backward(const LayerContext& context, const Tensor& grad_output, Saved saved) {
  FLM_ASSERT(saved.input.defined(), "{}: backward without a saved forward", name());
  const Stream stream = context.stream;
  const Device device = saved.input.device();
  const int64_t tokens = saved.input.size(0);
  const std::vector<int64_t>& offsets = saved.offsets;
  auto has_rows = [&](int64_t expert) { return offsets[size_t(expert) + 1] > offsets[size_t(expert)]; };

  // What forward did not keep, recomputed by the same kernels on the same inputs.
  Tensor permuted = saved.permuted.defined() ? std::move(saved.permuted) : permute(saved.input, saved.rows, stream);
  Tensor hidden = saved.hidden.defined() ? std::move(saved.hidden) : first_projection(permuted, offsets, stream);
  Tensor activated = saved.activated.defined() ? std::move(saved.activated) : activate(hidden, stream);
  Tensor grad_permuted = permute(grad_output, saved.rows, stream);

  // layer_2: grad W2_e (+)= (s a)_e^T g_e, grad of the scaled activation g_e W2_e^T. Experts without rows get no gemm:
  // the step's first accumulation writes their gradient blocks as zeros.
  Tensor grad_activated = Tensor::empty(activated.shape(), activated.dtype(), device, stream);
  {
    Parameter& weight = layer_2_.weight();
    const bool trained = weight.grad.defined();
    const double beta = trained ? weight.grad_beta() : 1.0;
    Tensor scaled_rows = trained ? scaled(activated, saved.rows, saved.scores, stream) : Tensor();
    for (int64_t expert = 0; expert < experts_; ++expert) {
      Tensor weight_grad = trained ? expert_weight(weight.grad, intermediate_size_, expert) : Tensor();
      if (!has_rows(expert)) {
        if (trained && beta == 0.0) kernels::fill({.tensor = weight_grad, .value = 0.0, .stream = stream});
        continue;
      }
      const Tensor grad_rows = expert_rows(grad_permuted, offsets, expert);
      Tensor out = expert_rows(grad_activated, offsets, expert);
      kernels::gemm({.a = grad_rows,
                     .b = expert_weight(weight.weight, intermediate_size_, expert),
                     .out = out,
                     .transpose_b = true,
                     .ragged = kernels::GemmRagged::m,
                     .stream = stream});
      if (trained)
        kernels::gemm({.a = expert_rows(scaled_rows, offsets, expert),
                       .b = grad_rows,
                       .out = weight_grad,
                       .transpose_a = true,
                       .beta = beta,
                       .ragged = kernels::GemmRagged::k,
                       .stream = stream});
    }
  }
  Tensor grad_scores = Tensor::empty(saved.scores.shape(), saved.scores.dtype(), device, stream);
  kernels::moe_scale_rows_backward({.grad_output = grad_activated,
                                    .input = activated,
                                    .rows = saved.rows,
                                    .scores = saved.scores,
                                    .grad_input = grad_activated,
                                    .grad_scores = grad_scores,
                                    .stream = stream});
  activated = Tensor();
  Tensor grad_hidden = Tensor::empty(hidden.shape(), hidden.dtype(), device, stream);
  kernels::activation_backward({.type = activation_,
                                .gated = gated_,
                                .grad_output = grad_activated,
                                .input = hidden,
                                .grad_input = grad_hidden,
                                .stream = stream});
  hidden = Tensor();
  grad_activated = Tensor();

  // layer_1: grad W1_e (+)= dh_e^T x_e, dx_e = dh_e W1_e into grad_permuted's rows (layer_2 is done with them).
  {
    Parameter& weight = layer_1_.weight();
    const int64_t width = (gated_ ? 2 : 1) * intermediate_size_;
    const bool trained = weight.grad.defined();
    const double beta = trained ? weight.grad_beta() : 1.0;
    for (int64_t expert = 0; expert < experts_; ++expert) {
      Tensor weight_grad = trained ? expert_weight(weight.grad, width, expert) : Tensor();
      if (!has_rows(expert)) {
        if (trained && beta == 0.0) kernels::fill({.tensor = weight_grad, .value = 0.0, .stream = stream});
        continue;
      }
      const Tensor grad_rows = expert_rows(grad_hidden, offsets, expert);
      if (trained)
        kernels::gemm({.a = grad_rows,
                       .b = expert_rows(permuted, offsets, expert),
                       .out = weight_grad,
                       .transpose_a = true,
                       .beta = beta,
                       .ragged = kernels::GemmRagged::k,
                       .stream = stream});
      Tensor out = expert_rows(grad_permuted, offsets, expert);
      kernels::gemm({.a = grad_rows,
                     .b = expert_weight(weight.weight, width, expert),
                     .out = out,
                     .ragged = kernels::GemmRagged::m,
                     .stream = stream});
    }
  }
  grad_hidden = Tensor();
  permuted = Tensor();
  Tensor grad_input = Tensor::empty(Shape{tokens, hidden_size_}, grad_output.dtype(), device, stream);
  kernels::moe_unpermute({.input = grad_permuted, .rows = saved.rows, .output = grad_input, .stream = stream});
  grad_permuted = Tensor();

  // The router: scores and both losses -> logits -> (jitter) -> router weight and input.
  const double micro_batches = double(std::max<int64_t>(context.micro_batches_in_step, 1));
  const bool load_balancing = routing_ == kernels::MoeRouting::top_k_softmax && auxiliary_loss_coefficient_ > 0.0;
  Tensor grad_logits = Tensor::empty(saved.logits.shape(), saved.logits.dtype(), device, stream);
  kernels::moe_route_backward(
      {.logits = saved.logits,
       .experts = saved.experts,
       .grad_scores = grad_scores,
       .grad_logits = grad_logits,
       .top_k = top_k_,
       .shared_experts = shared_experts_,
       .routing = routing_,
       .load_balancing_gradient = load_balancing ? auxiliary_loss_coefficient_ * double(routed_experts_) *
                                                       context.loss_scale / micro_batches
                                                 : 0.0,
       .z_loss_gradient = z_loss_coefficient_ * context.loss_scale / micro_batches,
       .expert_counts = &saved.expert_counts,
       .stream = stream});
  if (saved.jitter.defined()) multiply_by_jitter(grad_logits, saved.jitter, stream);
  if (grad_logits.dtype() != saved.input.dtype()) {
    Tensor cast = Tensor::empty(grad_logits.shape(), saved.input.dtype(), device, stream);
    kernels::cast({.source = grad_logits, .destination = cast, .stream = stream});
    grad_logits = std::move(cast);
  }
  Parameter& router = router_.weight();
  kernels::gemm({.a = grad_logits,
                 .b = router.weight,
                 .out = grad_input,
                 .alpha = router_input_scale_,
                 .beta = 1.0,
                 .stream = stream});
  if (router.grad.defined())
    kernels::gemm({.a = grad_logits,
                   .b = saved.input,
                   .out = router.grad,
                   .transpose_a = true,
                   .alpha = router_input_scale_,
                   .beta = router.grad_beta(),
                   .stream = stream});
  return grad_input;
}

}  // namespace fast_llm::layers
