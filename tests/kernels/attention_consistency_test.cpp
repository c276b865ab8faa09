// Consistency of every attention_forward / attention_backward variant with the CPU reference: packed documents of
// mixed lengths (an empty one, a single token), grouped-query and multi-head layouts, head sizes 32 / 64 / 80 / 128,
// causal, windowed and bidirectional masks, fp32 / bf16 / fp16 / fp64, contiguous tensors and views into a fused QKV
// buffer. The backward problems start from the reference forward's output and logsumexp. A variant may decline some
// problems (a head size, a dtype), but must run at least one. The reference itself is checked against a dense
// implementation and finite differences in attention_test.cpp.
// The CUDA variants also run the shapes their tiles care about (cuda_cases): documents of lengths around the 16 / 64 /
// 128-row tiles (1, 17, 63, 64, 65, 127, 128, 129, 200, 256, 383, 513), windows of 1, 7 and 100, head groups of 1 / 3 /
// 4 heads and MQA, head sizes 64 and 128 (80 for the reference variant), bf16 / fp16 / fp32, against the CPU reference
// on the same rounded inputs (fp32 math). Backward cases with rotary tables check the rotation of the gradients that
// the tile variants fold into their stores (and that the others, or tables the tile variants cannot read, leave to
// rotary_apply) against the reference's rotary_apply.
#include "fast_llm/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "fast_llm/kernels/op_profiler.h"
#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

struct AttentionCase {
  std::vector<int64_t> document_lengths;
  int64_t heads = 8, head_groups = 2, head_size = 64;
  bool causal = true;
  std::optional<int64_t> window;
  DType dtype = DType::bfloat16;
  bool fused = false;  // query, key and value are views into one (tokens, heads + 2 groups, head_size) buffer
  // The backward returns the gradients before a rotary rotation by tables of rotary_dims / 2 columns (0: none;
  // head_size / 2 is what the CUDA tile variants fold into their stores, fewer goes through rotary_apply).
  int64_t rotary_half = 0;
  // The tables are views with rows of rotary_half + 1 floats: full width, but a row stride the tile kernels do not
  // read, so that they hand both gradients to rotary_apply.
  bool rotary_padded = false;

  int64_t tokens() const { return std::accumulate(document_lengths.begin(), document_lengths.end(), int64_t(0)); }
  int64_t longest() const { return *std::max_element(document_lengths.begin(), document_lengths.end()); }
  double softmax_scale() const { return 1.0 / std::sqrt(double(head_size)); }
};

std::string case_name(const AttentionCase& c) {
  return fmt::format("{} tokens={} heads={}/{} head_size={} causal={} window={} rotary_dims={}{} {}",
                     dtype_name(c.dtype), c.tokens(), c.heads, c.head_groups, c.head_size, c.causal,
                     c.window.value_or(0), 2 * c.rotary_half, c.rotary_padded ? " (padded rows)" : "",
                     c.fused ? "fused" : "");
}

std::vector<AttentionCase> attention_cases() {
  struct Layout {
    std::vector<int64_t> document_lengths;
    int64_t heads, head_groups, head_size;
  };
  const std::vector<Layout> layouts{{{1, 17, 0, 64, 45}, 8, 2, 64},
                                    {{128}, 4, 4, 128},
                                    {{33, 7}, 6, 1, 80},
                                    {{5, 3, 24}, 4, 2, 32}};
  std::vector<AttentionCase> cases;
  for (DType dtype : {DType::bfloat16, DType::float16, DType::float32, DType::float64})
    for (const Layout& layout : layouts)
      for (const auto& [causal, window] : std::vector<std::pair<bool, std::optional<int64_t>>>{
               {true, std::nullopt}, {true, 16}, {false, std::nullopt}, {false, 16}})
        for (bool fused : {false, true})
          cases.push_back({.document_lengths = layout.document_lengths, .heads = layout.heads,
                           .head_groups = layout.head_groups, .head_size = layout.head_size, .causal = causal,
                           .window = window, .dtype = dtype, .fused = fused});
  // Rotary tables over the whole head and over half of it, on separate and fused tensors.
  for (DType dtype : {DType::bfloat16, DType::float32})
    for (const Layout& layout : layouts)
      for (int64_t rotary_half : {layout.head_size / 2, layout.head_size / 4})
        for (bool fused : {false, true})
          cases.push_back({.document_lengths = layout.document_lengths, .heads = layout.heads,
                           .head_groups = layout.head_groups, .head_size = layout.head_size, .causal = true,
                           .window = std::nullopt, .dtype = dtype, .fused = fused, .rotary_half = rotary_half});
  return cases;
}

Tensor cu_seqlens_of(const AttentionCase& c) {
  std::vector<double> offsets{0};
  for (int64_t length : c.document_lengths) offsets.push_back(offsets.back() + double(length));
  return make_tensor(offsets, Shape{int64_t(offsets.size())}, DType::int32);
}

// Query, key and value specs: separate tensors, or views into one fused buffer (the same storage for all three, so
// the harness copies it once per tensor; each view reads its own heads).
void add_query_key_value(ConsistencyProblem<AttentionForward>* forward, ConsistencyProblem<AttentionBackward>* backward,
                         const AttentionCase& c, const Tensor& query, const Tensor& key, const Tensor& value) {
  const auto add = [&](const std::string& name, TensorSpec spec) {
    if (forward) forward->tensors[name] = spec;
    if (backward) backward->tensors[name] = spec;
  };
  if (!c.fused) {
    add("query", input(query));
    add("key", input(key));
    add("value", input(value));
    return;
  }
  // (tokens, heads + 2 groups, head_size): [query heads | key groups | value groups]
  const int64_t width = c.heads + 2 * c.head_groups;
  std::vector<double> fused(size_t(c.tokens() * width * c.head_size));
  const std::vector<double> q = values_of(query), k = values_of(key), v = values_of(value);
  for (int64_t token = 0; token < c.tokens(); ++token)
    for (int64_t head = 0; head < width; ++head)
      for (int64_t channel = 0; channel < c.head_size; ++channel) {
        double x;
        if (head < c.heads)
          x = q[size_t((token * c.heads + head) * c.head_size + channel)];
        else if (head < c.heads + c.head_groups)
          x = k[size_t((token * c.head_groups + head - c.heads) * c.head_size + channel)];
        else
          x = v[size_t((token * c.head_groups + head - c.heads - c.head_groups) * c.head_size + channel)];
        fused[size_t((token * width + head) * c.head_size + channel)] = x;
      }
  const Tensor storage = make_tensor(fused, Shape{c.tokens(), width, c.head_size}, c.dtype);
  const int64_t heads = c.heads, groups = c.head_groups;
  add("query", input(storage, [heads](const Tensor& t) { return t.slice(1, 0, heads); }));
  add("key", input(storage, [heads, groups](const Tensor& t) { return t.slice(1, heads, heads + groups); }));
  add("value",
      input(storage, [heads, groups](const Tensor& t) { return t.slice(1, heads + groups, heads + 2 * groups); }));
}

// Whether each variant ran at least one problem.
void record(std::map<std::string, bool>& ran, const ConsistencyReport& report) {
  for (const VariantOutcome& outcome : report) ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;
}

// Tile-boundary shapes for the CUDA variants.
std::vector<AttentionCase> cuda_cases() {
  struct Layout {
    std::vector<int64_t> document_lengths;
    int64_t heads, head_groups, head_size;
  };
  const std::vector<Layout> layouts{{{1, 17, 63, 64, 65, 200, 513}, 6, 2, 64},  // 3 heads per group
                                    {{513, 1, 130}, 8, 2, 128},                 // 4 heads per group
                                    {{200, 64, 17}, 4, 4, 128},                 // multi-head
                                    {{65, 300}, 4, 1, 64},                      // multi-query
                                    {{127, 128, 129, 256, 383}, 4, 2, 128},     // around the 128-row wgmma tiles
                                    {{63, 129}, 3, 1, 80}};                     // the reference variant only
  const std::vector<std::pair<bool, std::optional<int64_t>>> masks{
      {true, std::nullopt}, {true, 1}, {true, 7}, {true, 100}, {false, std::nullopt}, {false, 7}};
  std::vector<AttentionCase> cases;
  for (DType dtype : {DType::bfloat16, DType::float16, DType::float32})
    for (const Layout& layout : layouts)
      for (const auto& [causal, window] : masks)
        cases.push_back({.document_lengths = layout.document_lengths, .heads = layout.heads,
                         .head_groups = layout.head_groups, .head_size = layout.head_size, .causal = causal,
                         .window = window, .dtype = dtype, .fused = false});
  // The rotary inverse folded into the tile kernels' stores, at the tile boundaries; and full-width tables they
  // cannot read, which go to rotary_apply.
  for (DType dtype : {DType::bfloat16, DType::float16})
    for (const Layout& layout : layouts)
      for (bool padded : {false, true})
        cases.push_back({.document_lengths = layout.document_lengths, .heads = layout.heads,
                         .head_groups = layout.head_groups, .head_size = layout.head_size, .causal = true,
                         .window = std::nullopt, .dtype = dtype, .fused = false,
                         .rotary_half = layout.head_size / 2, .rotary_padded = padded});
  return cases;
}

void check_all_variants(const std::vector<AttentionCase>& cases, DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 40000;
  for (const AttentionCase& c : cases) {
    const Shape query_shape{c.tokens(), c.heads, c.head_size}, key_shape{c.tokens(), c.head_groups, c.head_size};
    const Tensor query = random_tensor(query_shape, c.dtype, ++seed, -2, 2);
    const Tensor key = random_tensor(key_shape, c.dtype, ++seed, -2, 2);
    const Tensor value = random_tensor(key_shape, c.dtype, ++seed, -2, 2);
    const Tensor cu_seqlens = cu_seqlens_of(c);

    ConsistencyProblem<AttentionForward> forward{.name = case_name(c), .dtype = c.dtype, .exact = false, .tensors = {},
                                                 .call = {}};
    add_query_key_value(&forward, nullptr, c, query, key, value);
    forward.tensors["cu_seqlens"] = input(cu_seqlens);
    forward.tensors["output"] = output(Tensor::empty(query_shape, c.dtype));
    forward.tensors["logsumexp"] = output(Tensor::empty(Shape{c.heads, c.tokens()}, DType::float32));
    forward.call = [c](TensorMap& t, const auto& run) {
      run({.query = t.at("query"), .key = t.at("key"), .value = t.at("value"), .cu_seqlens = t.at("cu_seqlens"),
           .max_seqlen = c.longest(), .output = t.at("output"), .logsumexp = t.at("logsumexp"),
           .softmax_scale = c.softmax_scale(), .causal = c.causal, .window_size = c.window});
    };
    record(ran, check_variants(forward, device_type));

    // The saved output and logsumexp every backward variant starts from: the reference forward's.
    Tensor saved_output = Tensor::empty(query_shape, c.dtype);
    Tensor saved_logsumexp = Tensor::empty(Shape{c.heads, c.tokens()}, DType::float32);
    OpRegistry<AttentionForward>::instance().find("reference", Device::cpu()).run(
        {.query = query, .key = key, .value = value, .cu_seqlens = cu_seqlens, .max_seqlen = c.longest(),
         .output = saved_output, .logsumexp = saved_logsumexp, .softmax_scale = c.softmax_scale(),
         .causal = c.causal, .window_size = c.window});

    ConsistencyProblem<AttentionBackward> backward{.name = case_name(c), .dtype = c.dtype, .exact = false,
                                                   .tensors = {}, .call = {}};
    add_query_key_value(nullptr, &backward, c, query, key, value);
    backward.tensors["grad_output"] = input(random_tensor(query_shape, c.dtype, ++seed, -1, 1));
    backward.tensors["output"] = input(saved_output);
    backward.tensors["logsumexp"] = input(saved_logsumexp);
    backward.tensors["cu_seqlens"] = input(cu_seqlens);
    backward.tensors["grad_query"] = output(Tensor::empty(query_shape, c.dtype));
    backward.tensors["grad_key"] = output(Tensor::empty(key_shape, c.dtype));
    backward.tensors["grad_value"] = output(Tensor::empty(key_shape, c.dtype));
    if (c.rotary_half > 0) {
      const int64_t half = c.rotary_half;
      auto [cos, sin] =
          random_rotary_tables(c.tokens(), c.rotary_padded ? half + 1 : half, DType::float32, ++seed, 1.1);
      std::function<Tensor(const Tensor&)> view;
      if (c.rotary_padded) view = [half](const Tensor& table) { return table.slice(1, 0, half); };
      backward.tensors["rotary_cos"] = input(cos, view);
      backward.tensors["rotary_sin"] = input(sin, view);
    }
    backward.call = [c](TensorMap& t, const auto& run) {
      const bool rotary = c.rotary_half > 0;
      run({.grad_output = t.at("grad_output"), .query = t.at("query"), .key = t.at("key"), .value = t.at("value"),
           .output = t.at("output"), .logsumexp = t.at("logsumexp"), .cu_seqlens = t.at("cu_seqlens"),
           .max_seqlen = c.longest(), .grad_query = t.at("grad_query"), .grad_key = t.at("grad_key"),
           .grad_value = t.at("grad_value"), .softmax_scale = c.softmax_scale(), .causal = c.causal,
           .window_size = c.window, .rotary_cos = rotary ? &t.at("rotary_cos") : nullptr,
           .rotary_sin = rotary ? &t.at("rotary_sin") : nullptr});
    };
    record(ran, check_variants(backward, device_type));
  }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

TEST(AttentionConsistency, CpuVariantsMatchTheReference) { check_all_variants(attention_cases(), DeviceType::cpu); }

TEST(AttentionConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_all_variants(attention_cases(), DeviceType::cuda);
}

TEST(AttentionConsistency, CudaVariantsMatchTheReferenceAtTileBoundaries) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_all_variants(cuda_cases(), DeviceType::cuda);
}

// The consistency cases above pass whether a variant folds the rotary inverse into its stores or leaves it to
// rotary_apply (the values are the same); what the fold saves is rotary_apply's passes. So count them: with tables a
// tile kernel reads (full width, contiguous 16-byte aligned rows of a multiple of 4 floats), `wgmma` folds both
// gradients, `flash` the query's, and the reference neither; with padded rows every variant hands both to
// rotary_apply.
TEST(AttentionConsistency, CudaTileVariantsFoldTheRotaryInverseIntoTheirStores) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const Device device = Device::cuda(0);
  const std::map<std::string, int64_t> folded_passes_left{{"wgmma", 0}, {"flash", 1}, {"reference", 2}};
  // Records only around each variant's run, and leaves the profiler off whatever happens (a throwing variant would
  // otherwise leave every later dispatch of the process recorded).
  struct RecordedRun {
    OpProfiler& profiler = OpProfiler::instance();
    RecordedRun() {
      profiler.reset();
      profiler.configure(/*cpu=*/false, /*cuda=*/true);
      profiler.start_recording();
    }
    ~RecordedRun() {
      if (profiler.recording()) profiler.stop_recording();
      profiler.configure(false, false);
      profiler.reset();
    }
  };
  std::set<std::string> ran;
  uint64_t seed = 50000;
  for (int64_t head_size : {64, 128})
    for (bool padded : {false, true}) {
      const AttentionCase c{.document_lengths = {130, 67}, .heads = 4, .head_groups = 2, .head_size = head_size,
                            .causal = true, .window = std::nullopt};
      const Shape query_shape{c.tokens(), c.heads, c.head_size}, key_shape{c.tokens(), c.head_groups, c.head_size};
      const auto on_device = [&](const Shape& shape, double low, double high) {
        return random_tensor(shape, c.dtype, ++seed, low, high).to(device);
      };
      const Tensor query = on_device(query_shape, -2, 2), key = on_device(key_shape, -2, 2),
                   value = on_device(key_shape, -2, 2), grad_output = on_device(query_shape, -1, 1);
      const Tensor cu_seqlens = cu_seqlens_of(c).to(device);
      Tensor output = Tensor::empty(query_shape, c.dtype, device);
      Tensor logsumexp = Tensor::empty(Shape{c.heads, c.tokens()}, DType::float32, device);
      attention_forward({.query = query, .key = key, .value = value, .cu_seqlens = cu_seqlens,
                         .max_seqlen = c.longest(), .output = output, .logsumexp = logsumexp,
                         .softmax_scale = c.softmax_scale(), .causal = true, .window_size = std::nullopt});
      const int64_t half = head_size / 2;
      auto [cos_storage, sin_storage] =
          random_rotary_tables(c.tokens(), padded ? half + 1 : half, DType::float32, ++seed, 1.1);
      const Tensor cos = cos_storage.to(device).slice(1, 0, half), sin = sin_storage.to(device).slice(1, 0, half);
      for (const auto& variant : OpRegistry<AttentionBackward>::instance().variants()) {
        if (variant.info.device != DeviceType::cuda) continue;
        const std::string name = variant.info.variant;
        ASSERT_TRUE(folded_passes_left.contains(name)) << name << ": a new CUDA variant; say what it folds here";
        Tensor grad_query = Tensor::empty(query_shape, c.dtype, device);
        Tensor grad_key = Tensor::empty(key_shape, c.dtype, device);
        Tensor grad_value = Tensor::empty(key_shape, c.dtype, device);
        const AttentionBackwardArgs args{.grad_output = grad_output, .query = query, .key = key, .value = value,
                                         .output = output, .logsumexp = logsumexp, .cu_seqlens = cu_seqlens,
                                         .max_seqlen = c.longest(), .grad_query = grad_query, .grad_key = grad_key,
                                         .grad_value = grad_value, .softmax_scale = c.softmax_scale(),
                                         .causal = true, .window_size = std::nullopt, .rotary_cos = &cos,
                                         .rotary_sin = &sin};
        if (variant.supports) {
          if (const auto reason = variant.supports(args)) {
            GTEST_LOG_(INFO) << name << " declines head_size=" << head_size << ": " << *reason;
            continue;
          }
        }
        int64_t rotary_passes = 0;
        {
          RecordedRun recorded;
          variant.run(args);
          recorded.profiler.stop_recording();
          for (const OpTiming& timing : recorded.profiler.totals())
            if (timing.id.starts_with("rotary_apply:")) rotary_passes += timing.calls;
        }
        ran.insert(name);
        EXPECT_EQ(rotary_passes, padded ? 2 : folded_passes_left.at(name))
            << name << " head_size=" << head_size << (padded ? " (padded rows)" : "");
      }
    }
  // A test whose tile variants all declined would check only the reference's two passes.
  EXPECT_TRUE(ran.contains("flash") && ran.contains("reference")) << "flash or reference declined every case";
  if (device_info(device).compute_capability() == 90) {
    EXPECT_TRUE(ran.contains("wgmma")) << "wgmma declined on sm_90";
  }
}

// A query range inside a longer key range (query_offset: micro_batch_splits, sequence_data_parallel): the CUDA
// "reference" variant runs it and matches the CPU reference (output, logsumexp, and the gradients with rotary tables,
// every key row written); the tile variants decline it with the reason.
TEST(AttentionConsistency, CudaReferenceRunsAQueryRangeInsideLongerKeys) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const Device device = Device::cuda(0);
  // Documents of 40, 70 and 50 keys; the queries are key rows [64, 128), two documents cut at both ends.
  const AttentionCase c{.document_lengths = {40, 70, 50}, .heads = 4, .head_groups = 2, .head_size = 64,
                        .causal = true, .window = 48, .dtype = DType::float32};
  const int64_t offset = 64, queries = 64, keys = c.tokens(), half = c.head_size / 2;
  const Shape query_shape{queries, c.heads, c.head_size}, key_shape{keys, c.head_groups, c.head_size};
  struct Tensors {
    Tensor query, key, value, grad_output, cu_seqlens, cos, sin, output, logsumexp, grad_query, grad_key, grad_value;
  };
  auto [cos, sin] = random_rotary_tables(keys, half, DType::float32, 60005, 1.1);
  const Tensors host{.query = random_tensor(query_shape, c.dtype, 60001, -2, 2),
                     .key = random_tensor(key_shape, c.dtype, 60002, -2, 2),
                     .value = random_tensor(key_shape, c.dtype, 60003, -2, 2),
                     .grad_output = random_tensor(query_shape, c.dtype, 60004, -1, 1),
                     .cu_seqlens = cu_seqlens_of(c),
                     .cos = cos,
                     .sin = sin,
                     .output = Tensor::empty(query_shape, c.dtype),
                     .logsumexp = Tensor::empty(Shape{c.heads, queries}, DType::float32),
                     .grad_query = Tensor::empty(query_shape, c.dtype),
                     .grad_key = Tensor::empty(key_shape, c.dtype),
                     .grad_value = Tensor::empty(key_shape, c.dtype)};
  const auto on = [&](const Tensor& tensor, Device where) { return where.is_cpu() ? tensor : tensor.to(where); };
  const auto run = [&](Device where, std::string_view variant_name) {
    Tensors t{on(host.query, where),       on(host.key, where),         on(host.value, where),
              on(host.grad_output, where), on(host.cu_seqlens, where),  on(host.cos, where),
              on(host.sin, where),         on(host.output, where),      on(host.logsumexp, where),
              on(host.grad_query, where),  on(host.grad_key, where),    on(host.grad_value, where)};
    const AttentionForwardArgs forward{.query = t.query, .key = t.key, .value = t.value, .cu_seqlens = t.cu_seqlens,
                                       .max_seqlen = c.longest(), .output = t.output, .logsumexp = t.logsumexp,
                                       .softmax_scale = c.softmax_scale(), .causal = true, .window_size = c.window,
                                       .query_offset = offset};
    const AttentionBackwardArgs backward{.grad_output = t.grad_output, .query = t.query, .key = t.key,
                                         .value = t.value, .output = t.output, .logsumexp = t.logsumexp,
                                         .cu_seqlens = t.cu_seqlens, .max_seqlen = c.longest(),
                                         .grad_query = t.grad_query, .grad_key = t.grad_key,
                                         .grad_value = t.grad_value, .softmax_scale = c.softmax_scale(),
                                         .causal = true, .window_size = c.window, .query_offset = offset,
                                         .rotary_cos = &t.cos, .rotary_sin = &t.sin};
    const auto& forward_variant = OpRegistry<AttentionForward>::instance().find(variant_name, where);
    const auto& backward_variant = OpRegistry<AttentionBackward>::instance().find(variant_name, where);
    for (const auto& reason : {forward_variant.supports ? forward_variant.supports(forward) : std::nullopt,
                               backward_variant.supports ? backward_variant.supports(backward) : std::nullopt})
      EXPECT_FALSE(reason.has_value()) << variant_name << ": " << reason.value_or("");
    check_attention_forward(forward);
    forward_variant.run(forward);
    check_attention_backward(backward);
    backward_variant.run(backward);
    return t;
  };
  const Tensors expected = run(Device::cpu(), "reference");
  const Tensors actual = run(device, "reference");
  const auto compare = [&](const Tensor& gpu, const Tensor& cpu, const char* what) {
    testing::detail::compare_output(values_of(gpu.to(Device::cpu())), values_of(cpu), 1e-4, /*exact=*/false, what);
  };
  compare(actual.output, expected.output, "output");
  compare(actual.logsumexp, expected.logsumexp, "logsumexp");
  compare(actual.grad_query, expected.grad_query, "grad_query");
  compare(actual.grad_key, expected.grad_key, "grad_key");
  compare(actual.grad_value, expected.grad_value, "grad_value");

  // The tile variants decline (bf16, the dtype they take).
  const Tensor query = random_tensor(query_shape, DType::bfloat16, 60011, -1, 1).to(device);
  const Tensor key = random_tensor(key_shape, DType::bfloat16, 60012, -1, 1).to(device);
  const Tensor cu_seqlens = cu_seqlens_of(c).to(device);
  Tensor output = Tensor::empty(query_shape, DType::bfloat16, device);
  Tensor logsumexp = Tensor::empty(Shape{c.heads, queries}, DType::float32, device);
  Tensor grad_query = Tensor::empty(query_shape, DType::bfloat16, device);
  Tensor grad_key = Tensor::empty(key_shape, DType::bfloat16, device);
  Tensor grad_value = Tensor::empty(key_shape, DType::bfloat16, device);
  const AttentionForwardArgs forward{.query = query, .key = key, .value = key, .cu_seqlens = cu_seqlens,
                                     .max_seqlen = c.longest(), .output = output, .logsumexp = logsumexp,
                                     .softmax_scale = c.softmax_scale(), .query_offset = offset};
  const AttentionBackwardArgs backward{.grad_output = output, .query = query, .key = key, .value = key,
                                       .output = output, .logsumexp = logsumexp, .cu_seqlens = cu_seqlens,
                                       .max_seqlen = c.longest(), .grad_query = grad_query, .grad_key = grad_key,
                                       .grad_value = grad_value, .softmax_scale = c.softmax_scale(),
                                       .query_offset = offset};
  int declined = 0;
  const auto expect_declined = [&](const auto& variant, const auto& args) {
    if (variant.info.device != DeviceType::cuda || variant.info.variant == "reference") return;
    ASSERT_TRUE(variant.supports) << variant.info.variant;
    const auto reason = variant.supports(args);
    ASSERT_TRUE(reason.has_value()) << variant.info.variant << " accepts a query offset";
    EXPECT_NE(reason->find("only the reference variants"), std::string::npos) << *reason;
    ++declined;
  };
  for (const auto& variant : OpRegistry<AttentionForward>::instance().variants()) expect_declined(variant, forward);
  for (const auto& variant : OpRegistry<AttentionBackward>::instance().variants()) expect_declined(variant, backward);
  EXPECT_GE(declined, 2);
}

}  // namespace
}  // namespace fast_llm::kernels
