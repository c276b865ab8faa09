#include "fast_llm/models/gpt/conversion/reference_outputs.h"

#include <fmt/format.h>

#include <cmath>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/checkpoint/safetensors.h"
#include "fast_llm/engine/checkpoint/state.h"
#include "fast_llm/engine/schedule/runner.h"
#include "fast_llm/layers/language_model/config.h"
#include "fast_llm/models/gpt/conversion/huggingface.h"
#include "fast_llm/models/gpt/model.h"

namespace fast_llm::models::gpt {

namespace {

constexpr std::string_view kComponent = "model_outputs";

}  // namespace

void ModelOutputsConfig::visit(config::Visitor& v) {
  using config::Hint;
  v(pretrained, "pretrained", "The checkpoint to load (its model config is used, under the values given here).",
    Hint::core);
  v(model, "model", "The model; model.distributed.compute_dtype and use_cuda choose the numerics and the device.",
    Hint::core);
  v(tokens, "tokens", "A safetensors file holding `tokens`, I64 (batch, sequence); each row is one document.",
    Hint::core);
  v(output, "output", "The safetensors file to write (logits, loss, grad.<parameter>).", Hint::core);
  v(gradients, "gradients", "Also run backward and write the gradient of the mean loss for every parameter.",
    Hint::optional);
}

void ModelOutputsConfig::check() const {
  if (!pretrained.path) fail("pretrained", "pretrained.path is required");
  if (!tokens) fail("tokens", "is required");
  if (!output) fail("output", "is required");
}

void write_model_outputs(const ModelOutputsConfig& config) {
  const GPTModelConfig& model_config = config.model;
  // Gradients are written for every parameter, named as the checkpoint's format names it: a model whose weights are
  // frozen (LoRA's freeze_others) has none for them.
  if (const auto* lora = dynamic_cast<const layers::LoraConfig*>(&model_config.base_model.peft.get());
      config.gradients && lora != nullptr && lora->freeze_others)
    throw ConfigError(config.field_path("gradients"),
                      "is true, but the model's weights other than its LoRA adapters are frozen and have no "
                      "gradient (model.base_model.peft.freeze_others); set gradients: false");
  const layers::LanguageModelHeadConfig& head_config = model_config.base_model.head;
  GPTModel model(model_config.base_model);
  const Device device = engine::resolve_device(model_config.distributed);
  const Stream stream = compute_stream(device);
  engine::MultiStage multi_stage(model, model_config.multi_stage, model_config.distributed, device,
                                 /*training=*/true);
  const engine::PretrainedState state = engine::open_pretrained_state(config.pretrained, model_config);
  engine::load_multi_stage_state(multi_stage, *state.state, false);

  // Tokens: one document per row.
  engine::SafetensorsFile tokens_file(*config.tokens);
  const engine::SafetensorsTensorInfo& info = tokens_file.info("tokens");
  FLM_CHECK(info.dtype.name == "I64" && info.shape.size() == 2 && info.shape[1] >= 2, kComponent,
            "{}: `tokens` must be I64 (batch, sequence) with sequences of at least 2 tokens, got {} [{}]",
            config.tokens->string(), info.dtype.name, fmt::join(info.shape, ", "));
  const Tensor tokens = tokens_file.read("tokens");
  const int64_t batch = tokens.size(0), length = tokens.size(1);
  const int64_t vocab = model_config.base_model.embeddings.vocab_size;
  std::vector<layers::MicroBatch> micro_batches;
  for (int64_t row = 0; row < batch; ++row) {
    const int64_t* values = tokens.data_as<int64_t>() + row * length;
    const size_t count = size_t(length);
    std::vector<int64_t> ids(values, values + length), labels(count), positions(count);
    for (int64_t t = 0; t < length; ++t) {
      FLM_CHECK(ids[size_t(t)] >= 0 && ids[size_t(t)] < vocab, kComponent, "{}: token {} is outside the vocabulary "
                                                                           "of {}",
                config.tokens->string(), ids[size_t(t)], vocab);
      labels[size_t(t)] = t + 1 < length ? values[t + 1] : -100;
      positions[size_t(t)] = t;
    }
    Tensor cu_seqlens = Tensor::empty(Shape{2}, DType::int32);
    cu_seqlens.data_as<int32_t>()[0] = 0;
    cu_seqlens.data_as<int32_t>()[1] = int32_t(length);
    micro_batches.push_back({.index = row,
                             .tokens = Tensor::from_indices(ids, DType::int64, device, stream),
                             .labels = Tensor::from_indices(labels, DType::int64, device, stream),
                             .positions = Tensor::from_indices(positions, DType::int64, device, stream),
                             .cu_seqlens = device.is_cpu() ? cu_seqlens : cu_seqlens.to(device, stream),
                             .max_seqlen = length});
  }

  // Logits, from the final norm's output and the output weights (or the tied embeddings), in fp64.
  Tensor logits = Tensor::empty(Shape{batch, length, vocab}, DType::float64);
  const Tensor weights = engine::to_host_dtype(model.head().output_weights().weight, DType::float64);
  const int64_t hidden = model_config.base_model.hidden_size;
  for (int64_t row = 0; row < batch; ++row) {
    layers::LossSums unused;
    layers::LayerContext context{.batch = micro_batches[size_t(row)],
                                 .device = device,
                                 .compute_dtype = model_config.distributed.compute_dtype,
                                 .stream = stream,
                                 .training = false,
                                 .losses = &unused};
    Tensor x = model.embeddings().forward(context, Tensor());
    for (int block = 0; block < model.block_count(); ++block) x = model.block(block).forward(context, x);
    const Tensor normalized = engine::to_host_dtype(model.head().final_norm().forward(x, nullptr, stream),
                                                    DType::float64);
    const double* h = normalized.data_as<double>();
    const double* w = weights.data_as<double>();
    double* out = logits.data_as<double>() + row * length * vocab;
    for (int64_t t = 0; t < length; ++t)
      for (int64_t v = 0; v < vocab; ++v) {
        double sum = 0.0;
        for (int64_t k = 0; k < hidden; ++k) sum += h[t * hidden + k] * w[v * hidden + k];
        sum *= head_config.logits_scale_factor;
        if (head_config.final_logit_softcap)
          sum = *head_config.final_logit_softcap * std::tanh(sum / *head_config.final_logit_softcap);
        out[t * vocab + v] = sum;
      }
  }

  std::vector<engine::SafetensorsEntry> entries{
      {.name = "logits", .dtype = DType::float64, .shape = logits.shape(), .values = [logits] { return logits; }}};
  std::map<std::string, std::string> metadata{
      {"format", std::string(config::enum_name(config.pretrained.format))},
      {"compute_dtype", std::string(dtype_name(model_config.distributed.compute_dtype))},
      {"device", device.str()}};

  if (config.gradients) {
    // One training step's forward and backward (no update): the mean loss over every label, and its gradients.
    engine::ScheduleConfig schedule;
    schedule.load(YAML::Load(fmt::format("{{depth_first_micro_batches: {}}}", batch)), "schedule");
    schedule.validate("schedule");
    engine::ScheduleRunner runner(multi_stage, schedule, model_config.distributed);
    const int64_t num_labels = batch * (length - 1);
    layers::LossSums losses;
    runner.run_training_step(micro_batches, num_labels, 1, 1.0, losses);
    const std::string total(layers::LanguageModelHeadConfig::kHeadLossName);
    FLM_CHECK(losses.all().contains(total), kComponent, "the head computed no `{}`", total);
    Tensor loss = Tensor::empty(Shape{1}, DType::float64);
    loss.data_as<double>()[0] = losses.all().at(total).item() / double(num_labels);
    entries.push_back({.name = "loss", .dtype = DType::float64, .shape = Shape{1}, .values = [loss] { return loss; }});

    auto gradients = std::make_shared<engine::TensorList>("gradients");
    for (layers::Layer* layer : model.layers())
      for (layers::Parameter* parameter : layer->parameters()) {
        FLM_ASSERT(parameter->grad.defined(), "parameter {} has no gradient", parameter->meta.name);
        Tensor gradient = engine::to_host_dtype(parameter->grad, DType::float64).reshape(parameter->meta.shape);
        Tensor copy = Tensor::empty(gradient.shape(), DType::float64);
        copy.copy_bytes_from(gradient);
        gradients->add(engine::state_key(parameter->meta.name, engine::kWeightsShard),
                       {DType::float64, parameter->meta.shape}, [copy] { return copy; });
      }
    // Named as the checkpoint names its weights.
    std::shared_ptr<const engine::TensorSource> named = gradients;
    std::optional<engine::CheckpointFormat> hf;
    if (config.pretrained.format == engine::CheckpointFormat::auto_)
      hf = read_huggingface_checkpoint(*config.pretrained.path, engine::CheckpointFormat::auto_, false).format->format;
    else if (config.pretrained.format != engine::CheckpointFormat::distributed &&
             config.pretrained.format != engine::CheckpointFormat::fast_llm)
      hf = config.pretrained.format;
    if (hf) named = export_hf_weights(hf_format(*hf), gradients, model_config.base_model);
    for (const std::string& name : named->names()) {
      std::string label = name;
      if (!hf) label = name.substr(0, name.rfind('/'));
      const engine::TensorSpec spec = named->spec(name);
      entries.push_back({.name = "grad." + label, .dtype = spec.dtype, .shape = spec.shape,
                         .values = [named, name] { return named->load(name); }});
    }
  }
  engine::write_safetensors(*config.output, entries, metadata);
  log_main("Wrote the outputs of {} on {} sequences of {} tokens to {}", config.pretrained.path->string(), batch,
           length, config.output->string());
}

}  // namespace fast_llm::models::gpt
