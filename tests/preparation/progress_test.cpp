// The progress line: percentage, counts, rate and the time left, as a person reads them.
#include <gtest/gtest.h>

#include "fast_llm/preparation/progress.h"

namespace fast_llm::preparation {
namespace {

TEST(Progress, LineShowsRateAndTimeLeft) {
  // A quarter of 1000 documents and 2.5M tokens in 10 s: 250k tokens/s, 30 s left at 25 documents/s.
  const std::string line = ProgressReporter::format_line("prepare", 250, 1000, 2500000, 10.0, 8);
  EXPECT_EQ(line, "prepare [##......]  25% 250/1000 documents, 2.50M tokens, 250.0k tokens/s, elapsed 0:10, ETA 0:30");
  EXPECT_NE(ProgressReporter::format_line("prepare", 0, 10, 0, 0.0, 0).find("ETA ?"), std::string::npos);
}

TEST(Progress, HumanUnits) {
  EXPECT_EQ(human_count(999), "999");
  EXPECT_EQ(human_count(1500), "1.5k");
  EXPECT_EQ(human_count(2.5e9), "2.50G");
  EXPECT_EQ(human_duration(59.6), "1:00");
  EXPECT_EQ(human_duration(3725), "1:02:05");
}

}  // namespace
}  // namespace fast_llm::preparation
