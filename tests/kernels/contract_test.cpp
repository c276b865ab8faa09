// The checks the ops' entry functions build their contracts from (kernels/contract.h): each names the op and the
// argument, and passes what the contract allows.
#include "fast_llm/kernels/contract.h"

#include <gtest/gtest.h>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using testing::expect_error;

const OpContract kContract("probe_op", Device::cpu());

TEST(OpContract, PassesWhatTheContractAllows) {
  const Tensor matrix = Tensor::empty(Shape{2, 3}, DType::bfloat16);
  kContract.on_device("matrix", matrix);
  kContract.rank("matrix", matrix, 2, "(rows, columns)");
  kContract.shape("matrix", matrix, Shape{2, 3});
  kContract.shape("absent", nullptr, Shape{7});
  kContract.floating("matrix", matrix);
  kContract.dtype("matrix", matrix, {DType::float32, DType::bfloat16});
  kContract.same_dtype("matrix", matrix, "other", Tensor::empty(Shape{1}, DType::bfloat16));
  kContract.contiguous("matrix", matrix);
}

TEST(OpContract, NamesTheOpAndTheArgument) {
  const Tensor matrix = Tensor::empty(Shape{2, 3}, DType::float32);
  expect_error([&] { kContract.on_device("weight", Tensor()); }, "[probe_op] weight is undefined");
  expect_error([&] { kContract.rank("input", matrix, 3, "(tokens, heads, head_size)"); },
               "[probe_op] input has shape (2, 3), expected (tokens, heads, head_size)");
  expect_error(
      [&] {
        kContract.shape("output", matrix, Shape{3, 2});
      },
      "[probe_op] output has shape (2, 3), expected (3, 2)");
  const Tensor present = matrix;
  expect_error([&] { kContract.shape("bias", &present, Shape{3}); }, "[probe_op] bias has shape (2, 3), expected (3)");
  expect_error([&] { kContract.floating("labels", Tensor::empty(Shape{2}, DType::int64)); },
               "[probe_op] labels has dtype int64; supported: float32, float64, bfloat16, float16");
  expect_error([&] { kContract.dtype("state", matrix, {DType::float64}); },
               "[probe_op] state has dtype float32; supported: float64");
  expect_error([&] { kContract.same_dtype("grad", Tensor::empty(Shape{2}, DType::float16), "input", matrix); },
               "[probe_op] grad has dtype float16, input has float32; they must match");
  expect_error([&] { kContract.contiguous("input", matrix.transpose(0, 1)); },
               "[probe_op] input is not contiguous (shape (3, 2), strides (1, 3))");
}

}  // namespace
}  // namespace fast_llm::kernels
