// Field lists of the training, run and profiling configs.
#include "fast_llm/engine/training/config.h"

#include <fmt/format.h>

#include <set>

#include "fast_llm/engine/training/run_config.h"

namespace fast_llm::engine {

using config::Hint;
using config::Visitor;
namespace check = config::check;

// ---------------------------------------------------------------------------------------------------------------
// Training

void MetricsLogsConfig::visit(Visitor& v) {
  visit_interval(v, "Training steps between two metric log lines. Unset: no metric logs.",
                 "Step of the first metric log line.");
}

void TrainingCheckpointBaseConfig::visit_keep(Visitor& v) {
  v(keep, "keep", "Most saves kept; older ones are deleted first. Unset: all.", Hint::feature, check::gt(0));
  v(keep_every, "keep_every", "Keep every n-th save out of the count and the deletion of `keep`.", Hint::feature,
    check::gt(0));
}

void TrainingCheckpointConfig::visit(Visitor& v) {
  visit_interval(v, "Training steps between two checkpoints. Unset: no checkpoints.", "Step of the first checkpoint.");
  visit_keep(v);
}

void TrainingExportConfig::visit(Visitor& v) {
  visit_interval(v, "Training steps between two exports. Unset: no exports.", "Step of the first export.");
  visit_keep(v);
  visit_save_options(v);
}

void TrainingExportConfig::derive() {
  IntervalConfig::derive();
  resolve_save_options();
}

void TrainingExportConfig::check() const { check_save_options(*this); }

void ShutdownConfig::visit(Visitor& v) {
  visit_interval(v,
                 "Training steps between two automated shutdowns, each right after a checkpoint; must be a multiple "
                 "of the checkpoint interval. Unset: never.",
                 "Step of the first shutdown; must match the checkpoint offset.");
}

void WandbAlertConfig::visit(Visitor& v) {
  visit_interval(v,
                 "Training steps between two W&B status alerts; must be a multiple of the log interval. Unset: none.",
                 "Step of the first alert; must match the log offset.");
  v(status_updates, "status_updates", "Post an alert when the run starts and ends. Unset: when alerts are on.",
    Hint::feature);
}

void WandbConfig::visit(Visitor& v) {
  v(alert, "alert", "Status alerts, posted by e-mail or Slack depending on the W&B account.", Hint::core);
  v(group_name, "group_name", "W&B group of the run.", Hint::feature);
  v(project_name, "project_name", "W&B project of the run.", Hint::feature);
  v(entity_name, "entity_name", "W&B entity (user or team); logging to W&B is on only when it is set.",
    Hint::feature, config::not_supported_yet(std::optional<std::string>(), "Weights & Biases logging"));
}

void TrainingConfig::visit(Visitor& v) {
  v(evaluators, "evaluators", "Evaluations by name; a `loss` evaluator reads the dataset of the same name.",
    Hint::core);
  v(logs, "logs", "Metric log line.", Hint::core);
  v(checkpoint, "checkpoint", "Training checkpoints (for resuming).", Hint::core);
  v(export_, "export", "Exports in another format.", Hint::core);
  v(shutdown, "shutdown", "Automated shutdown after checkpoints.", Hint::core);
  v(wandb, "wandb", "Weights & Biases logging.", Hint::core);
  v(train_iters, "train_iters", "Number of training steps.", Hint::core, check::ge(int64_t(0)));
  v(num_workers, "num_workers", "Data-loading workers per data iterator.", Hint::optional, check::ge(0));
  v(prefetch_factor, "prefetch_factor", "Micro-batches each data-loading worker prepares ahead. Unset: the default.",
    Hint::performance, check::gt(0));
  v(timeout, "timeout",
    "Timeout of long operations (checkpoint saving and loading, dataset preparation and sampling), in seconds.",
    Hint::feature, check::gt(0.0));
  v(max_consecutive_skipped_iterations, "max_consecutive_skipped_iterations",
    "Stop the run with an error once this many training steps in a row were skipped (non-finite gradients: the run "
    "has diverged), before it saves again. Skips while the fp16 loss scaler can still lower its scale do not count. "
    "Checked when the trainer reads its step records: at log lines, before checkpoints and exports, and at least "
    "every 1000 steps. Unset: never stop.",
    Hint::stability, check::gt(int64_t(0)));
}

void TrainingConfig::check() const {
  if (!shutdown.is_sub_interval(checkpoint))
    fail("shutdown", "every shutdown must fall on a checkpoint: the interval must be a multiple of the checkpoint "
                     "interval, with a matching offset");
  if (!wandb.alert.is_sub_interval(logs))
    fail("wandb.alert", "every alert must fall on a metric log: the interval must be a multiple of the log interval, "
                        "with a matching offset");
}

// ---------------------------------------------------------------------------------------------------------------
// Run

void TensorLogsConfig::visit(Visitor& v) {
  v(save, "save", "Save the debug tensor logs in the experiment directory.", Hint::logging,
    config::not_supported_yet(false, "saved tensor logs"));
  v(show, "show", "Print the debug tensor logs (may be very long).", Hint::logging);
  v(max_elements, "max_elements", "Values printed per tensor.", Hint::logging, check::gt(0));
  v(full_tensors, "full_tensors", "Save or print whole tensors.", Hint::unknown);
}

void RunConfig::visit(Visitor& v) {
  v(tensor_logs, "tensor_logs", "Debug tensor logs.", Hint::logging);
  v(structured_logs, "structured_logs", "Write logs in Fast-LLM's format.", Hint::logging);
  v(experiment_dir, "experiment_dir", "Directory of every checkpoint, export, log and artifact of the run.",
    Hint::core);
  v(enable_all_loggers, "enable_all_loggers", "Also show informational logs from outside fast-llm.", Hint::logging);
  v(log_timestamps, "log_timestamps", "Start each log line with a timestamp.", Hint::logging);
  v(experiment_name, "experiment_name", "Name of the experiment. Unset: the experiment directory's name, or default.",
    Hint::feature);
  v(torch_dynamo_enable, "torch_dynamo_enable", "Fast-LLM's torch.compile switch; no effect here (there is no torch).",
    Hint::expert);
  v(enable_triton_kernels, "enable_triton_kernels",
    "Fast-LLM's Triton switch; no effect here (kernels are chosen with `kernels`).", Hint::expert);
  v(triton_linear_kernels, "triton_linear_kernels",
    "Fast-LLM's switch for Triton linear kernels; no effect here (kernels are chosen with `kernels`).",
    Hint::performance);
  v(model_debug_level, "model_debug_level", "Detail of debug prints of intermediate model states.", Hint::logging,
    check::ge(0), config::not_supported_yet(0, "model debug prints"));
}

void RunConfig::check() const {
  if (!experiment_dir && tensor_logs.save) fail("tensor_logs.save", "needs run.experiment_dir to save into");
}

void ProfilingConfig::visit(Visitor& v) {
  v(cpu, "cpu", "Time the kernels that run on the CPU (host clock per kernel dispatch).", Hint::feature);
  v(cuda, "cuda", "Time the kernels that run on a GPU (CUDA events around each kernel dispatch).", Hint::core);
  v(skip, "skip", "Steps before the first profiling cycle.", Hint::optional, check::ge(0));
  v(wait, "wait", "Steps at the start of each cycle with the profiler off.", Hint::optional, check::ge(0));
  v(warmup, "warmup", "Steps after `wait` with the profiler on but its results discarded.", Hint::optional,
    check::ge(0));
  v(cycles, "cycles", "Steps recorded in each cycle.", Hint::optional, check::gt(0));
  v(averages, "averages",
    "Write a table of the time per kernel variant, averaged over each cycle's recorded steps (the profiler's output).",
    Hint::logging);
  v(trace, "trace", "Log every operation in order.", Hint::logging,
    config::not_supported_yet(false, "a per-operation trace (use `averages`)"));
  v(table_width, "table_width", "Width of logged tables, in characters.", Hint::logging, check::ge(40));
  v(ranks, "ranks", "Ranks to profile. Empty: all.", Hint::feature);
  v(log, "log", "Print the tables rather than saving them as artifacts.", Hint::logging);
  v(export_, "export", "Save the raw profile as a Chrome trace artifact.", Hint::logging,
    config::not_supported_yet(false, "Chrome trace export (use `averages`)"));
}

void ProfilingConfig::check() const {
  if ((cpu || cuda) && !averages)
    fail("averages", "profiling is on (cpu or cuda) but produces nothing: set averages: true for the table of time per "
                     "kernel variant");
  std::set<int> seen;
  for (int rank : ranks) {
    if (rank < 0) fail("ranks", fmt::format("ranks must be at least 0, got {}", rank));
    if (!seen.insert(rank).second) fail("ranks", fmt::format("rank {} appears twice", rank));
  }
}

}  // namespace fast_llm::engine
