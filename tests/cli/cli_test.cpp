// The `fast-llm` command line, run as a user runs it: every subcommand and option with a valid config file, with
// overrides, and with nonsense. Whatever the input, the program exits with a status (never a signal, never a hang)
// and a user's mistake is reported as such, never as "[internal] ... this is a bug". In the sanitizer build
// (`asan` preset) the same test runs the sanitized binary, so memory errors on these paths fail it too.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "data/byte_tokenizer_json.h"
#include "run_fast_llm.h"

namespace {

namespace fs = std::filesystem;

using fast_llm::testing::Outcome;
using fast_llm::testing::run_fast_llm;

std::string join(const std::vector<std::string>& arguments) {
  std::string line = "fast-llm";
  for (const auto& argument : arguments) line += " " + argument;
  return line;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = fs::temp_directory_path() /
                 ("fast_llm_cli_test_" + std::to_string(getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  fs::path write(const std::string& name, const std::string& text) {
    fs::path path = directory_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return path;
  }

  // Runs the command and checks it ended by itself with `status`, printing `expected` and no internal error.
  Outcome expect(const std::vector<std::string>& arguments, int status, const std::string& expected = "",
                 const std::optional<fs::path>& standard_output = std::nullopt) {
    Outcome outcome = run_fast_llm(arguments, directory_, std::chrono::seconds(120), standard_output);
    EXPECT_TRUE(outcome.exited) << join(arguments) << " did not exit by itself (signal or hang):\n" << outcome.output;
    EXPECT_EQ(outcome.status, status) << join(arguments) << ":\n" << outcome.output;
    EXPECT_NE(outcome.output.find(expected), std::string::npos)
        << join(arguments) << ": expected \"" << expected << "\" in:\n" << outcome.output;
    EXPECT_EQ(outcome.output.find("[internal]"), std::string::npos) << join(arguments) << ":\n" << outcome.output;
    EXPECT_EQ(outcome.output.find("AddressSanitizer"), std::string::npos) << join(arguments) << ":\n"
                                                                          << outcome.output;
    EXPECT_EQ(outcome.output.find("runtime error:"), std::string::npos) << join(arguments) << ":\n" << outcome.output;
    return outcome;
  }

  fs::path directory_;
};

// A complete training config, small enough to run in a second on the CPU.
constexpr const char* kTrainConfig = R"(
training: {train_iters: 2, logs: {interval: 1}}
data:
  datasets: {training: {type: random}}
  micro_batch_size: 16
optimizer: {learning_rate: {base: 1.0e-3}}
model:
  base_model:
    embeddings: {vocab_size: 32}
    decoder:
      block:
        mixer: {type: attention, heads: 2, head_groups: 1, head_size: 4}
        mlp: {intermediate_size: 16, gated: true}
        normalization: {type: rms_norm}
      num_blocks: 1
    hidden_size: 8
  distributed: {compute_dtype: fp32}
run: {experiment_dir: experiment}
)";

TEST_F(CliTest, TopLevel) {
  expect({"--help"}, 0, "train");
  expect({"--version"}, 0, "fast-llm");
  expect({}, 106, "A subcommand of `fast-llm` is required");
  expect({"frobnicate"}, 109, "frobnicate");
  expect({"--debug", "kernels", "--device", "cpu"}, 0, "rms_norm_forward");
  expect({"train"}, 106, "A subcommand of `fast-llm train` is required");
  expect({"train", "bert"}, 109, "bert");
  expect({"prepare"}, 106, "A subcommand of `fast-llm prepare` is required");
}

TEST_F(CliTest, TrainGpt) {
  const fs::path config = write("train.yaml", kTrainConfig);
  for (const std::string command : {"train gpt", "train_gpt"}) {
    std::vector<std::string> prefix;
    std::istringstream words(command);
    for (std::string word; words >> word;) prefix.push_back(word);
    auto with = [&](std::vector<std::string> rest) {
      std::vector<std::string> arguments = prefix;
      arguments.insert(arguments.end(), rest.begin(), rest.end());
      return arguments;
    };
    expect(with({"--help"}), 0, "--validate");
    expect(with({"-c", config.string(), "--validate"}), 0, "hidden_size: 8");
    expect(with({"-c", config.string(), "model.base_model.hidden_size=12", "-v"}), 0, "hidden_size: 12");
    expect(with({"-c", config.string(), "model.base_model.hiden_size=12"}), 1, "hiden_size");
    expect(with({"-c", config.string(), "model.base_model.hidden_size=twelve"}), 1, "model.base_model.hidden_size");
    expect(with({"-c", config.string(), "no_equals_sign"}), 1, "no_equals_sign");
    expect(with({"-c", (directory_ / "missing.yaml").string()}), 1, "missing.yaml");
    expect(with({"-c", write("broken.yaml", "training: {train_iters: [").string()}), 1, "broken.yaml");
    expect(with({"-c"}), 114, "--config");
    expect(with({"--frobnicate"}), 109, "--frobnicate");
  }
  const Outcome trained = expect({"train", "gpt", "-c", config.string()}, 0);
  EXPECT_TRUE(fs::exists(directory_ / "experiment" / "config.yaml")) << trained.output;
}

// examples/mixtral-tiny.yaml trains (a mixture of experts on random tokens): the language-model loss falls and every
// training log line carries the routers' load-balancing and z losses, as does the validation line.
TEST_F(CliTest, MixtralTinyExampleTrains) {
  const fs::path example = fs::path(FAST_LLM_SOURCE_DIR) / "examples" / "mixtral-tiny.yaml";
  const Outcome trained = expect({"train", "gpt", "-c", example.string(), "run.experiment_dir=experiment",
                                  "training.evaluators={validation: {type: loss, interval: 30, iterations: 2}}",
                                  "data.datasets.validation={type: random}"},
                                 0, "load_balancing_loss");
  std::vector<double> losses;
  bool validated = false;
  std::istringstream lines(trained.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("validation") != std::string::npos && line.find("lm_head_loss") != std::string::npos) {
      EXPECT_NE(line.find("load_balancing_loss"), std::string::npos) << line;
      EXPECT_NE(line.find("router_z_loss"), std::string::npos) << line;
      validated = true;
      continue;
    }
    if (line.find("load_balancing_loss") == std::string::npos) continue;
    EXPECT_NE(line.find("router_z_loss"), std::string::npos) << line;
    const std::string key = "lm_head_loss: ";
    const size_t at = line.find(key);
    if (at != std::string::npos) losses.push_back(std::stod(line.substr(at + key.size())));
  }
  ASSERT_GE(losses.size(), 2u) << trained.output;
  EXPECT_LT(losses.back(), losses.front()) << trained.output;
  EXPECT_TRUE(validated) << trained.output;
}

// The numbers a log line carries under `key`, in order, over the lines that have it.
std::vector<double> logged(const std::string& output, const std::string& key) {
  std::vector<double> values;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find(key + ": ");
    if (line.find("training @") != std::string::npos && at != std::string::npos)
      values.push_back(std::stod(line.substr(at + key.size() + 2)));
  }
  return values;
}

// examples/distillation.yaml trains: the distillation loss against the frozen teacher falls, and the head's total is
// the weighted sum of it and the label loss.
TEST_F(CliTest, DistillationExampleTrains) {
  const fs::path example = fs::path(FAST_LLM_SOURCE_DIR) / "examples" / "distillation.yaml";
  const Outcome trained = expect({"train", "gpt", "-c", example.string(), "run.experiment_dir=experiment",
                                  "training.train_iters=12", "training.logs.interval=4"},
                                 0, "distillation: ");
  const std::vector<double> distillation = logged(trained.output, "distillation");
  const std::vector<double> cross_entropy = logged(trained.output, "cross_entropy");
  const std::vector<double> total = logged(trained.output, "lm_head_loss");
  ASSERT_EQ(distillation.size(), 3u) << trained.output;
  ASSERT_EQ(total.size(), 3u) << trained.output;
  EXPECT_LT(distillation.back(), distillation.front()) << trained.output;
  for (size_t index = 0; index < total.size(); ++index)
    EXPECT_NEAR(total[index], 0.5 * cross_entropy[index] + distillation[index], 2e-5) << trained.output;
}

// examples/dpo.yaml, as its comment says: the preference data prepared from JSONL, then DPO against a reference that
// starts as the policy itself: log(2) at the first step, then lower.
TEST_F(CliTest, DpoExampleTrains) {
  const fs::path source(FAST_LLM_SOURCE_DIR);
  fs::create_directory_symlink(source / "examples", directory_ / "examples");
  fs::create_directory_symlink(source / "tests", directory_ / "tests");
  expect({"prepare", "gpt_memmap", "-c", "examples/dpo/prepare.yaml"}, 0, "Prepared 48 documents");
  const Outcome trained = expect({"train", "gpt", "-c", "examples/dpo.yaml", "training.train_iters=6",
                                  "training.logs.interval=1",
                                  "training.evaluators={validation: {type: loss, interval: 6, iterations: 2}}",
                                  "data.datasets.validation={type: file, path: experiments/dpo/dataset/"
                                  "fast_llm_config.yaml}"},
                                 0, "dpo: ");
  // The evaluation runs the reference model too: its line carries the dpo loss.
  bool validated = false;
  std::istringstream lines(trained.output);
  for (std::string line; std::getline(lines, line);)
    validated = validated || (line.find("validation") != std::string::npos && line.find("dpo: ") != std::string::npos);
  EXPECT_TRUE(validated) << trained.output;
  const std::vector<double> dpo = logged(trained.output, "dpo");
  ASSERT_EQ(dpo.size(), 6u) << trained.output;
  EXPECT_NEAR(dpo.front(), std::log(2.0), 1e-5) << trained.output;
  EXPECT_LT(dpo.back(), 0.5) << trained.output;
  // Without whole documents a pair could be cut: refused before anything runs.
  expect({"train", "gpt", "-c", "examples/dpo.yaml", "data.truncate_documents=true"}, 1, "truncate_documents");
}

// examples/lora-finetune.yaml on a tiny Llama made here (mixtral-tiny with a dense MLP, exported as llama) and random
// tokens: the adapters train (the only trainable parameters), the loss falls, and the export is PEFT's adapter files.
TEST_F(CliTest, LoraFinetuneExampleTrains) {
  const fs::path examples = fs::path(FAST_LLM_SOURCE_DIR) / "examples";
  expect({"train", "gpt", "-c", (examples / "mixtral-tiny.yaml").string(), "run.experiment_dir=base",
          "model.base_model.decoder.block.mlp={type: mlp, intermediate_size: 48, gated: true, activation: silu, "
          "add_linear_biases: false}",
          "training.train_iters=4", "training.export={format: llama, interval: 4}"},
         0, "Exported step 4");
  const Outcome trained = expect({"train", "gpt", "-c", (examples / "lora-finetune.yaml").string(),
                                  "pretrained.path=base/export/llama/4", "data.datasets={training: {type: random}}",
                                  "data.micro_batch_size=256", "data.maximum_document_length=256",
                                  "run.experiment_dir=finetune"},
                                 0, "1792 trainable");
  std::vector<double> losses;
  std::istringstream lines(trained.output);
  for (std::string line; std::getline(lines, line);) {
    const std::string key = "lm_head_loss: ";
    if (const size_t at = line.find(key); at != std::string::npos)
      losses.push_back(std::stod(line.substr(at + key.size())));
  }
  ASSERT_EQ(losses.size(), 5u) << trained.output;
  EXPECT_LT(losses.back(), losses.front()) << trained.output;
  EXPECT_TRUE(fs::exists(directory_ / "finetune/export/llama/50/adapter_model.safetensors"));
  std::ifstream adapter_config(directory_ / "finetune/export/llama/50/adapter_config.json");
  const nlohmann::json adapter = nlohmann::json::parse(adapter_config);
  // The run knows its base model: PEFT's loaders find it there.
  EXPECT_EQ(adapter["base_model_name_or_path"], fs::absolute(directory_ / "base/export/llama/4").string());
}

// Issue 23's speed shapes (examples/benchmarks/llama-3.2-1b-lora.yaml and -dpo.yaml, run on the GPU by
// benchmarks/gpu_training_benchmark.sh) at a tiny width on the CPU: the configs are valid and train as their comments
// say. LoRA: only the adapters of query and value train (2 blocks x rank 8 x (64 + 64 + 64 + 32) = 3584 parameters,
// the count benchmarks/llama_shapes.py's FLOPs formula assumes). DPO: the reference is a fresh model with the run's
// seed, so the first step's loss is log 2 (here on the prepared example pairs; the benchmark writes its own file).
TEST_F(CliTest, PostTrainingBenchmarkShapesTrainSmall) {
  const fs::path source(FAST_LLM_SOURCE_DIR);
  const std::vector<std::string> tiny = {
      "model.base_model.hidden_size=64", "model.base_model.decoder.num_blocks=2",
      "model.base_model.decoder.block.mixer.heads=4", "model.base_model.decoder.block.mixer.head_groups=2",
      "model.base_model.decoder.block.mixer.head_size=16",
      "model.base_model.decoder.block.mlp.intermediate_size=128", "model.base_model.embeddings.vocab_size=320"};
  std::vector<std::string> lora = {"train",
                                   "gpt",
                                   "-c",
                                   (source / "examples/benchmarks/llama-3.2-1b-lora.yaml").string(),
                                   "model.distributed.use_cuda=false",
                                   "schedule.cuda_graphs=false",
                                   "training.train_iters=2",
                                   "training.num_workers=0",
                                   "data.micro_batch_size=256",
                                   "data.maximum_document_length=128",
                                   "run.experiment_dir=lora"};
  lora.insert(lora.end(), tiny.begin(), tiny.end());
  const Outcome lora_run = expect(lora, 0, "(3584 trainable)");
  const std::vector<double> lora_losses = logged(lora_run.output, "lm_head_loss");
  ASSERT_EQ(lora_losses.size(), 2u) << lora_run.output;
  EXPECT_TRUE(std::isfinite(lora_losses.back())) << lora_run.output;

  fs::create_directory_symlink(source / "examples", directory_ / "examples");
  fs::create_directory_symlink(source / "tests", directory_ / "tests");
  expect({"prepare", "gpt_memmap", "-c", "examples/dpo/prepare.yaml"}, 0, "Prepared 48 documents");
  std::vector<std::string> dpo = {"train", "gpt", "-c", "examples/benchmarks/llama-3.2-1b-dpo.yaml",
                                  "model.distributed.use_cuda=false", "training.train_iters=3",
                                  "training.num_workers=0", "data.micro_batch_size=256",
                                  "data.datasets.training={type: file, path: experiments/dpo/dataset/"
                                  "fast_llm_config.yaml}",
                                  "run.experiment_dir=dpo"};
  for (const std::string& override : tiny) {
    dpo.push_back(override);
    dpo.push_back("reference_models.reference.model." + override.substr(std::string("model.").size()));
  }
  const Outcome dpo_run = expect(dpo, 0, "dpo: ");
  const std::vector<double> dpo_losses = logged(dpo_run.output, "dpo");
  ASSERT_EQ(dpo_losses.size(), 3u) << dpo_run.output;
  EXPECT_NEAR(dpo_losses.front(), std::log(2.0), 2e-3) << dpo_run.output;  // bf16 compute
}

// A configuration that cannot run is refused before the model is built (no -c: evaluation of a default 229M-parameter
// model without weights), and one that cannot fit is refused at start-up with the estimate.
TEST_F(CliTest, TrainGptChecksBeforeBuilding) {
  const Outcome bare = expect({"train", "gpt"}, 1, "needs weights to evaluate");
  EXPECT_EQ(bare.output.find("layers in"), std::string::npos) << bare.output;
  const fs::path config = write("train.yaml", kTrainConfig);
  const Outcome huge = expect({"train", "gpt", "-c", config.string(), "data.micro_batch_size=1073741824"}, 1,
                              "[memory] this run needs about ");
  EXPECT_NE(huge.output.find(", 1 micro-batch of 1073741824 tokens in flight: "), std::string::npos) << huge.output;
  EXPECT_EQ(huge.output.find("layers in"), std::string::npos) << huge.output;
}

// Two runs in one experiment directory: the second is refused naming the first; once the first is killed (kill -9,
// its lock file left behind), the next one starts.
TEST_F(CliTest, OneRunPerExperimentDirectory) {
  const fs::path config = write("train.yaml", kTrainConfig);
  const std::string experiment = "run.experiment_dir=" + (directory_ / "experiment").string();
  fs::create_directories(directory_ / "first");
  std::thread first([&] {
    run_fast_llm({"train", "gpt", "-c", config.string(), experiment, "training.train_iters=1000000"},
                 directory_ / "first");
  });
  std::string holder;
  for (int attempt = 0; attempt < 2000 && holder.empty(); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ifstream lock(directory_ / "experiment" / "lock");
    std::getline(lock, holder);
  }
  // Without a holder the first run ends at run_fast_llm's time limit; the thread is joined either way.
  const bool holding = holder.rfind("pid ", 0) == 0;
  EXPECT_TRUE(holding) << holder;
  if (holding) {
    const pid_t pid = std::stoi(holder.substr(4));
    expect({"train", "gpt", "-c", config.string(), experiment}, 1,
           "is in use by another run (pid " + std::to_string(pid) + " on host ");
    kill(pid, SIGKILL);
  }
  first.join();
  expect({"train", "gpt", "-c", config.string(), experiment}, 0);
}

// A diverged run (learning rate 1e6) stops after training.max_consecutive_skipped_iterations (100) skipped steps in a
// row, keeping the last checkpoint from before them although `keep: 5` and a checkpoint every step would prune it.
// With fp16, the skips of the loss scaler lowering its scale do not count; those at its lowest scale do.
TEST_F(CliTest, ADivergedRunStops) {
  const fs::path config = write("train.yaml", kTrainConfig);
  const Outcome diverged =
      expect({"train", "gpt", "-c", config.string(), "optimizer.learning_rate.base=1.0e+6", "training.train_iters=200",
              "training.checkpoint.interval=1", "training.checkpoint.keep=5"},
             1, "training diverged: steps ");
  EXPECT_NE(diverged.output.find("and training.max_consecutive_skipped_iterations (100) stops a run"),
            std::string::npos)
      << diverged.output;
  const std::string kept_prefix = "The last checkpoint before them, ";
  const size_t kept = diverged.output.find(kept_prefix);
  ASSERT_NE(kept, std::string::npos) << diverged.output;
  const size_t begin = kept + kept_prefix.size();
  const fs::path checkpoint = directory_ / diverged.output.substr(begin, diverged.output.find(',', begin) - begin);
  EXPECT_TRUE(fs::exists(checkpoint / "ok")) << checkpoint;
  EXPECT_FALSE(fs::exists(directory_ / "experiment" / "checkpoint" / "200"));

  const std::vector<std::string> fp16 = {"train", "gpt", "-c", config.string(), "model.distributed.compute_dtype=fp16",
                                         "optimizer.gradient_scaler.hysteresis=1", "training.train_iters=40",
                                         "training.max_consecutive_skipped_iterations=3", "training.logs.interval=40"};
  auto with = [&](std::vector<std::string> rest) {
    std::vector<std::string> arguments = fp16;
    arguments.insert(arguments.end(), rest.begin(), rest.end());
    return arguments;
  };
  // From a scale of 1e12, about 25 skips in a row before the scale fits fp16.
  const Outcome searching = expect(with({"optimizer.gradient_scaler.initial=1.0e+12", "run.experiment_dir=fp16_a"}), 0);
  EXPECT_NE(searching.output.find("Setting loss scale to 976562500"), std::string::npos) << searching.output;
  expect(with({"optimizer.gradient_scaler.initial=4", "optimizer.learning_rate.base=1.0e+6",
               "run.experiment_dir=fp16_b"}),
         1, "skipped while the fp16 loss scaler lowered its scale");
}

TEST_F(CliTest, ConvertGpt) {
  const fs::path checkpoint = directory_ / "missing_checkpoint";
  expect({"convert", "gpt", "--help"}, 0, "--validate");
  expect({"convert", "gpt", "input.format=llama", "input.path=" + checkpoint.string(), "output.format=fast_llm",
          "output.path=out", "--validate"},
         0, "format: fast_llm");
  expect({"convert", "gpt", "-c", write("convert.yaml", "input: {format: llama}\noutput: {format: fast_llm}\n").string(),
          "input.path=" + checkpoint.string(), "output.path=out"},
         1, "missing_checkpoint");
  expect({"convert", "gpt", "input.format=nonsense"}, 1, "input.format");
  expect({"convert", "gpt"}, 1, "input.path is required");
  expect({"convert"}, 106, "A subcommand of `fast-llm convert` is required");
  expect({"convert", "frobnicate"}, 109, "frobnicate");
  expect({"model_outputs", "gpt", "pretrained.format=nonsense"}, 1, "pretrained.format");
}

TEST_F(CliTest, ConvertNeverWritesWhereItReads) {
  const fs::path config = write("train.yaml", kTrainConfig);
  expect({"train", "gpt", "-c", config.string(), "training.checkpoint.interval=2"}, 0);
  expect({"convert", "gpt", "input.format=distributed", "input.path=experiment/checkpoint/2", "output.format=fast_llm",
          "output.path=converted"},
         0, "Done");
  // In place: this died with SIGBUS and left model_0.safetensors cut short.
  expect({"convert", "gpt", "input.format=fast_llm", "input.path=converted", "output.format=fast_llm",
          "output.path=converted", "exist_ok=true"},
         1, "output.path converted is the checkpoint being read (input.path converted)");
  expect({"convert", "gpt", "input.format=fast_llm", "input.path=converted", "output.format=distributed",
          "output.path=converted/inner", "exist_ok=true"},
         1, "is inside the checkpoint being read");
  // The input is intact: it still converts.
  expect({"convert", "gpt", "input.format=fast_llm", "input.path=converted", "output.format=distributed",
          "output.path=again"},
         0, "Done");
  EXPECT_TRUE(fs::exists(directory_ / "again" / "ok"));
}

TEST_F(CliTest, UserErrorsNameThePath) {
  const fs::path config = write("train.yaml", kTrainConfig);
  const std::string too_long(300, 'x');
  fs::create_directories(directory_ / "a_folder");
  write("a_file", "text");
  expect({"train", "gpt", "-c", "a_folder"}, 1, "[config] a_folder: is a folder, not a YAML config file");
  expect({"train", "gpt", "-c", too_long + "/config.yaml"}, 1, "(File name too long)");
  expect({"prepare", "byte_corpus", "--output", "a_file", "--source", config.string()}, 1,
         "--output a_file: is a file, not a folder");
  fs::create_directories(directory_ / "hf" / "config.json");
  expect({"convert", "gpt", "input.format=llama", "input.path=hf", "output.format=fast_llm", "output.path=out"}, 1,
         "hf/config.json: is a folder, not a file");
  // Outputs that cannot be written: a component too long, and a folder under a regular file (what a read-only
  // filesystem gives too, with EROFS: it cannot be made here, the tests run as root).
  expect({"train", "gpt", "-c", config.string(), "training.checkpoint.interval=2"}, 0);
  for (const auto& [output, reason] : std::vector<std::pair<std::string, std::string>>{
           {too_long, too_long + ": cannot resolve the path (File name too long)"},
           {"a_file/out", "a_file: is a file, not a folder"}})
    expect({"convert", "gpt", "input.format=distributed", "input.path=experiment/checkpoint/2",
            "output.format=fast_llm", "output.path=" + output},
           1, reason);
}

TEST_F(CliTest, Prepare) {
  const fs::path text = write("text/a.txt", "Some text to make a byte-level dataset from.\n");
  expect({"prepare", "byte_corpus", "--output", "corpus", "--source", text.string(), "--max-bytes", "1000"}, 0,
         "wrote 1 documents");
  EXPECT_TRUE(fs::exists(directory_ / "corpus" / "fast_llm_config.yaml"));
  expect({"prepare", "byte_corpus", "--output", "corpus2", "--max-bytes", "-5"}, 105, "--max-bytes");
  expect({"prepare", "byte_corpus"}, 106, "--output");
  expect({"prepare", "byte_corpus", "--output", "corpus3", "--source", (directory_ / "nothing").string()}, 1,
         "no files found");
  expect({"prepare", "gpt_memmap", "--nonsense"}, 109, "--nonsense");
  expect({"prepare", "gpt_memmap"}, 1, "dataset.path: required");
  expect({"prepare", "dataset_discovery", "--help"}, 0, "--validate");
}

// Fast-LLM's three steps on a user's own JSONL: prepare with a tokenizer.json (a pre-0.4 config, as Fast-LLM's
// documentation shows it), then train on the prepared splits with `type: file`.
TEST_F(CliTest, PrepareGptMemmapThenTrain) {
  std::string lines;
  for (int index = 0; index < 60; ++index)
    lines += "{\"text\": \"Document " + std::to_string(index) +
             ": the cat sat on the mat, and you ran to the sea in the morning.\"}\n";
  write("data/part-0.jsonl", lines);
  const std::string tokenizer = std::string(FAST_LLM_SOURCE_DIR) + "/tests/data/byte_bpe_tokenizer";
  const fs::path config = write("prepare.yaml", "output_path: dataset\nloading_workers: 2\ntokenize_workers: 2\n"
                                                "saving_workers: 2\ndataset: {path: data, field: text, "
                                                "trust_remote_code: true}\ntokenizer: {path: " + tokenizer +
                                                "}\nsplits: {training: 0.9, validation: 0.1}\n");
  const Outcome validated = expect({"prepare", "gpt_memmap", "-c", config.string(), "--validate"}, 0,
                                   "read as `num_workers: 2`");
  EXPECT_NE(validated.output.find("read as `dataset.source_schema.text: text`"), std::string::npos);
  EXPECT_NE(validated.output.find("num_workers: 2"), std::string::npos) << validated.output;
  expect({"prepare", "gpt_memmap", "-c", config.string(), "--trust-remote-code"}, 0,
         "Prepared 60 documents");
  ASSERT_TRUE(fs::exists(directory_ / "dataset/fast_llm_config_training.yaml"));
  ASSERT_TRUE(fs::exists(directory_ / "dataset/fast_llm_config_validation.yaml"));
  const fs::path train = write("train.yaml", R"(
training: {train_iters: 2, logs: {interval: 1}, evaluators: {validation: {type: loss, interval: 2, iterations: 1}}}
data:
  datasets:
    training: {type: file, path: dataset/fast_llm_config_training.yaml}
    validation: {type: file, path: dataset/fast_llm_config_validation.yaml}
  micro_batch_size: 32
optimizer: {learning_rate: {base: 1.0e-3}}
model:
  base_model:
    embeddings: {vocab_size: 305}
    decoder:
      block:
        mixer: {type: attention, heads: 2, head_groups: 1, head_size: 4}
        mlp: {intermediate_size: 16, gated: true}
        normalization: {type: rms_norm}
      num_blocks: 1
    hidden_size: 8
  distributed: {compute_dtype: fp32}
run: {experiment_dir: experiment}
)");
  const Outcome trained = expect({"train", "gpt", "-c", train.string()}, 0, "validation");
  EXPECT_TRUE(fs::exists(directory_ / "experiment" / "config.yaml")) << trained.output;

  // Bad input is an error naming the file and line; nothing is written for it.
  write("bad/a.jsonl", "{\"text\": \"fine\"}\n{\"txt\": \"wrong field\"}\n");
  expect({"prepare", "gpt_memmap", "-c", config.string(), "dataset.path=bad", "output_path=bad_out"}, 1,
         "bad/a.jsonl:2: the record has no field `text`");
  EXPECT_FALSE(fs::exists(directory_ / "bad_out/fast_llm_config_training.yaml"));
  expect({"prepare", "gpt_memmap", "-c", config.string(), "dataset.load_from_disk=true"}, 1, "Arrow");
  expect({"prepare", "gpt_memmap", "-c", config.string(), "tokenizer.path=missing.json"}, 1, "missing.json");

  // dataset_discovery over the prepared folder: one blend of its shards.
  const fs::path discovery = write("discovery.yaml", "directory: dataset\noutput: blend.yaml\n");
  expect({"prepare", "dataset_discovery", "-c", discovery.string()}, 0, "Found 1 dataset file");
  expect({"prepare", "dataset_discovery", "-c", discovery.string(), "directory=data"}, 1,
         "no readable, non-empty .fast_llm_dataset");
  // Its output is a dataset config with absolute paths, to put in a training config as it is (`type: file` accepts
  // only relative paths, in Fast-LLM as here).
  std::ifstream blend_file(directory_ / "blend.yaml");
  const std::string blend((std::istreambuf_iterator<char>(blend_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(blend.find("shard_0_0.fast_llm_dataset"), std::string::npos) << blend;
  const Outcome trained_on_blend = expect(
      {"train", "gpt", "-c", train.string(), "data.datasets.training=" + blend, "run.experiment_dir=experiment2"}, 0);
  EXPECT_TRUE(fs::exists(directory_ / "experiment2" / "config.yaml")) << trained_on_blend.output;
}

TEST_F(CliTest, PrepareBpeTokenizer) {
  // The project's own tokenizer sources are the text: ~200 KB, enough for 600 tokens.
  const std::string source = std::string(FAST_LLM_SOURCE_DIR) + "/src/fast_llm/tokenizer";
  expect({"prepare", "bpe_tokenizer", "--output", "tokenizer", "--source", source, "--vocab-size", "600",
          "--model-max-length", "512"},
         0, "-> 600 tokens");
  std::stringstream tokenizer_json, tokenizer_config;
  tokenizer_json << std::ifstream(directory_ / "tokenizer" / "tokenizer.json").rdbuf();
  tokenizer_config << std::ifstream(directory_ / "tokenizer" / "tokenizer_config.json").rdbuf();
  EXPECT_NE(tokenizer_json.str().find("\"content\": \"<fim_pad>\""), std::string::npos);
  EXPECT_NE(tokenizer_config.str().find("\"model_max_length\": 512"), std::string::npos);
  // A text too small for the vocabulary asked for: a smaller vocabulary and a warning, not a failure.
  const fs::path text = write("text/a.txt", "tiny text, tiny text\n");
  expect({"prepare", "bpe_tokenizer", "--output", "small", "--source", text.string()}, 0, "no pair left to merge");
  EXPECT_TRUE(fs::exists(directory_ / "small" / "tokenizer.json"));
  write("a_file", "text");
  expect({"prepare", "bpe_tokenizer", "--output", "a_file", "--source", text.string()}, 1,
         "--output a_file: is a file, not a folder");
  expect({"prepare", "bpe_tokenizer", "--output", "t2", "--source", text.string(), "--vocab-size", "100"}, 105,
         "--vocab-size");
  expect({"prepare", "bpe_tokenizer", "--output", "t3", "--source", (directory_ / "nothing").string()}, 1,
         "no files found");
  expect({"prepare", "bpe_tokenizer"}, 106, "--output");
}

// Fast-LLM's examples/mistral.yaml as Fast-LLM ships it (its test suite validates it): its evaluator has
// `iterations: null` and no dataset, which Fast-LLM accepts as an evaluator that never runs.
constexpr const char* kFastLlmMistralExample = R"(
training:
  train_iters: 100
  num_workers: 8
  logs:
    interval: 10
  evaluators:
    validation:
      type: loss
      iterations: null
data:
  datasets:
    training:
      type: random
  micro_batch_size: 8192
  maximum_document_length: 4096
optimizer:
  learning_rate:
    base: 1.0e-05
    decay_style: constant
    warmup_iterations: 0
  weight_decay: 0.1
  beta_1: 0.9
  beta_2: 0.95
model:
  base_model:
    embeddings:
      vocab_size: 32000
      dropout: 0.0
    decoder:
      block:
        mixer:
          type: attention
          rotary:
            type: default
            theta: 10000
          heads: 32
          head_groups: 8
          head_size: 128
          add_linear_biases: false
          window_size: 4096
          dropout: 0.0
        mlp:
          intermediate_size: 14336
          add_linear_biases: false
          gated: true
          activation: silu
        normalization:
          type: rms_norm
          epsilon: 1.0e-05
        dropout: 0.0
      num_blocks: 32
    head:
      normalization:
        type: rms_norm
        epsilon: 1.0e-05
    hidden_size: 4096
    tied_embedding_weight: false
  multi_stage:
    zero_stage: 2
  distributed:
    compute_dtype: bf16
    seed: 984059
run:
  experiment_dir: mistral_example
)";

TEST_F(CliTest, FastLlmMistralExampleValidates) {
  const fs::path config = write("mistral.yaml", kFastLlmMistralExample);
  expect({"train", "gpt", "-c", config.string(), "--validate"}, 0, "window_size: 4096");
  // The same evaluator, once it runs, needs its dataset.
  expect({"train", "gpt", "-c", config.string(), "training.evaluators.validation.iterations=2",
          "training.evaluators.validation.interval=10", "--validate"},
         1, "data.datasets.validation");
}

// The training config of Fast-LLM's quick-start ("Small"), in the forms of before Fast-LLM 0.4 that its
// documentation still shows (nested evaluator with dataset_name, data.sampling, a `sampled` dataset), on SmolLM2's
// config.json as the hub publishes it: it validates, with a warning per old form showing the current spelling.
// examples/fast-llm-quick-start: Fast-LLM's quick-start preparation and training configs, run as its README says on
// this repository's sources (3 iterations instead of 100), then generation from the export.
TEST_F(CliTest, FastLlmQuickStartExampleTrains) {
  const fs::path source(FAST_LLM_SOURCE_DIR);
  fs::create_directory_symlink(source / "examples", directory_ / "examples");
  const std::string sources = (source / "src").string();
  expect({"prepare", "text_corpus", "--output", "fast-llm-tutorial/corpus.jsonl", "--source", sources, "--max-bytes",
          "600000"},
         0);
  expect({"prepare", "bpe_tokenizer", "--output", "fast-llm-tutorial/tokenizer", "--source", sources, "--max-bytes",
          "600000", "--vocab-size", "1000"},
         0);
  const Outcome prepared = expect({"prepare", "gpt_memmap", "--trust-remote-code", "--config",
                                   "examples/fast-llm-quick-start/prepare-config.yaml"},
                                  0, "loading_workers");
  EXPECT_TRUE(fs::exists(directory_ / "fast-llm-tutorial/dataset/fast_llm_config_validation.yaml")) << prepared.output;
  const Outcome trained = expect({"train", "gpt", "--config", "examples/fast-llm-quick-start/train-config.yaml",
                                  "training.train_iters=3", "training.evaluators.validation.interval=3",
                                  "training.evaluators.validation.evaluator.iterations=2", "training.export.interval=3"},
                                 0, "read as `training.evaluators.validation: {interval: 3, type: loss, iterations: 2}`");
  EXPECT_NE(trained.output.find("validation/validation @ iteration      3"), std::string::npos) << trained.output;
  ASSERT_TRUE(fs::exists(directory_ / "fast-llm-tutorial/experiment/export/llama/3/config.json")) << trained.output;
  expect({"generate", "--pretrained", "fast-llm-tutorial/experiment/export/llama/3", "--tokenizer",
          "fast-llm-tutorial/tokenizer", "--prompt", "Permission is hereby granted", "--max-new-tokens", "4"},
         0, "Permission is hereby granted");
}

// The values of `key` (e.g. "grpo_new_logprobs: ") on the training log lines, in order.
std::vector<double> logged_values(const std::string& output, const std::string& key) {
  std::vector<double> values;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("training @ iteration") == std::string::npos) continue;
    const size_t at = line.find(key);
    if (at != std::string::npos) values.push_back(std::stod(line.substr(at + key.size())));
  }
  return values;
}

// examples/grpo-prepare.yaml and examples/grpo.yaml as their comments say to run them (from a folder with the
// repository's examples and tests): the rollouts are prepared with their advantages, and the GRPO run logs Fast-LLM's
// metrics; the policy's log-probability of the rollouts rises (most advantages of the sampled answers are positive).
TEST_F(CliTest, GrpoExampleTrains) {
  const fs::path source(FAST_LLM_SOURCE_DIR);
  fs::create_directory_symlink(source / "examples", directory_ / "examples");
  fs::create_directory_symlink(source / "tests", directory_ / "tests");
  expect({"prepare", "gpt_memmap", "-c", "examples/grpo-prepare.yaml"}, 0, "Prepared 32 documents");
  const Outcome trained = expect({"train", "gpt", "-c", "examples/grpo.yaml", "training.train_iters=20"}, 0,
                                 "grpo_clipped_ratio_fraction");
  for (const char* name : {"grpo: ", "grpo_ratio_new_old: ", "grpo_kl_new_old: ", "grpo_advantage: ",
                           "grpo_entropy: ", "grpo_num_tokens: ", "grpo_old_logprobs: 0.00000"})
    EXPECT_NE(trained.output.find(name), std::string::npos) << name << "\n" << trained.output;
  const std::vector<double> log_probs = logged_values(trained.output, "grpo_new_logprobs: ");
  ASSERT_EQ(log_probs.size(), 4u) << trained.output;
  EXPECT_GT(log_probs.back(), log_probs.front() + 0.5) << trained.output;
  // gspo on the same file.
  const Outcome gspo = expect({"train", "gpt", "-c", "examples/grpo.yaml", "training.train_iters=5",
                               "run.experiment_dir=experiments/gspo",
                               "model.base_model.head.losses={gspo: {type: gspo}}"},
                              0, "gspo_num_segments");
  EXPECT_EQ(logged_values(gspo.output, "gspo: ").size(), 1u) << gspo.output;
}

// examples/sft-prepare.yaml and examples/sft.yaml: supervised fine-tuning with the prompts masked by loss-masking
// spans; the loss on the answers falls.
TEST_F(CliTest, SftExampleTrains) {
  const fs::path source(FAST_LLM_SOURCE_DIR);
  fs::create_directory_symlink(source / "examples", directory_ / "examples");
  fs::create_directory_symlink(source / "tests", directory_ / "tests");
  expect({"prepare", "gpt_memmap", "-c", "examples/sft-prepare.yaml"}, 0, "Prepared 12 documents");
  const Outcome trained = expect({"train", "gpt", "-c", "examples/sft.yaml", "training.train_iters=20"}, 0);
  const std::vector<double> losses = logged_values(trained.output, "cross_entropy: ");
  ASSERT_EQ(losses.size(), 4u) << trained.output;
  EXPECT_LT(losses.back(), losses.front() - 1.0) << trained.output;
}

TEST_F(CliTest, FastLlmQuickStartConfigRunsWithMigrationWarnings) {
  std::ifstream hub(std::string(FAST_LLM_SOURCE_DIR) + "/tests/data/hf_configs/smollm2-135m.json");
  ASSERT_TRUE(hub.good());
  std::stringstream smollm2;
  smollm2 << hub.rdbuf();
  write("pretrained-model/config.json", smollm2.str());
  const fs::path config = write("train-config.yaml", R"(
training:
  train_iters: 100_000
  logs:
    interval: 10
  evaluators:
    validation:
      interval: 100
      evaluator:
        type: loss
        iterations: 25
        dataset_name: validation
  export:
    format: llama
    interval: 20_000
data:
  datasets:
    training:
      type: random
    validation:
      type: sampled
      dataset:
        type: random
      sampling:
        shuffle: disabled
  sampling:
    shuffle: skip_first_epoch
  micro_batch_size: 61440
  maximum_document_length: 1024
optimizer:
  learning_rate:
    base: 6.0e-04
pretrained:
  format: llama
  path: pretrained-model
  model_weights: no
model:
  base_model:
    decoder:
      block:
        mixer:
          use_flash_attention: yes
  distributed:
    compute_dtype: bf16
run:
  experiment_dir: fast-llm-tutorial/experiment
)");
  const Outcome validated = expect({"train", "gpt", "-c", config.string(), "--validate"}, 0,
                                   "read as `training.evaluators.validation: {interval: 100, type: loss, "
                                   "iterations: 25}`");
  for (const char* printed : {"iterations: 25", "shuffle: skip_first_epoch", "train_iters: 100000",
                              "hidden_size: 576", "its sampling {shuffle: disabled} no longer applies"})
    EXPECT_NE(validated.output.find(printed), std::string::npos) << printed << "\n" << validated.output;
}

// The tensor-log lines of `output` (model.multi_stage.debug_layer_*), without time stamps and rank prefixes, sorted.
std::vector<std::string> layer_log_lines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream stream(output);
  for (std::string line; std::getline(stream, line);) {
    size_t begin = line.find("Global ");
    if (begin == std::string::npos) continue;
    lines.push_back(line.substr(begin));
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

// debug_layer_outputs / debug_layer_gradients log each layer's output and input gradient as Fast-LLM does, numbered
// by the micro-batch's place in the whole step, so two layouts of one run print the same lines: 2 processes with one
// micro-batch each against one process with 2 sequential micro-batches.
TEST_F(CliTest, LayerLogsAreTheSameForTwoLayoutsOfOneRun) {
  const fs::path config = write("train.yaml", kTrainConfig);
  const std::vector<std::string> logs = {"training.train_iters=1", "model.multi_stage.debug_layer_outputs=3",
                                         "model.multi_stage.debug_layer_gradients=2"};
  std::vector<std::string> one = {"train", "gpt", "-c", config.string(), "run.experiment_dir=one",
                                  "schedule.depth_first_micro_batches=2"};
  one.insert(one.end(), logs.begin(), logs.end());
  std::vector<std::string> two = {"train", "gpt", "--nproc-per-node", "2", "-c", config.string(),
                                  "run.experiment_dir=two"};
  two.insert(two.end(), logs.begin(), logs.end());
  const std::vector<std::string> sequential = layer_log_lines(expect(one, 0, "Global decoder.0 fw, mb=1/2").output);
  const std::vector<std::string> parallel = layer_log_lines(expect(two, 0, "Global decoder.0 fw, mb=1/2").output);
  // Forward: embeddings and the block; backward: the head and the block (the embeddings have no input gradient).
  EXPECT_EQ(sequential.size(), 8u);
  EXPECT_EQ(sequential, parallel);
  for (const std::string& line : sequential) {
    EXPECT_NE(line.find("shape=(16, 8)"), std::string::npos) << line;
    EXPECT_NE(line.find(" mu="), std::string::npos) << line;
  }
  // Level 3 on outputs: one value sampled at the largest stride that divides no dimension (16 x 8 -> 127).
  for (const std::string& line : sequential)
    EXPECT_EQ(line.find("samples (step=127)") != std::string::npos, line.find(" fw") != std::string::npos) << line;
}

// The loss printed on the last line of `output` that holds `line_marker` ("training @ iteration",
// "validation/validation"), or -1 when there is none.
double last_loss(const std::string& output, const std::string& line_marker) {
  const size_t line = output.rfind(line_marker);
  if (line == std::string::npos) return -1.0;
  const std::string field = "lm_head_loss: ";
  const size_t value = output.find(field, line);
  if (value == std::string::npos) return -1.0;
  return std::stod(output.substr(value + field.size()));
}

double training_loss(const std::string& output) { return last_loss(output, "training @ iteration"); }

// Training on a fill-in-the-middle dataset: a byte corpus wrapped in `fim`, with a tokenizer.json of the corpus's ids
// and the FIM sentinels. The rewritten samples are the same in one process (two sequential micro-batches) and in two
// (one each), so the losses are; they differ from those of the unwritten corpus (rate 0). A sentinel the tokenizer
// lacks is an error naming the field.
TEST_F(CliTest, TrainGptOnAFimDataset) {
  const fs::path text = write("text/a.txt", "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n");
  write("text/b.txt", "int main() { return 0; }\n");
  write("text/c.txt", "The quick brown fox jumps over the lazy dog, again and again.\n");
  expect({"prepare", "byte_corpus", "--output", "corpus", "--source", text.parent_path().string()}, 0,
         "wrote 3 documents");
  fast_llm::testing::write_byte_tokenizer(directory_ / "tokenizer");
  const fs::path config = write("train.yaml", kTrainConfig);
  auto fim = [](const std::string& fields) {
    return "data.datasets.training={type: fim, dataset: {type: file, path: corpus/fast_llm_config.yaml}, "
           "tokenizer: {path: tokenizer}, " + fields + "}";
  };
  const std::vector<std::string> common = {"model.base_model.embeddings.vocab_size=264", "training.train_iters=1"};
  auto with = [&](std::vector<std::string> arguments) {
    arguments.insert(arguments.end(), common.begin(), common.end());
    return arguments;
  };
  const Outcome one = expect(with({"train", "gpt", "-c", config.string(), fim("rate: 1.0"), "run.experiment_dir=one",
                                   "schedule.depth_first_micro_batches=2"}),
                             0, "Loading the tokenizer of dataset data.datasets.training");
  const Outcome two = expect(with({"train", "gpt", "--nproc-per-node", "2", "-c", config.string(), fim("rate: 1.0"),
                                   "run.experiment_dir=two"}),
                             0);
  const Outcome plain = expect(with({"train", "gpt", "-c", config.string(), fim("rate: 0.0"),
                                     "run.experiment_dir=plain", "schedule.depth_first_micro_batches=2"}),
                               0);
  ASSERT_GT(training_loss(one.output), 0.0) << one.output;
  EXPECT_NEAR(training_loss(two.output), training_loss(one.output), 1e-4) << two.output;
  EXPECT_GT(std::abs(training_loss(plain.output) - training_loss(one.output)), 1e-4) << plain.output;
  // Two iterations, as a user runs it.
  expect({"train", "gpt", "-c", config.string(), fim("rate: 0.5, spm_rate: 0.5, max_middle_len: 8"),
          "model.base_model.embeddings.vocab_size=264", "run.experiment_dir=two_iterations"},
         0, "training @ iteration      2/     2");

  // Fast-LLM's spelling before 0.4: the tokenizer in `data.tokenizer`, given to the fim datasets.
  expect(with({"train", "gpt", "-c", config.string(),
               "data.datasets.training={type: fim, dataset: {type: file, path: corpus/fast_llm_config.yaml}, "
               "rate: 1.0}",
               "data.tokenizer={path: tokenizer}", "run.experiment_dir=legacy"}),
         0, "Loading the tokenizer of dataset data.datasets.training from tokenizer");

  expect(with({"train", "gpt", "-c", config.string(), fim("rate: 0.5, prefix_token: '<PRE>'"),
               "run.experiment_dir=unknown"}),
         1, "data.datasets.training.prefix_token: token '<PRE>' is not in the vocabulary of the tokenizer tokenizer");
  expect(with({"train", "gpt", "-c", config.string(), "data.datasets.training={type: fim, dataset: {type: random}}",
               "run.experiment_dir=no_tokenizer"}),
         1, "data.datasets.training.tokenizer.path: fill-in-the-middle needs a tokenizer");
}

double validation_loss(const std::string& output) { return last_loss(output, "validation/validation"); }

// `evaluate gpt` runs a config's evaluators on pretrained weights without training: on the export of a training run,
// it prints the loss that run's own evaluation printed after its last step (same weights, same validation samples).
TEST_F(CliTest, EvaluateGpt) {
  const fs::path config = write("train.yaml", kTrainConfig);
  const std::vector<std::string> evaluation = {
      "data.datasets.validation={type: random}",
      "training.evaluators.validation={type: loss, interval: 2, iterations: 2}"};
  auto with = [](std::vector<std::string> arguments, const std::vector<std::string>& more) {
    arguments.insert(arguments.end(), more.begin(), more.end());
    return arguments;
  };
  const Outcome trained = expect(
      with({"train", "gpt", "-c", config.string(), "training.export={format: fast_llm, interval: 2}"}, evaluation), 0,
      "validation/validation");
  const double trained_loss = validation_loss(trained.output);
  ASSERT_GT(trained_loss, 0.0) << trained.output;

  const std::string pretrained = "pretrained={format: fast_llm, path: " +
                                 (directory_ / "experiment" / "export" / "fast_llm" / "2").string() + "}";
  const Outcome evaluated =
      expect(with({"evaluate", "gpt", "-c", config.string(), "run.experiment_dir=evaluation", pretrained}, evaluation),
             0, "validation/validation");
  EXPECT_EQ(evaluated.output.find("training @"), std::string::npos) << "no training step expected:\n"
                                                                    << evaluated.output;
  EXPECT_NEAR(validation_loss(evaluated.output), trained_loss, 1e-5) << evaluated.output;

  // Nothing to evaluate, or no weights: errors naming what is missing.
  expect({"evaluate", "gpt", "-c", config.string(), "run.experiment_dir=evaluation2", pretrained}, 1,
         "training.evaluators");
  expect(with({"evaluate", "gpt", "-c", config.string(), "run.experiment_dir=evaluation3"}, evaluation), 1,
         "needs weights to evaluate");
  expect({"evaluate", "gpt", "--help"}, 0, "--config");
  expect({"evaluate"}, 106, "A subcommand of `fast-llm evaluate` is required");
}

// A model that converts to llama (rotary, RMS norms), with a vocabulary of 16 to match kByteLevelTokenizer.
constexpr const char* kGenerationTrainConfig = R"(
training: {train_iters: 2, logs: {interval: 1}, checkpoint: {interval: 2}}
data:
  datasets: {training: {type: random}}
  micro_batch_size: 16
optimizer: {learning_rate: {base: 1.0e-3}}
model:
  base_model:
    embeddings: {vocab_size: 16}
    decoder:
      block:
        mixer: {type: attention, heads: 4, head_groups: 2, head_size: 4, rotary: {type: default}}
        mlp: {intermediate_size: 16, gated: true}
        normalization: {type: rms_norm}
      num_blocks: 2
    head: {normalization: {type: rms_norm}}
    hidden_size: 16
  distributed: {compute_dtype: fp32}
run: {experiment_dir: experiment}
)";

// A byte-level BPE tokenizer.json of 16 ids: "hello world" is [11, 14, 2, 6]; id 15 is the special <|end|>.
constexpr const char* kByteLevelTokenizer = R"({"version": "1.0",
  "added_tokens": [{"id": 15, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": null,
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false,
            "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "w": 4, "r": 5, "d": 6, "\u0120": 7, "ll": 8, "he": 9,
                      "hell": 10, "hello": 11, "\u0120w": 12, "or": 13, "\u0120wor": 14},
            "merges": ["l l", "h e", "he ll", "hell o", "\u0120 w", "o r", "\u0120w or"]}})";

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream file(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  return lines;
}

// `generate` end to end on a trained checkpoint in its three forms (distributed, fast_llm, llama): the same greedy
// completions whatever the format and batch size; text prompts through the checkpoint folder's tokenizer; a prompts
// file; streaming; and the user's mistakes named.
TEST_F(CliTest, Generate) {
  const fs::path config = write("train.yaml", kGenerationTrainConfig);
  expect({"train", "gpt", "-c", config.string()}, 0);
  expect({"convert", "gpt", "input.format=distributed", "input.path=experiment/checkpoint/2", "output.format=llama",
          "output.path=hf"},
         0, "Done");
  expect({"convert", "gpt", "input.format=distributed", "input.path=experiment/checkpoint/2",
          "output.format=fast_llm", "output.path=native"},
         0, "Done");
  const std::vector<std::string> prompts{"--prompt-ids", "1,2,3", "--prompt-ids", "5",
                                         "--prompt-ids", "7 8 9 10 11 12"};
  auto run = [&](const std::string& pretrained, const std::string& output, std::vector<std::string> extra) {
    std::vector<std::string> arguments{"generate", "--pretrained", pretrained, "--max-new-tokens", "6",
                                       "--output", output};
    arguments.insert(arguments.end(), prompts.begin(), prompts.end());
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    expect(arguments, 0, "Generated 18 tokens for 3 prompts");
    return lines_of(directory_ / output);
  };
  const std::vector<std::string> expected = run("experiment/checkpoint/2", "distributed.jsonl", {});
  ASSERT_EQ(expected.size(), 3u);
  EXPECT_NE(expected[0].find(R"("index":0,"prompt_ids":[1,2,3])"), std::string::npos) << expected[0];
  EXPECT_NE(expected[2].find(R"("prompt_ids":[7,8,9,10,11,12])"), std::string::npos) << expected[2];
  EXPECT_EQ(run("native", "native.jsonl", {}), expected);
  EXPECT_EQ(run("hf", "hf.jsonl", {"--format", "llama"}), expected);
  EXPECT_EQ(run("hf", "hf_batch_1.jsonl", {"--batch-size", "1"}), expected);
  EXPECT_EQ(run("hf", "hf_stream.jsonl", {"--stream"}), expected);
  EXPECT_EQ(run("hf", "hf_fp64.jsonl", {"--dtype", "fp64"}), expected);
  // Sampling: reproducible per seed.
  EXPECT_EQ(run("hf", "seed_a.jsonl", {"--temperature", "1", "--top-p", "0.9", "--seed", "4"}),
            run("hf", "seed_b.jsonl", {"--temperature", "1", "--top-p", "0.9", "--seed", "4"}));

  // Text through the checkpoint folder's tokenizer; the same from a config file and from a JSONL prompts file.
  write("hf/tokenizer.json", kByteLevelTokenizer);
  write("hf/tokenizer_config.json", R"({"eos_token": "<|end|>"})");
  const Outcome text = expect({"generate", "--pretrained", "hf", "--prompt", "hello world", "--max-new-tokens", "4",
                               "--output", "text.jsonl", "--ignore-eos"},
                              0, "hello world");
  const std::vector<std::string> text_lines = lines_of(directory_ / "text.jsonl");
  ASSERT_EQ(text_lines.size(), 1u);
  EXPECT_NE(text_lines[0].find(R"("prompt_ids":[11,14,2,6])"), std::string::npos) << text_lines[0];
  EXPECT_NE(text_lines[0].find(R"("text":)"), std::string::npos) << text_lines[0];
  write("prompts.jsonl", "{\"text\": \"hello world\"}\n\n{\"ids\": [1, 2, 3]}\n");
  const fs::path generate_config = write("generate.yaml", "pretrained: {path: hf}\nprompts_file: prompts.jsonl\n"
                                                          "max_new_tokens: 4\nignore_eos: true\noutput: file.jsonl\n");
  expect({"generate", "-c", generate_config.string()}, 0, "Generated 8 tokens for 2 prompts");
  const std::vector<std::string> file_lines = lines_of(directory_ / "file.jsonl");
  ASSERT_EQ(file_lines.size(), 2u);
  EXPECT_EQ(file_lines[0], text_lines[0]);

  // Overrides after the repeatable options stay overrides.
  expect({"generate", "--pretrained", "hf", "--prompt-ids", "1", "max_new_tokens=2", "--ignore-eos"}, 0,
         "Generated 2 tokens for 1 prompts");

  // Mistakes.
  expect({"generate", "--pretrained", "hf"}, 1, "no prompts");
  expect({"generate", "--pretrained", "hf", "--prompt-ids", "1", "kernels.include=[nonsense]"}, 1,
         "kernels.include");
  expect({"generate", "--prompt-ids", "1"}, 1, "pretrained.path is required");
  expect({"generate", "--pretrained", "hf", "--prompt-ids", "1,x"}, 1, "`x` is not a token id");
  expect({"generate", "--pretrained", "hf", "--prompt-ids", "1,16"}, 1, "prompt 0 has token 16, outside the model's "
                                                                        "vocabulary of 16");
  expect({"generate", "--pretrained", "native", "--prompt", "hello"}, 1, "tokenizer.path");
  expect({"generate", "--pretrained", "hf", "--prompt-ids", "1", "--top-p", "0"}, 1, "top_p");
  expect({"generate", "--pretrained", "hf", "--prompt-ids", "1", "--temperature", "-1"}, 1, "temperature");
  expect({"generate", "--pretrained", "missing", "--prompt-ids", "1"}, 1, "missing");
  write("bad.jsonl", "{\"text\": \"hello\"}\n[1, 2]\n");
  expect({"generate", "--pretrained", "hf", "--prompts-file", "bad.jsonl"}, 1,
         "bad.jsonl:2: expected an object with a string `text` or an integer list `ids`");
  expect({"generate", "--help"}, 0, "--prompt-ids");

  // EOS from the folder's generation_config.json (an id or a list): every id ends a completion at its first token.
  write("hf/generation_config.json", R"({"eos_token_id": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]})");
  expect({"generate", "--pretrained", "hf", "--prompt-ids", "1", "--prompt-ids", "2,3"}, 0,
         "Generated 2 tokens for 2 prompts");
  expect({"generate", "--pretrained", "hf", "--prompt-ids", "1", "--max-new-tokens", "3", "--ignore-eos"}, 0,
         "Generated 3 tokens for 1 prompts");
  write("hf/generation_config.json", R"({"eos_token_id": "</s>"})");
  expect({"generate", "--pretrained", "hf", "--prompt-ids", "1"}, 1,
         "generation_config.json: eos_token_id holds \"</s>\", not a token id");
}

// What a command was asked to print is checked like every other write: a full disk under standard output is an
// error, not an exit 0 with nothing printed.
TEST_F(CliTest, PrintingToAFullDiskIsAnError) {
  const fs::path config = write("train.yaml", kTrainConfig);
  expect({"train", "gpt", "-c", config.string(), "--validate"}, 1, "[output] cannot write to standard output",
         "/dev/full");
  expect({"convert", "gpt", "input.format=llama", "input.path=in", "output.format=fast_llm", "output.path=out", "-v"},
         1, "[output] cannot write to standard output", "/dev/full");
  expect({"kernels"}, 1, "[output] cannot write to standard output", "/dev/full");
}

TEST_F(CliTest, Kernels) {
  expect({"kernels"}, 0, "gemm");
  expect({"kernels", "--device", "cuda"}, 0, "CUDA devices");
  expect({"kernels", "--device", "tpu"}, 105, "tpu");
  expect({"kernels", "--plugin", (directory_ / "missing.so").string()}, 1, "missing.so");
  expect({"kernels", "--plugin", write("not_a_library.so", "text").string()}, 1, "not_a_library.so");
}

}  // namespace
