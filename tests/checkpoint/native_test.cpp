// Native checkpoints of a tiny GPT model's stages: distributed save/load (same layout: the shards as they were; another
// stage layout or dtype: parameter by parameter), the fast_llm format, the metadata, finding the newest complete
// checkpoint among interrupted writes, pruning by keep / keep_every, and load errors.
#include <gtest/gtest.h>

#include <set>

#include "checkpoint/checkpoint_test_util.h"
#include "fast_llm/engine/checkpoint/directory.h"
#include "fast_llm/engine/checkpoint/distributed.h"
#include "fast_llm/engine/checkpoint/fast_llm_format.h"
#include "fast_llm/engine/checkpoint/metadata.h"
#include "fast_llm/engine/training/config.h"
#include "fast_llm/models/gpt/model.h"
#include "models/config_test_util.h"

namespace fast_llm::engine {
namespace {

using testing::error_of;
using testing::same_bytes;

std::filesystem::path directory(const std::string& name) { return testing::fresh_directory("native_test", name); }

constexpr const char* kModel = R"(
hidden_size: 8
embeddings: {vocab_size: 13}
head: {normalization: {type: rms_norm}}
decoder:
  num_blocks: 3
  block:
    mixer: {heads: 2, head_groups: 1, head_size: 4, add_linear_biases: true, rotary: {type: default}}
    mlp: {intermediate_size: 12, gated: true, add_linear_biases: false}
    normalization: {type: rms_norm}
)";

struct Model {
  explicit Model(const std::string& multi_stage_yaml = "{layers_per_stage: 1}",
                 const std::string& optimization = "float32")
      : config(testing::load_config<models::gpt::GPTBaseModelConfig>(kModel, "model.base_model")),
        multi_stage_config(testing::load_config<MultiStageConfig>(multi_stage_yaml, "model.multi_stage")),
        distributed(testing::load_config<DistributedConfig>(
            "{compute_dtype: float32, optimization_dtype: " + optimization +
                ", use_cuda: false, world_size: 1, rank: 0, local_world_size: 1, seed: 77}",
            "model.distributed")),
        model(config),
        multi_stage(model, multi_stage_config, distributed, Device::cpu(), true) {}

  // Initial weights, and Adam moments that are not zero.
  void fill() {
    multi_stage.initialize_weights();
    uint64_t seed = 100;
    for (auto& stage : multi_stage.stages()) {
      for (Tensor* buffer : {&stage->exp_avg(), &stage->exp_avg_sq()}) {
        Tensor values = testing::pseudo_random(buffer->shape(), buffer->dtype(), seed++);
        buffer->copy_bytes_from(values);
      }
    }
  }

  YAML::Node model_yaml() const {
    YAML::Node node(YAML::NodeType::Map);
    node["base_model"] = config.to_yaml(config::WriteOptions{.explicit_only = true});
    return node;
  }

  models::gpt::GPTBaseModelConfig config;
  MultiStageConfig multi_stage_config;
  DistributedConfig distributed;
  models::gpt::GPTModel model;
  MultiStage multi_stage;
};

const TrainingState kState{.completed_steps = 7,
                           .optimizer = {.step = 6, .grad_scaler = {.scale = 0.5, .growth_tracker = 3,
                                                                     .hysteresis_tracker = 1}}};

void expect_same_state(MultiStage& a, MultiStage& b, bool optimizer_state) {
  auto first = multi_stage_source(a, optimizer_state);
  auto second = multi_stage_source(b, optimizer_state);
  ASSERT_EQ(first->names(), second->names());
  for (const std::string& name : first->names()) {
    Tensor x = first->load(name), y = second->load(name);
    if (x.dtype() != y.dtype()) y = to_host_dtype(y, x.dtype());
    EXPECT_TRUE(same_bytes(x, y)) << name;
  }
}

TEST(DistributedCheckpoint, SavesAndLoadsTheShardsExactly) {
  const auto root = directory("round_trip");
  Model saved;
  saved.fill();
  save_distributed_checkpoint(root / "7", saved.multi_stage,
                              {.state = kState,
                               .consumed_samples = 56,
                               .model = "gpt",
                               .model_config = saved.model_yaml(),
                               .trainer_config = "training: {train_iters: 10}\n"});
  EXPECT_TRUE(checkpoint_complete(root / "7"));
  EXPECT_TRUE(std::filesystem::exists(root / "7" / "rank_0.safetensors"));
  EXPECT_EQ(latest_checkpoint(root), root / "7");

  const CheckpointMetadata metadata = read_checkpoint_metadata(root / "7", CheckpointFormat::distributed);
  EXPECT_EQ(metadata.fast_llm_version, kFastLLMVersion);
  EXPECT_EQ(metadata.shards, (std::vector<std::string>{"weights", "exp_avg", "exp_avg_sq"}));
  ASSERT_TRUE(metadata.state.has_value());
  EXPECT_EQ(metadata.state->completed_steps, 7);
  EXPECT_EQ(metadata.state->optimizer.step, 6);
  EXPECT_EQ(metadata.state->optimizer.grad_scaler, kState.optimizer.grad_scaler);
  EXPECT_EQ(metadata.consumed_samples, 56);
  EXPECT_EQ(metadata.config["base_model"]["hidden_size"].as<int>(), 8);
  EXPECT_NE(metadata.trainer_config.find("train_iters: 10"), std::string::npos);

  Model loaded;
  const TrainingState state = load_distributed_checkpoint(root / "7", metadata, loaded.multi_stage, true);
  EXPECT_EQ(state.completed_steps, 7);
  for (size_t index = 0; index < saved.multi_stage.stages().size(); ++index) {
    Stage& a = *saved.multi_stage.stages()[index];
    Stage& b = *loaded.multi_stage.stages()[index];
    EXPECT_TRUE(same_bytes(a.weight_shard(), b.weight_shard()));
    EXPECT_TRUE(same_bytes(a.exp_avg(), b.exp_avg()));
    EXPECT_TRUE(same_bytes(a.exp_avg_sq(), b.exp_avg_sq()));
    EXPECT_TRUE(same_bytes(a.weight_buffer(), b.weight_buffer()));
  }
}

TEST(DistributedCheckpoint, LoadsIntoAnotherLayoutParameterByParameter) {
  const auto root = directory("relayout");
  Model saved;
  saved.fill();
  save_distributed_checkpoint(root / "3", saved.multi_stage,
                              {.state = kState,
                               .consumed_samples = 0,
                               .model = "gpt",
                               .model_config = saved.model_yaml()});
  const CheckpointMetadata metadata = read_checkpoint_metadata(root / "3");
  Model regrouped("{layers_per_stage: 2}");
  ASSERT_NE(regrouped.multi_stage.stages().size(), saved.multi_stage.stages().size());
  load_distributed_checkpoint(root / "3", metadata, regrouped.multi_stage, true);
  expect_same_state(saved.multi_stage, regrouped.multi_stage, true);
  Model wider("{layers_per_stage: 1}", "float64");
  load_distributed_checkpoint(root / "3", metadata, wider.multi_stage, true);
  expect_same_state(saved.multi_stage, wider.multi_stage, true);
}

TEST(FastLLMCheckpoint, RoundTripsWeightsAndOptimizerState) {
  const auto path = directory("fast_llm");
  Model saved;
  saved.fill();
  CheckpointMetadata metadata{.format = CheckpointFormat::fast_llm, .model = "gpt", .config = saved.model_yaml(),
                              .shards = state_shards(true), .state = kState, .consumed_samples = 9};
  // Small files: several of them.
  write_fast_llm_checkpoint(path, *multi_stage_source(saved.multi_stage, true), metadata, 100);
  FastLLMCheckpoint checkpoint = open_fast_llm_checkpoint(path);
  EXPECT_GT(checkpoint.state->files().size(), 3u);
  EXPECT_TRUE(checkpoint.state->contains("decoder.1.mixer.key_value.bias/exp_avg_sq"));
  EXPECT_EQ(checkpoint.metadata.state->optimizer.grad_scaler.scale, 0.5);
  Model loaded("{layers_per_stage: 3}");
  load_multi_stage_state(loaded.multi_stage, *checkpoint.state, true);
  expect_same_state(saved.multi_stage, loaded.multi_stage, true);

  // Weights only: Adam's moments of the model stay as they were (zeros of a fresh model).
  Model weights_only;
  load_multi_stage_state(weights_only.multi_stage, *checkpoint.state, false);
  expect_same_state(saved.multi_stage, weights_only.multi_stage, false);
  for (auto& stage : weights_only.multi_stage.stages())
    for (int64_t index = 0; index < stage->exp_avg().numel(); ++index)
      ASSERT_EQ(stage->exp_avg().data_as<float>()[index], 0.0f);
}

TEST(Checkpoints, LoadErrorsNameTheTensorAndTheCheckpoint) {
  Model model;
  TensorList source("checkpoint /somewhere");
  auto full = multi_stage_source(model.multi_stage, false);
  for (const std::string& name : full->names()) {
    if (name == "decoder.2.mlp.layer_2.weight/weights") continue;
    TensorSpec spec = full->spec(name);
    if (name == "decoder.0.mixer.query.weight/weights") spec.shape = Shape{4, 8};
    source.add(name, spec, [spec] { return Tensor::empty(spec.shape, spec.dtype); });
  }
  std::string message = error_of([&] { load_multi_stage_state(model.multi_stage, source, false); });
  EXPECT_NE(message.find("checkpoint /somewhere: tensor 'decoder.0.mixer.query.weight/weights' has shape (4, 8)"),
            std::string::npos)
      << message;
  TensorList missing("checkpoint /elsewhere");
  for (const std::string& name : full->names())
    if (name != "decoder.2.mlp.layer_2.weight/weights")
      missing.add(name, full->spec(name), [spec = full->spec(name)] { return Tensor::empty(spec.shape, spec.dtype); });
  message = error_of([&] { load_multi_stage_state(model.multi_stage, missing, false); });
  EXPECT_NE(message.find("checkpoint /elsewhere: no tensor 'decoder.2.mlp.layer_2.weight/weights'"),
            std::string::npos)
      << message;
  TensorList extra("checkpoint /extra");
  for (const std::string& name : full->names()) {
    TensorSpec spec = full->spec(name);
    extra.add(name, spec, [spec] { return Tensor::empty(spec.shape, spec.dtype); });
  }
  extra.add("decoder.9.norm_1.weight/weights", {DType::float32, Shape{8}}, [] { return Tensor::empty(Shape{8}, DType::float32); });
  message = error_of([&] { load_multi_stage_state(model.multi_stage, extra, false); });
  EXPECT_NE(message.find("'decoder.9.norm_1.weight/weights' belongs to no parameter"), std::string::npos) << message;

  const auto root = directory("no_optimizer");
  Model saved;
  saved.fill();
  std::filesystem::create_directories(root / "weights_only");
  write_fast_llm_checkpoint(root / "weights_only", *multi_stage_source(saved.multi_stage, false),
                            {.format = CheckpointFormat::fast_llm, .model = "gpt", .config = saved.model_yaml(),
                             .shards = state_shards(false)},
                            1 << 20);
  message = error_of([&] {
    load_multi_stage_state(model.multi_stage, *open_fast_llm_checkpoint(root / "weights_only").state, true);
  });
  EXPECT_NE(message.find("exp_avg"), std::string::npos) << message;
}

TEST(Checkpoints, MetadataErrorsNameTheFileAndKey) {
  const auto path = directory("metadata");
  EXPECT_NE(error_of([&] { read_checkpoint_metadata(path); }).find("no metadata.yaml"), std::string::npos);
  std::ofstream(path / "metadata.yaml") << "format: distributed\nfast_llm_version: 0.1.0\nmodel: gpt\nshards: [weights]\n";
  std::string message = error_of([&] { read_checkpoint_metadata(path); });
  EXPECT_NE(message.find("metadata.yaml: `config` is missing"), std::string::npos) << message;
  std::ofstream(path / "metadata.yaml", std::ios::trunc)
      << "format: distributed\nfast_llm_version: 0.1.0\nmodel: gpt\nconfig: {}\nshards: [weights]\n"
         "state: {completed_steps: 3, consumed_samples: 1, optimizer: {step: x}}\n";
  message = error_of([&] { read_checkpoint_metadata(path); });
  EXPECT_NE(message.find("`state.optimizer.step` has an invalid value 'x'"), std::string::npos) << message;
  std::ofstream(path / "metadata.yaml", std::ios::trunc)
      << "format: distributed\nfast_llm_version: 0.1.0\nmodel: gpt\nconfig: {}\nshards: [weights]\nstate: 3\n";
  message = error_of([&] { read_checkpoint_metadata(path); });
  EXPECT_NE(message.find("metadata.yaml: `state` must be a mapping"), std::string::npos) << message;
  std::ofstream(path / "metadata.yaml", std::ios::trunc)
      << "format: llama\nfast_llm_version: 0.1.0\nmodel: gpt\nconfig: {}\nshards: [weights]\n";
  message = error_of([&] { read_checkpoint_metadata(path); });
  EXPECT_NE(message.find("`format` is 'llama'"), std::string::npos) << message;
  std::ofstream(path / "metadata.yaml", std::ios::trunc)
      << "format: fast_llm\nfast_llm_version: 0.1.0\nmodel: gpt\nconfig: {}\nshards: [weights]\n";
  message = error_of([&] { read_checkpoint_metadata(path, CheckpointFormat::distributed); });
  EXPECT_NE(message.find("given as distributed"), std::string::npos) << message;
}

// Rewrites the metadata.yaml of `directory` with `edit` applied to its tree.
template <class Edit>
void edit_metadata(const std::filesystem::path& directory, Edit edit) {
  YAML::Node node = YAML::LoadFile((directory / kMetadataFile).string());
  edit(node);
  YAML::Emitter emitter;
  emitter << node;
  std::ofstream(directory / kMetadataFile, std::ios::trunc) << emitter.c_str();
}

TEST(Checkpoints, ALayoutThatWouldLoadTheWrongWeightsIsRefused) {
  const auto root = directory("layout");
  Model saved;
  saved.fill();
  const DistributedCheckpointContents contents{.state = kState, .consumed_samples = 0, .model = "gpt",
                                               .model_config = saved.model_yaml()};
  auto load_error = [&](const std::string& name, auto edit) {
    save_distributed_checkpoint(root / name, saved.multi_stage, contents);
    edit_metadata(root / name, edit);
    // Another stage layout: loaded parameter by parameter through the recorded offsets.
    Model regrouped("{layers_per_stage: 2}");
    return error_of([&] {
      load_distributed_checkpoint(root / name, read_checkpoint_metadata(root / name), regrouped.multi_stage, true);
    });
  };
  // Stage 1 is the first decoder block; its second parameter moved onto its first.
  std::string message = load_error("overlap", [](YAML::Node& node) {
    YAML::Node parameters = node["layout"]["stages"][1]["parameters"];
    parameters[1]["offset"] = parameters[0]["offset"].as<int64_t>() + 1;
  });
  EXPECT_NE(message.find("metadata.yaml: `layout` overlaps parameters decoder.0."), std::string::npos) << message;
  message = load_error("outside", [](YAML::Node& node) {
    YAML::Node stage = node["layout"]["stages"][1];
    stage["parameters"][0]["offset"] = stage["trainable_size"].as<int64_t>() + stage["frozen_size"].as<int64_t>() - 1;
  });
  EXPECT_NE(message.find("outside stage 1's trainable region"), std::string::npos) << message;
  message = load_error("negative",
                       [](YAML::Node& node) { node["layout"]["stages"][0]["parameters"][0]["offset"] = -8; });
  EXPECT_NE(message.find("outside stage 0's trainable region"), std::string::npos) << message;
  message = load_error("shape", [](YAML::Node& node) {
    YAML::Node shape = node["layout"]["stages"][2]["parameters"][0]["shape"];
    shape[0] = -shape[0].as<int64_t>();
  });
  EXPECT_NE(message.find("an invalid shape"), std::string::npos) << message;
  message = load_error("duplicate", [](YAML::Node& node) {
    YAML::Node parameters = node["layout"]["stages"][1]["parameters"];
    parameters[1]["name"] = parameters[0]["name"].as<std::string>();
  });
  EXPECT_NE(message.find("twice"), std::string::npos) << message;
}

TEST(Checkpoints, ACheckpointWithoutItsTrainingStateIsRefused) {
  const auto root = directory("stateless");
  Model saved;
  saved.fill();
  save_distributed_checkpoint(root / "4", saved.multi_stage,
                              {.state = kState, .consumed_samples = 0, .model = "gpt",
                               .model_config = saved.model_yaml()});
  edit_metadata(root / "4", [](YAML::Node& node) { node.remove("state"); });
  // A run resuming from it would restart at step 0 with Adam's moments of step 6.
  std::string message = error_of([&] { read_checkpoint_metadata(root / "4"); });
  EXPECT_NE(message.find("metadata.yaml: `state` is missing: a distributed checkpoint records"), std::string::npos)
      << message;

  const auto fast_llm = directory("stateless_fast_llm");
  write_fast_llm_checkpoint(fast_llm, *multi_stage_source(saved.multi_stage, true),
                            {.format = CheckpointFormat::fast_llm, .model = "gpt", .config = saved.model_yaml(),
                             .shards = state_shards(true), .state = kState},
                            1 << 20);
  edit_metadata(fast_llm, [](YAML::Node& node) { node.remove("state"); });
  message = error_of([&] { open_fast_llm_checkpoint(fast_llm); });
  EXPECT_NE(message.find("`state` is missing: a checkpoint holding the optimizer state records"), std::string::npos)
      << message;
}

TEST(Checkpoints, MetadataWithoutOptionalSectionsReadsAndARepeatedKeyTakesItsLastValue) {
  const auto path = directory("metadata_minimal");
  std::ofstream(path / "metadata.yaml")
      << "format: distributed\nfast_llm_version: 0.1.0\nmodel: gpt\nconfig: {}\nshards: [weights]\nformat: fast_llm\n";
  const CheckpointMetadata metadata = read_checkpoint_metadata(path);
  EXPECT_EQ(metadata.format, CheckpointFormat::fast_llm);
  EXPECT_FALSE(metadata.state.has_value());
  EXPECT_FALSE(metadata.layout);
  EXPECT_TRUE(metadata.trainer_config.empty());
}

TEST(Checkpoints, InterruptedWritesAreIgnoredAndPruned) {
  const auto root = directory("interrupted");
  Model model;
  model.fill();
  const DistributedCheckpointContents contents{.state = kState, .consumed_samples = 0, .model = "gpt",
                                               .model_config = model.model_yaml()};
  save_distributed_checkpoint(root / "3", model.multi_stage, contents);
  save_distributed_checkpoint(root / "5", model.multi_stage, contents);
  // A write killed after the rename (no `ok`) and one killed before it (the temporary directory).
  std::filesystem::copy(root / "5", root / "7", std::filesystem::copy_options::recursive);
  std::filesystem::remove(root / "7" / "ok");
  std::filesystem::create_directories(root / ".9.tmp-12345");
  std::ofstream(root / ".9.tmp-12345" / "rank_0.safetensors") << "partial";
  EXPECT_EQ(latest_checkpoint(root), root / "5");

  // A writer that fails half-way leaves the previous checkpoint of that step as it was.
  EXPECT_THROW(write_checkpoint_directory(
                   root / "5", [](const std::filesystem::path&) { throw Error("test", "disk full"); }, true),
               Error);
  EXPECT_TRUE(checkpoint_complete(root / "5"));
  EXPECT_EQ(latest_checkpoint(root), root / "5");

  TrainingCheckpointConfig config = testing::load_config<TrainingCheckpointConfig>("{interval: 2, keep: 1}", "c");
  prune_checkpoints(root, config.retention());
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(root)) left.push_back(entry.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"5"});
}

TEST(Checkpoints, PruningKeepsTheLastAndEveryNth) {
  const auto root = directory("prune");
  for (int step : {2, 4, 6, 8, 10, 12}) {
    std::filesystem::create_directories(root / std::to_string(step));
    std::ofstream(root / std::to_string(step) / "ok");
  }
  // Saves 1..6; keep_every 2 keeps saves 2, 4, 6 (steps 4, 8, 12) for ever, outside the count of the last 2.
  prune_checkpoints(root, testing::load_config<TrainingCheckpointConfig>("{interval: 2, keep: 2, keep_every: 2}", "c")
                              .retention());
  std::set<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(root)) left.insert(entry.path().filename());
  EXPECT_EQ(left, (std::set<std::string>{"4", "6", "8", "10", "12"}));
  prune_checkpoints(root, testing::load_config<TrainingCheckpointConfig>("{interval: 2, keep: 1}", "c").retention());
  left.clear();
  for (const auto& entry : std::filesystem::directory_iterator(root)) left.insert(entry.path().filename());
  EXPECT_EQ(left, (std::set<std::string>{"12"}));
}

}  // namespace
}  // namespace fast_llm::engine
