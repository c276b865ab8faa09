// Stages and flat buffers: layout, binding, initialisation (reproducible, independent of the stage layout and of
// sharding), casts between the master shard and the compute weights, a pipeline rank's share of the stages, and
// refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "engine/engine_test_util.h"
#include "fast_llm/core/half.h"
#include "fast_llm/core/random.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"

namespace fast_llm::engine {
namespace {

using testing::TestModel;

std::map<std::string, std::vector<double>> parameter_values(MultiStage& multi_stage) {
  std::map<std::string, std::vector<double>> result;
  for (layers::Layer* layer : multi_stage.layers())
    for (layers::Parameter* parameter : layer->parameters())
      result[parameter->meta.name] = testing::values(parameter->weight);
  return result;
}

// An independent FNV-1a of the name, for the initialisation contract: element i = f(seed, name, i).
uint64_t reference_name_hash(const std::string& name) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : name) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

TEST(MultiStage, StagesGroupConsecutiveLayers) {
  auto distributed = testing::cpu_distributed();
  TestModel model(11, 4, 3);  // 5 layers
  for (auto [layers_per_stage, expected] :
       std::vector<std::pair<double, std::vector<size_t>>>{{1.0, {1, 1, 1, 1, 1}}, {2.0, {2, 2, 1}},
                                                          {5.0, {5}}, {10.0, {5}}, {1.5, {2, 2, 1}}, {0.5, {1, 1, 1, 1, 1}}}) {
    auto config = testing::multi_stage_config("{layers_per_stage: " + std::to_string(layers_per_stage) + "}");
    MultiStage multi_stage(model, config, distributed, Device::cpu());
    std::vector<size_t> sizes;
    std::vector<layers::Layer*> order;
    for (auto& stage : multi_stage.stages()) {
      sizes.push_back(stage->layers().size());
      order.insert(order.end(), stage->layers().begin(), stage->layers().end());
    }
    EXPECT_EQ(sizes, expected) << "layers_per_stage " << layers_per_stage;
    EXPECT_EQ(order, model.layers());
  }
}

TEST(MultiStage, LayoutAlignsParametersAndGroupsTheirSettings) {
  auto distributed = testing::cpu_distributed();
  auto config = testing::multi_stage_config("{layers_per_stage: 5}");
  TestModel model(11, 5, 3);
  MultiStage multi_stage(model, config, distributed, Device::cpu());
  ASSERT_EQ(multi_stage.stages().size(), 1u);
  Stage& stage = *multi_stage.stages()[0];
  // (weight decay, lr_scale 1): embeddings, linear weights, head weight; (no decay, 0.5): linear biases; (no decay, 1):
  // head bias.
  ASSERT_EQ(stage.groups().size(), 3u);
  EXPECT_EQ(stage.groups()[0].begin, 0);
  for (size_t g = 1; g < stage.groups().size(); ++g) EXPECT_EQ(stage.groups()[g].begin, stage.groups()[g - 1].end);
  EXPECT_EQ(stage.groups().back().end, stage.trainable_size());
  EXPECT_EQ(stage.trainable_size() % kParameterAlignment, 0);
  int64_t total = 0;
  for (const ParameterSlot& slot : stage.parameters()) {
    EXPECT_EQ(slot.offset % kParameterAlignment, 0) << slot.parameter->meta.name;
    total += slot.numel;
    const ParameterGroup* group = nullptr;
    for (const ParameterGroup& candidate : stage.groups())
      if (slot.offset >= candidate.begin && slot.offset + slot.numel <= candidate.end) group = &candidate;
    ASSERT_NE(group, nullptr) << slot.parameter->meta.name;
    EXPECT_EQ(group->weight_decay, slot.parameter->meta.weight_decay) << slot.parameter->meta.name;
    EXPECT_EQ(group->lr_scale, slot.parameter->meta.lr_scale) << slot.parameter->meta.name;
    // Views into the stage buffers.
    const auto* weights = static_cast<const char*>(stage.weight_buffer().data());
    const auto* grads = static_cast<const char*>(stage.grad_buffer().data());
    EXPECT_EQ(static_cast<const char*>(slot.parameter->weight.data()), weights + slot.offset * sizeof(double));
    EXPECT_EQ(static_cast<const char*>(slot.parameter->grad.data()), grads + slot.offset * sizeof(double));
    EXPECT_EQ(slot.parameter->weight.shape(), slot.parameter->meta.shape);
  }
  EXPECT_EQ(total, multi_stage.num_parameters());
  EXPECT_EQ(total, 11 * 5 + 3 * (5 * 5 + 5) + 5 + 1);
  // fp64 compute and optimization, one rank: the master shard is the weight buffer, the grad shard the grad buffer.
  EXPECT_EQ(stage.weight_shard().data(), stage.weight_buffer().data());
  EXPECT_EQ(stage.grad_shard().data(), stage.grad_buffer().data());
}

TEST(MultiStage, InitialisationIsReproducibleAndIndependentOfTheStageLayout) {
  auto distributed = testing::cpu_distributed(/*seed=*/99);
  auto one_per_stage = testing::multi_stage_config("{layers_per_stage: 1}");
  auto two_per_stage = testing::multi_stage_config("{layers_per_stage: 2}");
  TestModel model_a(13, 6, 3), model_b(13, 6, 3), model_c(13, 6, 3);
  MultiStage a(model_a, one_per_stage, distributed, Device::cpu());
  MultiStage b(model_b, two_per_stage, distributed, Device::cpu());
  ASSERT_NE(a.stages().size(), b.stages().size());
  a.initialize_weights();
  b.initialize_weights();
  auto values_a = parameter_values(a);
  EXPECT_EQ(values_a, parameter_values(b));
  a.initialize_weights();
  EXPECT_EQ(parameter_values(a), values_a);

  auto other_seed = testing::cpu_distributed(/*seed=*/100);
  MultiStage c(model_c, one_per_stage, other_seed, Device::cpu());
  c.initialize_weights();
  EXPECT_NE(parameter_values(c).at("decoder.0.weight"), values_a.at("decoder.0.weight"));
  // Parameters of the same kind but other names differ too.
  EXPECT_NE(values_a.at("decoder.0.weight"), values_a.at("decoder.1.weight"));
}

TEST(MultiStage, InitialisationFollowsEachParameterSpecification) {
  auto distributed = testing::cpu_distributed(/*seed=*/5);
  auto config = testing::multi_stage_config();
  TestModel model(1000, 16, 1);
  MultiStage multi_stage(model, config, distributed, Device::cpu());
  multi_stage.initialize_weights();
  auto values = parameter_values(multi_stage);

  // fill(0.25)
  EXPECT_EQ(values.at("head.bias"), std::vector<double>{0.25});
  // uniform(-0.1, 0.1)
  for (double value : values.at("decoder.0.bias")) {
    EXPECT_GT(value, -0.1);
    EXPECT_LE(value, 0.1);
  }
  // normal(0.5): element i is 0.5 * random_normal(derive_seed(seed, fnv1a(name)), i), rounded once to fp64.
  const auto& table = values.at("embeddings.weight");
  const uint64_t key = derive_seed(uint64_t(5), reference_name_hash("embeddings.weight"));
  for (size_t i = 0; i < table.size(); i += 997) EXPECT_EQ(table[i], 0.5 * double(random_normal(key, i))) << i;
  double mean = 0, square = 0;
  for (double value : table) {
    mean += value;
    square += value * value;
  }
  mean /= double(table.size());
  const double std = std::sqrt(square / double(table.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std, 0.5, 0.02);
}

class TruncatedLayer : public testing::TestLayer {
 public:
  TruncatedLayer() : TestLayer("truncated", nullptr) {
    declare("weight", Shape{4096},
            layers::Initialization{.kind = layers::Initialization::Kind::normal, .std = 1.0, .min = -0.5, .max = 0.5});
  }
  Tensor forward(layers::LayerContext&, const Tensor& input) override { return input; }
  Tensor backward(layers::LayerContext&, const Tensor& grad) override { return grad; }
};

class SingleLayerModel : public BaseModel {
 public:
  std::vector<layers::Layer*> layers() override { return {&layer}; }
  TruncatedLayer layer;
};

TEST(MultiStage, NormalInitialisationIsClampedToItsBounds) {
  auto distributed = testing::cpu_distributed();
  auto config = testing::multi_stage_config();
  SingleLayerModel model;
  MultiStage multi_stage(model, config, distributed, Device::cpu());
  multi_stage.initialize_weights();
  auto values = testing::values(model.layer.parameters()[0]->weight);
  int64_t at_bounds = 0;
  for (double value : values) {
    ASSERT_GE(value, -0.5);
    ASSERT_LE(value, 0.5);
    at_bounds += std::fabs(value) == 0.5;
  }
  // A standard normal leaves [-0.5, 0.5] with probability 0.62.
  EXPECT_GT(at_bounds, 2000);
  EXPECT_LT(at_bounds, 3000);
}

TEST(MultiStage, ShardsOfADataParallelLayoutInitialiseTheirPartOfTheSameModel) {
  TestModel whole_model(9, 7, 2), sharded_model(9, 7, 2);
  std::vector<layers::Layer*> whole_layers = whole_model.layers(), sharded_layers = sharded_model.layers();
  StageSettings settings{.device = Device::cpu(),
                         .compute_dtype = DType::float64,
                         .gradient_dtype = DType::float64,
                         .optimization_dtype = DType::float64,
                         .seed = 77};
  Stage whole(0, whole_layers, settings);
  whole.initialize_weights();
  EXPECT_FALSE(whole.trainable_compute_weight_shard().defined());  // the weights are the master shard itself
  const std::vector<double> all = testing::values(whole.weight_shard());

  settings.data_parallel = 2;
  std::vector<ParameterGroup> reassembled;
  for (int rank = 0; rank < 2; ++rank) {
    settings.data_rank = rank;
    Stage shard(0, sharded_layers, settings);
    EXPECT_EQ(shard.trainable_size() % (2 * kParameterAlignment), 0);
    EXPECT_EQ(shard.trainable_shard_size() * 2, shard.trainable_size());
    EXPECT_EQ(shard.weight_shard().numel(), shard.trainable_shard_size());
    shard.initialize_shard();
    const std::vector<double> part = testing::values(shard.weight_shard());
    const int64_t begin = shard.trainable_shard_begin(rank);
    // The same layout as one rank (the padding differs only after the last parameter).
    for (int64_t i = 0; i < int64_t(part.size()) && begin + i < int64_t(all.size()); ++i)
      ASSERT_EQ(part[size_t(i)], all[size_t(begin + i)]) << "rank " << rank << " element " << i;
    for (ParameterGroup group : shard.shard_groups(rank)) {
      group.begin += begin;
      group.end += begin;
      if (!reassembled.empty() && reassembled.back().end == group.begin &&
          reassembled.back().weight_decay == group.weight_decay && reassembled.back().lr_scale == group.lr_scale)
        reassembled.back().end = group.end;
      else
        reassembled.push_back(group);
    }
    // Gathering shards needs the distributed engine, and Adam cannot refresh the whole weight buffer from one shard.
    EXPECT_THROW(shard.copy_weights_from_shard(), Error);
    EXPECT_FALSE(shard.trainable_compute_weight_shard().defined());
    if (rank == 1) {
      ASSERT_EQ(reassembled.size(), shard.groups().size());
      for (size_t g = 0; g < reassembled.size(); ++g) {
        EXPECT_EQ(reassembled[g].begin, shard.groups()[g].begin);
        EXPECT_EQ(reassembled[g].end, shard.groups()[g].end);
      }
    }
  }
}

TEST(MultiStage, MixedPrecisionCastsMasterWeightsAndGradients) {
  auto distributed = testing::cpu_distributed(/*seed=*/3, "bfloat16", "float32");
  auto config = testing::multi_stage_config();
  TestModel model(8, 4, 1);
  MultiStage multi_stage(model, config, distributed, Device::cpu());
  multi_stage.initialize_weights();
  for (auto& stage : multi_stage.stages()) {
    EXPECT_EQ(stage->weight_buffer().dtype(), DType::bfloat16);
    EXPECT_EQ(stage->weight_shard().dtype(), DType::float32);
    EXPECT_EQ(stage->grad_buffer().dtype(), DType::float32);  // full_precision_gradients
    EXPECT_EQ(stage->grad_shard().data(), stage->grad_buffer().data());
    const float* master = stage->weight_shard().data_as<float>();
    const bfloat16* weights = stage->weight_buffer().data_as<bfloat16>();
    for (int64_t i = 0; i < stage->weight_shard().numel(); ++i)
      ASSERT_EQ(weights[i].bits, to_bfloat16(master[i]).bits) << i;
    // What Adam refreshes in its own pass: the bf16 weights of the master shard's trainable elements.
    const Tensor compute_weights = stage->trainable_compute_weight_shard();
    ASSERT_TRUE(compute_weights.defined());
    EXPECT_EQ(compute_weights.dtype(), DType::bfloat16);
    EXPECT_EQ(compute_weights.data(), stage->weight_buffer().data());
    EXPECT_EQ(compute_weights.numel(), stage->trainable_weight_shard().numel());
  }

  auto low_precision = testing::multi_stage_config("{full_precision_gradients: false}");
  TestModel other(8, 4, 1);
  MultiStage cast_gradients(other, low_precision, distributed, Device::cpu());
  Stage& stage = *cast_gradients.stages()[0];
  ASSERT_EQ(stage.grad_buffer().dtype(), DType::bfloat16);
  ASSERT_EQ(stage.grad_shard().dtype(), DType::float32);
  bfloat16* grads = stage.grad_buffer().data_as<bfloat16>();
  for (int64_t i = 0; i < stage.grad_buffer().numel(); ++i) grads[i] = to_bfloat16(0.5f + float(i));
  cast_gradients.copy_gradients_to_shards();
  const float* shard = stage.grad_shard().data_as<float>();
  for (int64_t i = 0; i < stage.grad_shard().numel(); ++i) ASSERT_EQ(shard[i], to_float(to_bfloat16(0.5f + float(i))));
  cast_gradients.zero_gradients();
  for (int64_t i = 0; i < stage.grad_buffer().numel(); ++i) ASSERT_EQ(grads[i].bits, 0);
}

// A step's gradients without a zeroing pass (Stage::begin_gradients): parameters whose layers track the step's first
// accumulation keep their stale values until written, and finish_gradients zeroes those nothing wrote; a stage with
// an untracked parameter is zeroed whole at the start, as before.
TEST(MultiStage, TrackedGradientsAreWrittenOrZeroedUntrackedStagesAreZeroedFirst) {
  auto distributed = testing::cpu_distributed();
  auto config = testing::multi_stage_config();
  TestModel model(8, 4, 1);
  MultiStage multi_stage(model, config, distributed, Device::cpu());
  std::vector<layers::Parameter*> parameters;
  for (layers::Layer* layer : multi_stage.layers())
    for (layers::Parameter* parameter : layer->parameters()) parameters.push_back(parameter);
  ASSERT_GE(parameters.size(), 2u);
  const auto fill = [](layers::Parameter& parameter, double value) {
    double* data = parameter.grad.data_as<double>();
    for (int64_t i = 0; i < parameter.grad.numel(); ++i) data[i] = value;
  };
  const auto all_equal = [](const layers::Parameter& parameter, double value) {
    for (double element : testing::values(parameter.grad))
      if (element != value) return false;
    return true;
  };

  // Every parameter tracked: begin leaves the stale values, the written one keeps what it was given, the others end
  // as zeros.
  for (layers::Parameter* parameter : parameters) {
    parameter->tracks_grad_start = true;
    fill(*parameter, 7.0);
  }
  multi_stage.begin_gradients();
  for (layers::Parameter* parameter : parameters) {
    EXPECT_FALSE(parameter->grad_started) << parameter->meta.name;
    EXPECT_TRUE(all_equal(*parameter, 7.0)) << parameter->meta.name;
  }
  EXPECT_EQ(parameters[0]->grad_beta(), 0.0);  // a layer's first accumulation writes...
  fill(*parameters[0], 3.0);                    // ... (as a gemm with beta 0 would)
  EXPECT_EQ(parameters[0]->grad_beta(), 1.0);  // and the next one adds
  multi_stage.finish_gradients();
  EXPECT_TRUE(all_equal(*parameters[0], 3.0));
  for (size_t i = 1; i < parameters.size(); ++i) EXPECT_TRUE(all_equal(*parameters[i], 0.0)) << parameters[i]->meta.name;

  // One untracked parameter: its stage is zeroed whole at the start (the untracked one counts as started); the
  // other stages keep their stale values until written.
  parameters[1]->tracks_grad_start = false;
  for (layers::Parameter* parameter : parameters) fill(*parameter, 7.0);
  multi_stage.begin_gradients();
  for (const auto& stage : multi_stage.stages()) {
    bool untracked_stage = false;
    for (const ParameterSlot& slot : stage->parameters()) untracked_stage |= slot.parameter == parameters[1];
    for (const ParameterSlot& slot : stage->parameters())
      EXPECT_TRUE(all_equal(*slot.parameter, untracked_stage ? 0.0 : 7.0)) << slot.parameter->meta.name;
  }
  EXPECT_TRUE(parameters[1]->grad_started);
  EXPECT_FALSE(parameters[0]->grad_started);
  EXPECT_GT(multi_stage.stages().size(), 1u);
}

TEST(MultiStage, SeveralProcessesNeedTheirGroup) {
  testing::ScopedEnvironment environment(testing::single_process());
  auto distributed = testing::load_config<DistributedConfig>(
      "{compute_dtype: float64, optimization_dtype: float64, use_cuda: false, world_size: 2, rank: 0, "
      "local_world_size: 2}",
      "model.distributed");
  auto config = testing::multi_stage_config();
  TestModel model(8, 4, 1);
  EXPECT_THROW(MultiStage(model, config, distributed, Device::cpu()), Error);
}

// A pipeline group seen from one rank: placement only asks for its size and rank.
class PlacementOnlyGroup : public distributed::Communicator {
 public:
  PlacementOnlyGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::unique_ptr<distributed::Work> all_reduce(Tensor&, distributed::ReduceOp, Stream) override { return refuse(); }
  std::unique_ptr<distributed::Work> reduce_scatter(const Tensor&, Tensor&, distributed::ReduceOp, Stream) override {
    return refuse();
  }
  std::unique_ptr<distributed::Work> all_gather(const Tensor&, Tensor&, Stream) override { return refuse(); }
  std::unique_ptr<distributed::Work> broadcast(Tensor&, int, Stream) override { return refuse(); }
  std::unique_ptr<distributed::Work> send(const Tensor&, int, Stream) override { return refuse(); }
  std::unique_ptr<distributed::Work> recv(Tensor&, int, Stream) override { return refuse(); }
  void barrier() override { refuse(); }
  std::unique_ptr<Communicator> split(int, const std::string&) override {
    refuse();
    return nullptr;
  }

 private:
  std::unique_ptr<distributed::Work> refuse() {
    ADD_FAILURE() << "placing stages should not communicate";
    return nullptr;
  }
  int rank_, size_;
  std::string name_ = "pipeline (test)";
};

TEST(MultiStage, APipelineRankHoldsOnlyItsStages) {
  testing::ScopedEnvironment environment(testing::single_process());
  // Pipeline rank 1 of 2 (data_parallel 1): stages 1 and 3 of the five one-layer stages.
  auto distributed = testing::load_config<DistributedConfig>(
      "{compute_dtype: float64, optimization_dtype: float64, use_cuda: false, world_size: 2, rank: 1, "
      "local_world_size: 2, pipeline_parallel: 2}",
      "model.distributed");
  auto config = testing::multi_stage_config("{layers_per_stage: 1}");
  TestModel model(11, 4, 3), whole_model(11, 4, 3);
  PlacementOnlyGroup pipeline(1, 2);
  MultiStage multi_stage(model, config, distributed, Device::cpu(), /*training=*/true, nullptr, &pipeline);
  MultiStage whole(whole_model, config, testing::cpu_distributed(), Device::cpu());
  ASSERT_EQ(multi_stage.stages().size(), 5u);
  int64_t expected_bytes = 0;
  for (size_t index = 0; index < 5; ++index) {
    const bool mine = index % 2 == 1;
    EXPECT_EQ(multi_stage.runs(index), mine) << index;
    EXPECT_EQ(multi_stage.holds(index), mine) << index;
    Stage& stage = *multi_stage.stages()[index];
    // Every stage is laid out as on one process; only this rank's own memory.
    EXPECT_EQ(stage.trainable_size(), whole.stages()[index]->trainable_size()) << index;
    EXPECT_EQ(stage.weight_buffer().defined(), mine) << index;
    EXPECT_EQ(stage.exp_avg().defined(), mine) << index;
    for (const ParameterSlot& slot : stage.parameters()) {
      EXPECT_EQ(slot.parameter->weight.defined(), mine) << slot.parameter->meta.name;
      EXPECT_EQ(slot.parameter->grad.defined(), mine) << slot.parameter->meta.name;
    }
    if (mine)
      expected_bytes += stage_buffer_bytes(stage_regions(stage.layers(), 1), multi_stage.settings());
  }
  // The memory check counts the same buffers.
  const StageSettings settings = stage_settings(config, distributed, Device::cpu(), /*training=*/true);
  EXPECT_EQ(settings.pipeline_rank, 1);
  EXPECT_EQ(multi_stage_buffer_bytes(split_into_stages(model.layers(), 1.0), config, settings), expected_bytes);
  // This rank's stages start from the values one process gives them.
  multi_stage.initialize_weights();
  whole.initialize_weights();
  for (size_t index : {size_t(1), size_t(3)})
    EXPECT_EQ(testing::values(multi_stage.stages()[index]->weight_buffer()),
              testing::values(whole.stages()[index]->weight_buffer()))
        << index;
}

TEST(MultiStage, InferenceBuildsNoGradientOrOptimizerState) {
  auto distributed = testing::cpu_distributed();
  auto config = testing::multi_stage_config();
  TestModel model(8, 4, 1);
  MultiStage multi_stage(model, config, distributed, Device::cpu(), /*training=*/false);
  multi_stage.initialize_weights();
  for (auto& stage : multi_stage.stages()) {
    EXPECT_FALSE(stage->grad_buffer().defined());
    EXPECT_FALSE(stage->exp_avg().defined());
    for (const ParameterSlot& slot : stage->parameters()) EXPECT_FALSE(slot.parameter->grad.defined());
  }
}

}  // namespace
}  // namespace fast_llm::engine
