// Tests of gemm (kernels/gemm.h): the CPU reference against products worked out by hand (alpha, beta, bias,
// transposes, transposed views, batches), beta = 0 never reading out, shape errors; then every variant against the
// reference on random problems (odd sizes, all transposes, padded and column-major views, batches with own or shared
// b, bias, beta != 0, bf16 products into fp32): the CPU variants here, the CUDA ones on a GPU machine; and cuBLASLt's
// autotuning, which synchronises, refusing to run inside a CUDA graph capture.
#include "fast_llm/kernels/gemm.h"

#include <gtest/gtest.h>

#include "fast_llm/tensor/graph.h"

#include "kernels/consistency.h"
#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

// Restores the default selection (auto, nothing excluded) when a test that changed it ends.
struct SelectionScope {
  explicit SelectionScope(const KernelSelection& selection) { set_kernel_selection(selection); }
  ~SelectionScope() { set_kernel_selection(KernelSelection{}); }
};

const KernelVariant<GemmArgs>& gemm_variant(std::string_view name) {
  return OpRegistry<Gemm>::instance().find(name, Device::cpu());
}

void run_variant(std::string_view name, const GemmArgs& args) {
  const auto& variant = gemm_variant(name);
  if (variant.supports) {
    auto reason = variant.supports(args);
    ASSERT_FALSE(reason.has_value()) << name << ": " << *reason;
  }
  variant.run(args);
}

// a = [[1, 2, 3], [4, 5, 6]], b = [[1, -1], [0, 2], [3, 1]]: a b = [[10, 6], [22, 12]].
constexpr std::initializer_list<double> kA = {1, 2, 3, 4, 5, 6};
constexpr std::initializer_list<double> kATransposed = {1, 4, 2, 5, 3, 6};  // a^T stored (3, 2)
constexpr std::initializer_list<double> kB = {1, -1, 0, 2, 3, 1};
constexpr std::initializer_list<double> kBTransposed = {1, 0, 3, -1, 2, 1};  // b^T stored (2, 3)

TEST(GemmReference, HandComputedProduct) {
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor a = make_tensor(kA, Shape{2, 3}, dtype);
    Tensor b = make_tensor(kB, Shape{3, 2}, dtype);
    Tensor out = filled(Shape{2, 2}, dtype, NAN);
    run_variant("reference", {.a = a, .b = b, .out = out});
    expect_near(out, {10, 6, 22, 12}, 0, 0, "a b");
  }
}

TEST(GemmReference, AlphaBetaBiasAndTransposes) {
  // 0.5 a b + 2 out + bias, out = 1, bias = [0.25, -1]: [[7.25, 4], [13.25, 7]] (exact in every dtype).
  const std::initializer_list<double> expected = {7.25, 4, 13.25, 7};
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16}) {
    for (bool transpose_a : {false, true}) {
      for (bool transpose_b : {false, true}) {
        SCOPED_TRACE(fmt::format("{} transpose_a={} transpose_b={}", dtype_name(dtype), transpose_a, transpose_b));
        Tensor a = transpose_a ? make_tensor(kATransposed, Shape{3, 2}, dtype) : make_tensor(kA, Shape{2, 3}, dtype);
        Tensor b = transpose_b ? make_tensor(kBTransposed, Shape{2, 3}, dtype) : make_tensor(kB, Shape{3, 2}, dtype);
        Tensor out = filled(Shape{2, 2}, dtype, 1);
        Tensor bias = make_tensor({0.25, -1}, Shape{2}, dtype);
        run_variant("reference", {.a = a, .b = b, .out = out, .bias = &bias, .transpose_a = transpose_a,
                                  .transpose_b = transpose_b, .alpha = 0.5, .beta = 2});
        expect_near(out, expected, 0, 0, "0.5 a b + 2 out + bias");
      }
    }
  }
}

TEST(GemmReference, TransposedViewsAndBatches) {
  // a as a transposed view of a^T's storage: the same product as a itself.
  Tensor a_storage = make_tensor(kATransposed, Shape{3, 2}, DType::float32);
  Tensor b = make_tensor(kB, Shape{3, 2}, DType::float32);
  Tensor out = filled(Shape{2, 2}, DType::float32, NAN);
  run_variant("reference", {.a = a_storage.transpose(0, 1), .b = b, .out = out});
  expect_near(out, {10, 6, 22, 12}, 0, 0, "view of a^T");

  // Batch of two: a and 2 a, b shared by the batch, then b and -b per batch entry.
  Tensor batched_a = make_tensor({1, 2, 3, 4, 5, 6, 2, 4, 6, 8, 10, 12}, Shape{2, 2, 3}, DType::float32);
  Tensor batched_out = filled(Shape{2, 2, 2}, DType::float32, NAN);
  run_variant("reference", {.a = batched_a, .b = b, .out = batched_out});
  expect_near(batched_out, {10, 6, 22, 12, 20, 12, 44, 24}, 0, 0, "shared b");
  Tensor batched_b = make_tensor({1, -1, 0, 2, 3, 1, -1, 1, 0, -2, -3, -1}, Shape{2, 3, 2}, DType::float32);
  run_variant("reference", {.a = batched_a, .b = batched_b, .out = batched_out});
  expect_near(batched_out, {10, 6, 22, 12, -20, -12, -44, -24}, 0, 0, "b per batch entry");
}

TEST(GemmReference, FloatOutputForBfloat16Inputs) {
  // bf16 products accumulated into an fp32 buffer (gradient accumulation): out += a b.
  Tensor a = make_tensor(kA, Shape{2, 3}, DType::bfloat16);
  Tensor b = make_tensor(kB, Shape{3, 2}, DType::bfloat16);
  Tensor out = make_tensor({0.125, 0, 0, 1e-3}, Shape{2, 2}, DType::float32);
  run_variant("reference", {.a = a, .b = b, .out = out, .beta = 1});
  expect_near(out, {10.125, 6, 22, 12.001}, 1e-6, 0, "out += a b in fp32");
}

TEST(GemmReference, BetaZeroNeverReadsOut) {
  for (const char* variant : {"reference", "openblas"}) {
    SCOPED_TRACE(variant);
    Tensor a = make_tensor(kA, Shape{2, 3}, DType::float32);
    Tensor b = make_tensor(kB, Shape{3, 2}, DType::float32);
    Tensor out = filled(Shape{2, 2}, DType::float32, NAN);
    run_variant(variant, {.a = a, .b = b, .out = out, .beta = 0});
    expect_near(out, {10, 6, 22, 12}, 0, 0, "NaN in out before the product");
  }
}

TEST(GemmReference, OpenblasMatchesHandComputed) {
  for (DType dtype : {DType::float32, DType::float64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor a = make_tensor(kATransposed, Shape{3, 2}, dtype);
    Tensor b = make_tensor(kB, Shape{3, 2}, dtype);
    Tensor out = filled(Shape{2, 2}, dtype, 1);
    Tensor bias = make_tensor({0.25, -1}, Shape{2}, dtype);
    run_variant("openblas",
                {.a = a, .b = b, .out = out, .bias = &bias, .transpose_a = true, .alpha = 0.5, .beta = 2});
    expect_near(out, {7.25, 4, 13.25, 7}, 0, 0, "0.5 a b + 2 out + bias");
  }
}

TEST(GemmReference, OpenblasWidenedMatchesHandComputed) {
  for (DType dtype : {DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor a = make_tensor(kATransposed, Shape{3, 2}, dtype);
    Tensor b = make_tensor(kB, Shape{3, 2}, dtype);
    Tensor out = filled(Shape{2, 2}, dtype, 1);
    Tensor bias = make_tensor({0.25, -1}, Shape{2}, dtype);
    run_variant("openblas_widened",
                {.a = a, .b = b, .out = out, .bias = &bias, .transpose_a = true, .alpha = 0.5, .beta = 2});
    expect_near(out, {7.25, 4, 13.25, 7}, 0, 0, "0.5 a b + 2 out + bias");
    Tensor nan_out = filled(Shape{2, 2}, DType::float32, NAN);
    run_variant("openblas_widened", {.a = a, .b = b, .out = nan_out, .transpose_a = true});
    expect_near(nan_out, {10, 6, 22, 12}, 0, 0, "beta 0 into fp32 never reads out");
  }
}

TEST(GemmReference, ShapeErrors) {
  Tensor a = make_tensor(kA, Shape{2, 3}, DType::float32);
  Tensor b = make_tensor(kB, Shape{3, 2}, DType::float32);
  Tensor out = filled(Shape{2, 2}, DType::float32, 0);
  Tensor wrong_out = filled(Shape{2, 3}, DType::float32, 0);
  expect_error([&] { gemm({.a = a, .b = b, .out = wrong_out}); }, "[gemm] cannot multiply a (2, 3) by b (3, 2) into out (2, 3)");
  expect_error([&] { gemm({.a = a, .b = b, .out = out, .transpose_b = true}); }, "cannot multiply");
  Tensor bias = filled(Shape{3}, DType::float32, 0);
  expect_error([&] { gemm({.a = a, .b = b, .out = out, .bias = &bias}); }, "bias has shape (3), expected (2)");
  Tensor half_out = filled(Shape{2, 2}, DType::float16, 0);
  Tensor a16 = make_tensor(kA, Shape{2, 3}, DType::bfloat16);
  Tensor b16 = make_tensor(kB, Shape{3, 2}, DType::bfloat16);
  expect_error([&] { gemm({.a = a16, .b = b16, .out = half_out}); },
               "out has dtype float16, expected bfloat16 (the inputs') or float32");
}

// The contract is checked before any variant is chosen: arguments no variant may take are the op's error, even when
// the selection lists a variant explicitly.
TEST(GemmSelection, ContractErrorsComeBeforeTheVariantsLimits) {
  SelectionScope scope({.mode = KernelSelection::Mode::listed, .included = {"gemm:cpu:openblas"}, .excluded = {}});
  Tensor a16 = make_tensor(kA, Shape{2, 3}, DType::bfloat16);
  Tensor b16 = make_tensor(kB, Shape{3, 2}, DType::bfloat16);
  Tensor wrong_out = filled(Shape{2, 3}, DType::bfloat16, 0);
  expect_error([&] { gemm({.a = a16, .b = b16, .out = wrong_out}); },
               "[gemm] cannot multiply a (2, 3) by b (3, 2) into out (2, 3)");
}

TEST(GemmSelection, AutoPrefersOpenblasAndNoneKeepsTheReference) {
  Tensor a = make_tensor(kA, Shape{2, 3}, DType::float32);
  Tensor b = make_tensor(kB, Shape{3, 2}, DType::float32);
  Tensor out = filled(Shape{2, 2}, DType::float32, 0);
  const GemmArgs args{.a = a, .b = b, .out = out};
  EXPECT_EQ(OpRegistry<Gemm>::instance().select(args, Device::cpu()).info.id(), "gemm:cpu:openblas");
  // bf16 is not openblas's: auto takes the widening variant.
  Tensor a16 = make_tensor(kA, Shape{2, 3}, DType::bfloat16);
  Tensor b16 = make_tensor(kB, Shape{3, 2}, DType::bfloat16);
  Tensor out16 = filled(Shape{2, 2}, DType::bfloat16, 0);
  EXPECT_EQ(OpRegistry<Gemm>::instance().select({.a = a16, .b = b16, .out = out16}, Device::cpu()).info.id(),
            "gemm:cpu:openblas_widened");
  {
    SelectionScope scope({.mode = KernelSelection::Mode::baseline_only, .included = {}, .excluded = {}});
    EXPECT_EQ(OpRegistry<Gemm>::instance().select(args, Device::cpu()).info.id(), "gemm:cpu:reference");
  }
  {
    SelectionScope scope({.mode = KernelSelection::Mode::all, .included = {}, .excluded = {"gemm:cpu:openblas"}});
    EXPECT_EQ(OpRegistry<Gemm>::instance().select(args, Device::cpu()).info.id(), "gemm:cpu:reference");
  }
  {
    // Listed explicitly, openblas must run where gemm runs: bf16 arguments are an error, not a fallback.
    SelectionScope scope({.mode = KernelSelection::Mode::listed, .included = {"gemm:cpu:openblas"}, .excluded = {}});
    EXPECT_EQ(OpRegistry<Gemm>::instance().select(args, Device::cpu()).info.id(), "gemm:cpu:openblas");
    expect_error([&] { gemm({.a = a16, .b = b16, .out = out16}); },
                 "gemm:cpu:openblas is requested by kernels.include but cannot run these arguments: a has dtype "
                 "bfloat16");
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Consistency of every variant with the reference.

enum class Layout {
  row_major,     // contiguous storage of the matrix as given
  column_major,  // a transposed view of the transpose's storage
  padded,        // a slice of wider rows: leading dimension > columns
};

struct GemmCase {
  int64_t m = 1, n = 1, k = 1;
  DType dtype = DType::float32;
  bool transpose_a = false, transpose_b = false;
  DType out_dtype = DType::float32;
  bool bias = false;
  double alpha = 1, beta = 0;
  int64_t batch = 0;  // 0: unbatched
  bool shared_b = false;
  Layout layout_a = Layout::row_major, layout_b = Layout::row_major;
  GemmRagged ragged = GemmRagged::none;
};

// A (batch,) rows x columns operand in `layout`, random in [-1, 1).
TensorSpec operand(const GemmCase& gemm_case, int64_t batch, int64_t rows, int64_t columns, Layout layout,
                   uint64_t seed) {
  auto shape = [&](int64_t first, int64_t second) {
    return batch > 0 ? Shape{batch, first, second} : Shape{first, second};
  };
  const int last = batch > 0 ? 2 : 1;
  switch (layout) {
    case Layout::row_major: return input(random_tensor(shape(rows, columns), gemm_case.dtype, seed));
    case Layout::column_major:
      return input(random_tensor(shape(columns, rows), gemm_case.dtype, seed),
                   [last](const Tensor& storage) { return storage.transpose(last - 1, last); });
    case Layout::padded:
      return input(random_tensor(shape(rows, columns + 3), gemm_case.dtype, seed),
                   [last, columns](const Tensor& storage) { return storage.slice(last, 0, columns); });
  }
  return {};
}

ConsistencyProblem<Gemm> make_problem(const GemmCase& c, uint64_t seed) {
  ConsistencyProblem<Gemm> problem;
  problem.name = fmt::format("{}->{} m={} n={} k={} ta={} tb={} bias={} alpha={} beta={} batch={}{} layouts={}/{}{}",
                             dtype_name(c.dtype), dtype_name(c.out_dtype), c.m, c.n, c.k, c.transpose_a,
                             c.transpose_b, c.bias, c.alpha, c.beta, c.batch, c.shared_b ? " shared b" : "",
                             int(c.layout_a), int(c.layout_b),
                             c.ragged == GemmRagged::m ? " ragged m" : c.ragged == GemmRagged::k ? " ragged k" : "");
  problem.dtype = c.out_dtype == DType::float32 ? c.dtype : c.out_dtype;
  problem.tensors["a"] = operand(c, c.batch, c.transpose_a ? c.k : c.m, c.transpose_a ? c.m : c.k, c.layout_a, seed);
  problem.tensors["b"] = operand(c, c.shared_b ? 0 : c.batch, c.transpose_b ? c.n : c.k, c.transpose_b ? c.k : c.n,
                                 c.layout_b, seed + 1);
  const Shape out_shape = c.batch > 0 ? Shape{c.batch, c.m, c.n} : Shape{c.m, c.n};
  problem.tensors["out"] = c.beta != 0 ? accumulated_output(random_tensor(out_shape, c.out_dtype, seed + 2))
                                       : output(Tensor::empty(out_shape, c.out_dtype));
  if (c.bias) problem.tensors["bias"] = input(random_tensor(Shape{c.n}, c.out_dtype, seed + 3));
  problem.call = [c](TensorMap& tensors, const auto& run) {
    const Tensor* bias = c.bias ? &tensors.at("bias") : nullptr;
    run({.a = tensors.at("a"), .b = tensors.at("b"), .out = tensors.at("out"), .bias = bias,
         .transpose_a = c.transpose_a, .transpose_b = c.transpose_b, .alpha = c.alpha, .beta = c.beta,
         .ragged = c.ragged});
  };
  return problem;
}

std::vector<GemmCase> gemm_cases(std::initializer_list<DType> dtypes, bool large) {
  std::vector<GemmCase> cases;
  for (DType dtype : dtypes) {
    std::vector<std::array<int64_t, 3>> sizes = {{1, 1, 1}, {7, 13, 5}, {33, 17, 65}, {64, 48, 96}};
    if (large) sizes.push_back({256, 384, 512});
    for (const auto& [m, n, k] : sizes)
      for (bool transpose_a : {false, true})
        for (bool transpose_b : {false, true})
          cases.push_back({.m = m, .n = n, .k = k, .dtype = dtype, .transpose_a = transpose_a,
                           .transpose_b = transpose_b, .out_dtype = dtype});
    const GemmCase base{.m = 33, .n = 17, .k = 65, .dtype = dtype, .out_dtype = dtype};
    auto with = [&](auto change) {
      GemmCase changed = base;
      change(changed);
      cases.push_back(changed);
    };
    with([](GemmCase& c) { c.bias = true; c.alpha = 0.5; });
    with([](GemmCase& c) { c.beta = 1.5; c.alpha = -2; });
    with([](GemmCase& c) { c.bias = true; c.beta = 1; c.transpose_b = true; });
    with([](GemmCase& c) { c.layout_a = Layout::column_major; c.layout_b = Layout::padded; });
    with([](GemmCase& c) { c.layout_a = Layout::padded; c.layout_b = Layout::column_major; c.transpose_a = true; });
    with([](GemmCase& c) { c.batch = 3; });
    with([](GemmCase& c) { c.batch = 3; c.shared_b = true; c.bias = true; c.transpose_b = true; });
    with([](GemmCase& c) { c.batch = 2; c.layout_a = Layout::padded; c.beta = 1; });
    if (dtype == DType::bfloat16 || dtype == DType::float16) {
      // Low-precision products into fp32 buffers, read and written (gradient accumulation).
      with([](GemmCase& c) { c.out_dtype = DType::float32; c.beta = 1; });
      with([](GemmCase& c) { c.out_dtype = DType::float32; c.transpose_a = true; c.bias = true; });
    }
  }
  return cases;
}

TEST(GemmConsistency, CpuVariantsMatchTheReference) {
  uint64_t seed = 1000;
  int openblas_runs = 0;
  for (const GemmCase& gemm_case :
       gemm_cases({DType::float32, DType::float64, DType::bfloat16, DType::float16}, /*large=*/false)) {
    const ConsistencyReport report = check_variants(make_problem(gemm_case, seed += 10), DeviceType::cpu);
    const bool blas_dtype = gemm_case.dtype == DType::float32 || gemm_case.dtype == DType::float64;
    // Every layout generated here is one BLAS addresses: openblas must take all fp32 / fp64 cases, and no other.
    EXPECT_EQ(report_ran(report, "gemm:cpu:openblas"), blas_dtype && gemm_case.out_dtype == gemm_case.dtype)
        << make_problem(gemm_case, 0).name;
    openblas_runs += report_ran(report, "gemm:cpu:openblas");
    // openblas_widened takes every bf16 / fp16 case, whatever the layout, and no other.
    EXPECT_EQ(report_ran(report, "gemm:cpu:openblas_widened"), !blas_dtype) << make_problem(gemm_case, 0).name;
  }
  EXPECT_GT(openblas_runs, 0);
}

TEST(GemmConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 5000;
  for (const GemmCase& gemm_case : gemm_cases({DType::float32, DType::bfloat16, DType::float16}, /*large=*/true)) {
    const ConsistencyReport report = check_variants(make_problem(gemm_case, seed += 10), DeviceType::cuda);
    // cuBLASLt is the baseline on CUDA: it must run every one of these.
    EXPECT_TRUE(report_ran(report, "gemm:cuda:cublaslt")) << make_problem(gemm_case, 0).name;
  }
}

// Ragged gemms (an expert's rows: m and k change from call to call) share the plan of their power-of-two bucket and
// run it with their exact sizes: sizes that fall in one bucket one after the other (the first call of a bucket tunes
// its plan), sizes equal to their bucket, and the three products of the MoE layer (forward x W^T, input gradient
// dy W, weight gradient dy^T x accumulated), each against the reference.
TEST(GemmCuda, RaggedSizesShareTheirBucketsPlanAndMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 9000;
  for (DType dtype : {DType::bfloat16, DType::float32})
    for (int64_t rows : {1, 3, 64, 65, 100, 127, 128, 129, 1000, 1024, 1500}) {
      // Forward: (rows, 96) x (160, 96)^T; input gradient: (rows, 160) x (160, 96); weight gradient: (rows, 160)^T
      // x (rows, 96) added to fp32.
      const GemmCase forward{.m = rows, .n = 160, .k = 96, .dtype = dtype, .transpose_b = true, .out_dtype = dtype,
                             .ragged = GemmRagged::m};
      const GemmCase input_gradient{.m = rows, .n = 96, .k = 160, .dtype = dtype, .out_dtype = dtype,
                                    .ragged = GemmRagged::m};
      const GemmCase weight_gradient{.m = 160, .n = 96, .k = rows, .dtype = dtype, .transpose_a = true,
                                     .out_dtype = DType::float32, .beta = 1, .ragged = GemmRagged::k};
      for (const GemmCase& gemm_case : {forward, input_gradient, weight_gradient}) {
        const ConsistencyReport report = check_variants(make_problem(gemm_case, seed += 10), DeviceType::cuda);
        EXPECT_TRUE(report_ran(report, "gemm:cuda:cublaslt")) << make_problem(gemm_case, 0).name;
      }
    }
}

TEST(GemmCuda, AutotuningRefusesToRunInsideAGraphCapture) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  SelectionScope scope(KernelSelection{});  // autotune on, the default
  const Device device = Device::cuda(0);
  const Stream stream = create_stream(device);
  // A shape no other case uses, so that its first call here is the one that would tune.
  Tensor a = Tensor::empty(Shape{136, 264}, DType::float32, device, stream);
  Tensor b = Tensor::empty(Shape{264, 200}, DType::float32, device, stream);
  Tensor out = Tensor::empty(Shape{136, 200}, DType::float32, device, stream);
  set_bytes(a.data(), device, 0, a.nbytes(), stream);
  set_bytes(b.data(), device, 0, b.nbytes(), stream);
  std::string refusal;
  try {
    GraphCapture capture(device, stream);
    gemm({.a = a, .b = b, .out = out, .stream = stream});
    capture.finish();
  } catch (const InternalError& error) {
    refusal = error.what();
  }
  EXPECT_FALSE(is_capturing(device, stream));
  if (refusal.empty()) GTEST_SKIP() << "cuBLASLt proposed a single algorithm for this shape: nothing to tune";
  EXPECT_NE(refusal.find("during a CUDA graph capture"), std::string::npos) << refusal;
  // Run eagerly, the same call tunes; captured after that, it replays.
  gemm({.a = a, .b = b, .out = out, .stream = stream});
  Graph graph;
  {
    GraphCapture capture(device, stream);
    gemm({.a = a, .b = b, .out = out, .stream = stream});
    graph = capture.finish();
  }
  graph.launch(stream);
  synchronize(device, stream);
}

}  // namespace
}  // namespace fast_llm::kernels
