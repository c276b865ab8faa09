// The training loop (reference/fast-llm.md §6.6-§6.8; DESIGN.md §5).
//
// The caller (the `train` command) validates the trainer config, builds the model, the data and the experiment
// directory's resolved config text, then:
//
//   engine::Trainer trainer({.training = config.training, .schedule = config.schedule,
//                            .optimizer = config.optimizer, .model = config.model,
//                            .pretrained = config.pretrained, .run = config.run},
//                           model, data, config.to_yaml_string());
//   trainer.run();
//
// Setup (in the constructor) checks before it builds (docs/reliability.md): it locks the experiment directory
// (ExperimentLock), checks the whole-config preconditions (saves need run.experiment_dir, sampled datasets exist,
// evaluators are supported, evaluation alone needs weights) and the memory the run needs (memory_check.h). Then the
// model is cut into stages on the run's device, the optimizer and the schedule are built, `training` and each `loss`
// evaluator's dataset are sampled, `<experiment_dir>/config.yaml` is written and `runs/<k>/` created (k: the first
// unused index). `run()` loads or initialises the weights, trains `training.train_iters` steps (or only evaluates when
// it is 0), logs every `training.logs.interval` steps to the log and to `runs/<k>/metrics.jsonl`, evaluates on the
// evaluators' intervals and at the end. Files are written through FileWriter: a failed write stops the run.
//
// A run of `training.max_consecutive_skipped_iterations` skipped steps (the fp16 scaler's search aside) stops training
// before the next save; meanwhile pruning keeps the newest save from before the first of them. Both happen where the
// host reads the step records (below).
//
// Weights come from the run's newest complete checkpoint when it is restarted, else from `pretrained`, else a fresh
// initialisation; checkpoints and exports are saved on their intervals (and a checkpoint at a shutdown). All go
// through the checkpoint engine (checkpoint/loading.h, checkpoint/saving.h), which sees the model through its
// ModelConfig.
//
// On a GPU a training step queues its work without waiting for the device: batches go up on their own stream
// (BatchUploader), the optimizer decides clipping and skipping on the device, and the step's decisions and loss sums
// are copied aside on the device (StepRecords). The host reads them, and so waits for the device, only when a log
// line, an evaluation, a checkpoint or an export needs numbers (and once per StepRecords capacity when logging is
// rarer), so it keeps queueing the next step while the device runs the current one. With `schedule.cuda_graphs`,
// steps whose shapes repeat are replayed from CUDA graphs (GraphedTrainingStep).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fast_llm/core/file_writer.h"
#include "fast_llm/data/batch.h"
#include "fast_llm/data/data.h"
#include "fast_llm/engine/base_model.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/checkpoint/saving.h"
#include "fast_llm/engine/checkpoint/training_state.h"
#include "fast_llm/engine/distributed/process_groups.h"
#include "fast_llm/engine/model_type.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/engine/optimizer/config.h"
#include "fast_llm/engine/optimizer/optimizer.h"
#include "fast_llm/engine/schedule/config.h"
#include "fast_llm/engine/schedule/activation_memory.h"
#include "fast_llm/engine/schedule/runner.h"
#include "fast_llm/engine/training/batch_uploader.h"
#include "fast_llm/engine/training/config.h"
#include "fast_llm/engine/training/cuda_graph_step.h"
#include "fast_llm/engine/training/experiment_lock.h"
#include "fast_llm/engine/training/memory_check.h"
#include "fast_llm/engine/training/metrics.h"
#include "fast_llm/engine/training/profiling.h"
#include "fast_llm/engine/training/step_records.h"
#include "fast_llm/engine/training/run_config.h"
#include "fast_llm/layers/context.h"

namespace fast_llm::engine {

// The validated sections of the trainer config the engine reads (a model type's trainer config composes them, e.g.
// models/gpt/trainer_config.h).
struct TrainerSections {
  const TrainingConfig& training;
  const ScheduleConfig& schedule;
  const OptimizerConfig& optimizer;
  const ModelConfig& model;  // multi_stage, distributed, and the base model as checkpoints store it
  const CheckpointLoadConfig& pretrained;
  const RunConfig& run;
  const ProfilingConfig* profiling = nullptr;  // none: no kernel profiling
  // What each layer of the model keeps and works with on this rank's layout (schedule/activation_memory.h; GPT's:
  // models/gpt/training.h), from which the memory check counts this rank's activations; no layers leaves
  // activations out of the memory check.
  ModelActivations activations;
  // Runs on each step's micro-batches (this rank's; training and evaluation) once they are uploaded and their step
  // counts set, before the model sees them: the model type adds what its layers read besides the data (the GPT
  // reference models' logits, models/gpt/reference_models.h). Empty: nothing.
  std::function<void(std::span<layers::MicroBatch>)> prepare_micro_batches;
  // Device memory the model type needs besides the trained model and its activations (the reference models' weights
  // and outputs), listed by the memory check.
  std::vector<MemoryEstimate::Part> extra_device_memory;
  // Whether prepare_micro_batches may be handed micro-batches whose preference pairs share their prompt rows
  // (BaseModel::computes_shared_prompts_once; the GPT reference models' layers must allow it too).
  bool prepares_shared_prompts = true;
};

class Trainer {
 public:
  Trainer(TrainerSections sections, BaseModel& model, data::GPTData& data, std::string resolved_config_yaml);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void run();

  MultiStage& multi_stage() { return *multi_stage_; }
  // Null when train_iters is 0 (evaluation only).
  Optimizer* optimizer() { return optimizer_.get(); }
  Device device() const { return device_; }
  int64_t samples_per_step() const { return samples_per_step_; }
  int64_t completed_steps() const { return completed_steps_; }

  // `<experiment_dir>/runs/<k>` and its metrics file; empty without run.experiment_dir.
  const std::optional<std::filesystem::path>& run_directory() const { return run_directory_; }
  std::optional<std::filesystem::path> metrics_path() const;
  // What the CUDA graphs did (all zero when `schedule.cuda_graphs` is off or the run does not qualify).
  GraphedTrainingStep::Counts cuda_graph_counts() const;

 private:
  struct Evaluator;
  // Queues one training step on the next batches of the training loader; its numbers go to step_records_.
  void train_step();
  // The preconditions of the run that need nothing built (see the file comment); returns each dataset to sample with
  // its number of samples, and lists the evaluators.
  std::vector<std::pair<std::string, int64_t>> check_run();
  MemoryEstimate estimate_memory(const std::vector<std::pair<std::string, int64_t>>& samplings) const;
  // Moves the step records to interval_steps_ (waits for the device) and follows the streak of skipped steps.
  void read_step_records();
  // The fields training and validation lines share, after `completed` steps: one step's `step_time` (seconds) and
  // this rank's `flops_per_step`, this rank's `memory` (the line reports the fullest rank's) and the losses' means.
  StepMetrics step_metrics(int64_t completed, double step_time, double flops_per_step, const MemoryUsage& memory,
                           std::vector<std::pair<std::string, double>> losses) const;
  // Each figure's largest value over the ranks (the log line reports the fullest rank).
  MemoryUsage fullest_rank_memory(MemoryUsage memory) const;
  // Warns once when this rank's peak allocation (since the trainer was built) exceeds what the memory check estimated
  // for its device (by more than the allocator's alignment could explain): the estimate is meant as an upper bound.
  void warn_if_beyond_estimate(const MemoryUsage& memory);
  // Zeroes `values` on every tensor rank but 0, before a sum over the world: each tensor-parallel group counts once.
  void count_once_per_tensor_group(std::vector<double>& values) const;
  // The steps' loss sums added over the ranks (each rank recorded its own micro-batches'; the label counts are global),
  // their extremes reduced with max / min.
  void sum_over_ranks(std::vector<StepRecords::Step>& steps) const;
  // `values`: rows of one value per loss of `names` (in its order), replaced by their reduction over the ranks: each
  // tensor-parallel group counts once, sums add, maxima and minima (layers::LossNormalization) take the extreme.
  void reduce_losses_over_ranks(const std::map<std::string, layers::LossNormalization>& names,
                                std::vector<double>& values) const;
  // Throws when the streak of skipped steps reached `training.max_consecutive_skipped_iterations`.
  void stop_if_diverged() const;

  std::vector<layers::MicroBatch> next_micro_batches(data::DataLoader& loader, std::string_view dataset,
                                                     std::vector<std::shared_ptr<const data::Batch>>& keep_alive,
                                                     int64_t& num_labels);
  // `schedule.cuda_graphs`: the graphed step when the run qualifies, else the log line saying why not.
  void set_up_cuda_graphs();
  TrainingState state() const;
  void restore(const TrainingState& state);
  void initialize_or_load();
  // The run's newest complete checkpoint / the weights of `pretrained`, into the stages; false when there is none.
  bool resume_from_checkpoint();
  bool load_pretrained_weights();
  // What a checkpoint or an export of the current state holds besides the stages.
  TrainingSave training_save() const;
  void train();
  void run_evaluators(bool done);
  // Reads the step records (waits for the device) and writes the log line of the interval.
  void log_training(int64_t completed);
  void write_metrics(const nlohmann::json& record);
  void show_progress(double average_step_ms);
  void clear_progress();
  void save(bool done, bool stopping);
  // What pruning keeps of the checkpoints or exports of `config`: their own rule, and the newest save before a streak
  // of skipped steps.
  CheckpointRetention retention(const TrainingCheckpointBaseConfig& config) const;

  TrainerSections sections_;
  std::unique_ptr<ExperimentLock> lock_;  // held for the life of the trainer (rank 0, with an experiment directory)
  BaseModel& model_;
  data::GPTData& data_;
  std::string resolved_config_yaml_;
  Device device_;
  Stream stream_;
  int64_t samples_per_step_ = 0;       // of all data-parallel ranks together
  int64_t rank_samples_per_step_ = 0;  // of this rank: the schedule's micro-batches
  int64_t tokens_per_sample_ = 0;
  // The memory check's estimate of this rank's device memory, what the device's allocator held before it, and
  // whether warn_if_beyond_estimate has warned.
  int64_t estimated_device_bytes_ = 0;
  int64_t allocated_before_run_ = 0;
  bool warned_beyond_estimate_ = false;
  bool training_ = false;

  std::unique_ptr<ProcessGroups> groups_;
  std::unique_ptr<MultiStage> multi_stage_;
  std::unique_ptr<ScheduleRunner> runner_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::unique_ptr<Evaluator>> evaluators_;
  std::unique_ptr<data::DataLoader> training_loader_;
  std::unique_ptr<BatchUploader> uploader_;
  std::unique_ptr<StepRecords> step_records_;
  std::unique_ptr<StepProfiler> profiler_;  // kernel timing (`profiling`), when configured
  std::unique_ptr<GraphedTrainingStep> graphed_step_;  // `schedule.cuda_graphs` in a run that qualifies

  int64_t completed_steps_ = 0;
  std::optional<std::filesystem::path> run_directory_;
  std::optional<std::filesystem::path> last_checkpoint_;
  std::optional<std::filesystem::path> last_export_;
  std::unique_ptr<FileWriter> metrics_file_;  // opened at the first record

  // The steps read from step_records_ since the last log line.
  std::vector<StepRecords::Step> interval_steps_;
  // The steps skipped in a row up to the last step read: the first and last of them, and how many count towards the
  // stop.
  struct SkippedStreak {
    std::optional<int64_t> first_step;
    int64_t last_step = 0;
    int64_t counted = 0;
    std::optional<std::filesystem::path> checkpoint_before;  // the newest checkpoint when it began
  } streak_;
  bool progress_on_terminal_ = false;
  bool progress_shown_ = false;

  // Host numbers accumulated since the last log line (the device ones are in step_records_).
  struct Interval {
    int64_t steps = 0;
    double data_wait_ms = 0, flops = 0;
  } interval_;
  double start_time_ = 0, last_log_time_ = 0;
  int64_t start_step_ = 0, last_log_step_ = 0;
};

}  // namespace fast_llm::engine
