// attention_decode: the CPU reference against attention_forward over the whole sequence (the cached keys plus the new
// one, causal, the new token's query last), in fp64 so the two agree to rounding; the cache rows it must write; its
// contract errors; and every variant against the reference on random caches (batches of different lengths, a sequence
// with an empty cache, one at the last free row, windows, GQA / MQA / MHA, head sizes 64 and 128, fp32 / bf16 / fp16).
// The CUDA cases skip themselves without a GPU (kernels_cuda_test runs them on the GPU machine).
#include "fast_llm/kernels/attention_decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fast_llm/kernels/attention.h"
#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

struct DecodeCase {
  std::vector<int32_t> lengths;  // cached tokens per sequence before the step
  int64_t capacity = 40, heads = 8, head_groups = 2, head_size = 64;
  std::optional<int64_t> window;
  DType dtype = DType::float32;
  int64_t batch() const { return int64_t(lengths.size()); }
  double softmax_scale() const { return 1.0 / std::sqrt(double(head_size)); }
};

Tensor lengths_tensor(const std::vector<int32_t>& lengths) {
  Tensor tensor = Tensor::empty(Shape{int64_t(lengths.size())}, DType::int32);
  std::copy(lengths.begin(), lengths.end(), tensor.data_as<int32_t>());
  return tensor;
}

// One sequence's attention through attention_forward: the cached rows 0..length-1 of `cache` and the new key as a
// document of length + 1 tokens, whose last query is the new one. Returns the last output row (heads, head_size).
std::vector<double> full_attention_last_row(const DecodeCase& c, int64_t sequence, const Tensor& query,
                                            const Tensor& key, const Tensor& value, const Tensor& key_cache,
                                            const Tensor& value_cache) {
  const int64_t length = c.lengths[size_t(sequence)] + 1, groups = c.head_groups, size = c.head_size;
  Tensor full_query = random_tensor(Shape{length, c.heads, size}, c.dtype, 99);
  Tensor full_key = Tensor::empty(Shape{length, groups, size}, c.dtype);
  Tensor full_value = Tensor::empty(Shape{length, groups, size}, c.dtype);
  const size_t element = dtype_size(c.dtype);
  auto copy_row = [&](Tensor& destination, int64_t row, const void* from) {
    std::memcpy(static_cast<char*>(destination.data()) + size_t(row * groups * size) * element, from,
                size_t(groups * size) * element);
  };
  for (int64_t position = 0; position + 1 < length; ++position) {
    const size_t offset = size_t((sequence * c.capacity + position) * groups * size) * element;
    copy_row(full_key, position, static_cast<const char*>(key_cache.data()) + offset);
    copy_row(full_value, position, static_cast<const char*>(value_cache.data()) + offset);
  }
  const size_t new_row = size_t(sequence * groups * size) * element;
  copy_row(full_key, length - 1, static_cast<const char*>(key.data()) + new_row);
  copy_row(full_value, length - 1, static_cast<const char*>(value.data()) + new_row);
  std::memcpy(static_cast<char*>(full_query.data()) + size_t((length - 1) * c.heads * size) * element,
              static_cast<const char*>(query.data()) + size_t(sequence * c.heads * size) * element,
              size_t(c.heads * size) * element);
  Tensor cu_seqlens = Tensor::empty(Shape{2}, DType::int32);
  cu_seqlens.data_as<int32_t>()[0] = 0;
  cu_seqlens.data_as<int32_t>()[1] = int32_t(length);
  Tensor output = Tensor::empty(full_query.shape(), c.dtype);
  Tensor logsumexp = Tensor::empty(Shape{c.heads, length}, DType::float64);
  attention_forward({.query = full_query, .key = full_key, .value = full_value, .cu_seqlens = cu_seqlens,
                     .max_seqlen = length, .output = output, .logsumexp = logsumexp,
                     .softmax_scale = c.softmax_scale(), .causal = true, .window_size = c.window});
  const std::vector<double> all = values_of(output);
  return {all.end() - c.heads * size, all.end()};
}

TEST(AttentionDecodeReference, EqualsAttentionForwardOverTheWholeSequence) {
  for (const DecodeCase& c : {DecodeCase{.lengths = {0, 5, 39, 17}, .dtype = DType::float64},
                              DecodeCase{.lengths = {12, 3}, .heads = 4, .head_groups = 4, .window = 4,
                                         .dtype = DType::float64},
                              DecodeCase{.lengths = {20}, .heads = 6, .head_groups = 1, .head_size = 16,
                                         .window = 30, .dtype = DType::float64}}) {
    const Shape query_shape{c.batch(), c.heads, c.head_size}, key_shape{c.batch(), c.head_groups, c.head_size};
    const Shape cache_shape{c.batch(), c.capacity, c.head_groups, c.head_size};
    const Tensor query = random_tensor(query_shape, c.dtype, 1, -2, 2);
    const Tensor key = random_tensor(key_shape, c.dtype, 2, -2, 2);
    const Tensor value = random_tensor(key_shape, c.dtype, 3);
    Tensor key_cache = random_tensor(cache_shape, c.dtype, 4, -2, 2);
    Tensor value_cache = random_tensor(cache_shape, c.dtype, 5);
    const Tensor lengths = lengths_tensor(c.lengths);
    Tensor output = Tensor::empty(query_shape, c.dtype);
    attention_decode({.query = query, .key = key, .value = value, .key_cache = key_cache, .value_cache = value_cache,
                      .lengths = lengths, .output = output, .softmax_scale = c.softmax_scale(),
                      .window_size = c.window});
    const std::vector<double> outputs = values_of(output), keys = values_of(key), cached_keys = values_of(key_cache);
    const std::vector<double> values = values_of(value), cached_values = values_of(value_cache);
    const int64_t row = c.head_groups * c.head_size;
    for (int64_t sequence = 0; sequence < c.batch(); ++sequence) {
      const std::vector<double> expected =
          full_attention_last_row(c, sequence, query, key, value, key_cache, value_cache);
      expect_near(std::span(outputs).subspan(size_t(sequence * c.heads * c.head_size), expected.size()), expected,
                  1e-12, 1e-12, fmt::format("sequence {}", sequence));
      // The new key and value are now the cache's row `length`.
      const size_t cached = size_t((sequence * c.capacity + c.lengths[size_t(sequence)]) * row);
      for (int64_t i = 0; i < row; ++i) {
        EXPECT_EQ(cached_keys[cached + size_t(i)], keys[size_t(sequence * row + i)]);
        EXPECT_EQ(cached_values[cached + size_t(i)], values[size_t(sequence * row + i)]);
      }
    }
  }
}

TEST(AttentionDecodeReference, RefusesAFullCacheAndBadShapes) {
  const DecodeCase c{.lengths = {40}, .capacity = 40};
  Tensor query = random_tensor(Shape{1, 8, 64}, DType::float32, 1);
  Tensor key = random_tensor(Shape{1, 2, 64}, DType::float32, 2);
  Tensor key_cache = random_tensor(Shape{1, 40, 2, 64}, DType::float32, 3);
  Tensor value_cache = random_tensor(Shape{1, 40, 2, 64}, DType::float32, 4);
  Tensor output = Tensor::empty(query.shape(), DType::float32);
  expect_error([&] {
    attention_decode({.query = query, .key = key, .value = key, .key_cache = key_cache, .value_cache = value_cache,
                      .lengths = lengths_tensor(c.lengths), .output = output});
  }, "sequence 0 has 40 cached tokens, the cache holds 40");
  Tensor small_cache = random_tensor(Shape{1, 40, 4, 64}, DType::float32, 3);
  expect_error([&] {
    attention_decode({.query = query, .key = key, .value = key, .key_cache = small_cache, .value_cache = value_cache,
                      .lengths = lengths_tensor({3}), .output = output});
  }, "[attention_decode] key_cache has shape");
}

void check_all_variants(DeviceType device_type) {
  std::vector<DecodeCase> cases;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16}) {
    cases.push_back({.lengths = {0, 7, 39, 300 % 40}, .heads = 32, .head_groups = 8, .head_size = 64, .dtype = dtype});
    cases.push_back({.lengths = {383}, .capacity = 384, .heads = 32, .head_groups = 8, .head_size = 128,
                     .dtype = dtype});
    cases.push_back({.lengths = {5, 130, 1, 2, 100}, .capacity = 200, .heads = 4, .head_groups = 1, .head_size = 128,
                     .window = 64, .dtype = dtype});
    cases.push_back({.lengths = {17, 3}, .heads = 6, .head_groups = 6, .head_size = 64, .window = 3, .dtype = dtype});
  }
  cases.push_back({.lengths = {9, 2}, .heads = 4, .head_groups = 2, .head_size = 80, .dtype = DType::float32});
  std::map<std::string, bool> ran;
  uint64_t seed = 7000;
  for (const DecodeCase& c : cases) {
    const Shape query_shape{c.batch(), c.heads, c.head_size}, key_shape{c.batch(), c.head_groups, c.head_size};
    const Shape cache_shape{c.batch(), c.capacity, c.head_groups, c.head_size};
    ConsistencyProblem<AttentionDecode> problem{
        .name = fmt::format("{} batch={} heads={}/{} head_size={} window={}", dtype_name(c.dtype), c.batch(), c.heads,
                            c.head_groups, c.head_size, c.window.value_or(0)),
        .dtype = c.dtype, .tolerance = std::nullopt, .exact = false, .tensors = {}, .call = {}};
    problem.tensors["query"] = input(random_tensor(query_shape, c.dtype, ++seed, -2, 2));
    problem.tensors["key"] = input(random_tensor(key_shape, c.dtype, ++seed, -2, 2));
    problem.tensors["value"] = input(random_tensor(key_shape, c.dtype, ++seed));
    problem.tensors["key_cache"] = accumulated_output(random_tensor(cache_shape, c.dtype, ++seed, -2, 2));
    problem.tensors["value_cache"] = accumulated_output(random_tensor(cache_shape, c.dtype, ++seed));
    problem.tensors["lengths"] = input(lengths_tensor(c.lengths));
    problem.tensors["output"] = output(Tensor::empty(query_shape, c.dtype));
    problem.call = [c](TensorMap& t, const auto& run) {
      run({.query = t.at("query"), .key = t.at("key"), .value = t.at("value"), .key_cache = t.at("key_cache"),
           .value_cache = t.at("value_cache"), .lengths = t.at("lengths"), .output = t.at("output"),
           .softmax_scale = c.softmax_scale(), .window_size = c.window});
    };
    for (const VariantOutcome& outcome : check_variants(problem, device_type))
      ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;
  }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

// The CPU has only the reference (checked above against attention_forward), so only the CUDA variants are compared.
TEST(AttentionDecodeConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_all_variants(DeviceType::cuda);
}

}  // namespace
}  // namespace fast_llm::kernels
