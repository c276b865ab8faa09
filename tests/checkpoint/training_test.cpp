// Checkpoints in `train gpt` runs (models::gpt::train on a tiny model and the `random` dataset, on the CPU):
// - a run stopped after a checkpoint (shutdown) and restarted gives, bit for bit, the losses of the uninterrupted run;
// - a restart ignores a checkpoint whose write was interrupted (no `ok`, temporary folder) and resumes from the last
//   complete one, with the same losses;
// - a restart with another model is refused;
// - exports (llama, fast_llm) and `pretrained` in each format load the same weights;
// - the pretrained checkpoint's config is merged under the run's own values.
#include <gtest/gtest.h>

#include "checkpoint/checkpoint_test_util.h"
#include "fast_llm/config/merge.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/checkpoint/metadata.h"
#include "fast_llm/layers/block/config.h"
#include "fast_llm/models/gpt/model_type.h"
#include "fast_llm/models/gpt/training.h"
#include "models/config_test_util.h"

namespace fast_llm::models::gpt {
namespace {

using config::merge_config_trees;
using testing::error_of;

std::filesystem::path directory(const std::string& name) { return testing::fresh_directory("training_test", name); }

constexpr const char* kModel = R"(
model:
  base_model:
    hidden_size: 16
    embeddings: {vocab_size: 32}
    decoder:
      num_blocks: 2
      block:
        mixer: {heads: 2, head_groups: 1, head_size: 8, add_linear_biases: false, rotary: {type: default}}
        mlp: {intermediate_size: 24, gated: true, add_linear_biases: false}
        normalization: {type: rms_norm}
    head: {normalization: {type: rms_norm}}
  distributed: {compute_dtype: fp32, use_cuda: false, seed: 4321}
data: {datasets: {training: {type: random}}, micro_batch_size: 24}
optimizer: {learning_rate: {base: 0.01, warmup_iterations: 2}}
schedule: {depth_first_micro_batches: 2}
)";

// What `train gpt` does with its YAML tree.
void load_trainer_config(GPTTrainerConfig& config, const YAML::Node& tree) {
  engine::load_config_with_pretrained(config, tree, gpt_model_type());
}

// Runs `train gpt` with kModel + `extra` (YAML, merged) + `overrides`, in `experiment`.
void train_run(const std::filesystem::path& experiment, const std::string& extra,
               const std::vector<std::string>& overrides = {}) {
  YAML::Node tree = merge_config_trees(YAML::Load(kModel), YAML::Load(extra));
  config::apply_override(tree, "run.experiment_dir=" + experiment.string());
  config::apply_override(tree, "training.num_workers=1");
  for (const auto& assignment : overrides) config::apply_override(tree, assignment);
  testing::ScopedEnvironment environment(testing::single_process());
  GPTTrainerConfig config;
  load_trainer_config(config, tree);
  train(config);
}

// (iteration, training loss, grad norm) of each training record of runs/<run>/metrics.jsonl.
struct Record {
  int64_t iteration;
  double loss, grad_norm, learning_rate;
};
std::vector<Record> records(const std::filesystem::path& experiment, int run) {
  std::vector<Record> result;
  std::ifstream file(experiment / "runs" / std::to_string(run) / "metrics.jsonl");
  for (std::string line; std::getline(file, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["phase"] != "training") continue;
    result.push_back({record["iteration"], record["lm_head_loss"], record["grad_norm"], record["learning_rate"]});
  }
  return result;
}

void expect_same_tail(const std::vector<Record>& full, const std::vector<Record>& resumed) {
  ASSERT_FALSE(resumed.empty());
  ASSERT_LE(resumed.size(), full.size());
  const size_t offset = full.size() - resumed.size();
  for (size_t index = 0; index < resumed.size(); ++index) {
    const Record& a = full[offset + index];
    const Record& b = resumed[index];
    EXPECT_EQ(a.iteration, b.iteration);
    // Bit for bit: the JSON numbers are the shortest text that reads back as the same double.
    EXPECT_EQ(a.loss, b.loss) << "step " << a.iteration;
    EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << a.iteration;
    EXPECT_EQ(a.learning_rate, b.learning_rate) << "step " << a.iteration;
  }
}

constexpr const char* kSixSteps = "training: {train_iters: 6, logs: {interval: 1}, checkpoint: {interval: 3}}";

TEST(Resume, ARestartGivesTheLossesOfTheUninterruptedRun) {
  const auto uninterrupted = directory("uninterrupted");
  train_run(uninterrupted, kSixSteps);
  const std::vector<Record> full = records(uninterrupted, 0);
  ASSERT_EQ(full.size(), 6u);
  EXPECT_NE(full[3].loss, full[4].loss);
  EXPECT_TRUE(engine::checkpoint_complete(uninterrupted / "checkpoint" / "3"));
  EXPECT_TRUE(engine::checkpoint_complete(uninterrupted / "checkpoint" / "6"));

  // Stopped by the shutdown after the checkpoint of step 3, then started again with the same command.
  const auto stopped = directory("stopped");
  train_run(stopped, kSixSteps, {"training.shutdown.interval=3"});
  ASSERT_EQ(records(stopped, 0).size(), 3u);
  EXPECT_FALSE(std::filesystem::exists(stopped / "checkpoint" / "6"));
  train_run(stopped, kSixSteps, {"training.shutdown.interval=3"});
  const std::vector<Record> resumed = records(stopped, 1);
  ASSERT_EQ(resumed.size(), 3u);
  EXPECT_EQ(resumed.front().iteration, 4);
  expect_same_tail(full, resumed);
  expect_same_tail(std::vector<Record>(full.begin(), full.begin() + 3), records(stopped, 0));
}

TEST(Resume, AnInterruptedCheckpointWriteIsIgnored) {
  const auto experiment = directory("crashed");
  train_run(experiment, kSixSteps);
  const std::vector<Record> full = records(experiment, 0);
  // As if the process had been killed while writing the checkpoint of step 6 (after the rename, before `ok`) and
  // while writing another one (before the rename).
  std::filesystem::remove(experiment / "checkpoint" / "6" / "ok");
  std::filesystem::create_directories(experiment / "checkpoint" / ".7.tmp-999");
  std::ofstream(experiment / "checkpoint" / ".7.tmp-999" / "rank_0.safetensors") << "half";
  train_run(experiment, kSixSteps);
  const std::vector<Record> resumed = records(experiment, 1);
  ASSERT_EQ(resumed.size(), 3u);
  EXPECT_EQ(resumed.front().iteration, 4);
  expect_same_tail(full, resumed);
  EXPECT_TRUE(engine::checkpoint_complete(experiment / "checkpoint" / "6"));
  EXPECT_FALSE(std::filesystem::exists(experiment / "checkpoint" / ".7.tmp-999"));
  // Completed: a third start has nothing left to do.
  train_run(experiment, kSixSteps);
  EXPECT_TRUE(records(experiment, 2).empty());
}

TEST(Resume, ADifferentModelIsRefused) {
  const auto experiment = directory("other_model");
  train_run(experiment, "training: {train_iters: 2, checkpoint: {interval: 2}}");
  const std::string message = error_of([&] {
    train_run(experiment, "training: {train_iters: 4, checkpoint: {interval: 2}}",
              {"model.base_model.decoder.num_blocks=3"});
  });
  EXPECT_NE(message.find("differs from its last checkpoint"), std::string::npos) << message;
  EXPECT_NE(message.find("num_blocks: 3 != 2"), std::string::npos) << message;
}

TEST(Export, AModelTheFormatCannotHoldIsRefusedBeforeTraining) {
  const auto experiment = directory("export_refused");
  const std::string message = error_of([&] {
    train_run(experiment, "training: {train_iters: 2, export: {interval: 2, format: qwen2}}");
  });
  EXPECT_NE(message.find("the qwen2 format needs"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(experiment / "runs"));
}

TEST(Pretrained, EveryFormatLoadsTheSameWeights) {
  // Three steps, exported as llama and fast_llm and checkpointed.
  const auto source = directory("pretrained_source");
  train_run(source, "training: {train_iters: 3, logs: {interval: 1}, checkpoint: {interval: 3}, export: {interval: 3, "
                    "format: llama}}");
  const auto fast_llm_source = directory("pretrained_fast_llm_source");
  train_run(fast_llm_source, "training: {train_iters: 3, logs: {interval: 1}, export: {interval: 3, format: fast_llm}}");
  EXPECT_TRUE(engine::checkpoint_complete(source / "export" / "llama" / "3"));
  EXPECT_TRUE(std::filesystem::exists(source / "export" / "llama" / "3" / "config.json"));
  EXPECT_TRUE(engine::checkpoint_complete(fast_llm_source / "export" / "fast_llm" / "3"));

  // One step from each, on the same data: the same first loss, and not the loss of a fresh model.
  auto first_loss = [&](const std::string& name, const std::string& pretrained) {
    const auto experiment = directory(name);
    train_run(experiment, "training: {train_iters: 1, logs: {interval: 1}}\npretrained: " + pretrained);
    return records(experiment, 0).at(0).loss;
  };
  const double fresh = first_loss("fresh", "{}");
  const double from_llama =
      first_loss("from_llama", "{format: llama, path: '" + (source / "export" / "llama" / "3").string() + "'}");
  const double from_auto =
      first_loss("from_auto", "{format: auto, path: '" + (source / "export" / "llama" / "3").string() + "'}");
  const double from_distributed =
      first_loss("from_distributed", "{format: distributed, path: '" + (source / "checkpoint").string() + "'}");
  const double from_fast_llm = first_loss(
      "from_fast_llm", "{format: fast_llm, path: '" + (fast_llm_source / "export" / "fast_llm" / "3").string() + "'}");
  EXPECT_NE(fresh, from_llama);
  EXPECT_EQ(from_llama, from_auto);
  EXPECT_EQ(from_llama, from_distributed);
  EXPECT_EQ(from_llama, from_fast_llm);  // both sources trained the same 3 steps
}

TEST(Pretrained, TheRunsValuesOverrideTheCheckpointsConfig) {
  const auto source = directory("config_source");
  train_run(source, "training: {train_iters: 1, export: {interval: 1, format: mistral}}",
            {"model.base_model.decoder.block.mixer.window_size=8"});
  const std::filesystem::path exported = source / "export" / "mistral" / "1";
  YAML::Node tree = YAML::Load("pretrained: {format: mistral, path: '" + exported.string() +
                               "'}\nmodel: {base_model: {decoder: {block: {mixer: {window_size: 4, dropout: 0.0}}}, "
                               "embeddings: {dropout: 0.1}}}\ndata: {datasets: {training: {type: random}}}\n"
                               "training: {train_iters: 1}");
  testing::ScopedEnvironment environment(testing::single_process());
  GPTTrainerConfig config;
  load_trainer_config(config, tree);
  const auto& decoder = dynamic_cast<const layers::FixedBlockSequenceConfig&>(config.model.base_model.decoder.get());
  const auto& block = dynamic_cast<const layers::DecoderBlockConfig&>(decoder.block.get());
  const auto& mixer = *block.mixer.as<layers::AttentionConfig>();
  EXPECT_EQ(mixer.window_size, 4);                        // ours
  EXPECT_EQ(mixer.heads, 2);                              // the checkpoint's
  EXPECT_EQ(config.model.base_model.hidden_size, 16);     // the checkpoint's (the default is 1024)
  EXPECT_EQ(config.model.base_model.embeddings.dropout, 0.1);  // ours
  EXPECT_TRUE(block.normalization.is<layers::RmsNormalizationConfig>());

  // load_config none: nothing of the checkpoint's config.
  GPTTrainerConfig none;
  YAML::Node without = YAML::Clone(tree);
  without["pretrained"]["load_config"] = "none";
  load_trainer_config(none, without);
  EXPECT_EQ(none.model.base_model.hidden_size, 1024);
  // fast_llm (multi_stage and distributed too) needs a native checkpoint.
  YAML::Node whole = YAML::Clone(tree);
  whole["pretrained"]["load_config"] = "fast_llm";
  GPTTrainerConfig refused;
  const std::string message = error_of([&] { load_trainer_config(refused, whole); });
  EXPECT_NE(message.find("pretrained.load_config"), std::string::npos) << message;
}

TEST(ConfigMerge, RunValuesWinAndAnotherTypeReplaces) {
  YAML::Node base = YAML::Load("{a: 1, b: {c: 2, d: 3}, n: {type: rms_norm, epsilon: 1.0e-5}, l: [1, 2]}");
  YAML::Node merged = merge_config_trees(base, YAML::Load("{b: {c: 5}, n: {type: layer_norm}, l: [3], e: 4}"));
  EXPECT_EQ(merged["a"].as<int>(), 1);
  EXPECT_EQ(merged["b"]["c"].as<int>(), 5);
  EXPECT_EQ(merged["b"]["d"].as<int>(), 3);
  EXPECT_EQ(merged["n"]["type"].as<std::string>(), "layer_norm");
  EXPECT_FALSE(merged["n"]["epsilon"]);
  EXPECT_EQ(merged["l"].size(), 1u);
  EXPECT_EQ(merged["e"].as<int>(), 4);
  EXPECT_EQ(base["b"]["c"].as<int>(), 2);  // inputs unchanged
}

}  // namespace
}  // namespace fast_llm::models::gpt
