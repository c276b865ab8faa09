// Tests of Shape and Tensor on the CPU: strides, every view (values read back through item_as_double), errors on bad
// views, rounding in from_values, printing, byte copies, wrapped memory and the no-CUDA backend.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "fast_llm/tensor/allocator.h"
#include "fast_llm/tensor/graph.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm {
namespace {

// (2, 3, 4) holding 0, 1, ..., 23 in row-major order, so the value at [i, j, k] is 12 i + 4 j + k.
Tensor iota_tensor() {
  std::vector<float> values(24);
  std::iota(values.begin(), values.end(), 0.0f);
  return Tensor::from_values(values, Shape{2, 3, 4});
}

double at(const Tensor& tensor, std::initializer_list<int64_t> index) {
  return tensor.item_as_double(std::span<const int64_t>(index.begin(), index.size()));
}

std::vector<int64_t> as_vector(const Shape& shape) { return {shape.begin(), shape.end()}; }

// Runs `body` and returns the message of the fast_llm::Error it throws (fails the test if it throws none).
template <class Body>
std::string error_message(Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "no fast_llm::Error thrown";
  return {};
}

TEST(Shape, RankNumelAndString) {
  Shape shape{2, 3, 4};
  EXPECT_EQ(shape.rank(), 3);
  EXPECT_EQ(shape.numel(), 24);
  EXPECT_EQ(shape.str(), "(2, 3, 4)");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(Shape{}.str(), "()");
  EXPECT_EQ(Shape({5, 0}).numel(), 0);
  shape.push_back(5);
  EXPECT_EQ(shape, Shape({2, 3, 4, 5}));
  EXPECT_FALSE(shape == Shape({2, 3, 4}));
  std::vector<int64_t> dims{7, 8};
  EXPECT_EQ(Shape(std::span<const int64_t>(dims)), Shape({7, 8}));
}

TEST(Shape, RankAboveMaximumIsAnError) {
  EXPECT_EQ(error_message([] { Shape({1, 1, 1, 1, 1, 1, 1, 1, 1}); }),
            "[tensor] shape: rank 9 exceeds the maximum of 8");
  Shape full{1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_THROW(full.push_back(1), Error);
}

TEST(Shape, ContiguousStrides) {
  EXPECT_EQ(as_vector(contiguous_strides(Shape{2, 3, 4})), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(as_vector(contiguous_strides(Shape{5})), (std::vector<int64_t>{1}));
  EXPECT_EQ(contiguous_strides(Shape{}).rank(), 0);
}

TEST(Tensor, EmptyHasContiguousLayout) {
  Tensor tensor = Tensor::empty(Shape{2, 3}, DType::bfloat16);
  EXPECT_TRUE(tensor.defined());
  EXPECT_EQ(tensor.shape(), Shape({2, 3}));
  EXPECT_EQ(as_vector(tensor.strides()), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(tensor.rank(), 2);
  EXPECT_EQ(tensor.numel(), 6);
  EXPECT_EQ(tensor.element_size(), 2u);
  EXPECT_EQ(tensor.nbytes(), 12u);
  EXPECT_EQ(tensor.offset(), 0);
  EXPECT_EQ(tensor.dtype(), DType::bfloat16);
  EXPECT_EQ(tensor.device(), Device::cpu());
  EXPECT_TRUE(tensor.is_contiguous());
  EXPECT_EQ(tensor.size(-1), 3);
  EXPECT_EQ(tensor.size(0), 2);
  EXPECT_EQ(tensor.stride(-2), 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor.data()) % 64, 0u);
  EXPECT_EQ(error_message([&] { tensor.size(2); }), "[tensor] size: dim 2 out of range for shape (2, 3)");
}

TEST(Tensor, EmptyRejectsNegativeSizes) { EXPECT_THROW(Tensor::empty(Shape{2, -1}, DType::float32), Error); }

TEST(Tensor, UndefinedTensor) {
  Tensor tensor;
  EXPECT_FALSE(tensor.defined());
  EXPECT_THROW(tensor.data(), Error);
  EXPECT_THROW(tensor.slice(0, 0, 1), Error);
  EXPECT_EQ(tensor.str(), "Tensor(undefined)");
}

TEST(Tensor, DataAsChecksTheDType) {
  Tensor tensor = Tensor::empty(Shape{4}, DType::int64);
  EXPECT_EQ(tensor.data_as<int64_t>(), tensor.data());
  EXPECT_EQ(error_message([&] { tensor.data_as<float>(); }), "[tensor] data_as<float32> on a int64 tensor");
}

TEST(Tensor, CopiesShareStorage) {
  Tensor tensor = iota_tensor();
  Tensor copy = tensor;
  copy.data_as<float>()[5] = 100.0f;
  EXPECT_EQ(at(tensor, {0, 1, 1}), 100.0);
}

TEST(TensorViews, Slice) {
  Tensor tensor = iota_tensor();
  Tensor view = tensor.slice(1, 1, 3);
  EXPECT_EQ(view.shape(), Shape({2, 2, 4}));
  EXPECT_EQ(as_vector(view.strides()), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(view.offset(), 4);
  EXPECT_FALSE(view.is_contiguous());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(at(view, {i, j, k}), double(12 * i + 4 * (j + 1) + k));
  // Negative bounds count from the end; an empty range is allowed.
  Tensor last_two = tensor.slice(-1, -2, 4);
  EXPECT_EQ(last_two.shape(), Shape({2, 3, 2}));
  EXPECT_EQ(at(last_two, {1, 2, 0}), 22.0);
  EXPECT_EQ(at(last_two, {0, 0, 1}), 3.0);
  EXPECT_EQ(tensor.slice(0, 1, 1).numel(), 0);
  // A slice of the leading dimension stays contiguous and moves data().
  Tensor second = tensor.slice(0, 1, 2);
  EXPECT_TRUE(second.is_contiguous());
  EXPECT_EQ(static_cast<float*>(second.data()), tensor.data_as<float>() + 12);
}

TEST(TensorViews, Select) {
  Tensor tensor = iota_tensor();
  Tensor row = tensor.select(0, 1);
  EXPECT_EQ(row.shape(), Shape({3, 4}));
  EXPECT_TRUE(row.is_contiguous());
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(at(row, {j, k}), double(12 + 4 * j + k));
  Tensor column = tensor.select(-1, -1);
  EXPECT_EQ(column.shape(), Shape({2, 3}));
  EXPECT_EQ(as_vector(column.strides()), (std::vector<int64_t>{12, 4}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(at(column, {i, j}), double(12 * i + 4 * j + 3));
  Tensor scalar = tensor.select(0, 1).select(0, 2).select(0, 3);
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.item(), 23.0);
}

TEST(TensorViews, Transpose) {
  Tensor tensor = iota_tensor();
  Tensor view = tensor.transpose(0, 2);
  EXPECT_EQ(view.shape(), Shape({4, 3, 2}));
  EXPECT_EQ(as_vector(view.strides()), (std::vector<int64_t>{1, 4, 12}));
  EXPECT_FALSE(view.is_contiguous());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(at(view, {k, j, i}), double(12 * i + 4 * j + k));
  EXPECT_TRUE(view.transpose(-1, 0).is_contiguous());
}

TEST(TensorViews, ReshapeAndFlatten) {
  Tensor tensor = iota_tensor();
  Tensor view = tensor.reshape(Shape{4, -1});
  EXPECT_EQ(view.shape(), Shape({4, 6}));
  EXPECT_EQ(as_vector(view.strides()), (std::vector<int64_t>{6, 1}));
  EXPECT_EQ(at(view, {2, 5}), 17.0);
  EXPECT_EQ(at(view, {3, 0}), 18.0);
  Tensor flat = tensor.flatten();
  EXPECT_EQ(flat.shape(), Shape({24}));
  EXPECT_EQ(at(flat, {13}), 13.0);
  // Reshaping a contiguous view keeps its offset.
  Tensor second = tensor.select(0, 1).reshape(Shape{12});
  EXPECT_EQ(at(second, {0}), 12.0);
  EXPECT_EQ(at(second, {11}), 23.0);
  // Transposing a size-1 dimension leaves the tensor contiguous, so it can be reshaped.
  Tensor column = Tensor::from_values(std::vector<float>{1, 2, 3}, Shape{3, 1});
  EXPECT_EQ(at(column.transpose(0, 1).reshape(Shape{3}), {2}), 3.0);
}

TEST(TensorViews, Unsqueeze) {
  Tensor tensor = iota_tensor();
  Tensor middle = tensor.unsqueeze(1);
  EXPECT_EQ(middle.shape(), Shape({2, 1, 3, 4}));
  EXPECT_TRUE(middle.is_contiguous());
  EXPECT_EQ(at(middle, {1, 0, 2, 3}), 23.0);
  Tensor last = tensor.unsqueeze(-1);
  EXPECT_EQ(last.shape(), Shape({2, 3, 4, 1}));
  EXPECT_EQ(at(last, {1, 1, 2, 0}), 18.0);
  Tensor first = tensor.unsqueeze(0);
  EXPECT_EQ(first.shape(), Shape({1, 2, 3, 4}));
  EXPECT_EQ(at(first, {0, 0, 2, 1}), 9.0);
  // On a strided view the new dimension does not disturb the others.
  Tensor transposed = tensor.transpose(0, 2).unsqueeze(1);
  EXPECT_EQ(transposed.shape(), Shape({4, 1, 3, 2}));
  EXPECT_EQ(at(transposed, {3, 0, 1, 1}), 19.0);
}

TEST(TensorViews, ViewAsReinterpretsBytes) {
  Tensor tensor = Tensor::from_values(std::vector<float>{1.0f, -2.0f}, Shape{2}, DType::bfloat16);
  Tensor bits = tensor.view_as(DType::uint16);
  EXPECT_EQ(bits.dtype(), DType::uint16);
  EXPECT_EQ(at(bits, {0}), double(0x3f80));  // bf16 1.0
  EXPECT_EQ(at(bits, {1}), double(0xc000));  // bf16 -2.0
  EXPECT_EQ(bits.data(), tensor.data());
}

TEST(TensorViews, ComposedViews) {
  Tensor tensor = iota_tensor();
  // (2, 3, 4) -> transpose(1, 2): (2, 4, 3) -> slice dim 1 [1, 3): (2, 2, 3) -> select dim 0 index 1: (2, 3)
  Tensor view = tensor.transpose(1, 2).slice(1, 1, 3).select(0, 1);
  EXPECT_EQ(view.shape(), Shape({2, 3}));
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b) EXPECT_EQ(at(view, {a, b}), double(12 + 4 * b + (a + 1)));
  // Writes through the base are visible through the view.
  tensor.data_as<float>()[12 + 4 * 2 + 2] = -1.0f;
  EXPECT_EQ(at(view, {1, 2}), -1.0);
}

TEST(TensorViews, BadViewsAreErrors) {
  Tensor matrix = Tensor::empty(Shape{2, 3}, DType::float32);
  EXPECT_EQ(error_message([&] { matrix.slice(2, 0, 1); }), "[tensor] slice: dim 2 out of range for shape (2, 3)");
  EXPECT_EQ(error_message([&] { matrix.slice(-3, 0, 1); }), "[tensor] slice: dim -3 out of range for shape (2, 3)");
  EXPECT_EQ(error_message([&] { matrix.slice(1, 1, 4); }),
            "[tensor] slice: range [1, 4) out of bounds for dim 1 of size 3 (shape (2, 3))");
  EXPECT_THROW(matrix.slice(1, 2, 1), Error);
  EXPECT_EQ(error_message([&] { matrix.select(0, 2); }),
            "[tensor] select: index 2 out of range for dim 0 of size 2 (shape (2, 3))");
  EXPECT_THROW(matrix.select(0, -3), Error);
  EXPECT_EQ(error_message([&] { matrix.transpose(0, 2); }),
            "[tensor] transpose: dim 2 out of range for shape (2, 3)");
  EXPECT_EQ(error_message([&] { matrix.transpose(0, 1).reshape(Shape{6}); }),
            "[tensor] reshape: tensor with shape (3, 2) and strides (1, 3) is not contiguous; make a contiguous copy "
            "first");
  EXPECT_EQ(error_message([&] { matrix.reshape(Shape{4, 2}); }),
            "[tensor] reshape: cannot reshape (2, 3) (6 elements) into (4, 2)");
  EXPECT_THROW(matrix.reshape(Shape{-1, -1}), Error);
  EXPECT_THROW(matrix.reshape(Shape{4, -1}), Error);
  EXPECT_THROW(matrix.reshape(Shape{-2, -3}), Error);
  EXPECT_EQ(error_message([&] { matrix.unsqueeze(3); }), "[tensor] unsqueeze: dim 3 out of range for shape (2, 3)");
  EXPECT_EQ(matrix.unsqueeze(2).shape(), Shape({2, 3, 1}));
  EXPECT_EQ(matrix.unsqueeze(-3).shape(), Shape({1, 2, 3}));
  EXPECT_EQ(error_message([&] { matrix.view_as(DType::float64); }),
            "[tensor] view_as: float64 (8 bytes) cannot view float32 (4 bytes)");
  EXPECT_THROW(matrix.transpose(0, 1).view_as(DType::int32), Error);
  Tensor full = Tensor::empty(Shape{1, 1, 1, 1, 1, 1, 1, 1}, DType::float32);
  EXPECT_THROW(full.unsqueeze(0), Error);
}

TEST(TensorValues, FromValuesRoundsToTheDType) {
  std::vector<float> values{0.1f, 1.0f + 1.0f / 256.0f, 70000.0f, -3.0f};
  Tensor bf16 = Tensor::from_values(values, Shape{4}, DType::bfloat16);
  EXPECT_EQ(at(bf16, {0}), 0.10009765625);  // nearest bf16 to 0.1: 0x3dcd
  EXPECT_EQ(at(bf16, {1}), 1.0);            // halfway between 1 and 1 + 2^-7: ties to even
  EXPECT_EQ(at(bf16, {2}), 70144.0);        // 8 significant bits
  EXPECT_EQ(at(bf16, {3}), -3.0);
  Tensor fp16 = Tensor::from_values(values, Shape{4}, DType::float16);
  EXPECT_EQ(at(fp16, {0}), 0.0999755859375);  // nearest fp16 to 0.1: 0x2e66
  EXPECT_EQ(at(fp16, {1}), 1.00390625);       // representable with 10 mantissa bits
  EXPECT_EQ(at(fp16, {2}), std::numeric_limits<double>::infinity());  // above fp16's maximum of 65504
  Tensor fp32 = Tensor::from_values(values, Shape{4}, DType::float32);
  EXPECT_EQ(at(fp32, {0}), double(0.1f));
  Tensor fp64 = Tensor::from_values(values, Shape{2, 2}, DType::float64);
  EXPECT_EQ(at(fp64, {1, 0}), 70000.0);
}

TEST(TensorValues, FromValuesIntegers) {
  std::vector<float> values{-3.0f, 7.0f, 255.0f};
  Tensor int32 = Tensor::from_values(values, Shape{3}, DType::int32);
  EXPECT_EQ(int32.data_as<int32_t>()[0], -3);
  EXPECT_EQ(at(int32, {2}), 255.0);
  Tensor int64 = Tensor::from_values(values, Shape{3}, DType::int64);
  EXPECT_EQ(int64.data_as<int64_t>()[1], 7);
  EXPECT_EQ(error_message([] { Tensor::from_values(std::vector<float>{1.5f}, Shape{1}, DType::int32); }),
            "[tensor] from_values: 1.5 is not representable as int32");
  EXPECT_THROW(Tensor::from_values(std::vector<float>{-1.0f}, Shape{1}, DType::uint8), Error);
  EXPECT_THROW(Tensor::from_values(std::vector<float>{256.0f}, Shape{1}, DType::uint8), Error);
  EXPECT_EQ(error_message([] { Tensor::from_values(std::vector<float>{1, 2, 3}, Shape{2, 2}); }),
            "[tensor] from_values: 3 values for shape (2, 2) (4 elements)");
}

TEST(TensorValues, ItemAccessErrors) {
  Tensor tensor = iota_tensor();
  EXPECT_THROW(at(tensor, {0, 0}), Error);
  EXPECT_EQ(error_message([&] { at(tensor, {0, 3, 0}); }),
            "[tensor] item_as_double: index 3 out of range for dim 1 of shape (2, 3, 4)");
  EXPECT_EQ(error_message([&] { tensor.item(); }), "[tensor] item: tensor with shape (2, 3, 4) has 24 elements, not 1");
  EXPECT_EQ(tensor.slice(0, 1, 2).slice(1, 2, 3).slice(2, 1, 2).item(), 21.0);
}

TEST(TensorPrinting, MatrixLikePyTorch) {
  Tensor tensor = Tensor::from_values(std::vector<float>{1, 2.5f, -3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(tensor.str(),
            "Tensor(shape=(2, 3), dtype=float32, device=cpu)\n"
            "[[ 1.0000,  2.5000, -3.0000],\n"
            " [ 4.0000,  5.0000,  6.0000]]");
}

TEST(TensorPrinting, WholeNumbersIntegersAndScalars) {
  EXPECT_EQ(Tensor::from_values(std::vector<float>{1, 2, 30}, Shape{3}, DType::bfloat16).str(),
            "Tensor(shape=(3), dtype=bfloat16, device=cpu)\n[ 1.,  2., 30.]");
  EXPECT_EQ(Tensor::from_values(std::vector<float>{1, -2, 30}, Shape{3}, DType::int64).str(),
            "Tensor(shape=(3), dtype=int64, device=cpu)\n[ 1, -2, 30]");
  EXPECT_EQ(Tensor::from_values(std::vector<float>{2.5f}, Shape{}).str(),
            "Tensor(shape=(), dtype=float32, device=cpu)\n2.5000");
  EXPECT_EQ(Tensor::from_values(std::vector<float>{1e-5f, 1, 100}, Shape{3}).str(),
            "Tensor(shape=(3), dtype=float32, device=cpu)\n[1.0000e-05, 1.0000e+00, 1.0000e+02]");
}

TEST(TensorPrinting, ThreeDimensionsSeparateBlocksWithABlankLine) {
  Tensor tensor = iota_tensor().slice(2, 0, 2);
  EXPECT_EQ(tensor.str(),
            "Tensor(shape=(2, 3, 2), dtype=float32, device=cpu)\n"
            "[[[ 0.,  1.],\n"
            "  [ 4.,  5.],\n"
            "  [ 8.,  9.]],\n"
            "\n"
            " [[12., 13.],\n"
            "  [16., 17.],\n"
            "  [20., 21.]]]");
}

TEST(TensorPrinting, TruncatesLongTensors) {
  std::vector<float> values(100);
  std::iota(values.begin(), values.end(), 0.0f);
  Tensor vector = Tensor::from_values(values, Shape{100}, DType::int32);
  EXPECT_EQ(vector.str(6), "Tensor(shape=(100), dtype=int32, device=cpu)\n[ 0,  1,  2, ..., 97, 98, 99]");
  Tensor matrix = Tensor::from_values(values, Shape{10, 10}, DType::int32);
  EXPECT_EQ(matrix.str(16),
            "Tensor(shape=(10, 10), dtype=int32, device=cpu)\n"
            "[[ 0,  1, ...,  8,  9],\n"
            " [10, 11, ..., 18, 19],\n"
            " ...,\n"
            " [80, 81, ..., 88, 89],\n"
            " [90, 91, ..., 98, 99]]");
  // At the limit nothing is left out; the default limit (64) truncates 100 values.
  EXPECT_EQ(matrix.str(100).find("..."), std::string::npos);
  EXPECT_NE(matrix.str().find("..."), std::string::npos);
}

TEST(TensorPrinting, StridedViews) {
  Tensor tensor = Tensor::from_values(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::int32);
  EXPECT_EQ(tensor.transpose(0, 1).str(),
            "Tensor(shape=(3, 2), dtype=int32, device=cpu)\n"
            "[[1, 4],\n"
            " [2, 5],\n"
            " [3, 6]]");
}

TEST(TensorCopies, CopyBytesFrom) {
  Tensor source = iota_tensor();
  Tensor destination = Tensor::empty(Shape{2, 3, 4}, DType::float32);
  destination.copy_bytes_from(source);
  for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(at(destination, {1, 2, k}), double(20 + k));
  EXPECT_NE(destination.data(), source.data());
  // Into a contiguous view of a bigger tensor.
  Tensor big = Tensor::from_values(std::vector<float>(48, -1.0f), Shape{4, 3, 4});
  big.slice(0, 2, 4).copy_bytes_from(source);
  EXPECT_EQ(at(big, {1, 2, 3}), -1.0);
  EXPECT_EQ(at(big, {2, 0, 0}), 0.0);
  EXPECT_EQ(at(big, {3, 2, 3}), 23.0);
}

TEST(TensorCopies, CopyBytesFromChecksShapesDTypesAndLayout) {
  Tensor source = iota_tensor();
  EXPECT_EQ(error_message([&] { Tensor::empty(Shape{24}, DType::float32).copy_bytes_from(source); }),
            "[tensor] copy_bytes_from: shape (24) differs from the source's (2, 3, 4)");
  EXPECT_EQ(error_message([&] { Tensor::empty(Shape{2, 3, 4}, DType::int32).copy_bytes_from(source); }),
            "[tensor] copy_bytes_from: dtype int32 differs from the source's float32");
  EXPECT_THROW(Tensor::empty(Shape{4, 3, 2}, DType::float32).copy_bytes_from(source.transpose(0, 2)), Error);
}

TEST(TensorCopies, ToCpu) {
  Tensor tensor = iota_tensor();
  // Already there and contiguous: the same tensor.
  EXPECT_EQ(tensor.to(Device::cpu()).storage(), tensor.storage());
  // A strided view becomes a contiguous copy with the view's values.
  Tensor transposed = tensor.transpose(0, 2).slice(1, 1, 3);
  Tensor copy = transposed.to(Device::cpu());
  EXPECT_NE(copy.storage(), tensor.storage());
  EXPECT_TRUE(copy.is_contiguous());
  EXPECT_EQ(copy.shape(), Shape({4, 2, 2}));
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(at(copy, {k, j, i}), double(12 * i + 4 * (j + 1) + k));
}

TEST(TensorCopies, CopyAndSetBytesOnTheCpu) {
  std::vector<uint8_t> source{1, 2, 3, 4}, destination(4, 0);
  copy_bytes(destination.data(), Device::cpu(), source.data(), Device::cpu(), 3, Stream{});
  EXPECT_EQ(destination, (std::vector<uint8_t>{1, 2, 3, 0}));
  set_bytes(destination.data() + 1, Device::cpu(), 9, 2, Stream{});
  EXPECT_EQ(destination, (std::vector<uint8_t>{1, 9, 9, 0}));
}

TEST(TensorCopies, FromBlobWrapsWithoutAllocating) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  AllocatorStats before = allocator_for(Device::cpu()).stats();
  {
    Tensor tensor = Tensor::from_blob(owner->data(), Shape{3, 2}, DType::float32, Device::cpu(), owner);
    EXPECT_EQ(owner.use_count(), 2);
    EXPECT_FALSE(tensor.storage()->owns_memory());
    EXPECT_EQ(at(tensor, {2, 1}), 6.0);
    tensor.data_as<float>()[0] = 10.0f;
    EXPECT_EQ(allocator_for(Device::cpu()).stats().allocations, before.allocations);
  }
  EXPECT_EQ(owner.use_count(), 1);
  EXPECT_EQ((*owner)[0], 10.0f);
  EXPECT_EQ(allocator_for(Device::cpu()).stats().driver_frees, before.driver_frees);
}

TEST(CpuStreams, AreSynchronousNoOps) {
  EXPECT_EQ(compute_stream(Device::cpu()), Stream{});
  EXPECT_EQ(create_stream(Device::cpu()), Stream{});
  synchronize(Device::cpu(), Stream{});
  synchronize_device(Device::cpu());
  Event start(Device::cpu()), end(Device::cpu());
  start.record(Stream{});
  end.record(Stream{});
  end.wait(Stream{});
  end.synchronize();
  EXPECT_THROW(start.elapsed_ms(end), Error);
  Tensor tensor = iota_tensor();
  tensor.record_stream(Stream{});  // CPU tensors have no stream to order against
}

TEST(CpuStreams, AreNeverCapturedInGraphs) {
  EXPECT_FALSE(is_capturing(Device::cpu()));
  EXPECT_NE(error_message([] { GraphCapture capture(Device::cpu()); }).find("CUDA graphs need a CUDA device"),
            std::string::npos);
  EXPECT_FALSE(Graph().defined());
  EXPECT_EQ(allocator_for(Device::cpu()).stats().graph_pool_reserved_bytes, 0u);
}

TEST(NoCudaBuild, CudaRequestsSayTheBackendIsMissing) {
  if (cuda_compiled()) GTEST_SKIP() << "this build has the CUDA backend";
  const std::string expected = "[cuda] this build has no CUDA backend (configure with -DFAST_LLM_CUDA=ON)";
  EXPECT_EQ(error_message([] { Tensor::empty(Shape{2}, DType::float32, Device::cuda()); }), expected);
  EXPECT_THROW(allocator_for(Device::cuda()), NotSupportedError);
  EXPECT_THROW(compute_stream(Device::cuda()), NotSupportedError);
  EXPECT_THROW(Event(Device::cuda()), NotSupportedError);
  EXPECT_THROW(iota_tensor().to(Device::cuda()), NotSupportedError);
  EXPECT_THROW(GraphCapture(Device::cuda()), NotSupportedError);
  EXPECT_THROW(is_capturing(Device::cuda()), NotSupportedError);
}

TEST(Tensor, FromIndicesHoldsTheValuesInEitherIntegerType) {
  const std::vector<int64_t> values{0, 7, -3, 128255};
  const Tensor wide = Tensor::from_indices(values, DType::int64);
  const Tensor narrow = Tensor::from_indices(values, DType::int32);
  ASSERT_EQ(wide.shape(), Shape{4});
  ASSERT_EQ(narrow.dtype(), DType::int32);
  for (size_t index = 0; index < values.size(); ++index) {
    EXPECT_EQ(wide.data_as<int64_t>()[index], values[index]);
    EXPECT_EQ(narrow.data_as<int32_t>()[index], int32_t(values[index]));
  }
  EXPECT_THROW(Tensor::from_indices(values, DType::float32), Error);
}

}  // namespace
}  // namespace fast_llm
