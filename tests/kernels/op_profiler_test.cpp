// The per-variant timing behind `profiling`: counts and times every dispatch while recording, nothing otherwise.
#include "fast_llm/kernels/op_profiler.h"

#include <gtest/gtest.h>

#include "fast_llm/kernels/copy.h"
#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

const OpTiming* find_timing(const std::vector<OpTiming>& totals, const std::string& id) {
  for (const OpTiming& timing : totals)
    if (timing.id == id) return &timing;
  return nullptr;
}

TEST(OpProfiler, CountsDispatchesOnlyWhileRecording) {
  OpProfiler& profiler = OpProfiler::instance();
  profiler.reset();
  profiler.configure(/*cpu=*/true, /*cuda=*/false);
  Tensor tensor = Tensor::empty({1 << 16}, DType::float32);

  fill({.tensor = tensor, .value = 1.0});  // not recording: not counted
  for (int step = 0; step < 2; ++step) {
    profiler.start_recording();
    for (int call = 0; call < 3; ++call) fill({.tensor = tensor, .value = double(call)});
    profiler.stop_recording();
  }
  fill({.tensor = tensor, .value = 2.0});

  const std::vector<OpTiming> totals = profiler.totals();
  const OpTiming* fills = find_timing(totals, "fill:cpu:reference");
  ASSERT_NE(fills, nullptr);
  EXPECT_EQ(fills->calls, 6);
  EXPECT_GT(fills->total_ms, 0.0);
  EXPECT_EQ(profiler.recorded_steps(), 2);

  const std::string table = profiler.table(80);
  EXPECT_NE(table.find("fill:cpu:reference"), std::string::npos) << table;
  EXPECT_NE(table.find("3.0"), std::string::npos) << table;  // calls per step
  EXPECT_NE(table.find("100.0%"), std::string::npos) << table;

  profiler.reset();
  EXPECT_TRUE(profiler.totals().empty());
  EXPECT_EQ(profiler.recorded_steps(), 0);
}

TEST(OpProfiler, DevicesNotConfiguredAreNotTimed) {
  OpProfiler& profiler = OpProfiler::instance();
  profiler.reset();
  profiler.configure(/*cpu=*/false, /*cuda=*/true);
  Tensor tensor = Tensor::empty({16}, DType::float32);
  profiler.start_recording();
  fill({.tensor = tensor, .value = 1.0});
  profiler.stop_recording();
  EXPECT_TRUE(profiler.totals().empty());
  EXPECT_EQ(profiler.recorded_steps(), 1);
  profiler.configure(false, false);
  profiler.reset();
}

TEST(OpProfilerCuda, TimesCudaDispatchesBetweenEvents) {
  if (!testing::have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  OpProfiler& profiler = OpProfiler::instance();
  profiler.reset();
  profiler.configure(/*cpu=*/false, /*cuda=*/true);
  Tensor tensor = Tensor::empty({1 << 24}, DType::float32, Device::cuda(0));
  profiler.start_recording();
  for (int call = 0; call < 4; ++call) fill({.tensor = tensor, .value = double(call)});
  profiler.stop_recording();
  const std::vector<OpTiming> totals = profiler.totals();
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_EQ(totals[0].id.rfind("fill:cuda:", 0), 0u) << totals[0].id;
  EXPECT_EQ(totals[0].calls, 4);
  EXPECT_GT(totals[0].total_ms, 0.0);  // 4 x 64 MiB of writes take microseconds at least
  profiler.configure(false, false);
  profiler.reset();
}

}  // namespace
}  // namespace fast_llm::kernels
