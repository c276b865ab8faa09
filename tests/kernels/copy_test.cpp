// Tests of fill / copy / cast (kernels/copy.h): the CPU reference against bit patterns worked out by hand (round to
// nearest even and its ties, float64 -> 16-bit in one rounding, overflow, subnormals, NaN, saturating float -> integer,
// modular integer -> integer, integer -> float through float64), strided views, exact copies (NaN payloads included)
// and errors; then every CUDA variant bit for bit against the reference on every dtype pair and layout.
#include "fast_llm/kernels/copy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/consistency.h"
#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr DType kAllDTypes[] = {DType::float32, DType::float64, DType::bfloat16, DType::float16, DType::int32,
                                DType::int64,   DType::uint8,   DType::uint16,   DType::uint32};

uint16_t bits16(const Tensor& tensor, int64_t index) {
  uint16_t bits;
  std::memcpy(&bits, static_cast<const char*>(tensor.data()) + index * 2, 2);
  return bits;
}

// Fills a one-element tensor of `dtype` with `value` and returns it.
Tensor filled_with(DType dtype, double value) {
  Tensor tensor = Tensor::empty(Shape{1}, dtype);
  std::memset(tensor.data(), 0x5a, tensor.nbytes());
  fill({.tensor = tensor, .value = value});
  return tensor;
}

TEST(FillReference, RoundsOnceToNearestEven) {
  struct Case {
    double value;
    uint16_t bfloat16_bits, float16_bits;
  };
  const Case cases[] = {
      {1.0 + 0x1p-8, 0x3f80, 0x3c04},           // bf16 tie -> even (1); exact in fp16
      {1.0 + 0x3p-8, 0x3f82, 0x3c0c},           // bf16 tie -> even (1 + 2^-6); exact in fp16
      {1.0 + 0x1p-8 + 0x1p-40, 0x3f81, 0x3c04},  // just above the bf16 tie (rounding through fp32 would give 1)
      {1.0 + 0x1p-11, 0x3f80, 0x3c00},          // fp16 tie -> even (1)
      {1.0 + 0x3p-11, 0x3f80, 0x3c02},          // fp16 tie -> even (1 + 2^-9)
      {1.0 + 0x1p-11 + 0x1p-40, 0x3f80, 0x3c01},  // just above the fp16 tie
      {-0.0, 0x8000, 0x8000},
      {65504, 0x4780, 0x7bff},                  // fp16's largest finite; bf16 rounds 65504 up to 65536
      {65520, 0x4780, 0x7c00},                  // fp16 tie between 65504 and 2^16 -> infinity
      {1e39, 0x7f80, 0x7c00},                   // above every finite value -> infinity
      {-INFINITY, 0xff80, 0xfc00},
      {0x1p-25, 0x3300, 0x0000},                // fp16: tie between 0 and the smallest subnormal -> 0
      {0x1p-25 + 0x1p-40, 0x3300, 0x0001},      // just above it
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{:a}", c.value));
    EXPECT_EQ(bits16(filled_with(DType::bfloat16, c.value), 0), c.bfloat16_bits);
    EXPECT_EQ(bits16(filled_with(DType::float16, c.value), 0), c.float16_bits);
  }
  EXPECT_TRUE(std::isnan(filled_with(DType::bfloat16, NAN).item()));
  EXPECT_TRUE(std::isnan(filled_with(DType::float16, NAN).item()));
  EXPECT_EQ(filled_with(DType::float32, 1.0 + 0x1p-24).item(), 1.0);  // fp32 tie -> even
  EXPECT_EQ(filled_with(DType::float32, 1.0 + 0x1p-24 + 0x1p-50).item(), 1.0 + 0x1p-23);
  EXPECT_EQ(filled_with(DType::float64, 0.1).item(), 0.1);
}

TEST(FillReference, IntegersTruncateAndSaturate) {
  EXPECT_EQ(filled_with(DType::int32, 3.7).data_as<int32_t>()[0], 3);
  EXPECT_EQ(filled_with(DType::int32, -3.7).data_as<int32_t>()[0], -3);
  EXPECT_EQ(filled_with(DType::int32, 1e20).data_as<int32_t>()[0], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(filled_with(DType::int32, -1e20).data_as<int32_t>()[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(filled_with(DType::int32, NAN).data_as<int32_t>()[0], 0);
  EXPECT_EQ(filled_with(DType::int64, 9.3e18).data_as<int64_t>()[0], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(filled_with(DType::int64, -9.3e18).data_as<int64_t>()[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(filled_with(DType::int64, 0x1p62).data_as<int64_t>()[0], int64_t(1) << 62);
  EXPECT_EQ(filled_with(DType::uint8, -5).data_as<uint8_t>()[0], 0);
  EXPECT_EQ(filled_with(DType::uint8, 300).data_as<uint8_t>()[0], 255);
  EXPECT_EQ(filled_with(DType::uint8, 254.9).data_as<uint8_t>()[0], 254);
  EXPECT_EQ(filled_with(DType::uint16, 65535.5).data_as<uint16_t>()[0], 65535);
  EXPECT_EQ(filled_with(DType::uint32, 4294967295.5).data_as<uint32_t>()[0], 4294967295u);
  EXPECT_EQ(filled_with(DType::uint32, INFINITY).data_as<uint32_t>()[0], 4294967295u);
}

TEST(FillReference, StridedViewLeavesTheRestUntouched) {
  Tensor tensor = filled(Shape{3, 5}, DType::float32, 7);
  Tensor column = tensor.slice(1, 2, 3);  // (3, 1), stride 5
  fill({.tensor = column, .value = -1});
  expect_near(tensor, {7, 7, -1, 7, 7, 7, 7, -1, 7, 7, 7, 7, -1, 7, 7}, 0, 0, "column 2 filled");
  Tensor transposed = filled(Shape{2, 3}, DType::bfloat16, 0).transpose(0, 1);
  fill({.tensor = transposed, .value = 2.5});
  expect_near(transposed, {2.5, 2.5, 2.5, 2.5, 2.5, 2.5}, 0, 0, "transposed view");
}

// A one-dimensional tensor of `dtype` holding the given raw 32-bit (fp32) or 64-bit (fp64) patterns.
Tensor float32_from_bits(std::initializer_list<uint32_t> bits) {
  Tensor tensor = Tensor::empty(Shape{int64_t(bits.size())}, DType::float32);
  std::memcpy(tensor.data(), bits.begin(), bits.size() * 4);
  return tensor;
}

Tensor cast_to(const Tensor& source, DType dtype) {
  Tensor destination = Tensor::empty(source.shape(), dtype);
  std::memset(destination.data(), 0x5a, destination.nbytes());
  cast({.source = source, .destination = destination});
  return destination;
}

TEST(CastReference, Float32ToBfloat16Bits) {
  const Tensor source = float32_from_bits({
      0x3f808000,  // 1 + 2^-8: tie -> 0x3f80 (even)
      0x3f818000,  // tie -> 0x3f82 (even)
      0x3f808001,  // above the tie -> 0x3f81
      0x3f807fff,  // below the tie -> 0x3f80
      0x7f7fffff,  // fp32's largest: rounds past bf16's largest -> infinity
      0xff800000,  // -infinity
      0x00000001,  // smallest subnormal -> 0
      0x00018000,  // subnormal tie -> 0x0002 (even)
      0x80000000,  // -0
  });
  const Tensor result = cast_to(source, DType::bfloat16);
  const uint16_t expected[] = {0x3f80, 0x3f82, 0x3f81, 0x3f80, 0x7f80, 0xff80, 0x0000, 0x0002, 0x8000};
  for (int index = 0; index < 9; ++index) EXPECT_EQ(bits16(result, index), expected[index]) << "element " << index;
  const Tensor nan = cast_to(float32_from_bits({0x7fc00000, 0xffc00001}), DType::bfloat16);
  EXPECT_TRUE(std::isnan(nan.item_as_double(std::array<int64_t, 1>{0})));
  EXPECT_TRUE(std::isnan(nan.item_as_double(std::array<int64_t, 1>{1})));
}

TEST(CastReference, Float32ToFloat16Bits) {
  const Tensor source = make_tensor({65519, 65520, 0x1p-25, 0x3p-26, 0x1p-24, 1.0 + 0x1p-11, 1.0 + 0x3p-11, -2.0},
                                    Shape{8}, DType::float32);
  const Tensor result = cast_to(source, DType::float16);
  // 65519 -> 65504; 65520 ties to infinity; 2^-25 ties to 0; 3 * 2^-26 rounds up to 2^-24; exact subnormal; ties.
  const uint16_t expected[] = {0x7bff, 0x7c00, 0x0000, 0x0001, 0x0001, 0x3c00, 0x3c02, 0xc000};
  for (int index = 0; index < 8; ++index) EXPECT_EQ(bits16(result, index), expected[index]) << "element " << index;
}

TEST(CastReference, Float64RoundsOnce) {
  const Tensor source = make_tensor({1.0 + 0x1p-8 + 0x1p-40, 1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-24 + 0x1p-50, 0.1},
                                    Shape{4}, DType::float64);
  const Tensor to_bfloat16 = cast_to(source, DType::bfloat16);
  EXPECT_EQ(bits16(to_bfloat16, 0), 0x3f81);
  const Tensor to_float16 = cast_to(source, DType::float16);
  EXPECT_EQ(bits16(to_float16, 1), 0x3c01);
  const Tensor to_float32 = cast_to(source, DType::float32);
  EXPECT_EQ(to_float32.data_as<float>()[2], 1.0f + 0x1p-23f);
  EXPECT_EQ(to_float32.data_as<float>()[3], 0.1f);
}

TEST(CastReference, IntegersToFloats) {
  Tensor source = Tensor::empty(Shape{5}, DType::int64);
  const int64_t values[] = {16777217, -7, 257, 259, (int64_t(1) << 53) + 1};
  std::memcpy(source.data(), values, sizeof(values));
  const Tensor to_float32 = cast_to(source, DType::float32);
  EXPECT_EQ(to_float32.data_as<float>()[0], 16777216.0f);  // 2^24 + 1 ties to even
  EXPECT_EQ(to_float32.data_as<float>()[1], -7.0f);
  const Tensor to_bfloat16 = cast_to(source, DType::bfloat16);
  EXPECT_EQ(to_float(to_bfloat16.data_as<bfloat16>()[2]), 256.0f);  // 257 ties to 256 (even)
  EXPECT_EQ(to_float(to_bfloat16.data_as<bfloat16>()[3]), 260.0f);  // 259 ties to 260 (even)
  const Tensor to_float64 = cast_to(source, DType::float64);
  EXPECT_EQ(to_float64.data_as<double>()[4], 0x1p53);  // through float64: 2^53 + 1 rounds to 2^53
}

TEST(CastReference, FloatsToIntegersAndIntegersToIntegers) {
  const Tensor floats = make_tensor({-2.5, 2.99, NAN, INFINITY, -INFINITY, 1e10}, Shape{6}, DType::float32);
  const Tensor to_int32 = cast_to(floats, DType::int32);
  const int32_t expected_int32[] = {-2, 2, 0, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(),
                                    std::numeric_limits<int32_t>::max()};
  for (int index = 0; index < 6; ++index) EXPECT_EQ(to_int32.data_as<int32_t>()[index], expected_int32[index]);
  const Tensor to_uint8 = cast_to(cast_to(floats, DType::float16), DType::uint8);
  const uint8_t expected_uint8[] = {0, 2, 0, 255, 0, 255};  // 1e10 is infinity in fp16
  for (int index = 0; index < 6; ++index) EXPECT_EQ(to_uint8.data_as<uint8_t>()[index], expected_uint8[index]);

  Tensor integers = Tensor::empty(Shape{3}, DType::int64);
  const int64_t values[] = {300, -1, (int64_t(1) << 40) + 5};
  std::memcpy(integers.data(), values, sizeof(values));
  const Tensor to_uint8_from_int = cast_to(integers, DType::uint8);
  EXPECT_EQ(to_uint8_from_int.data_as<uint8_t>()[0], 44);  // modulo 256
  EXPECT_EQ(to_uint8_from_int.data_as<uint8_t>()[1], 255);
  EXPECT_EQ(cast_to(integers, DType::int32).data_as<int32_t>()[2], 5);
  EXPECT_EQ(cast_to(integers, DType::uint16).data_as<uint16_t>()[1], 65535);
}

TEST(CastReference, SixteenBitToSixteenBit) {
  // fp16 1 + 2^-10 is below half a bf16 ulp of 1 -> 1; bf16 1/3 (8 significant bits) is exact in fp16.
  const Tensor half = make_tensor({1.0 + 0x1p-10, 1.0 + 0x1p-8 + 0x1p-10}, Shape{2}, DType::float16);
  const Tensor as_bfloat16 = cast_to(half, DType::bfloat16);
  EXPECT_EQ(bits16(as_bfloat16, 0), 0x3f80);
  EXPECT_EQ(bits16(as_bfloat16, 1), 0x3f81);  // just above the tie
  const Tensor third = make_tensor({1.0 / 3}, Shape{1}, DType::bfloat16);
  EXPECT_EQ(cast_to(third, DType::float16).item(), third.item());
}

TEST(CopyReference, StridedAndExact) {
  // NaN payloads (quiet and signalling) and -0 come through bit for bit.
  const Tensor source = float32_from_bits({0x7fc12345, 0x7f800001, 0x80000000, 0x3f800000, 0x40000000, 0xc0400000});
  Tensor destination = Tensor::empty(Shape{6}, DType::float32);
  copy({.source = source, .destination = destination});
  EXPECT_EQ(std::memcmp(source.data(), destination.data(), 24), 0);

  // Transposed source into a contiguous destination, and a contiguous source into a transposed destination.
  const Tensor matrix = make_tensor({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::bfloat16);
  Tensor transposed = filled(Shape{3, 2}, DType::bfloat16, NAN);
  copy({.source = matrix.transpose(0, 1), .destination = transposed});
  expect_near(transposed, {1, 4, 2, 5, 3, 6}, 0, 0, "transposed source");
  Tensor storage = filled(Shape{3, 2}, DType::bfloat16, NAN);
  Tensor view = storage.transpose(0, 1);
  copy({.source = matrix, .destination = view});
  expect_near(storage, {1, 4, 2, 5, 3, 6}, 0, 0, "transposed destination");
}

TEST(CopyReference, Errors) {
  Tensor a = filled(Shape{2, 3}, DType::float32, 0);
  Tensor b = filled(Shape{3, 2}, DType::float32, 0);
  Tensor c = filled(Shape{2, 3}, DType::bfloat16, 0);
  expect_error([&] { copy({.source = a, .destination = b}); }, "[copy] source has shape (2, 3), destination (3, 2)");
  expect_error([&] { copy({.source = a, .destination = c}); },
               "[copy] source has dtype float32, destination bfloat16 (use cast to convert)");
  expect_error([&] { cast({.source = a, .destination = b}); }, "[cast] source has shape (2, 3), destination (3, 2)");
  Tensor undefined;
  expect_error([&] { fill({.tensor = undefined, .value = 1.0}); }, "[fill] tensor is undefined");
  expect_error([&] { cast({.source = undefined, .destination = c}); }, "[cast] source and destination must be defined");
}

// ---------------------------------------------------------------------------------------------------------------------
// Consistency of every variant with the reference (bit for bit).

// Values covering what conversions treat specially: ties of every 16-bit type, NaN, infinities, out-of-range values
// for integers, negative values for unsigned ones, plus random values in [-300, 300).
Tensor special_values(int64_t count, DType dtype, uint64_t seed) {
  std::vector<double> values = uniform_values(count, seed, -300, 300);
  const double specials[] = {NAN,           INFINITY, -INFINITY,     1.0 + 0x1p-8, 1.0 + 0x3p-8, 1.0 + 0x1p-11,
                             65520,         1e10,     -1e10,         257,          -2.5,         0x1p-25,
                             1.0 + 0x1p-8 + 0x1p-40, 4294967295.5, -0.0,         3e38,         1e300};
  for (size_t index = 0; index < std::size(specials) && index < values.size(); ++index)
    values[index * 7 % values.size()] = specials[index];
  if (!is_floating(dtype))
    for (double& value : values) value = std::isfinite(value) ? std::trunc(std::clamp(value, -1e9, 1e9)) : 3;
  Tensor tensor = Tensor::empty(Shape{count}, dtype);
  // Written by the test helpers, not by cast, so the inputs do not depend on the code under test.
  for (int64_t index = 0; index < count; ++index) {
    char* element = static_cast<char*>(tensor.data()) + index * tensor.element_size();
    switch (dtype) {
      case DType::uint8: *reinterpret_cast<uint8_t*>(element) = uint8_t(int64_t(values[size_t(index)])); break;
      case DType::uint16: *reinterpret_cast<uint16_t*>(element) = uint16_t(int64_t(values[size_t(index)])); break;
      case DType::uint32: *reinterpret_cast<uint32_t*>(element) = uint32_t(int64_t(values[size_t(index)])); break;
      default: write_double(element, dtype, values[size_t(index)]);
    }
  }
  return tensor;
}

// The layouts a problem's tensors take: contiguous (count elements), or a transposed (17, 241) view of them.
enum class CopyLayout { contiguous, transposed };

TensorSpec copy_operand(Tensor storage, CopyLayout layout, bool is_output) {
  std::function<Tensor(const Tensor&)> view;
  // 4097 = 17 x 241 elements: no vector width divides it, so every vectorised path has a tail.
  if (layout == CopyLayout::transposed)
    view = [](const Tensor& tensor) { return tensor.reshape(Shape{241, 17}).transpose(0, 1); };
  return is_output ? output(std::move(storage), view) : input(std::move(storage), view);
}

TEST(CopyConsistency, CudaVariantsMatchTheReferenceBitForBit) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  constexpr int64_t kCount = 17 * 241;
  uint64_t seed = 9000;
  for (CopyLayout layout : {CopyLayout::contiguous, CopyLayout::transposed}) {
    for (DType from : kAllDTypes) {
      for (DType to : kAllDTypes) {
        ConsistencyProblem<Cast> problem{.name = fmt::format("cast {} -> {} layout {}", dtype_name(from),
                                                             dtype_name(to), int(layout)),
                                         .dtype = to, .exact = true, .tensors = {}, .call = {}};
        problem.tensors["source"] = copy_operand(special_values(kCount, from, ++seed), layout, false);
        // The destination contiguous under a transposed source, and the other way round.
        problem.tensors["destination"] = output(Tensor::empty(Shape{kCount}, to));
        if (layout == CopyLayout::transposed)
          problem.tensors["destination"].view = [](const Tensor& tensor) { return tensor.reshape(Shape{17, 241}); };
        problem.call = [](TensorMap& tensors, const auto& run) {
          run({.source = tensors.at("source"), .destination = tensors.at("destination")});
        };
        const ConsistencyReport report = check_variants(problem, DeviceType::cuda);
        EXPECT_TRUE(report_ran(report, "cast:cuda:elementwise")) << problem.name;
      }
      for (double value : {-2.5, 1.0 + 0x1p-8 + 0x1p-40, 65520.0, 1e10, double(NAN)}) {
        ConsistencyProblem<Fill> problem{.name = fmt::format("fill {} {} layout {}", dtype_name(from), value,
                                                             int(layout)),
                                         .dtype = from, .exact = true, .tensors = {}, .call = {}};
        problem.tensors["tensor"] = copy_operand(Tensor::empty(Shape{kCount}, from), layout, true);
        problem.call = [value](TensorMap& tensors, const auto& run) {
          run({.tensor = tensors.at("tensor"), .value = value});
        };
        EXPECT_TRUE(report_ran(check_variants(problem, DeviceType::cuda), "fill:cuda:elementwise")) << problem.name;
      }
      ConsistencyProblem<Copy> problem{.name = fmt::format("copy {} layout {}", dtype_name(from), int(layout)),
                                       .dtype = from, .exact = true, .tensors = {}, .call = {}};
      problem.tensors["source"] = copy_operand(special_values(kCount, from, ++seed), layout, false);
      problem.tensors["destination"] = output(Tensor::empty(Shape{kCount}, from));
      if (layout == CopyLayout::transposed)
        problem.tensors["destination"].view = [](const Tensor& tensor) { return tensor.reshape(Shape{17, 241}); };
      problem.call = [](TensorMap& tensors, const auto& run) {
        run({.source = tensors.at("source"), .destination = tensors.at("destination")});
      };
      EXPECT_TRUE(report_ran(check_variants(problem, DeviceType::cuda), "copy:cuda:elementwise")) << problem.name;
    }
  }
}

TEST(CopyConsistency, CudaCopiesBetweenDevices) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const Tensor host = make_tensor({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::bfloat16);
  Tensor device = Tensor::empty(Shape{2, 3}, DType::bfloat16, Device::cuda(0));
  copy({.source = host, .destination = device});
  Tensor back = filled(Shape{2, 3}, DType::bfloat16, NAN);
  copy({.source = device, .destination = back});
  synchronize_device(Device::cuda(0));
  expect_near(back, {1, 2, 3, 4, 5, 6}, 0, 0, "host -> cuda -> host");
  Tensor transposed_host = filled(Shape{3, 2}, DType::bfloat16, 0);
  expect_error([&] { copy({.source = device.transpose(0, 1), .destination = transposed_host}); },
               "[copy] a copy from cuda:0 to cpu needs contiguous tensors");
}

}  // namespace
}  // namespace fast_llm::kernels
