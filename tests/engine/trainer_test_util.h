// The trainer on the test model and the `random` dataset, for the trainer tests: a fresh experiment directory per
// test, the configs of one small run (each replaceable before make_trainer), and the metrics file's records.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/test_model_type.h"
#include "fast_llm/data/data.h"
#include "fast_llm/engine/training/trainer.h"

namespace fast_llm::engine::testing {

using fast_llm::testing::load_config;

inline std::filesystem::path fresh_directory(const std::string& name) {
  auto path = std::filesystem::temp_directory_path() /
              ("fast_llm_trainer_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(path);
  return path;
}

inline constexpr const char* kTestDataYaml =
    "{datasets: {training: {type: random}, validation: {type: random}}, micro_batch_size: 16}";

struct TrainerRun {
  TrainerRun(const std::filesystem::path& directory, int seed, const std::string& training_yaml,
             const std::string& data_yaml = kTestDataYaml)
      : model_config(load_config<fast_llm::testing::TestModelConfig>(
            "{base_model: {vocab_size: 20, hidden_size: 4, num_linear: 2}, multi_stage: {layers_per_stage: 2}, "
            "distributed: " + fast_llm::testing::cpu_distributed_yaml(seed) + "}",
            "model")),
        pretrained(load_config<CheckpointLoadConfig>("{}", "pretrained")),
        training(load_config<TrainingConfig>(training_yaml, "training")),
        schedule(load_config<ScheduleConfig>("{depth_first_micro_batches: 2}", "schedule")),
        optimizer(load_config<OptimizerConfig>("{learning_rate: {base: 0.01, warmup_iterations: 2}}", "optimizer")),
        run(load_config<RunConfig>("{experiment_dir: '" + directory.string() + "'}", "run")),
        data_config(load_config<data::GPTDataConfig>(data_yaml, "data")),
        model(model_config.base_model.vocab_size, model_config.base_model.hidden_size,
              model_config.base_model.num_linear),
        data(data_config, {.experiment_directory = directory, .vocab_size = 20}) {}

  // `activation_bytes_per_token`: what each layer keeps per token for the memory check (0: activations left out).
  std::unique_ptr<Trainer> make_trainer(const ProfilingConfig* profiling = nullptr,
                                        int64_t activation_bytes_per_token = 0) {
    ModelActivations activations;
    if (activation_bytes_per_token > 0)
      activations.layers.assign(model.layers().size(), LayerActivations{.kept = activation_bytes_per_token});
    return std::make_unique<Trainer>(TrainerSections{.training = training,
                                                     .schedule = schedule,
                                                     .optimizer = optimizer,
                                                     .model = model_config,
                                                     .pretrained = pretrained,
                                                     .run = run,
                                                     .profiling = profiling,
                                                     .activations = activations},
                                     model, data, resolved_config);
  }

  fast_llm::testing::TestModelConfig model_config;
  CheckpointLoadConfig pretrained;
  TrainingConfig training;
  ScheduleConfig schedule;
  OptimizerConfig optimizer;
  RunConfig run;
  data::GPTDataConfig data_config;
  fast_llm::testing::TestModel model;
  data::GPTData data;
  std::string resolved_config = "resolved: true\nseed: 1";
};

inline std::vector<nlohmann::json> read_records(const std::filesystem::path& path) {
  std::vector<nlohmann::json> records;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

// The message of the fast_llm::Error `action` throws; empty (and a test failure) when it throws none.
template <class Action>
std::string error_message(Action&& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "no error was thrown";
  return {};
}

}  // namespace fast_llm::engine::testing
