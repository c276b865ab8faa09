// gemm on CUDA through cuBLASLt (kernels/gemm.h): fp32 compute and scaling for bf16 / fp16 / fp32 inputs, the bias
// added by the BIAS epilogue, strided batches, the algorithm cached per problem: with `kernels.autotune` (the default)
// the fastest of the heuristic's candidates, timed once on the first call's operands (its first choice was measured
// up to 1.3x slower than the best at some of the benchmark models' shapes, benchmarks/gemm_benchmark --candidates),
// else the heuristic's first.
//
// cuBLASLt is column-major, we are row-major. A row-major (r, c) matrix is the column-major (c, r) matrix of the same
// bytes, so out = op(a) op(b) is computed as the column-major out^T (n, m) = op(b)^T op(a)^T: cuBLASLt's "A" is our b,
// its "B" our a, and the bias, one value per row of cuBLASLt's D, is one per column of ours.
//
// Descriptors and algorithms are host-side objects created once per problem and kept for the process (they hold no
// device memory); the workspace is one buffer per (device, stream), so gemms on two streams never share one.
// A `ragged` gemm (an expert's rows: m or k changes every step) takes the plan of the power-of-two bucket of that size,
// tuned on the first call of the bucket, and runs it with layouts of its exact sizes; where cuBLASLt refuses that
// algorithm for the exact sizes (or has none for the bucket), the exact problem's heuristic choice (untuned) is kept.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "fast_llm/kernels/cuda/common.cuh"
#include "fast_llm/kernels/cuda/cublas_check.h"
#include "fast_llm/kernels/cuda/gemm.cuh"
#include "fast_llm/tensor/cuda/device_guard.h"

namespace fast_llm::kernels::cuda {

// Everything cuBLASLt's choice of algorithm depends on: the problem in cuBLASLt's (column-major) terms, the pointers'
// alignments, and whether the epilogue adds a bias.
struct GemmKey {
  int device = 0;
  uint64_t rows = 0, columns = 0, inner = 0;  // cuBLASLt's m, n, k: our n, m, k
  int64_t batch = 1;
  cudaDataType_t input_type = CUDA_R_32F, output_type = CUDA_R_32F;
  bool transpose_a = false, transpose_b = false;  // cuBLASLt's A (our b) and B (our a)
  int64_t leading_a = 0, leading_b = 0, leading_out = 0;
  int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_out = 0;
  bool bias = false;
  uint32_t alignment_a = 0, alignment_b = 0, alignment_out = 0, alignment_bias = 0;

  auto tie() const {
    return std::tie(device, rows, columns, inner, batch, input_type, output_type, transpose_a, transpose_b, leading_a,
                    leading_b, leading_out, batch_stride_a, batch_stride_b, batch_stride_out, bias, alignment_a,
                    alignment_b, alignment_out, alignment_bias);
  }
  bool operator<(const GemmKey& other) const { return tie() < other.tie(); }
};

// How many of the heuristic's algorithms autotuning times.
constexpr int kTunedCandidates = 8;

// The matrix layouts of a problem in cuBLASLt's roles (host objects).
struct Layouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, out = nullptr;
};

struct GemmPlan {
  cublasLtMatmulDesc_t description = nullptr;
  Layouts layouts;
  cublasLtMatmulAlgo_t algorithm{};
  // The heuristic's algorithms, best guess first, until they are timed (then none are left).
  cublasLtMatmulAlgo_t candidates[kTunedCandidates]{};
  int candidate_count = 0;
};

// The operands of one call, in cuBLASLt's roles.
struct GemmCall {
  GemmKey key;
  const void* a = nullptr;  // our b
  const void* b = nullptr;  // our a
  void* out = nullptr;
  const void* bias = nullptr;
};

static cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::bfloat16: return CUDA_R_16BF;
    case DType::float16: return CUDA_R_16F;
    case DType::float32: return CUDA_R_32F;
    default: break;
  }
  throw InternalError("kernels", fmt::format("gemm: no cuBLASLt type for {}", dtype_name(dtype)));
}

// The largest power of two (at most 256, cuBLASLt's default requirement) that divides the address.
static uint32_t pointer_alignment(const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

static std::optional<std::string> gemm_cublaslt_supports(const GemmArgs& args) {
  const GemmShape shape = gemm_shape(args);
  const DType dtype = args.a.dtype();
  if (dtype != DType::bfloat16 && dtype != DType::float16 && dtype != DType::float32)
    return fmt::format("a has dtype {}; cublaslt multiplies bfloat16, float16 and float32", dtype_name(dtype));
  if (args.bias && args.bias->stride(0) != 1 && shape.n > 1)
    return std::string("the bias epilogue needs a contiguous bias");
  if (shape.k == 0) return std::string("k = 0: cuBLASLt needs a non-empty inner dimension");
  std::string reason;
  if (!blas_operand(args.a, args.transpose_a, &reason)) return "a: " + reason;
  if (!blas_operand(args.b, args.transpose_b, &reason)) return "b: " + reason;
  if (!blas_output(args.out, &reason)) return reason;
  return std::nullopt;
}

static GemmCall describe(const GemmArgs& args, const GemmShape& shape) {
  const BlasOperand a = *blas_operand(args.a, args.transpose_a, nullptr);
  const BlasOperand b = *blas_operand(args.b, args.transpose_b, nullptr);
  const BlasOperand out = *blas_output(args.out, nullptr);
  GemmCall call;
  call.a = args.b.data();
  call.b = args.a.data();
  call.out = args.out.data();
  call.bias = args.bias ? args.bias->data() : nullptr;
  GemmKey& key = call.key;
  key.device = args.out.device().index;
  key.rows = uint64_t(shape.n);
  key.columns = uint64_t(shape.m);
  key.inner = uint64_t(shape.k);
  key.batch = shape.batch;
  key.input_type = cuda_data_type(args.a.dtype());
  key.output_type = cuda_data_type(args.out.dtype());
  key.transpose_a = b.transpose;
  key.transpose_b = a.transpose;
  key.leading_a = b.leading_dimension;
  key.leading_b = a.leading_dimension;
  key.leading_out = out.leading_dimension;
  key.batch_stride_a = shape.b_batched ? b.batch_stride : 0;
  key.batch_stride_b = a.batch_stride;
  key.batch_stride_out = out.batch_stride;
  key.bias = args.bias != nullptr;
  key.alignment_a = pointer_alignment(call.a);
  key.alignment_b = pointer_alignment(call.b);
  key.alignment_out = pointer_alignment(call.out);
  key.alignment_bias = call.bias ? pointer_alignment(call.bias) : 0;
  return call;
}

template <class Value>
static void set_layout(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, Value value) {
  FLM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)));
}

// A column-major (rows, columns) layout with `leading` and, batched, `batch_stride` between matrices.
static cublasLtMatrixLayout_t make_layout(cudaDataType_t type, uint64_t rows, uint64_t columns, int64_t leading,
                                          int64_t batch, int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  FLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, columns, leading));
  if (batch > 1) {
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t(batch));
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, batch_stride);
  }
  return layout;
}

// The layouts of `key`'s operands. Stored shapes: A is (rows, inner) after op, so (inner, rows) when transposed; B is
// (inner, columns) after op.
static Layouts make_layouts(const GemmKey& key) {
  return {.a = make_layout(key.input_type, key.transpose_a ? key.inner : key.rows,
                           key.transpose_a ? key.rows : key.inner, key.leading_a, key.batch, key.batch_stride_a),
          .b = make_layout(key.input_type, key.transpose_b ? key.columns : key.inner,
                           key.transpose_b ? key.inner : key.columns, key.leading_b, key.batch, key.batch_stride_b),
          .out = make_layout(key.output_type, key.rows, key.columns, key.leading_out, key.batch,
                             key.batch_stride_out)};
}

static void destroy_layouts(const Layouts& layouts) {
  cublasLtMatrixLayoutDestroy(layouts.a);
  cublasLtMatrixLayoutDestroy(layouts.b);
  cublasLtMatrixLayoutDestroy(layouts.out);
}

// The process's cuBLASLt handle for `device` (created on first use).
static cublasLtHandle_t cublaslt_handle(Device device) {
  static std::mutex mutex;
  static std::map<int, cublasLtHandle_t> handles;  // kept for the process, like the streams they serve
  std::lock_guard lock(mutex);
  cublasLtHandle_t& handle = handles[device.index];
  if (!handle) {
    ::fast_llm::detail::CudaDeviceGuard guard(device.index);
    FLM_CUBLAS_CHECK(cublasLtCreate(&handle));
  }
  return handle;
}

static std::mutex& plan_mutex() {
  static std::mutex mutex;
  return mutex;
}

// The cached plan of `key` (the problem of `call`, or its bucket), created (descriptors, heuristic) on first use;
// `tunable`: keep the heuristic's candidates for tune(). Call with plan_mutex held.
static GemmPlan& plan_for(const GemmCall& call, const GemmKey& key, Device device, bool tunable = true) {
  static std::map<GemmKey, GemmPlan> plans;
  if (auto found = plans.find(key); found != plans.end()) return found->second;

  GemmPlan plan;
  FLM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.description, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t operation_a = key.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t operation_b = key.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  FLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.description, CUBLASLT_MATMUL_DESC_TRANSA, &operation_a,
                                                  sizeof(operation_a)));
  FLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.description, CUBLASLT_MATMUL_DESC_TRANSB, &operation_b,
                                                  sizeof(operation_b)));
  if (key.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const int32_t bias_type = key.output_type;
    FLM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.description, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    FLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.description, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                    sizeof(bias_type)));
    // The heuristic reads the bias pointer's alignment from here.
    FLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.description, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &call.bias,
                                                    sizeof(call.bias)));
  }
  plan.layouts = make_layouts(key);

  cublasLtMatmulPreference_t preference = nullptr;
  FLM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace_bytes = kCublasLtWorkspaceBytes;
  FLM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &workspace_bytes, sizeof(workspace_bytes)));
  // cuBLASLt assumes 256-byte aligned operands unless told otherwise; views into flat buffers often are less.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.alignment_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.alignment_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.alignment_out},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.alignment_out}};
  for (const auto& [attribute, alignment] : alignments)
    FLM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &alignment, sizeof(alignment)));
  cublasLtMatmulHeuristicResult_t results[kTunedCandidates]{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      cublaslt_handle(device), plan.description, plan.layouts.a, plan.layouts.b, plan.layouts.out, plan.layouts.out,
      preference, kernel_selection().autotune ? kTunedCandidates : 1, results, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatmulDescDestroy(plan.description);
    destroy_layouts(plan.layouts);
    throw Error("gemm", fmt::format("cuBLASLt has no algorithm for m={} n={} k={} batch={} (row-major, transposes "
                                    "a={} b={}, leading dimensions a={} b={} out={}, alignments a={} b={} out={}): {}",
                                    key.columns, key.rows, key.inner, key.batch, key.transpose_b, key.transpose_a,
                                    key.leading_b, key.leading_a, key.leading_out, key.alignment_b, key.alignment_a,
                                    key.alignment_out,
                                    status == CUBLAS_STATUS_SUCCESS ? "no result" : cublasLtGetStatusName(status)));
  }
  plan.algorithm = results[0].algo;
  if (found > 1 && tunable)
    for (int index = 0; index < found; ++index) plan.candidates[plan.candidate_count++] = results[index].algo;
  return plans.emplace(key, plan).first->second;
}

// A ragged call's layouts of its exact sizes (beside its bucket's plan), for the call.
struct OwnedLayouts {
  Layouts layouts;
  explicit OwnedLayouts(const GemmKey& key) : layouts(make_layouts(key)) {}
  ~OwnedLayouts() { destroy_layouts(layouts); }
  OwnedLayouts(const OwnedLayouts&) = delete;
  OwnedLayouts& operator=(const OwnedLayouts&) = delete;
};

// The power-of-two bucket (at least 64) of a ragged size.
static uint64_t size_bucket(uint64_t size) {
  uint64_t bucket = 64;
  while (bucket < size) bucket *= 2;
  return bucket;
}

// The problem whose plan a ragged call shares: its ragged size (our m is cuBLASLt's columns, k its inner) bucketed.
static GemmKey bucket_key(GemmKey key, GemmRagged ragged) {
  if (ragged == GemmRagged::m) key.columns = size_bucket(key.columns);
  if (ragged == GemmRagged::k) key.inner = size_bucket(key.inner);
  return key;
}

// The bytes cuBLASLt's D of `key` spans (column-major, `rows` contiguous).
static size_t output_span_bytes(const GemmKey& key) {
  const size_t element = key.output_type == CUDA_R_32F ? 4 : 2;
  const size_t elements = size_t(key.batch - 1) * size_t(key.batch_stride_out) +
                          (key.columns - 1) * size_t(key.leading_out) + key.rows;
  return element * elements;
}

// Times the candidates of `plan` on `call`'s operands and keeps the fastest; a candidate cuBLASLt refuses is dropped.
// Every candidate runs once to warm up, then kRounds rounds time each once in turn (CUDA events on `stream`), and
// each candidate's median counts: the first step of a run is when this happens, and the clocks are still rising
// then, so timing one candidate after the other favoured whichever came last. D is `call.out` itself when beta is 0
// (the real call overwrites it next), else a scratch buffer of its span, so that accumulating outputs keep their
// values; when that buffer cannot be had, the heuristic's first stays. Synchronises the stream: once per problem.
static void tune(GemmPlan& plan, const Layouts& layouts, const GemmCall& call, float alpha, float beta,
                 void* workspace, cudaStream_t stream, Device device) {
  // The host waits for the timings, which a CUDA graph capture cannot record: a captured step only has shapes an
  // eager step already tuned (engine/training/cuda_graph_step.h), so getting here while capturing is a bug. Refused
  // before the plan changes, so that an eager call still tunes it.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FLM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  FLM_ASSERT(capture == cudaStreamCaptureStatusNone,
             "gemm: autotuning m={} n={} k={} during a CUDA graph capture (timing synchronises the stream); an eager "
             "step should have tuned this shape first",
             call.key.columns, call.key.rows, call.key.inner);
  constexpr int kRounds = 5;
  const int candidates = plan.candidate_count;
  plan.candidate_count = 0;
  void* out = call.out;
  Tensor scratch;  // from the caching allocator, on the stream, like every device buffer
  if (beta != 0.0f) {
    try {
      scratch = Tensor::empty(Shape{int64_t(output_span_bytes(call.key))}, DType::uint8, device, Stream{stream});
    } catch (const Error&) {
      return;  // out of memory is not an error here: the heuristic's choice stays
    }
    out = scratch.data();
  }
  const cublasLtHandle_t handle = cublaslt_handle(device);
  const auto run = [&](int index) {
    return cublasLtMatmul(handle, plan.description, &alpha, call.a, layouts.a, call.b, layouts.b, &beta, out,
                          layouts.out, out, layouts.out, &plan.candidates[index], workspace, kCublasLtWorkspaceBytes,
                          stream) == CUBLAS_STATUS_SUCCESS;
  };
  bool usable[kTunedCandidates] = {};
  for (int index = 0; index < candidates; ++index) usable[index] = run(index);
  cudaEvent_t events[kTunedCandidates][kRounds][2] = {};
  for (int index = 0; index < candidates; ++index)
    for (int round = 0; round < kRounds; ++round)
      for (cudaEvent_t& event : events[index][round]) FLM_CUDA_CHECK(cudaEventCreate(&event));
  for (int round = 0; round < kRounds; ++round)
    for (int index = 0; index < candidates; ++index) {
      if (!usable[index]) continue;
      FLM_CUDA_CHECK(cudaEventRecord(events[index][round][0], stream));
      usable[index] = run(index);
      FLM_CUDA_CHECK(cudaEventRecord(events[index][round][1], stream));
    }
  FLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  float best_ms = 0.0f;
  for (int index = 0; index < candidates; ++index) {
    float times[kRounds] = {};
    for (int round = 0; round < kRounds; ++round) {
      if (usable[index])
        FLM_CUDA_CHECK(cudaEventElapsedTime(&times[round], events[index][round][0], events[index][round][1]));
      for (cudaEvent_t event : events[index][round]) FLM_CUDA_CHECK(cudaEventDestroy(event));
    }
    if (!usable[index]) continue;
    std::sort(times, times + kRounds);
    const float median = times[kRounds / 2];
    if (best_ms == 0.0f || median < best_ms) {
      best_ms = median;
      plan.algorithm = plan.candidates[index];
    }
  }
}

// One workspace per (device, stream): kept for the process, like the streams.
static void* workspace_for(Device device, cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::lock_guard lock(mutex);
  void*& workspace = workspaces[{device.index, stream}];
  if (!workspace) FLM_CUDA_CHECK(cudaMalloc(&workspace, kCublasLtWorkspaceBytes));
  return workspace;
}

cublasLtMatmulAlgo_t gemm_cublaslt_algorithm(const GemmArgs& args) {
  const GemmShape shape = gemm_shape(args);
  const Device device = args.out.device();
  ::fast_llm::detail::CudaDeviceGuard guard(device.index);
  std::lock_guard lock(plan_mutex());
  const GemmCall call = describe(args, shape);
  return plan_for(call, bucket_key(call.key, args.ragged), device).algorithm;
}

static void gemm_cublaslt(const GemmArgs& args) {
  const GemmShape shape = gemm_shape(args);
  if (shape.m == 0 || shape.n == 0) return;
  const Device device = args.out.device();
  const LaunchScope scope("gemm", device, args.stream);
  const cudaStream_t stream = scope.stream();
  const GemmCall call = describe(args, shape);
  void* workspace = workspace_for(device, stream);
  const float alpha = float(args.alpha), beta = float(args.beta);
  // The lock covers the plan (its bias pointer is set per call) until cuBLASLt has read it at enqueue time.
  std::lock_guard lock(plan_mutex());
  // A ragged problem whose size is its bucket's runs its bucket's plan as it is.
  const GemmKey bucket = bucket_key(call.key, args.ragged);
  const bool own_bucket = bucket.columns == call.key.columns && bucket.inner == call.key.inner;
  bool bucketed = !own_bucket;
  GemmPlan* plan = nullptr;
  if (bucketed) {
    try {
      plan = &plan_for(call, bucket, device);
    } catch (const Error&) {
      bucketed = false;  // no algorithm for the bucket's sizes: the exact problem's own plan, untuned
    }
  }
  if (plan == nullptr) plan = &plan_for(call, call.key, device, /*tunable=*/own_bucket);
  std::optional<OwnedLayouts> exact;
  if (bucketed) exact.emplace(call.key);
  Layouts layouts = bucketed ? exact->layouts : plan->layouts;
  // The plan's description holds the bias pointer, set per call.
  const auto set_bias = [&] {
    if (call.bias)
      FLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->description, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &call.bias, sizeof(call.bias)));
  };
  set_bias();
  if (plan->candidate_count > 0) tune(*plan, layouts, call, alpha, beta, workspace, stream, device);
  // C and D are both out: beta * out is read from and the result written to the same matrix.
  const auto run = [&] {
    return cublasLtMatmul(cublaslt_handle(device), plan->description, &alpha, call.a, layouts.a, call.b, layouts.b,
                          &beta, call.out, layouts.out, call.out, layouts.out, &plan->algorithm, workspace,
                          kCublasLtWorkspaceBytes, stream);
  };
  cublasStatus_t status = run();
  if (bucketed && (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)) {
    // The bucket's algorithm does not take these exact sizes: the exact problem's own heuristic choice, untuned (a
    // ragged problem's sizes come and go; timing each would synchronise every step).
    plan = &plan_for(call, call.key, device, /*tunable=*/false);
    set_bias();
    layouts = plan->layouts;
    status = run();
  }
  FLM_CUBLAS_CHECK(status);
}

FLM_REGISTER_KERNEL(Gemm, DeviceType::cuda, "cublaslt", /*priority=*/0, KernelKind::baseline, &gemm_cublaslt_supports,
                    &gemm_cublaslt,
                    "cuBLASLt, fp32 compute, bias epilogue, strided batches, heuristic algorithm cached per problem");

}  // namespace fast_llm::kernels::cuda
