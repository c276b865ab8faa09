// The step list of the breadth-first schedule (engine/schedule/schedule.h): Fast-LLM's order, the placement of stages
// on pipeline ranks, where each step's input comes from and its output goes, and that every rank's messages come in
// one order (so the ranks cannot wait for each other in a cycle), with micro-batches cut into splits too.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fast_llm/engine/schedule/schedule.h"

namespace fast_llm::engine {
namespace {

TEST(ScheduleSteps, OneRankRunsFastLlmsOrder) {
  // 3 stages, 2 depth-first groups of 2 breadth-first micro-batches.
  const Schedule schedule(3, 2, 2, 1, 1, /*training=*/true);
  EXPECT_EQ(schedule.describe(),
            "F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 B2.0 B2.1 B1.0 B1.1 B0.0 B0.1 "
            "F0.2 F0.3 F1.2 F1.3 F2.2 F2.3 B2.2 B2.3 B1.2 B1.3 B0.2 B0.3");
  for (const ScheduleStep& step : schedule.steps()) {
    EXPECT_EQ(step.receive_from, -1);
    EXPECT_EQ(step.send_to, -1);
    EXPECT_EQ(step.split, 0);
    EXPECT_EQ(step.depth_first_group, step.micro_batch / 2);
    // The hooks run once per (group, stage, direction): before its first micro-batch and after its last.
    EXPECT_EQ(step.first_of_stage, step.micro_batch % 2 == 0);
    EXPECT_EQ(step.last_of_stage, step.micro_batch % 2 == 1);
  }
}

TEST(ScheduleSteps, TwoPipelineRanksBreadthFirstFourDepthFirstTwo) {
  // pp2, 4 stages (stage s on rank s % 2), bf4, df2: 2 x (4 x 4 forward + 4 x 4 backward) steps.
  const Schedule schedule(4, 2, 4, 1, 2, /*training=*/true);
  ASSERT_EQ(schedule.steps().size(), 64u);
  EXPECT_EQ(schedule.describe(0),
            "F0.0 F0.1 F0.2 F0.3 F2.0 F2.1 F2.2 F2.3 B2.0 B2.1 B2.2 B2.3 B0.0 B0.1 B0.2 B0.3 "
            "F0.4 F0.5 F0.6 F0.7 F2.4 F2.5 F2.6 F2.7 B2.4 B2.5 B2.6 B2.7 B0.4 B0.5 B0.6 B0.7");
  EXPECT_EQ(schedule.describe(1),
            "F1.0 F1.1 F1.2 F1.3 F3.0 F3.1 F3.2 F3.3 B3.0 B3.1 B3.2 B3.3 B1.0 B1.1 B1.2 B1.3 "
            "F1.4 F1.5 F1.6 F1.7 F3.4 F3.5 F3.6 F3.7 B3.4 B3.5 B3.6 B3.7 B1.4 B1.5 B1.6 B1.7");
  std::map<std::pair<std::string, int>, const ScheduleStep*> by_name;
  for (const ScheduleStep& step : schedule.steps()) {
    EXPECT_EQ(step.pipeline_rank, int(step.stage % 2));
    std::string name = step.type == StepType::forward ? "F" : "B";
    name.append(std::to_string(step.stage));
    by_name[{name, step.micro_batch}] = &step;
  }
  // Forward: stage 0 takes tokens and sends to rank 1; the head (stage 3) receives and sends nothing.
  EXPECT_EQ(by_name.at({"F0", 0})->receive_from, -1);
  EXPECT_EQ(by_name.at({"F0", 0})->send_to, 1);
  EXPECT_EQ(by_name.at({"F3", 5})->receive_from, 0);
  EXPECT_EQ(by_name.at({"F3", 5})->send_to, -1);
  // Backward: the head's input gradient goes to rank 0; stage 0 receives it from rank 1 and sends nothing.
  EXPECT_EQ(by_name.at({"B3", 2})->receive_from, -1);
  EXPECT_EQ(by_name.at({"B3", 2})->send_to, 0);
  EXPECT_EQ(by_name.at({"B0", 7})->receive_from, 1);
  EXPECT_EQ(by_name.at({"B0", 7})->send_to, -1);
  // A received input is produced by the neighbouring stage's step of the same micro-batch, earlier in the list.
  EXPECT_EQ(by_name.at({"F2", 6})->producer_position, by_name.at({"F1", 6})->position);
  EXPECT_EQ(by_name.at({"B1", 3})->producer_position, by_name.at({"B2", 3})->position);
  for (const ScheduleStep& step : schedule.steps()) {
    if (step.receive_from >= 0) {
      EXPECT_LT(step.producer_position, step.position);
    }
  }
}

TEST(ScheduleSteps, MessagesBetweenTwoRanksComeInOneOrder) {
  // For each pair of ranks, the messages (keyed by the position of the step producing them) that one sends are the
  // ones the other receives, in the same order: both ranks' sequences are sorted by that key.
  const Schedule schedule(6, 2, 3, 1, 3, /*training=*/true);
  std::map<std::pair<int, int>, std::vector<size_t>> sent, received;
  for (const ScheduleStep& step : schedule.steps()) {
    if (step.send_to >= 0) sent[{step.pipeline_rank, step.send_to}].push_back(step.position);
    if (step.receive_from >= 0) received[{step.receive_from, step.pipeline_rank}].push_back(step.producer_position);
  }
  ASSERT_FALSE(sent.empty());
  for (auto& [pair, keys] : received) std::sort(keys.begin(), keys.end());
  EXPECT_EQ(sent, received);
}

TEST(ScheduleSteps, ValidationRunsForwardOnlyInOneGroup) {
  const Schedule schedule(2, 2, 2, 1, 2, /*training=*/false);
  EXPECT_EQ(schedule.describe(), "F0.0 F0.1 F0.2 F0.3 F1.0 F1.1 F1.2 F1.3");
  EXPECT_EQ(schedule.micro_batches(), 4);
}

TEST(ScheduleSteps, SplitsRunInOrderForwardAndInReverseBackward) {
  const Schedule schedule(2, 1, 2, 2, 1, /*training=*/true);
  EXPECT_EQ(schedule.splits(), 2);
  EXPECT_EQ(schedule.describe(), "F0.0:0 F0.0:1 F0.1:0 F0.1:1 F1.0:0 F1.0:1 F1.1:0 F1.1:1 B1.0:1 B1.0:0 B1.1:1 "
                                 "B1.1:0 B0.0:1 B0.0:0 B0.1:1 B0.1:0");
}

TEST(ScheduleSteps, TwoPipelineRanksBreadthFirstTwoInTwoSplits) {
  // pp2 x bf2 x ms2, 4 stages (stage s on rank s % 2): per stage, each breadth-first micro-batch's splits in order in
  // forward and in reverse in backward; every piece is its own message.
  const Schedule schedule(4, 1, 2, 2, 2, /*training=*/true);
  ASSERT_EQ(schedule.steps().size(), 32u);
  EXPECT_EQ(schedule.describe(0),
            "F0.0:0 F0.0:1 F0.1:0 F0.1:1 F2.0:0 F2.0:1 F2.1:0 F2.1:1 "
            "B2.0:1 B2.0:0 B2.1:1 B2.1:0 B0.0:1 B0.0:0 B0.1:1 B0.1:0");
  EXPECT_EQ(schedule.describe(1),
            "F1.0:0 F1.0:1 F1.1:0 F1.1:1 F3.0:0 F3.0:1 F3.1:0 F3.1:1 "
            "B3.0:1 B3.0:0 B3.1:1 B3.1:0 B1.0:1 B1.0:0 B1.1:1 B1.1:0");
  std::map<std::string, const ScheduleStep*> by_name;
  for (const ScheduleStep& step : schedule.steps())
    by_name[fmt::format("{}{}.{}:{}", step.type == StepType::forward ? 'F' : 'B', step.stage, step.micro_batch,
                        step.split)] = &step;
  // Each piece's input comes from the same micro-batch and split at the neighbouring stage, on the other rank.
  EXPECT_EQ(by_name.at("F1.1:1")->receive_from, 0);
  EXPECT_EQ(by_name.at("F1.1:1")->producer_position, by_name.at("F0.1:1")->position);
  EXPECT_EQ(by_name.at("F0.1:1")->send_to, 1);
  EXPECT_EQ(by_name.at("B2.0:0")->receive_from, 1);
  EXPECT_EQ(by_name.at("B2.0:0")->producer_position, by_name.at("B3.0:0")->position);
  EXPECT_EQ(by_name.at("B0.1:1")->producer_position, by_name.at("B1.1:1")->position);
  // The hooks: forward from micro-batch 0's split 0 to micro-batch 1's split 1, backward from micro-batch 0's split 1
  // to micro-batch 1's split 0.
  for (const ScheduleStep& step : schedule.steps()) {
    const bool forward = step.type == StepType::forward;
    EXPECT_EQ(step.first_of_stage, step.micro_batch == 0 && step.split == (forward ? 0 : 1));
    EXPECT_EQ(step.last_of_stage, step.micro_batch == 1 && step.split == (forward ? 1 : 0));
    if (step.receive_from >= 0) {
      EXPECT_LT(step.producer_position, step.position);
    }
  }
  // Both ranks' messages come in one order.
  std::map<std::pair<int, int>, std::vector<size_t>> sent, received;
  for (const ScheduleStep& step : schedule.steps()) {
    if (step.send_to >= 0) sent[{step.pipeline_rank, step.send_to}].push_back(step.position);
    if (step.receive_from >= 0) received[{step.receive_from, step.pipeline_rank}].push_back(step.producer_position);
  }
  for (auto& [pair, keys] : received) std::sort(keys.begin(), keys.end());
  EXPECT_EQ(sent, received);
}

TEST(ScheduleSteps, ValidationRunsEachMicroBatchsSplitsInOrder) {
  const Schedule schedule(2, 1, 2, 2, 2, /*training=*/false);
  EXPECT_EQ(schedule.describe(), "F0.0:0 F0.0:1 F0.1:0 F0.1:1 F1.0:0 F1.0:1 F1.1:0 F1.1:1");
}

}  // namespace
}  // namespace fast_llm::engine
