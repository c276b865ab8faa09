// The trainer's other sections (optimizer, schedule, training, run, pretrained, profiling) against Fast-LLM's contract:
// the Mistral example's sections load, defaults are Fast-LLM's (hard-coded from reference/fast-llm.md §6 and
// Fast-LLM's config classes), invalid values name their path, and features without behaviour are reported.
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/evaluation/config.h"
#include "fast_llm/engine/optimizer/config.h"
#include "fast_llm/engine/schedule/config.h"
#include "fast_llm/engine/training/config.h"
#include "fast_llm/engine/training/run_config.h"

namespace fast_llm::engine {
namespace {

using testing::config_error;
using testing::load_config;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool mentions(const std::vector<std::string>& messages, const std::string& part) {
  for (const auto& message : messages)
    if (contains(message, part)) return true;
  return false;
}

TEST(OptimizerConfig, MistralExampleSection) {
  auto config = load_config<OptimizerConfig>(
      "{learning_rate: {base: 1.0e-05, decay_style: constant, warmup_iterations: 0}, weight_decay: 0.1, beta_1: 0.9, "
      "beta_2: 0.95}",
      "optimizer");
  EXPECT_DOUBLE_EQ(config.learning_rate.base, 1e-5);
  EXPECT_EQ(config.learning_rate.decay_style, DecayStyle::constant);
  EXPECT_EQ(config.learning_rate.warmup_iterations, 0);
  EXPECT_DOUBLE_EQ(config.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(config.beta_1, 0.9);
  EXPECT_DOUBLE_EQ(config.beta_2, 0.95);
  // Left at Fast-LLM's defaults.
  EXPECT_DOUBLE_EQ(config.epsilon, 1e-8);
  EXPECT_DOUBLE_EQ(config.gradient_norm_clipping, 1.0);
  EXPECT_DOUBLE_EQ(config.default_learning_rate_scale, 1.0);
  EXPECT_FALSE(config.gradient_scaler.constant.has_value());
  EXPECT_DOUBLE_EQ(config.gradient_scaler.initial, 65536.0);
  EXPECT_DOUBLE_EQ(config.gradient_scaler.minimum, 1.0);
  EXPECT_EQ(config.gradient_scaler.window, 1000);
  EXPECT_EQ(config.gradient_scaler.hysteresis, 2);
  auto stages = config.learning_rate.stages();
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0].style, DecayStyle::constant);
  EXPECT_EQ(stages[0].begin, 0);
  EXPECT_FALSE(stages[0].end.has_value());
  EXPECT_DOUBLE_EQ(stages[0].lr, 1e-5);
}

TEST(OptimizerConfig, Defaults) {
  auto config = load_config<OptimizerConfig>("{}", "optimizer");
  EXPECT_DOUBLE_EQ(config.learning_rate.base, 1e-4);
  EXPECT_EQ(config.learning_rate.decay_style, DecayStyle::constant);
  EXPECT_FALSE(config.learning_rate.decay_iterations.has_value());
  EXPECT_DOUBLE_EQ(config.learning_rate.decay_power, 1.0);
  EXPECT_DOUBLE_EQ(config.learning_rate.minimum, 0.0);
  EXPECT_DOUBLE_EQ(config.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(config.beta_1, 0.9);
  EXPECT_DOUBLE_EQ(config.beta_2, 0.999);
}

TEST(OptimizerConfig, WarmupThenCosine) {
  auto config = load_config<OptimizerConfig>(
      "{learning_rate: {base: 3e-4, warmup_iterations: 100, decay_style: cosine, decay_iterations: 1000, "
      "minimum: 3e-5}}",
      "optimizer");
  auto stages = config.learning_rate.stages();
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0], (LearningRateStage{.style = DecayStyle::linear, .begin = 0, .end = 100, .lr = 0,
                                          .end_lr = 3e-4, .power = 1}));
  EXPECT_EQ(stages[1], (LearningRateStage{.style = DecayStyle::cosine, .begin = 100, .end = 1000, .lr = 3e-4,
                                          .end_lr = 3e-5, .power = 1}));
}

TEST(OptimizerConfig, ScheduleString) {
  auto config = load_config<OptimizerConfig>(
      "{learning_rate: {schedule: 'linear,2000,0,3e-4;constant,80000,3e-4;cosine,18000,3e-4,0,2'}}", "optimizer");
  auto stages = config.learning_rate.stages();
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages[1].begin, 2000);
  EXPECT_EQ(stages[1].end, 82000);
  EXPECT_EQ(stages[2].style, DecayStyle::cosine);
  EXPECT_EQ(stages[2].end, 100000);
  EXPECT_DOUBLE_EQ(stages[2].end_lr, 0.0);
  EXPECT_DOUBLE_EQ(stages[2].power, 2.0);
  // An open-ended last stage.
  stages = load_config<OptimizerConfig>("{learning_rate: {schedule: 'linear,10,0,1e-3;constant,-1,1e-3'}}", "optimizer")
               .learning_rate.stages();
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_FALSE(stages[1].end.has_value());
}

TEST(OptimizerConfig, InvalidValuesNameThePath) {
  auto error = [](const std::string& text) { return config_error<OptimizerConfig>(text, "optimizer"); };
  EXPECT_TRUE(contains(error("{learning_rate: {decay_style: cosine}}"),
                       "optimizer.learning_rate.decay_iterations: is required with decay_style cosine"));
  EXPECT_TRUE(contains(error("{learning_rate: {warmup_iterations: 100, decay_iterations: 50, decay_style: linear}}"),
                       "optimizer.learning_rate.decay_iterations: must be greater than warmup_iterations (100)"));
  EXPECT_TRUE(contains(error("{learning_rate: {decay_style: exponential}}"),
                       "optimizer.learning_rate.decay_style: unknown value 'exponential'"));
  EXPECT_TRUE(contains(error("{learning_rate: {schedule: 'linear,100,0'}}"),
                       "optimizer.learning_rate.schedule: cannot parse stage \"linear,100,0\": an interpolating stage "
                       "needs end_lr"));
  EXPECT_TRUE(contains(error("{learning_rate: {schedule: 'constant,-1,1e-3;constant,10,1e-3'}}"),
                       "only the last stage may be open-ended"));
  EXPECT_TRUE(contains(error("{learning_rate: {schedule: 'wsd,10,1e-3'}}"), "the type must be constant"));
  EXPECT_TRUE(contains(error("{beta_2: 1.5}"), "optimizer.beta_2: must be in [0, 1]"));
  EXPECT_TRUE(contains(error("{epsilon: 0}"), "optimizer.epsilon: must be greater than 0"));
  EXPECT_TRUE(contains(error("{weight_decay: heavy}"), "optimizer.weight_decay: expected a number"));
  EXPECT_TRUE(contains(error("{learning_rate: {bsae: 1}}"), "did you mean 'base'"));
}

TEST(TrainingConfig, MistralExampleSection) {
  auto config = load_config<TrainingConfig>("{train_iters: 100, num_workers: 8, logs: {interval: 10}}", "training");
  EXPECT_EQ(config.train_iters, 100);
  EXPECT_EQ(config.num_workers, 8);
  EXPECT_EQ(config.logs.interval, 10);
  EXPECT_TRUE(config.logs.enabled_at(20));
  EXPECT_FALSE(config.logs.enabled_at(25));
  // Left at Fast-LLM's defaults.
  EXPECT_EQ(config.logs.offset, 0);
  EXPECT_FALSE(config.checkpoint.interval.has_value());
  EXPECT_EQ(config.checkpoint.keep, 5);
  EXPECT_FALSE(config.checkpoint.keep_every.has_value());
  EXPECT_FALSE(config.export_.interval.has_value());
  EXPECT_EQ(config.export_.format, CheckpointFormat::fast_llm);
  EXPECT_EQ(config.export_.optimizer_state, true);  // fast_llm holds optimizer state
  EXPECT_EQ(config.export_.parameters_per_file, int64_t(1) << 32);
  EXPECT_FALSE(config.shutdown.interval.has_value());
  EXPECT_EQ(config.wandb.project_name, "fast_llm");
  EXPECT_EQ(config.wandb.group_name, "default");
  EXPECT_FALSE(config.wandb.entity_name.has_value());
  EXPECT_TRUE(config.evaluators.empty());
  EXPECT_FALSE(config.prefetch_factor.has_value());
  EXPECT_EQ(config.timeout, 3600.0);
  EXPECT_TRUE(config.unsupported_fields().empty());
}

TEST(TrainingConfig, Defaults) {
  auto config = load_config<TrainingConfig>("{}", "training");
  EXPECT_EQ(config.train_iters, 0);
  EXPECT_EQ(config.num_workers, 2);
  EXPECT_EQ(config.logs.interval, 100);
}

TEST(TrainingConfig, EvaluatorsExportsAndIntervals) {
  auto config = load_config<TrainingConfig>(
      "{evaluators: {validation: {interval: 50, iterations: 10}}, export: {format: llama, interval: 1000}, "
      "checkpoint: {interval: 1000, offset: 2500}}",
      "training");
  const auto* evaluator = config.evaluators.at("validation").as<LossEvaluatorConfig>();  // `loss` by default
  ASSERT_NE(evaluator, nullptr);
  EXPECT_EQ(evaluator->iterations, 10);
  EXPECT_EQ(config.export_.format, CheckpointFormat::llama);
  EXPECT_EQ(config.export_.optimizer_state, false);  // Hugging Face formats hold no optimizer state
  EXPECT_EQ(config.checkpoint.offset, 500);          // reduced modulo the interval

  auto error = [](const std::string& text) { return config_error<TrainingConfig>(text, "training"); };
  EXPECT_TRUE(contains(error("{checkpoint: {interval: 100}, shutdown: {interval: 150}}"),
                       "training.shutdown: every shutdown must fall on a checkpoint"));
  EXPECT_TRUE(contains(error("{export: {format: llama, optimizer_state: true}}"),
                       "training.export.optimizer_state: format llama cannot hold optimizer state"));
  EXPECT_TRUE(contains(error("{export: {format: auto}}"), "training.export.format: auto only applies to loading"));
  EXPECT_TRUE(contains(error("{export: {format: gemma4}}"), "training.export.format: gemma4 is not supported yet"));
  EXPECT_TRUE(contains(error("{export: {format: safetensors}}"), "training.export.format: unknown value 'safetensors'"));
  EXPECT_TRUE(contains(error("{evaluators: {validation: {type: perplexity}}}"),
                       "training.evaluators.validation.type: unknown type 'perplexity'"));
  EXPECT_TRUE(contains(error("{logs: {interval: 0}}"), "training.logs.interval: must be greater than 0"));
  EXPECT_TRUE(contains(error("{train_iters: -1}"), "training.train_iters: must be at least 0"));
}

TEST(TrainingConfig, NotSupportedYet) {
  auto unsupported = [](const std::string& text) {
    return load_config<TrainingConfig>(text, "training").unsupported_fields();
  };
  EXPECT_TRUE(mentions(unsupported("{evaluators: {harness: {type: lm_eval}}}"),
                       "training.evaluators.harness.type: lm_eval is not supported yet"));
  EXPECT_TRUE(mentions(unsupported("{wandb: {entity_name: me}}"), "training.wandb.entity_name: me is not supported"));
  EXPECT_TRUE(unsupported("{evaluators: {validation: {interval: 10, iterations: 2}}}").empty());
}

TEST(ScheduleConfig, DefaultsAndMarkers) {
  auto config = load_config<ScheduleConfig>("{depth_first_micro_batches: 4}", "schedule");
  EXPECT_EQ(config.depth_first_micro_batches, 4);
  EXPECT_EQ(config.breadth_first_micro_batches, 1);
  EXPECT_EQ(config.micro_batch_splits, 1);
  EXPECT_TRUE(config.data_overlap);
  EXPECT_TRUE(config.throttle_cpu);
  EXPECT_EQ(config.sequential_micro_batches(), 4);
  EXPECT_TRUE(config.unsupported_fields().empty());
  EXPECT_TRUE(load_config<ScheduleConfig>("{micro_batch_splits: 4}", "schedule").unsupported_fields().empty());
  EXPECT_TRUE(mentions(load_config<ScheduleConfig>("{skip_step: true}", "schedule").unsupported_fields(),
                       "schedule.skip_step: true is not supported yet"));
  EXPECT_TRUE(contains(config_error<ScheduleConfig>("{breadth_first_micro_batches: 0}", "schedule"),
                       "schedule.breadth_first_micro_batches: must be greater than 0"));
}

TEST(CheckpointLoadConfig, Pretrained) {
  auto config = load_config<CheckpointLoadConfig>("{format: mistral, path: /models/mistral-7b}", "pretrained");
  EXPECT_EQ(config.format, CheckpointFormat::mistral);
  EXPECT_EQ(config.path, std::filesystem::path("/models/mistral-7b"));
  EXPECT_EQ(config.load_config, ModelConfigType::model);
  EXPECT_TRUE(config.model_weights);
  EXPECT_FALSE(config.optimizer_state);
  auto defaults = load_config<CheckpointLoadConfig>("{}", "pretrained");
  EXPECT_EQ(defaults.format, CheckpointFormat::fast_llm);
  EXPECT_FALSE(defaults.path.has_value());

  auto error = [](const std::string& text) { return config_error<CheckpointLoadConfig>(text, "pretrained"); };
  EXPECT_TRUE(contains(error("{format: llama, optimizer_state: true}"),
                       "pretrained.optimizer_state: format llama holds no optimizer state"));
  EXPECT_TRUE(contains(error("{format: mtp_llama}"), "pretrained.format: mtp_llama is not supported yet"));
  EXPECT_TRUE(contains(error("{load_config: all}"), "pretrained.load_config: unknown value 'all'"));
  EXPECT_TRUE(load_config<CheckpointLoadConfig>("{format: distributed, optimizer_state: true}", "pretrained")
                  .optimizer_state);
}

TEST(RunConfig, MistralExampleSectionAndProfiling) {
  auto run = load_config<RunConfig>("{experiment_dir: mistral_example}", "run");
  EXPECT_EQ(run.experiment_dir, std::filesystem::path("mistral_example"));
  EXPECT_TRUE(run.structured_logs);
  EXPECT_TRUE(run.log_timestamps);
  EXPECT_FALSE(run.tensor_logs.save);
  EXPECT_EQ(run.tensor_logs.max_elements, 8);
  EXPECT_EQ(run.model_debug_level, 0);
  EXPECT_TRUE(run.unsupported_fields().empty());
  EXPECT_TRUE(contains(config_error<RunConfig>("{tensor_logs: {save: true}}", "run"),
                       "run.tensor_logs.save: needs run.experiment_dir"));

  auto profiling = load_config<ProfilingConfig>("{}", "profiling");
  EXPECT_EQ(profiling.skip, 1);
  EXPECT_EQ(profiling.warmup, 1);
  EXPECT_EQ(profiling.cycles, 1);
  EXPECT_EQ(profiling.table_width, 80);
  EXPECT_TRUE(profiling.unsupported_fields().empty());
  EXPECT_TRUE(load_config<ProfilingConfig>("{cuda: true, averages: true}", "profiling").unsupported_fields().empty());
  EXPECT_TRUE(mentions(
      load_config<ProfilingConfig>("{cuda: true, averages: true, export: true}", "profiling").unsupported_fields(),
      "profiling.export: true is not supported yet"));
  EXPECT_TRUE(contains(config_error<ProfilingConfig>("{cuda: true}", "profiling"),
                       "profiling.averages: profiling is on (cpu or cuda) but produces nothing"));
  EXPECT_TRUE(contains(config_error<ProfilingConfig>("{ranks: [0, 1, 0]}", "profiling"),
                       "profiling.ranks: rank 0 appears twice"));
}

TEST(TrainerSections, EverythingWrittenReadsBackTheSame) {
  auto round_trip = [](auto config, const std::string& path) {
    std::string written = config.to_yaml_string();
    auto reread = load_config<decltype(config)>(written, path);
    EXPECT_EQ(reread.to_yaml_string(), written) << path;
  };
  round_trip(load_config<OptimizerConfig>("{learning_rate: {schedule: 'linear,10,0,1e-3;constant,-1,1e-3'}, "
                                          "gradient_scaler: {constant: 1024}}",
                                          "optimizer"),
             "optimizer");
  round_trip(load_config<TrainingConfig>("{evaluators: {v: {interval: 5}, h: {type: lm_eval, cli_args: [--tasks, "
                                         "hellaswag]}}, export: {format: qwen2, data_type: bf16}, "
                                         "wandb: {alert: {interval: 100}}}",
                                         "training"),
             "training");
  round_trip(load_config<ScheduleConfig>("{breadth_first_micro_batches: 2}", "schedule"), "schedule");
  round_trip(load_config<CheckpointLoadConfig>("{format: auto, path: x}", "pretrained"), "pretrained");
  round_trip(load_config<RunConfig>("{experiment_dir: e, experiment_name: n}", "run"), "run");
  round_trip(load_config<ProfilingConfig>("{ranks: [3, 1]}", "profiling"), "profiling");
}

}  // namespace
}  // namespace fast_llm::engine
