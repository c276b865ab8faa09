// The training loop: data -> schedule -> optimizer, metric lines, evaluations, run directory.
#include "fast_llm/engine/training/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <system_error>
#include <tuple>
#include <utility>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/distributed.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/evaluation/config.h"
#include "fast_llm/tensor/allocator.h"

namespace fast_llm::engine {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Steps s in [1, steps] at which `interval` happens.
int64_t occurrences(const IntervalConfig& interval, int64_t steps) {
  if (!interval.interval || steps < 1) return 0;
  const int64_t every = *interval.interval, offset = interval.offset;
  // Occurrences are offset + k * every >= 1 (offset is in [0, every) after validation).
  const int64_t first = offset == 0 ? every : offset;
  return first > steps ? 0 : (steps - first) / every + 1;
}

// Checkpoints and exports need a folder to go to, and an export format must hold the model: refused before anything
// runs, not at the first save after hours of training.
void check_saves(const TrainerSections& sections) {
  const TrainingConfig& training = sections.training;
  const RunConfig& run = sections.run;
  if (!run.experiment_dir && training.checkpoint.enabled())
    throw ConfigError(run.field_path("experiment_dir"), fmt::format("is needed to save checkpoints ({} is set)",
                                                                    training.checkpoint.field_path("interval")));
  if (!run.experiment_dir && training.export_.enabled())
    throw ConfigError(run.field_path("experiment_dir"),
                      fmt::format("is needed to save exports ({} is set)", training.export_.field_path("interval")));
  if (!training.export_.enabled()) return;
  if (!training.export_.model_weights)
    throw ConfigError(training.export_.field_path("model_weights"),
                      "exports without weights are not written: set model_weights: true");
  check_exportable(training.export_, sections.model);
}

// The values of a loss over an interval's steps or an evaluation's iterations.
struct LossTotal {
  std::string name;
  double sum = 0;
  int64_t count = 0;
  double mean() const { return count > 0 ? sum / double(count) : std::numeric_limits<double>::quiet_NaN(); }
};

// Adds `value` to the total named `name`, keeping first-seen order; `counted` false only keeps the name in the list.
void accumulate(std::vector<LossTotal>& totals, const std::string& name, double value, bool counted = true) {
  auto total = std::find_if(totals.begin(), totals.end(), [&](const LossTotal& entry) { return entry.name == name; });
  if (total == totals.end()) total = totals.insert(totals.end(), LossTotal{.name = name});
  if (!counted) return;
  total->sum += value;
  ++total->count;
}

// Each total's name and mean, in the order of `totals`: a metric line's losses.
std::vector<std::pair<std::string, double>> loss_means(const std::vector<LossTotal>& totals) {
  std::vector<std::pair<std::string, double>> means;
  for (const LossTotal& total : totals) means.emplace_back(total.name, total.mean());
  return means;
}

// Every rank's loss names with their normalisations, merged over the ranks (those of a pipeline hold the losses of
// their own stages only): one all-gather of the names as text on the host group.
std::map<std::string, layers::LossNormalization> loss_names_over_ranks(
    const ProcessGroups& groups, const std::map<std::string, layers::LossNormalization>& local) {
  if (groups.world_size() == 1) return local;
  std::string text;
  for (const auto& [name, normalization] : local) text += fmt::format("{}\t{}\n", name, int(normalization));
  std::vector<double> length{double(text.size())};
  groups.max(length);
  const int64_t size = int64_t(length[0]);
  if (size == 0) return local;
  Tensor mine = Tensor::empty(Shape{size}, DType::int32);
  std::fill_n(mine.data_as<int32_t>(), size, 0);
  std::copy(text.begin(), text.end(), mine.data_as<int32_t>());
  Tensor all = Tensor::empty(Shape{size * groups.world_size()}, DType::int32);
  groups.host()->all_gather(mine, all, Stream())->wait();
  std::map<std::string, layers::LossNormalization> names;
  const int32_t* characters = all.data_as<int32_t>();
  for (int rank = 0; rank < groups.world_size(); ++rank) {
    std::string line;
    for (int64_t index = 0; index < size; ++index) {
      const char character = char(characters[rank * size + index]);
      if (character == '\0') break;
      if (character != '\n') {
        line += character;
        continue;
      }
      const size_t tab = line.rfind('\t');
      names.emplace(line.substr(0, tab), layers::LossNormalization(std::stoi(line.substr(tab + 1))));
      line.clear();
    }
  }
  return names;
}

}  // namespace

// A `loss` evaluator: `iterations` forward-only steps on `data.datasets.<name>` at each evaluation.
struct Trainer::Evaluator {
  std::string name;
  const LossEvaluatorConfig& config;
  int64_t iterations = 0;
  std::unique_ptr<data::DataLoader> loader;
};

Trainer::Trainer(TrainerSections sections, BaseModel& model, data::GPTData& data, std::string resolved_config_yaml)
    : sections_(sections), model_(model), data_(data), resolved_config_yaml_(std::move(resolved_config_yaml)) {
  const TrainingConfig& training = sections_.training;
  const DistributedConfig& distributed = sections_.model.distributed;
  FLM_CHECK(training.validated() && sections_.schedule.validated() && sections_.optimizer.validated() &&
                sections_.model.validated() && sections_.pretrained.validated() && sections_.run.validated(),
            "training", "the trainer config must be validated first");
  // Before anything reads or writes the experiment directory.
  if (sections_.run.experiment_dir && *distributed.rank == 0)
    lock_ = std::make_unique<ExperimentLock>(*sections_.run.experiment_dir);
  const std::vector<std::pair<std::string, int64_t>> samplings = check_run();
  const MemoryEstimate estimate = estimate_memory(samplings);
  // What the run allocates is measured from here (warn_if_beyond_estimate).
  allocated_before_run_ = int64_t(allocator_for(device_).stats().allocated_bytes);
  allocator_for(device_).reset_peak();
  // Without the model type's activations the estimate is not meant to bound the run: nothing to warn about.
  if (!sections_.activations.layers.empty())
    for (const MemoryEstimate::Part& part : estimate.device) estimated_device_bytes_ += part.bytes;
  // The ranks of the first data-parallel replica each log theirs: the other replicas hold the same shares.
  check_memory(estimate, device_,
               (distributed.model_parallel() > 1 || distributed.sequence_data_parallel > 1) &&
                   distributed.batch_data_rank() == 0);
  // Every process joins here (a one-process run builds nothing).
  groups_ = std::make_unique<ProcessGroups>(distributed, device_);

  multi_stage_ = std::make_unique<MultiStage>(model_, sections_.model.multi_stage, distributed, device_, training_,
                                              groups_->data(), groups_->pipeline(), groups_->tensor());
  const MultiStageConfig& stage_config = sections_.model.multi_stage;
  runner_ = std::make_unique<ScheduleRunner>(
      *multi_stage_, sections_.schedule, distributed,
      LayerLogSettings{.outputs = stage_config.debug_layer_outputs, .gradients = stage_config.debug_layer_gradients},
      stage_config.debug_global_tensors, groups_->sequence_data());
  // Two steps of micro-batches: the step the device runs and the one the host prepares. Shared prompt rows need the
  // micro-batches whole (no sequence pieces, every row on every stage and tensor rank) and eager steps: a graph's
  // input buffers carry no attention rows, but steps with prepared micro-batches (the reference models a dpo loss
  // reads) never run in graphs (cuda_graphs_refusal).
  const bool eager_steps = !sections_.schedule.cuda_graphs || static_cast<bool>(sections_.prepare_micro_batches);
  const bool share_prompt_rows = model_.computes_shared_prompts_once() && sections_.prepares_shared_prompts &&
                                 sections_.schedule.micro_batch_splits == 1 &&
                                 distributed.sequence_data_parallel == 1 && distributed.pipeline_parallel == 1 &&
                                 !distributed.sequence_tensor_parallel && eager_steps;
  uploader_ = std::make_unique<BatchUploader>(device_, stream_, int(2 * rank_samples_per_step_),
                                              model_.loss_row_rule(), share_prompt_rows);
  if (training_) {
    optimizer_ = std::make_unique<Optimizer>(sections_.optimizer, *multi_stage_);
    optimizer_->reserve_steps(training.train_iters, stream_);
    if (sections_.schedule.cuda_graphs) set_up_cuda_graphs();
    // A log interval's steps, so that logging reads them all at once; bounded, as every row is a few dozen bytes.
    constexpr int64_t kMaxRecordedSteps = 1000;
    step_records_ = std::make_unique<StepRecords>(
        device_, std::clamp<int64_t>(training.logs.interval.value_or(kMaxRecordedSteps), 1, kMaxRecordedSteps));
  }
  // Rank 0 samples first, so that the sampling caches it writes are what the other ranks read.
  if (groups_->is_main())
    for (const auto& [name, num_samples] : samplings) data_.sample_dataset(name, num_samples);
  groups_->barrier();
  if (!groups_->is_main())
    for (const auto& [name, num_samples] : samplings) data_.sample_dataset(name, num_samples);

  if (const auto& experiment = sections_.run.experiment_dir; experiment && groups_->is_main()) {
    std::string text = resolved_config_yaml_;
    if (!text.empty() && text.back() != '\n') text += '\n';
    write_file(*experiment / "config.yaml", text, {.component = "training"});
    int index = 0;
    while (std::filesystem::exists(*experiment / "runs" / std::to_string(index))) ++index;
    run_directory_ = *experiment / "runs" / std::to_string(index);
    std::error_code error;
    std::filesystem::create_directories(*run_directory_, error);
    if (error)
      throw Error("training", fmt::format("{}: cannot create the run directory ({})", run_directory_->string(),
                                          error.message()));
  }
  progress_on_terminal_ = isatty(STDERR_FILENO) == 1;
}

std::vector<std::pair<std::string, int64_t>> Trainer::check_run() {
  const TrainingConfig& training = sections_.training;
  const DistributedConfig& distributed = sections_.model.distributed;
  check_saves(sections_);
  device_ = resolve_device(distributed);
  stream_ = compute_stream(device_);
  if (sections_.schedule.cuda_graphs && !device_.is_cuda())
    throw ConfigError(sections_.schedule.field_path("cuda_graphs"),
                      fmt::format("needs a CUDA device; this run is on {}", device_.str()));
  training_ = training.train_iters > 0;
  rank_samples_per_step_ = sections_.schedule.sequential_micro_batches();
  samples_per_step_ = rank_samples_per_step_ * distributed.batch_data_parallel();
  tokens_per_sample_ = data_.config().micro_batch_size;
  if (const int64_t pieces = int64_t(sections_.schedule.micro_batch_splits) * distributed.sequence_data_parallel;
      tokens_per_sample_ % pieces != 0)
    throw ConfigError(data_.config().field_path("micro_batch_size"),
                      fmt::format("{} tokens do not cut into schedule.micro_batch_splits x "
                                  "model.distributed.sequence_data_parallel = {} x {} equal pieces",
                                  tokens_per_sample_, sections_.schedule.micro_batch_splits,
                                  distributed.sequence_data_parallel));
  if (data_.sampling_parameters().predicted_tokens != 1)
    throw NotSupportedError("training", fmt::format("{} predicted tokens per position (multi-token prediction heads) "
                                                    "are not supported by the training loop",
                                                    data_.sampling_parameters().predicted_tokens));
  if (!training_ && !(sections_.pretrained.path && sections_.pretrained.model_weights) &&
      !(sections_.run.experiment_dir && latest_checkpoint(training_checkpoint_folder(*sections_.run.experiment_dir))))
    throw Error("training", "evaluation only (training.train_iters is 0) needs weights to evaluate: set `pretrained` "
                            "or resume from a checkpoint");

  std::vector<std::pair<std::string, int64_t>> samplings;
  auto sample = [&](const std::string& name, int64_t num_samples, const std::string& needed_by) {
    if (!data_.config().datasets.contains(name))
      throw ConfigError(data_.config().field_path("datasets"),
                        fmt::format("has no dataset named `{}`, which {} needs", name, needed_by));
    samplings.emplace_back(name, num_samples);
  };
  if (training_) sample("training", training.train_iters * samples_per_step_, "training (train_iters > 0)");
  for (const auto& [name, evaluator] : training.evaluators) {
    if (!evaluator.is<LossEvaluatorConfig>())
      throw NotSupportedError("training", fmt::format("training.evaluators.{}: evaluators of type '{}' are not "
                                                      "supported; use type: loss",
                                                      name, evaluator.type()));
    const auto& config = static_cast<const LossEvaluatorConfig&>(evaluator.get());
    if (!config.enabled() || !config.iterations) {
      log_main("Evaluator {} is off: it needs both an interval and iterations", name);
      continue;
    }
    // Evaluations at each interval step, and one more at the end when the last step is not one.
    int64_t evaluations = training_ ? occurrences(config, training.train_iters) +
                                          (config.enabled_at(training.train_iters) ? 0 : 1)
                                    : 1;
    sample(name, evaluations * *config.iterations * samples_per_step_, fmt::format("training.evaluators.{}", name));
    evaluators_.push_back(
        std::make_unique<Evaluator>(
            Evaluator{.name = name, .config = config, .iterations = *config.iterations, .loader = nullptr}));
  }
  return samplings;
}

MemoryEstimate Trainer::estimate_memory(const std::vector<std::pair<std::string, int64_t>>& samplings) const {
  MemoryEstimate estimate;
  const StageSettings settings =
      stage_settings(sections_.model.multi_stage, sections_.model.distributed, device_, training_);
  const std::vector<std::vector<layers::Layer*>> stages =
      split_into_stages(model_.layers(), sections_.model.multi_stage.layers_per_stage);
  // This pipeline rank's stages (all of them without a pipeline).
  const std::vector<bool> held = stages_held(stages, settings.pipeline_parallel, settings.pipeline_rank);
  const size_t num_held = size_t(std::count(held.begin(), held.end(), true));
  const SharedBufferCounts shared =
      shared_buffer_counts(sections_.model.multi_stage, settings.data_parallel, num_held, training_);
  estimate.device.push_back(
      {fmt::format("{} of {} stages{}", training_ ? "weights, gradients and optimizer state" : "weights", num_held,
                   settings.data_parallel > 1
                       ? fmt::format(" (this rank's shard of {}; {} shared weight and {} shared gradient buffers)",
                                     settings.data_parallel, shared.weights, shared.gradients)
                       : std::string()),
       multi_stage_buffer_bytes(stages, sections_.model.multi_stage, settings)});
  if (training_ && device_.is_cpu() && settings.data_parallel > 1) {
    // Gloo's reduce-scatter works on a scratch copy of its whole input (widened to fp32 below it), of which this rank
    // keeps its part (distributed/gloo_communicator.cpp): a stage's gradient buffer while its gradients are reduced,
    // one stage at a time (the communicator's worker runs them in order), and the reduced shard.
    int64_t largest = 0;
    for (size_t stage = 0; stage < stages.size(); ++stage)
      if (held[stage])
        largest = std::max(largest, stage_regions(stages[stage], settings.data_parallel).trainable);
    const int64_t gradient = int64_t(dtype_size(settings.gradient_dtype));
    estimate.device.push_back({"the data-parallel gradient reduction's scratch (Gloo: the largest stage's gradients)",
                               largest * std::max<int64_t>(gradient, 4) + largest / settings.data_parallel * gradient});
  }
  if (training_) {
    // The optimizer's table of learning rates, one fp64 per step (optimizer.h).
    estimate.device.push_back({fmt::format("learning rates of {} steps", sections_.training.train_iters),
                               8 * (sections_.training.train_iters + 1)});
  }
  if (!sections_.activations.layers.empty()) {
    // This pipeline rank's steps of the step list the runner will run (evaluation only: the forward of every
    // micro-batch, which keeps nothing).
    const ScheduleConfig& schedule = sections_.schedule;
    const Schedule steps(stages.size(), schedule.depth_first_micro_batches, schedule.breadth_first_micro_batches,
                         schedule.micro_batch_splits, settings.pipeline_parallel, training_);
    std::vector<size_t> stage_sizes;
    for (const auto& layers : stages) stage_sizes.push_back(layers.size());
    const DistributedConfig& distributed = sections_.model.distributed;
    const ActivationPeak peak = activation_peak(sections_.activations, stage_sizes, steps, settings.pipeline_rank,
                                                tokens_per_sample_, distributed.sequence_data_parallel);
    estimate.device.push_back({describe_activation_peak(peak, distributed, tokens_per_sample_), peak.bytes});
  }
  for (const MemoryEstimate::Part& part : sections_.extra_device_memory) estimate.device.push_back(part);
  for (const auto& [name, num_samples] : samplings)
    estimate.host.push_back({fmt::format("sampling index of dataset {} ({} samples)", name, num_samples),
                             sampling_index_bytes(data_.config().datasets.at(name), data_.sampling_parameters(),
                                                  num_samples)});
  return estimate;
}

Trainer::~Trainer() = default;

std::optional<std::filesystem::path> Trainer::metrics_path() const {
  if (!run_directory_) return std::nullopt;
  return *run_directory_ / "metrics.jsonl";
}

GraphedTrainingStep::Counts Trainer::cuda_graph_counts() const {
  return graphed_step_ ? graphed_step_->counts() : GraphedTrainingStep::Counts{};
}

void Trainer::set_up_cuda_graphs() {
  bool dropout = false, host_reads = false;
  for (layers::Layer* layer : model_.layers()) {
    dropout = dropout || layer->uses_dropout();
    host_reads = host_reads || layer->reads_device_values_on_host();
  }
  const std::optional<std::string> refusal =
      cuda_graphs_refusal({.cuda = device_.is_cuda(),
                           .world_size = *sections_.model.distributed.world_size,
                           .dropout = dropout,
                           .dynamic_loss_scaling = optimizer_->dynamic_loss_scaling(),
                           .tensor_logs = sections_.model.multi_stage.debug_layer_outputs > 0 ||
                                          sections_.model.multi_stage.debug_layer_gradients > 0,
                           .host_reads = host_reads,
                           .prepared_inputs = static_cast<bool>(sections_.prepare_micro_batches),
                           .sequence_pieces = sections_.schedule.micro_batch_splits > 1});
  if (refusal) {
    log_main("{} is set, but the training steps run without CUDA graphs: {}",
             sections_.schedule.field_path("cuda_graphs"), *refusal);
    return;
  }
  graphed_step_ = std::make_unique<GraphedTrainingStep>(device_, stream_);
}

TrainingState Trainer::state() const {
  return {.completed_steps = completed_steps_, .optimizer = optimizer_ ? optimizer_->state() : OptimizerState{}};
}

void Trainer::restore(const TrainingState& state) {
  completed_steps_ = state.completed_steps;
  if (optimizer_) optimizer_->load(state.optimizer);
}

std::vector<layers::MicroBatch> Trainer::next_micro_batches(data::DataLoader& loader, std::string_view dataset,
                                                            std::vector<std::shared_ptr<const data::Batch>>& keep_alive,
                                                            int64_t& num_labels) {
  std::vector<layers::MicroBatch> micro_batches;
  num_labels = 0;
  int64_t preference_pairs = 0;
  int64_t num_documents = 0;
  for (int64_t index = 0; index < rank_samples_per_step_; ++index) {
    std::optional<data::Batch> batch = loader.next();
    FLM_CHECK(batch.has_value(), "training", "dataset '{}' ran out of samples after step {}", dataset,
              completed_steps_);
    auto shared = std::make_shared<const data::Batch>(std::move(*batch));
    num_labels += shared->num_labels(1);
    preference_pairs += int64_t(shared->preference_pairs.size());
    num_documents += shared->num_sample_documents;
    micro_batches.push_back(uploader_->upload(shared));
    keep_alive.push_back(std::move(shared));
  }
  // The loss is normalised by the labels of the whole step (the DPO loss by its preference pairs, GSPO's by its
  // documents), on every rank: all counts in one reduction (exact in doubles up to 2^53). The ranks of a pipeline read
  // the same samples: the first one counts them; likewise tensor rank 0 for its tensor group. The ranks of a
  // sequence-data group (each keeps its pieces of them) each count them whole, and the sum is divided by its size.
  const double counted = sections_.model.distributed.pipeline_rank() == 0 ? 1.0 : 0.0;
  std::vector<double> counts{counted * double(num_labels), counted * double(preference_pairs),
                             counted * double(num_documents)};
  count_once_per_tensor_group(counts);
  groups_->sum(counts);
  for (double& count : counts) count /= double(sections_.model.distributed.sequence_data_parallel);
  num_labels = int64_t(counts[0]);
  preference_pairs = int64_t(counts[1]);
  num_documents = int64_t(counts[2]);
  for (layers::MicroBatch& micro_batch : micro_batches) {
    micro_batch.labels_in_step = num_labels;
    micro_batch.preference_pairs_in_step = preference_pairs;
    micro_batch.documents_in_step = num_documents;
  }
  if (sections_.prepare_micro_batches) sections_.prepare_micro_batches(micro_batches);
  return micro_batches;
}

TrainingSave Trainer::training_save() const {
  return {.model = sections_.model,
          .state = state(),
          .consumed_samples = completed_steps_ * samples_per_step_,
          .trainer_config = resolved_config_yaml_,
          .base_model_path = sections_.pretrained.model_weights ? sections_.pretrained.path : std::nullopt};
}

bool Trainer::resume_from_checkpoint() {
  if (!sections_.run.experiment_dir) return false;
  const std::optional<ResumedCheckpoint> resumed =
      resume_training(*sections_.run.experiment_dir, sections_.model, *multi_stage_, training_);
  if (!resumed) return false;
  if (training_) restore(resumed->state);
  const int64_t expected = resumed->state.completed_steps * samples_per_step_;
  if (resumed->consumed_samples != expected)
    log_warning("Checkpoint {} consumed {} samples; {} steps of {} samples now resume the data at sample {} (the "
                "batch size changed)",
                resumed->directory.string(), resumed->consumed_samples, resumed->state.completed_steps,
                samples_per_step_, expected);
  return true;
}

bool Trainer::load_pretrained_weights() {
  const CheckpointLoadConfig& pretrained = sections_.pretrained;
  if (!pretrained.path || !pretrained.model_weights) return false;
  // The optimizer continues (Adam step, learning-rate schedule, loss scale); the run's own step count starts at 0.
  if (const std::optional<OptimizerState> optimizer =
          load_pretrained(pretrained, sections_.model, *multi_stage_, training_))
    restore({.completed_steps = 0, .optimizer = *optimizer});
  return true;
}

void Trainer::initialize_or_load() {
  if (resume_from_checkpoint() || load_pretrained_weights()) return;
  if (!training_)
    throw Error("training", "evaluation only (training.train_iters is 0) needs weights to evaluate: set `pretrained` "
                            "or resume from a checkpoint");
  log_main("Initializing training state from scratch...");
  multi_stage_->initialize_weights();
}

void Trainer::train_step() {
  std::vector<std::shared_ptr<const data::Batch>> keep_alive;
  int64_t num_labels = 0;
  const double data_start = now_seconds();
  std::vector<layers::MicroBatch> micro_batches = next_micro_batches(*training_loader_, "training", keep_alive,
                                                                     num_labels);
  interval_.data_wait_ms += (now_seconds() - data_start) * 1000.0;

  const int64_t step = completed_steps_ + 1;
  // Before the step: its skip may be the loss scaler lowering the scale it runs with.
  const bool loss_scale_search = optimizer_->loss_scale_can_lower();
  layers::LossSums eager_losses;
  const layers::LossSums* losses = &eager_losses;
  if (graphed_step_) {
    // The optimizer's host bookkeeping runs every step; a graph replays the rest. `step` only seeds dropout, which a
    // graphed run has none of, so the graph may bake in the step it was captured at.
    optimizer_->prepare_step(stream_);
    // A graph is keyed by the documents, not by which rows carry a loss: its head computes every row (the graph's
    // input buffers carry no loss rows), so the eager steps and the FLOP count below do too.
    for (layers::MicroBatch& micro_batch : micro_batches) micro_batch.loss_rows = Tensor();
    const StepGraphKey key = step_graph_key(keep_alive, num_labels, optimizer_->loss_scale(),
                                            {optimizer_->step_state().data(), optimizer_->learning_rates().data()});
    losses = &graphed_step_->run(
        micro_batches, key, /*eager_only=*/profiler_ && profiler_->records(step),
        [&](std::span<layers::MicroBatch> batches, layers::LossSums& sums) {
          runner_->run_training_step(batches, num_labels, step, optimizer_->loss_scale(), sums);
          optimizer_->queue_update(stream_);
        });
  } else {
    runner_->run_training_step(micro_batches, num_labels, step, optimizer_->loss_scale(), eager_losses);
    optimizer_->step(stream_);
  }
  step_records_->record(optimizer_->step_state(), *losses, num_labels, loss_scale_search, stream_);
  ++completed_steps_;
  ++interval_.steps;
  interval_.flops += runner_->flops(micro_batches);
}

void Trainer::run() {
  initialize_or_load();
  const MemoryUsage memory = fullest_rank_memory(memory_usage(device_, /*reset_peak=*/false));
  log_main("After initial setup: allocated {} MiB | max allocated {} MiB | reserved {} MiB | max reserved {} MiB",
           format_with_commas(memory.allocated_mib, 2), format_with_commas(memory.max_allocated_mib, 2),
           format_with_commas(memory.reserved_mib, 2), format_with_commas(memory.max_reserved_mib, 2));
  if (!training_)
    run_evaluators(/*done=*/true);
  else if (completed_steps_ >= sections_.training.train_iters)
    log_main("Training already completed ({} of {} steps), nothing to do", completed_steps_,
             sections_.training.train_iters);
  else
    train();
  clear_progress();
  if (metrics_file_) metrics_file_->commit();
  if (auto path = metrics_path())
    log_main("Metrics: {}", path->string());
  else
    log_main("Metrics: not written (set run.experiment_dir to keep them)");
  if (last_export_)
    log_main("Model: {}", last_export_->string());
  else if (last_checkpoint_)
    log_main("Model: {}", last_checkpoint_->string());
  else
    log_main("Model: not saved (set training.checkpoint.interval or training.export.interval to save it)");
}

void Trainer::train() {
  const TrainingConfig& training = sections_.training;
  const int workers = std::max(1, training.num_workers);
  training_loader_ = data_.make_loader(
      "training", {.begin_sample = completed_steps_ * samples_per_step_,
                   .data_rank = sections_.model.distributed.batch_data_rank(),
                   .data_parallel = sections_.model.distributed.batch_data_parallel(),
                   .num_workers = workers,
                   .prefetch = int(std::max<int64_t>(rank_samples_per_step_, int64_t(workers) *
                                                                            training.prefetch_factor.value_or(2)))});
  log_main("Training ...");
  // Setup (initialisation, loading) is done before the clock starts; from here on only logging waits.
  synchronize(device_, stream_);
  start_time_ = last_log_time_ = now_seconds();
  start_step_ = last_log_step_ = completed_steps_;
  interval_ = {};
  if (sections_.profiling)
    profiler_ = std::make_unique<StepProfiler>(*sections_.profiling, *sections_.model.distributed.rank, run_directory_);
  bool stop = false;
  while (!stop) {
    if (profiler_) profiler_->before_step(completed_steps_ + 1);
    train_step();
    if (profiler_) profiler_->after_step(completed_steps_);
    // Full records are read now rather than moved aside, so that skipped steps are seen at least that often.
    if (step_records_->pending() >= step_records_->capacity()) read_step_records();
    if (training.logs.enabled_at(completed_steps_))
      log_training(completed_steps_);
    else
      show_progress((now_seconds() - start_time_) * 1000.0 / double(completed_steps_ - start_step_));
    stop_if_diverged();
    const bool done = completed_steps_ >= training.train_iters;
    stop = done || training.shutdown.enabled_at(completed_steps_);
    run_evaluators(done);
    save(done, stop);
  }
  training_loader_.reset();
  if (graphed_step_) {
    const GraphedTrainingStep::Counts counts = graphed_step_->counts();
    log_main("CUDA graphs: {} captured, {} steps replayed, {} steps eager", counts.captures, counts.replays,
             counts.eager_steps);
  }
}

void Trainer::read_step_records() {
  std::vector<StepRecords::Step> steps = step_records_->read(stream_);
  sum_over_ranks(steps);
  // The records end with the step just completed.
  int64_t step = completed_steps_ - int64_t(steps.size());
  for (StepRecords::Step& record : steps) {
    ++step;
    if (record.update.successful) {
      streak_ = {};
    } else {
      if (!streak_.first_step) {
        streak_.first_step = step;
        // Every checkpoint so far was saved after reading its step, so before this one.
        if (sections_.run.experiment_dir)
          streak_.checkpoint_before = latest_checkpoint(training_checkpoint_folder(*sections_.run.experiment_dir));
      }
      streak_.last_step = step;
      streak_.counted += !record.loss_scale_search;
    }
    interval_steps_.push_back(std::move(record));
  }
}

void Trainer::warn_if_beyond_estimate(const MemoryUsage& memory) {
  if (warned_beyond_estimate_ || estimated_device_bytes_ <= 0) return;
  // The estimate counts bytes; the allocator aligns every block (64 bytes on the CPU) and the run keeps a few small
  // buffers the estimate leaves out (loss sums, pipeline headers): a small model's run may exceed it by that much.
  constexpr double kAllowance = 256.0 * 1024.0;
  const double allocated = memory.max_allocated_mib * 1024.0 * 1024.0 - double(allocated_before_run_);
  if (allocated <= double(estimated_device_bytes_) + kAllowance) return;
  warned_beyond_estimate_ = true;
  log_warning("this rank allocated up to {} MiB, more than the {} MiB the memory check estimated at start-up for "
              "its device (the estimate is meant as an upper bound: a run it lets through may still run out of "
              "memory)",
              format_with_commas(allocated / (1024.0 * 1024.0), 2),
              format_with_commas(double(estimated_device_bytes_) / (1024.0 * 1024.0), 2));
}

StepMetrics Trainer::step_metrics(int64_t completed, double step_time, double flops_per_step, const MemoryUsage& memory,
                                  std::vector<std::pair<std::string, double>> losses) const {
  const int64_t tokens_per_step = samples_per_step_ * tokens_per_sample_;
  StepMetrics metrics;
  metrics.iteration = completed;
  metrics.train_iters = sections_.training.train_iters;
  metrics.consumed_samples = completed * samples_per_step_;
  metrics.consumed_tokens = completed * tokens_per_step;
  metrics.batch_size = samples_per_step_;
  metrics.step_time_ms = step_time * 1000.0;
  // No activation recomputation: the hardware does the model's FLOPs.
  // This rank's micro-batches: every rank runs as many tokens, so this is the FLOP rate per GPU.
  metrics.model_tflops = flops_per_step / step_time / 1e12;
  metrics.hardware_tflops = metrics.model_tflops;
  metrics.tokens_per_sec_per_gpu = double(tokens_per_step) / *sections_.model.distributed.world_size / step_time;
  metrics.memory = fullest_rank_memory(memory);
  metrics.losses = std::move(losses);
  return metrics;
}

MemoryUsage Trainer::fullest_rank_memory(MemoryUsage memory) const {
  std::vector<double> values{memory.allocated_mib, memory.max_allocated_mib, memory.reserved_mib,
                             memory.max_reserved_mib, memory.global_max_reserved_mib};
  groups_->max(values);
  return {.allocated_mib = values[0],
          .max_allocated_mib = values[1],
          .reserved_mib = values[2],
          .max_reserved_mib = values[3],
          .global_max_reserved_mib = values[4]};
}

void Trainer::count_once_per_tensor_group(std::vector<double>& values) const {
  // The ranks of a tensor-parallel group read the same samples and hold the same losses: tensor rank 0 speaks for them.
  if (sections_.model.distributed.tensor_rank() != 0) std::fill(values.begin(), values.end(), 0.0);
}

void Trainer::sum_over_ranks(std::vector<StepRecords::Step>& steps) const {
  if (groups_->world_size() == 1) return;
  // A pipeline's ranks hold the losses of their own stages: every step gets the names of all ranks' losses.
  std::map<std::string, layers::LossNormalization> local;
  for (const StepRecords::Step& step : steps)
    for (size_t index = 0; index < step.loss_sums.size(); ++index)
      local.emplace(step.loss_sums[index].first, step.loss_normalizations[index]);
  const std::map<std::string, layers::LossNormalization> names = loss_names_over_ranks(*groups_, local);
  std::vector<double> sums;
  for (const StepRecords::Step& step : steps)
    for (const auto& named : names) {
      const std::string& name = named.first;  // not a structured binding: clang's OpenMP mode cannot capture those
      auto found = std::find_if(step.loss_sums.begin(), step.loss_sums.end(),
                                [&](const auto& entry) { return entry.first == name; });
      sums.push_back(found == step.loss_sums.end() ? layers::loss_identity(named.second) : found->second);
    }
  reduce_losses_over_ranks(names, sums);
  size_t next = 0;
  for (StepRecords::Step& step : steps) {
    step.loss_sums.clear();
    step.loss_normalizations.clear();
    for (const auto& [name, normalization] : names) {
      step.loss_sums.emplace_back(name, sums[next++]);
      step.loss_normalizations.push_back(normalization);
    }
  }
}

void Trainer::reduce_losses_over_ranks(const std::map<std::string, layers::LossNormalization>& names,
                                       std::vector<double>& values) const {
  if (names.empty()) return;
  std::vector<layers::LossNormalization> kinds;
  for (const auto& named : names) kinds.push_back(named.second);
  const bool counted = sections_.model.distributed.tensor_rank() == 0;
  // One all-reduce per operation: 0 sums, 1 maxima, 2 minima.
  auto operation = [&](size_t index) {
    const layers::LossNormalization kind = kinds[index % kinds.size()];
    return kind == layers::LossNormalization::maximum ? 1 : kind == layers::LossNormalization::minimum ? 2 : 0;
  };
  std::vector<double> reduced[3];
  for (size_t index = 0; index < values.size(); ++index)
    reduced[operation(index)].push_back(counted ? values[index] : layers::loss_identity(kinds[index % kinds.size()]));
  groups_->sum(reduced[0]);
  groups_->max(reduced[1]);
  groups_->min(reduced[2]);
  size_t next[3] = {0, 0, 0};
  for (size_t index = 0; index < values.size(); ++index) {
    const int kind = operation(index);
    values[index] = reduced[kind][next[kind]++];
  }
}

void Trainer::stop_if_diverged() const {
  const std::optional<int64_t>& limit = sections_.training.max_consecutive_skipped_iterations;
  if (!limit || streak_.counted < *limit) return;
  const int64_t scaler_skips = streak_.last_step - *streak_.first_step + 1 - streak_.counted;
  throw Error("training",
              fmt::format("training diverged: steps {} to {} were all skipped (non-finite gradients), and {} ({}) "
                          "stops a run after that many in a row{}. {}",
                          *streak_.first_step, streak_.last_step,
                          sections_.training.field_path("max_consecutive_skipped_iterations"), *limit,
                          scaler_skips > 0 ? fmt::format(" (not counting the first {}, skipped while the fp16 loss "
                                                         "scaler lowered its scale)",
                                                         scaler_skips)
                                           : std::string(),
                          streak_.checkpoint_before
                              ? fmt::format("The last checkpoint before them, {}, is kept: lower the learning rate "
                                            "and resume from it (a restart resumes from the newest checkpoint, so "
                                            "move the later ones away)",
                                            streak_.checkpoint_before->string())
                              : std::string("No checkpoint was saved before them")));
}

CheckpointRetention Trainer::retention(const TrainingCheckpointBaseConfig& config) const {
  CheckpointRetention retention = config.retention();
  retention.keep_newest_before = streak_.first_step;
  return retention;
}

void Trainer::log_training(int64_t completed) {
  const TrainingConfig& training = sections_.training;
  // Waits for the device: the step time below covers the device work of the interval.
  read_step_records();
  const std::vector<StepRecords::Step> steps = std::exchange(interval_steps_, {});
  FLM_ASSERT(!steps.empty(), "a log line without a recorded step");
  int64_t skipped = 0, nan = 0;
  std::vector<LossTotal> loss_totals;
  for (const StepRecords::Step& step : steps) {
    // Loss sum / labels in the step (the MoE router losses are already the step's mean). A skipped step's loss counts
    // too: its forward pass completed, and its loss is how the model stood (its update is what went wrong).
    // An extreme over no labels is infinite by definition: it leaves the mean without marking the step non-finite.
    bool finite = true;
    for (size_t index = 0; index < step.loss_sums.size(); ++index) {
      const auto& [name, sum] = step.loss_sums[index];
      const layers::LossNormalization normalization = step.loss_normalizations[index];
      const double value = layers::loss_value(normalization, sum, step.num_labels);
      finite = finite && (std::isfinite(value) || (layers::is_extreme(normalization) && std::isinf(value)));
      accumulate(loss_totals, name, value, std::isfinite(value));
    }
    if (step.update.successful) continue;
    ++skipped;
    // Non-finite gradients or loss; the skips of the fp16 loss scaler looking for its scale are only skipped.
    nan += !finite || !step.loss_scale_search;
  }
  const OptimizerStepResult& last_update = steps.back().update;
  const double now = now_seconds();
  const double step_time = (now - last_log_time_) / double(completed - last_log_step_);
  const double average_step_time = (now - start_time_) / double(completed - start_step_);
  const double remaining = average_step_time * double(training.train_iters - completed);
  const double flops_per_step = interval_.steps > 0 ? interval_.flops / double(interval_.steps) : 0.0;

  const MemoryUsage memory = memory_usage(device_, /*reset_peak=*/true);
  warn_if_beyond_estimate(memory);
  TrainingMetrics metrics;
  static_cast<StepMetrics&>(metrics) =
      step_metrics(completed, step_time, flops_per_step, memory, loss_means(loss_totals));
  metrics.learning_rate = last_update.learning_rate;
  metrics.loss_scale = optimizer_->loss_scale();
  metrics.grad_norm = last_update.grad_norm;
  metrics.skipped_iters = skipped;
  metrics.nan_iters = nan;
  metrics.step_time_average_ms = average_step_time * 1000.0;
  metrics.data_wait_ms = interval_.steps > 0 ? interval_.data_wait_ms / double(interval_.steps) : 0.0;
  metrics.remaining_time_s = remaining;
  metrics.completion_time = double(std::time(nullptr)) + remaining;
  metrics.percent_done = 100.0 * double(completed) / double(training.train_iters);

  clear_progress();
  log_main("{}", format_training_metrics(metrics));
  write_metrics(training_metrics_json(metrics));
  last_log_time_ = now;
  last_log_step_ = completed;
  interval_ = {};
}

void Trainer::run_evaluators(bool done) {
  for (auto& evaluator : evaluators_) {
    if (!done && !evaluator->config.enabled_at(completed_steps_)) continue;
    clear_progress();
    const int64_t iterations = evaluator->iterations;
    if (!evaluator->loader) {
      // Evaluations before this one (a resumed run continues where the last one stopped).
      const int64_t previous = occurrences(evaluator->config, completed_steps_ - 1);
      evaluator->loader = data_.make_loader(
          evaluator->name, {.begin_sample = previous * iterations * samples_per_step_,
                            .data_rank = sections_.model.distributed.batch_data_rank(),
                            .data_parallel = sections_.model.distributed.batch_data_parallel(),
                            .num_workers = std::max(1, sections_.training.num_workers),
                            .prefetch = int(rank_samples_per_step_)});
    }
    const double start = now_seconds();
    double flops = 0.0;
    // Each iteration's loss sums stay on the device until all are queued; reading them is the one wait.
    std::vector<std::pair<layers::LossSums, int64_t>> iteration_losses(static_cast<size_t>(iterations));
    for (int64_t iteration = 0; iteration < iterations; ++iteration) {
      std::vector<std::shared_ptr<const data::Batch>> keep_alive;
      auto& [losses, num_labels] = iteration_losses[size_t(iteration)];
      std::vector<layers::MicroBatch> micro_batches =
          next_micro_batches(*evaluator->loader, evaluator->name, keep_alive, num_labels);
      runner_->run_forward(micro_batches, iteration, losses);
      // Forward only: a third of forward + backward.
      flops += runner_->flops(micro_batches) / 3.0;
    }
    // Each rank's loss sums, added over the ranks (the label counts already are; extremes reduced with max / min); a
    // pipeline's ranks hold the losses of their own stages.
    std::map<std::string, layers::LossNormalization> local;
    for (const auto& [losses, num_labels] : iteration_losses)
      for (const auto& [name, sum] : losses.all()) local.emplace(name, losses.normalization(name));
    const std::map<std::string, layers::LossNormalization> names = loss_names_over_ranks(*groups_, local);
    std::vector<double> sums;
    for (const auto& [losses, num_labels] : iteration_losses)
      for (const auto& [name, normalization] : names) {
        auto found = losses.all().find(name);
        sums.push_back(found == losses.all().end() ? layers::loss_identity(normalization) : found->second.item());
      }
    reduce_losses_over_ranks(names, sums);
    std::vector<LossTotal> totals;
    size_t next_sum = 0;
    for (const auto& [losses, num_labels] : iteration_losses)
      for (const auto& [name, normalization] : names) {
        const double value = layers::loss_value(normalization, sums[next_sum++], num_labels);
        // An extreme over no labels (infinite) leaves the mean, as in the training log.
        accumulate(totals, name, value, !layers::is_extreme(normalization) || std::isfinite(value));
      }
    const double step_time = (now_seconds() - start) / double(iterations);
    const StepMetrics metrics = step_metrics(completed_steps_, step_time, flops / double(iterations),
                                             memory_usage(device_, /*reset_peak=*/false), loss_means(totals));
    log_main("{}", format_validation_metrics(metrics, evaluator->name));
    write_metrics(validation_metrics_json(metrics, evaluator->name));
  }
}

void Trainer::save(bool done, bool stopping) {
  const TrainingConfig& training = sections_.training;
  const bool checkpoint = training.checkpoint.enabled() &&
                          (stopping || training.checkpoint.enabled_at(completed_steps_));
  const bool exported = training.export_.enabled() && (done || training.export_.enabled_at(completed_steps_));
  if (!checkpoint && !exported) return;
  // Whether steps are being skipped decides what pruning keeps, and a diverged run saves nothing more.
  read_step_records();
  stop_if_diverged();
  clear_progress();
  if (checkpoint) {
    last_checkpoint_ = save_training_checkpoint(*sections_.run.experiment_dir, completed_steps_, *multi_stage_,
                                                training_save(), retention(training.checkpoint), *groups_);
    log_main("Saved checkpoint of step {} in {}", completed_steps_, last_checkpoint_->string());
  }
  if (exported) {
    last_export_ = save_training_export(*sections_.run.experiment_dir, completed_steps_, *multi_stage_,
                                        training_save(), training.export_, retention(training.export_), *groups_);
    log_main("Exported step {} to {}", completed_steps_, last_export_->string());
  }
}

void Trainer::write_metrics(const nlohmann::json& record) {
  auto path = metrics_path();
  if (!path) return;
  if (!metrics_file_)
    metrics_file_ = std::make_unique<FileWriter>(*path, FileWriter::Options{.component = "training",
                                                                           .mode = FileWriter::Mode::append});
  metrics_file_->write(record.dump() + "\n");
  metrics_file_->flush();
}

void Trainer::show_progress(double average_step_ms) {
  if (!progress_on_terminal_ || !groups_->is_main()) return;
  const int64_t total = sections_.training.train_iters;
  const double remaining_s = average_step_ms / 1000.0 * double(total - completed_steps_);
  write_to_terminal(fmt::format("\r\033[Ktraining: step {}/{} ({:.1f} %) | {:.1f} ms/step | remaining {}",
                                completed_steps_, total, 100.0 * double(completed_steps_) / double(total),
                                average_step_ms, format_duration(remaining_s)));
  progress_shown_ = true;
}

void Trainer::clear_progress() {
  if (!progress_shown_) return;
  write_to_terminal("\r\033[K");
  progress_shown_ = false;
}

}  // namespace fast_llm::engine
