// The trainer end to end on the test model and the `random` dataset: reproducible losses for a seed, the metrics
// file and its records, the run directory, evaluators, refusals, checkpoints and `pretrained` through the checkpoint
// engine on a model that is not GPT; and the formatting of the metric line.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/trainer_test_util.h"
#include "fast_llm/engine/checkpoint/metadata.h"

namespace fast_llm::engine {
namespace {

using testing::fresh_directory;
using testing::load_config;
using testing::read_records;
using testing::TrainerRun;

constexpr const char* kTrainingYaml =
    "{train_iters: 6, logs: {interval: 2}, evaluators: {validation: {interval: 3, iterations: 2}}}";

std::vector<nlohmann::json> train(const std::string& name, int seed) {
  auto directory = fresh_directory(name);
  TrainerRun run(directory, seed, kTrainingYaml);
  auto trainer = run.make_trainer();
  trainer->run();
  return read_records(directory / "runs" / "0" / "metrics.jsonl");
}

TEST(Trainer, WritesTheRunDirectoryAndOneRecordPerLogLine) {
  auto directory = fresh_directory("records");
  {
    TrainerRun run(directory, 1234, kTrainingYaml);
    auto trainer = run.make_trainer();
    EXPECT_EQ(trainer->samples_per_step(), 2);
    EXPECT_EQ(trainer->metrics_path(), directory / "runs" / "0" / "metrics.jsonl");
    trainer->run();
    EXPECT_EQ(trainer->completed_steps(), 6);
    EXPECT_EQ(trainer->optimizer()->optimizer_step(), 6);
  }
  std::ifstream config_file(directory / "config.yaml");
  std::stringstream config_text;
  config_text << config_file.rdbuf();
  EXPECT_EQ(config_text.str(), "resolved: true\nseed: 1\n");

  auto records = read_records(directory / "runs" / "0" / "metrics.jsonl");
  ASSERT_EQ(records.size(), 5u);
  const std::vector<std::pair<std::string, int>> expected = {
      {"training", 2}, {"validation", 3}, {"training", 4}, {"training", 6}, {"validation", 6}};
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& record = records[i];
    EXPECT_EQ(record.at("phase"), expected[i].first) << i;
    EXPECT_EQ(record.at("iteration"), expected[i].second) << i;
    EXPECT_EQ(record.at("train_iters"), 6);
    EXPECT_EQ(record.at("batch_size"), 2);
    EXPECT_EQ(record.at("consumed_samples"), 2 * expected[i].second);
    EXPECT_EQ(record.at("consumed_tokens"), 2 * 16 * expected[i].second);
    ASSERT_TRUE(record.at("mse").is_number()) << i;
    EXPECT_GT(record.at("mse").get<double>(), 0.0);
    EXPECT_GT(record.at("model_tflops").get<double>(), 0.0);
    EXPECT_GT(record.at("tokens_per_sec_per_gpu").get<double>(), 0.0);
    if (expected[i].first == "training") {
      EXPECT_GT(record.at("grad_norm").get<double>(), 0.0);
      EXPECT_EQ(record.at("skipped_iters"), 0);
      EXPECT_EQ(record.at("nan_iters"), 0);
      EXPECT_EQ(record.at("loss_scale"), 1.0);
      EXPECT_DOUBLE_EQ(record.at("percent_done").get<double>(), 100.0 * expected[i].second / 6.0);
    } else {
      EXPECT_EQ(record.at("dataset"), "validation");
    }
  }
  // Warmup over 2 steps: the rate logged at step 2 is the base rate.
  EXPECT_DOUBLE_EQ(records[0].at("learning_rate").get<double>(), 0.01);

  // A second run in the same experiment directory gets the next run index.
  TrainerRun again(directory, 1234, kTrainingYaml);
  auto trainer = again.make_trainer();
  EXPECT_EQ(trainer->metrics_path(), directory / "runs" / "1" / "metrics.jsonl");
  std::filesystem::remove_all(directory);
}

TEST(Trainer, TheSameSeedGivesTheSameLosses) {
  auto first = train("seed_a", 42), second = train("seed_b", 42), other = train("seed_c", 43);
  ASSERT_EQ(first.size(), 5u);
  ASSERT_EQ(second.size(), first.size());
  ASSERT_EQ(other.size(), first.size());
  bool any_difference = false;
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].at("mse").get<double>(), second[i].at("mse").get<double>()) << i;
    if (first[i].contains("grad_norm")) {
      EXPECT_EQ(first[i].at("grad_norm").get<double>(), second[i].at("grad_norm").get<double>()) << i;
    }
    any_difference = any_difference || first[i].at("mse").get<double>() != other[i].at("mse").get<double>();
  }
  EXPECT_TRUE(any_difference);
  for (const char* name : {"seed_a", "seed_b", "seed_c"}) std::filesystem::remove_all(fresh_directory(name));
}

TEST(Trainer, CheckpointsNeedAnExperimentDirectoryAndFollowTheirInterval) {
  auto directory = fresh_directory("checkpoints");
  TrainerRun without(directory, 1, "{train_iters: 2, checkpoint: {interval: 1}}");
  without.run = load_config<RunConfig>("{}", "run");
  std::string refused_path, refusal;
  try {
    without.make_trainer();
  } catch (const ConfigError& error) {
    refused_path = error.path();
    refusal = error.what();
  }
  EXPECT_EQ(refused_path, "run.experiment_dir");
  EXPECT_NE(refusal.find("training.checkpoint.interval is set"), std::string::npos) << refusal;
  // With it, a complete checkpoint of the test model at each interval step, holding the step and the model type.
  TrainerRun run(directory, 1, "{train_iters: 2, checkpoint: {interval: 1}}");
  run.make_trainer()->run();
  for (int step : {1, 2}) {
    const std::filesystem::path checkpoint = directory / "checkpoint" / std::to_string(step);
    ASSERT_TRUE(checkpoint_complete(checkpoint)) << step;
    const CheckpointMetadata metadata = read_checkpoint_metadata(checkpoint, CheckpointFormat::distributed);
    EXPECT_EQ(metadata.model, "test");
    ASSERT_TRUE(metadata.state.has_value());
    EXPECT_EQ(metadata.state->completed_steps, step);
    EXPECT_EQ(metadata.config["base_model"]["num_linear"].as<int>(), 2);
    EXPECT_EQ(metadata.trainer_config, "resolved: true\nseed: 1");
  }
  std::filesystem::remove_all(directory);
}

TEST(Trainer, ARestartResumesTheTestModelBitForBit) {
  auto uninterrupted = fresh_directory("uninterrupted");
  TrainerRun full(uninterrupted, 3, "{train_iters: 4, logs: {interval: 1}}");
  full.make_trainer()->run();
  const std::vector<nlohmann::json> expected = read_records(uninterrupted / "runs" / "0" / "metrics.jsonl");
  ASSERT_EQ(expected.size(), 4u);

  // Stopped by the shutdown after the checkpoint of step 2, then started again.
  auto stopped = fresh_directory("stopped");
  constexpr const char* kStopping =
      "{train_iters: 4, logs: {interval: 1}, checkpoint: {interval: 2}, shutdown: {interval: 2}}";
  TrainerRun first(stopped, 3, kStopping);
  first.make_trainer()->run();
  TrainerRun second(stopped, 3, kStopping);
  auto trainer = second.make_trainer();
  trainer->run();
  EXPECT_EQ(trainer->completed_steps(), 4);
  EXPECT_EQ(trainer->optimizer()->optimizer_step(), 4);
  const std::vector<nlohmann::json> resumed = read_records(stopped / "runs" / "1" / "metrics.jsonl");
  ASSERT_EQ(resumed.size(), 2u);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i].at("iteration"), expected[i + 2].at("iteration"));
    EXPECT_EQ(resumed[i].at("mse").get<double>(), expected[i + 2].at("mse").get<double>()) << i;
    EXPECT_EQ(resumed[i].at("grad_norm").get<double>(), expected[i + 2].at("grad_norm").get<double>()) << i;
  }
  std::filesystem::remove_all(uninterrupted);
  std::filesystem::remove_all(stopped);
}

TEST(Trainer, CudaGraphsAreOffByDefaultAndRefusedOnTheCpu) {
  EXPECT_FALSE(ScheduleConfig{}.cuda_graphs);
  EXPECT_FALSE(load_config<ScheduleConfig>("{}", "schedule").cuda_graphs);
  EXPECT_TRUE(load_config<ScheduleConfig>("{cuda_graphs: true}", "schedule").cuda_graphs);
  auto directory = fresh_directory("cuda_graphs");
  TrainerRun run(directory, 1, "{train_iters: 2}");
  run.schedule = load_config<ScheduleConfig>("{depth_first_micro_batches: 2, cuda_graphs: true}", "schedule");
  try {
    run.make_trainer();
    ADD_FAILURE() << "a CPU run with schedule.cuda_graphs was accepted";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.path(), "schedule.cuda_graphs");
    EXPECT_NE(std::string(error.what()).find("needs a CUDA device"), std::string::npos) << error.what();
  }
  std::filesystem::remove_all(directory);
}

TEST(Trainer, EvaluationOnlyNeedsWeightsToLoad) {
  auto directory = fresh_directory("evaluation_only");
  TrainerRun run(directory, 1, "{train_iters: 0, evaluators: {validation: {interval: 1, iterations: 1}}}");
  EXPECT_THROW(run.make_trainer()->run(), Error);
  // The weights an earlier run exported.
  auto source = fresh_directory("evaluation_only_source");
  TrainerRun training(source, 1, "{train_iters: 1, export: {interval: 1, format: fast_llm}}");
  training.make_trainer()->run();
  TrainerRun loaded(directory, 1, "{train_iters: 0, evaluators: {validation: {interval: 1, iterations: 1}}}");
  loaded.pretrained = load_config<CheckpointLoadConfig>(
      "{format: fast_llm, path: '" + (source / "export" / "fast_llm" / "1").string() + "'}", "pretrained");
  auto trainer = loaded.make_trainer();
  EXPECT_EQ(trainer->optimizer(), nullptr);
  trainer->run();
  auto records = read_records(*trainer->metrics_path());
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].at("phase"), "validation");
  EXPECT_EQ(records[0].at("iteration"), 0);
  std::filesystem::remove_all(directory);
  std::filesystem::remove_all(source);
}

TEST(Trainer, ACheckpointOfAnotherModelTypeIsRefused) {
  auto source = fresh_directory("other_type_source");
  TrainerRun training(source, 1, "{train_iters: 1, export: {interval: 1, format: fast_llm}}");
  training.make_trainer()->run();
  const std::filesystem::path exported = source / "export" / "fast_llm" / "1";
  YAML::Node metadata = YAML::LoadFile((exported / "metadata.yaml").string());
  EXPECT_EQ(metadata["model"].as<std::string>(), "test");
  metadata["model"] = "gpt";
  std::ofstream(exported / "metadata.yaml") << YAML::Dump(metadata);
  auto directory = fresh_directory("other_type");
  TrainerRun loaded(directory, 1, "{train_iters: 1}");
  loaded.pretrained = load_config<CheckpointLoadConfig>("{format: fast_llm, path: '" + exported.string() + "'}",
                                                        "pretrained");
  std::string message;
  try {
    loaded.make_trainer()->run();
  } catch (const Error& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("metadata.yaml: `model` is 'gpt'; only test models are supported"), std::string::npos)
      << message;
  std::filesystem::remove_all(directory);
  std::filesystem::remove_all(source);
}

TEST(Trainer, ProfilingWritesTheKernelTableOfEachCycle) {
  auto directory = fresh_directory("profiling");
  TrainerRun run(directory, 5, "{train_iters: 6, logs: {interval: 3}}");
  // Step 1 skipped; cycles of 1 off + 2 recorded: steps 3-4 make the first table, the next cycle ends at 7 > 6.
  const auto profiling = load_config<ProfilingConfig>(
      "{cpu: true, averages: true, skip: 1, wait: 0, warmup: 1, cycles: 2}", "profiling");
  auto trainer = run.make_trainer(&profiling);
  trainer->run();
  const auto folder = directory / "runs" / "0" / "profile";
  ASSERT_TRUE(std::filesystem::exists(folder / "step_4.txt"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(folder), std::filesystem::directory_iterator()), 1);
  std::ifstream file(folder / "step_4.txt");
  const std::string table((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("average of steps 3 to 4"), std::string::npos) << table;
  // The test model's layers are host loops; the optimizer's kernels go through dispatch.
  EXPECT_NE(table.find("adam_step:cpu:"), std::string::npos) << table;
  EXPECT_NE(table.find("total"), std::string::npos) << table;
}

TEST(Metrics, PythonStyleNumberAndTimeFormats) {
  EXPECT_EQ(format_with_commas(1234567.891, 2), "1,234,567.89");
  EXPECT_EQ(format_with_commas(999, 0), "999");
  EXPECT_EQ(format_with_commas(1000, 0), "1,000");
  EXPECT_EQ(format_with_commas(-12345.5, 1), "-12,345.5");
  EXPECT_EQ(format_duration(3725), "1:02:05");
  EXPECT_EQ(format_duration(59.6), "0:01:00");
  EXPECT_EQ(format_duration(90061), "1 day, 1:01:01");
  EXPECT_EQ(format_duration(2 * 86400 + 5), "2 days, 0:00:05");
}

TEST(Metrics, TrainingLineHasFastLlmFields) {
  TrainingMetrics metrics;
  metrics.iteration = 20;
  metrics.train_iters = 100;
  metrics.consumed_samples = 160;
  metrics.consumed_tokens = 1310720;
  metrics.batch_size = 8;
  metrics.step_time_ms = 12.345;
  metrics.learning_rate = 3e-4;
  metrics.loss_scale = 1;
  metrics.grad_norm = 0.98765;
  metrics.skipped_iters = 1;
  metrics.losses = {{"language_model_loss", 2.3456789}};
  metrics.percent_done = 20;
  const std::string line = format_training_metrics(metrics);
  for (const char* field :
       {"training @ iteration     20/   100", "| consumed samples:          160", "| consumed tokens:        1,310,720",
        "| batch size:   8", "| step time: 12.35 ms", "tflop/s (model)", "tflop/s (hardware)", "tokens/s/gpu",
        "| Memory allocated 0.00 MiB", "| global max reserved 0.00 MiB", "| learning rate: 3.000e-04",
        "| loss scale:     1", "| grad norm: 0.9877", "| skipped iterations:   1", "| nan iterations:   0",
        "| average step time", "| data wait: ", "| remaining 0:00:00", "(20.00 %)",
        "| language_model_loss: 2.34568"})
    EXPECT_NE(line.find(field), std::string::npos) << field << "\n" << line;
  const std::string validation = format_validation_metrics(metrics, "wiki");
  EXPECT_EQ(validation.rfind("validation/wiki @ iteration     20/   100", 0), 0u) << validation;
  EXPECT_EQ(validation.find("learning rate"), std::string::npos);
}

}  // namespace
}  // namespace fast_llm::engine
