// Tensor log lines as Fast-LLM's log_tensor writes them (column widths, number formats, sampling stride); the
// expected strings were worked out from its formatting rules by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fast_llm/engine/schedule/layer_logs.h"

namespace fast_llm::engine {
namespace {

TEST(LayerLogs, FormatNumberSwitchesToScientificOutsideItsRange) {
  EXPECT_EQ(format_number(0.0), "0.0000");
  EXPECT_EQ(format_number(1e-2), "0.0100");
  EXPECT_EQ(format_number(0.00999), "9.990e-03");
  EXPECT_EQ(format_number(1234567.0), "1234567.0000");
  EXPECT_EQ(format_number(12345678.0), "1.235e+07");
  EXPECT_EQ(format_number(-2.5e-11), "-2.500e-11");
  EXPECT_EQ(format_number(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(format_number(std::numeric_limits<double>::infinity()), "inf");
}

TEST(LayerLogs, DescribeTensorAtEachLevel) {
  const Tensor tensor = Tensor::from_values(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const std::string name = "t";
  EXPECT_EQ(describe_tensor(name, tensor, 1),
            "t                                                   shape=(2, 3)              dtype=float32    device=cpu     ");
  EXPECT_EQ(describe_tensor(name, tensor, 2),
            "t                                                   shape=(2, 3)              dtype=float32    device=cpu      "
            "mu=3.5000      std=1.8708      stride=(3, 1)               ");
  EXPECT_EQ(describe_tensor(name, tensor, 4),
            "t                                                   shape=(2, 3)              dtype=float32    device=cpu      "
            "mu=3.5000      std=1.8708      stride=(3, 1)                samples (step=1)     = (1.0000    ,2.0000    )  ");
  // One element: no standard deviation; a vector's shape is written as Python writes a 1-tuple.
  const std::string single = describe_tensor("x", Tensor::from_values(std::vector<float>{2.0f}, Shape{1}), 2);
  EXPECT_NE(single.find("shape=(1,)"), std::string::npos) << single;
  EXPECT_NE(single.find("std=nan"), std::string::npos) << single;
}

}  // namespace
}  // namespace fast_llm::engine
