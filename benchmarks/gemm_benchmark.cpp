// gemm benchmark: our gemm (the dispatch path, gemm:cuda:cublaslt) against a direct cublasLtMatmul call with the same
// algorithm and against cublasGemmEx, for row-major bf16 products with fp32 compute (default 8192 x 8192 x 8192).
//
//   gemm_benchmark [m n k [iterations]]
//   gemm_benchmark --candidates m n k [m n k ...]
//   gemm_benchmark --candidates [--sustained [seconds]] MxNxK[+ta][+tb][+f32] ...
//   gemm_benchmark --sustained [m n k [seconds]]
//
// --sustained times our gemm back to back for `seconds` (1) after half a second of heat, with its energy, power and SM
// clock (benchmarks/sustained_energy.h): the rate at the power cap a training step runs at, and the energy per FLOP.
//
// --candidates times, for each shape, every algorithm cuBLASLt's heuristic proposes (up to 16, in its order) and
// prints the first's TFLOP/s (the heuristic's choice) and the best's: how much choosing by measurement would win.
// Shapes written MxNxK take "+ta" / "+tb" (a or b stored transposed, as a linear layer's gemms have them) and "+f32"
// (fp32 out, as its weight gradient); with --sustained each candidate also runs at the power cap, with its energy.
//
// The three results are compared with each other, and a sample of elements with products computed on the host in
// fp64, before anything is timed. Runs are timed with CUDA events on the compute stream, after a warm-up, in rounds
// that time each variant once in turn; the median is reported as TFLOP/s (2 m n k / time) with the ratios ours / cuBLAS.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/core/random.h"
#include "fast_llm/kernels/cuda/cublas_check.h"
#include "fast_llm/kernels/cuda/gemm.cuh"
#include "fast_llm/kernels/gemm.h"
#include "fast_llm/tensor/tensor.h"

#include "device_timing.h"
#include "sustained_energy.h"

namespace fast_llm {
namespace {

// cuBLAS (not Lt) statuses: cublasGetStatusString is in libcublas, which only this benchmark links.
void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) throw Error("cublas", fmt::format("{} failed: {}", call, cublasGetStatusString(status)));
}

// A (rows, columns) bf16 matrix on `device`, uniform in [-1, 1), generated on the host from `seed`.
Tensor random_matrix(int64_t rows, int64_t columns, uint64_t seed, Device device) {
  Tensor host = Tensor::empty(Shape{rows, columns}, DType::bfloat16);
  bfloat16* data = host.data_as<bfloat16>();
#pragma omp parallel for
  for (int64_t index = 0; index < rows * columns; ++index)
    data[index] = to_bfloat16(2.0f * random_uniform(seed, uint64_t(index)) - 1.0f);
  return host.to(device);
}

std::vector<float> to_host_floats(const Tensor& tensor) {
  Tensor host = tensor.to(Device::cpu());
  std::vector<float> values(size_t(host.numel()));
  const bfloat16* data = host.data_as<bfloat16>();
  for (size_t index = 0; index < values.size(); ++index) values[index] = to_float(data[index]);
  return values;
}

double relative_difference(const std::vector<float>& actual, const std::vector<float>& expected) {
  double error = 0, norm = 0;
  for (size_t index = 0; index < actual.size(); ++index) {
    error += double(actual[index] - expected[index]) * double(actual[index] - expected[index]);
    norm += double(expected[index]) * double(expected[index]);
  }
  return std::sqrt(error / std::max(norm, 1e-300));
}

// Median milliseconds of each of `runs` over `iterations` timed rounds, after `warmup` untimed ones. Each round times
// every run once, in turn, so clock and temperature drift over the measurement reach all of them alike.
std::vector<double> median_ms(const std::vector<std::function<void()>>& runs, Device device, Stream stream, int warmup,
                              int iterations) {
  for (int iteration = 0; iteration < warmup; ++iteration)
    for (const auto& run : runs) run();
  std::vector<std::vector<double>> times(runs.size());
  Event start(device), stop(device);
  for (int iteration = 0; iteration < iterations; ++iteration) {
    for (size_t index = 0; index < runs.size(); ++index) {
      start.record(stream);
      runs[index]();
      stop.record(stream);
      stop.synchronize();
      times[index].push_back(start.elapsed_ms(stop));
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& run_times : times) {
    std::sort(run_times.begin(), run_times.end());
    medians.push_back(run_times[run_times.size() / 2]);
  }
  return medians;
}

// One product: row-major out (m x n) = op(a) (m x k) op(b) (k x n), bf16 inputs, fp32
// compute, bf16 or fp32 out. A linear layer's forward is (tokens, out, in) with transpose_b, its input gradient
// (tokens, in, out), its weight gradient (out, in, tokens) with transpose_a and fp32 out.
struct ProductShape {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false, float32_out = false;

  std::string str() const {
    return fmt::format("{}x{}x{}{}{}{}", m, n, k, transpose_a ? "+ta" : "", transpose_b ? "+tb" : "",
                       float32_out ? "+f32" : "");
  }
};

// cuBLASLt's description of a ProductShape. Row-major out = op(a) op(b) is column-major out^T = op(b)^T op(a)^T:
// cuBLASLt's A is b viewed column-major ((n, k), or (k, n) transposed), its B is a ((k, m), or (m, k) transposed), D is
// (n, m).
struct RowMajorProduct {
  cublasLtMatmulDesc_t description = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_out = nullptr;

  explicit RowMajorProduct(const ProductShape& shape) {
    const auto [m, n, k, transpose_a, transpose_b, float32_out] = shape;
    FLM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&description, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t operation_a = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t operation_b = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    FLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(description, CUBLASLT_MATMUL_DESC_TRANSA, &operation_a,
                                                    sizeof(operation_a)));
    FLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(description, CUBLASLT_MATMUL_DESC_TRANSB, &operation_b,
                                                    sizeof(operation_b)));
    FLM_CUBLAS_CHECK(transpose_b ? cublasLtMatrixLayoutCreate(&layout_a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k)
                                 : cublasLtMatrixLayoutCreate(&layout_a, CUDA_R_16BF, uint64_t(n), uint64_t(k), n));
    FLM_CUBLAS_CHECK(transpose_a ? cublasLtMatrixLayoutCreate(&layout_b, CUDA_R_16BF, uint64_t(m), uint64_t(k), m)
                                 : cublasLtMatrixLayoutCreate(&layout_b, CUDA_R_16BF, uint64_t(k), uint64_t(m), k));
    FLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_out, float32_out ? CUDA_R_32F : CUDA_R_16BF, uint64_t(n),
                                                uint64_t(m), n));
  }
  RowMajorProduct(const RowMajorProduct&) = delete;
  RowMajorProduct& operator=(const RowMajorProduct&) = delete;
  ~RowMajorProduct() {
    cublasLtMatrixLayoutDestroy(layout_a);
    cublasLtMatrixLayoutDestroy(layout_b);
    cublasLtMatrixLayoutDestroy(layout_out);
    cublasLtMatmulDescDestroy(description);
  }
};

int run_benchmark(int64_t m, int64_t n, int64_t k, int iterations) {
  if (cuda_devices().empty()) {
    std::fprintf(stderr, "gemm_benchmark: no CUDA device\n");
    return 1;
  }
  const Device device = Device::cuda(0);
  const Stream stream = compute_stream(device);
  const cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream.handle);
  fmt::print("device: {}\nproblem: row-major bf16 ({} x {}) @ ({} x {}), fp32 compute, bf16 out\n",
             device_info(device).name, m, k, k, n);

  const Tensor a = random_matrix(m, k, 1, device);  // (m, k)
  const Tensor b = random_matrix(k, n, 2, device);  // (k, n)
  Tensor out_ours = Tensor::empty(Shape{m, n}, DType::bfloat16, device);
  Tensor out_lt = Tensor::empty(Shape{m, n}, DType::bfloat16, device);
  Tensor out_gemm_ex = Tensor::empty(Shape{m, n}, DType::bfloat16, device);
  const float alpha = 1, beta = 0;

  // Ours, through dispatch.
  const kernels::GemmArgs args{.a = a, .b = b, .out = out_ours, .stream = stream};
  auto run_ours = [&] { kernels::gemm(args); };

  // Direct cuBLASLt with the algorithm our plan holds.
  run_ours();  // the first call settles the plan's algorithm (autotuning times the candidates then)
  const cublasLtMatmulAlgo_t algorithm = kernels::cuda::gemm_cublaslt_algorithm(args);
  cublasLtHandle_t lt_handle = nullptr;
  FLM_CUBLAS_CHECK(cublasLtCreate(&lt_handle));
  const RowMajorProduct product(ProductShape{m, n, k});
  Tensor lt_workspace = Tensor::empty(Shape{int64_t(kernels::cuda::kCublasLtWorkspaceBytes)}, DType::uint8, device);
  auto run_lt = [&] {
    FLM_CUBLAS_CHECK(cublasLtMatmul(lt_handle, product.description, &alpha, b.data(), product.layout_a, a.data(),
                                    product.layout_b, &beta, out_lt.data(), product.layout_out, out_lt.data(),
                                    product.layout_out, &algorithm,
                                    lt_workspace.data(), kernels::cuda::kCublasLtWorkspaceBytes, cuda_stream));
  };

  // cublasGemmEx with its default algorithm choice and the same workspace size.
  cublasHandle_t handle = nullptr;
  check_cublas(cublasCreate(&handle), "cublasCreate");
  check_cublas(cublasSetStream(handle, cuda_stream), "cublasSetStream");
  Tensor gemm_ex_workspace =
      Tensor::empty(Shape{int64_t(kernels::cuda::kCublasLtWorkspaceBytes)}, DType::uint8, device);
  check_cublas(cublasSetWorkspace(handle, gemm_ex_workspace.data(), kernels::cuda::kCublasLtWorkspaceBytes),
               "cublasSetWorkspace");
  auto run_gemm_ex = [&] {
    check_cublas(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, b.data(), CUDA_R_16BF,
                              int(n), a.data(), CUDA_R_16BF, int(k), &beta, out_gemm_ex.data(), CUDA_R_16BF, int(n),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  };

  // Correctness first: all three agree, and agree with fp64 products on the host at sampled elements.
  run_ours();
  run_lt();
  run_gemm_ex();
  synchronize(device, stream);
  const std::vector<float> ours = to_host_floats(out_ours), lt = to_host_floats(out_lt),
                           gemm_ex = to_host_floats(out_gemm_ex);
  const double ours_vs_lt = relative_difference(ours, lt), ours_vs_gemm_ex = relative_difference(ours, gemm_ex);
  const Tensor a_host = a.to(Device::cpu()), b_host = b.to(Device::cpu());
  const bfloat16* a_data = a_host.data_as<bfloat16>();
  const bfloat16* b_data = b_host.data_as<bfloat16>();
  double sample_error = 0, sample_norm = 0;
  for (int sample = 0; sample < 64; ++sample) {
    const int64_t row = int64_t(random_uniform(3, uint64_t(2 * sample)) * float(m - 1));
    const int64_t column = int64_t(random_uniform(3, uint64_t(2 * sample + 1)) * float(n - 1));
    double expected = 0;
    for (int64_t inner = 0; inner < k; ++inner)
      expected += double(to_float(a_data[row * k + inner])) * double(to_float(b_data[inner * n + column]));
    const double difference = double(ours[size_t(row * n + column)]) - expected;
    sample_error += difference * difference;
    sample_norm += expected * expected;
  }
  const double ours_vs_host = std::sqrt(sample_error / sample_norm);
  fmt::print("check: ours vs cublasLt {:.2e}, ours vs cublasGemmEx {:.2e}, ours vs fp64 host (64 samples) {:.2e}\n",
             ours_vs_lt, ours_vs_gemm_ex, ours_vs_host);
  // Same algorithm: bit for bit (up to reduction-order freedom, none expected); another algorithm and fp64 products:
  // within bf16 rounding of the outputs.
  if (ours_vs_lt > 1e-6 || ours_vs_gemm_ex > 1e-2 || ours_vs_host > 1e-2) {
    std::fprintf(stderr, "gemm_benchmark: results disagree; not timing\n");
    return 1;
  }

  const int warmup = 10;
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const std::vector<double> medians = median_ms({run_ours, run_lt, run_gemm_ex}, device, stream, warmup, iterations);
  const double ours_ms = medians[0], lt_ms = medians[1], gemm_ex_ms = medians[2];
  auto tflops = [&](double ms) { return flops / (ms * 1e-3) / 1e12; };
  fmt::print("{:<34} {:>10} {:>10}\n", "variant", "median ms", "TFLOP/s");
  fmt::print("{:<34} {:>10.3f} {:>10.1f}\n", "ours (gemm dispatch, cublaslt)", ours_ms, tflops(ours_ms));
  fmt::print("{:<34} {:>10.3f} {:>10.1f}\n", "cublasLtMatmul (same algorithm)", lt_ms, tflops(lt_ms));
  fmt::print("{:<34} {:>10.3f} {:>10.1f}\n", "cublasGemmEx (default)", gemm_ex_ms, tflops(gemm_ex_ms));
  fmt::print("ratio ours / cublasLt: {:.3f}\nratio ours / cublasGemmEx: {:.3f}\n", tflops(ours_ms) / tflops(lt_ms),
             tflops(ours_ms) / tflops(gemm_ex_ms));

  cublasDestroy(handle);
  cublasLtDestroy(lt_handle);
  return 0;
}

// "MxNxK" with any of the suffixes "+ta", "+tb", "+f32", or nothing when the text is not one.
std::optional<ProductShape> parse_candidate_problem(const std::string& text) {
  ProductShape problem;
  int consumed = 0;
  long long m = 0, n = 0, k = 0;
  if (std::sscanf(text.c_str(), "%lldx%lldx%lld%n", &m, &n, &k, &consumed) != 3 || m <= 0 || n <= 0 || k <= 0)
    return std::nullopt;
  problem.m = m, problem.n = n, problem.k = k;
  std::string rest = text.substr(size_t(consumed));
  for (const auto& [suffix, flag] : {std::pair<std::string, bool*>{"+ta", &problem.transpose_a},
                                     {"+tb", &problem.transpose_b}, {"+f32", &problem.float32_out}})
    if (const size_t at = rest.find(suffix); at != std::string::npos) {
      *flag = true;
      rest.erase(at, suffix.size());
    }
  if (!rest.empty()) return std::nullopt;
  return problem;
}

// Every algorithm cuBLASLt's heuristic proposes for each problem (up to 16, in its order), timed: the median of 20
// runs in rounds, and with `sustained_seconds` > 0 each one also back to back at the power cap, with its energy per
// FLOP (a training step runs at the cap, where the fastest algorithm in a burst need not be the cheapest).
int run_candidates(const std::vector<ProductShape>& problems, double sustained_seconds) {
  const Device device = Device::cuda(0);
  const Stream stream = compute_stream(device);
  const cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream.handle);
  cublasLtHandle_t handle = nullptr;
  FLM_CUBLAS_CHECK(cublasLtCreate(&handle));
  Tensor workspace = Tensor::empty(Shape{int64_t(kernels::cuda::kCublasLtWorkspaceBytes)}, DType::uint8, device);
  fmt::print("device: {}\n", device_info(device).name);
  for (const ProductShape& problem : problems) {
    const auto [m, n, k, transpose_a, transpose_b, float32_out] = problem;
    const Tensor a = transpose_a ? random_matrix(k, m, 1, device) : random_matrix(m, k, 1, device);
    const Tensor b = transpose_b ? random_matrix(n, k, 2, device) : random_matrix(k, n, 2, device);
    Tensor out = Tensor::empty(Shape{m, n}, float32_out ? DType::float32 : DType::bfloat16, device);
    const RowMajorProduct product(problem);
    cublasLtMatmulPreference_t preference = nullptr;
    FLM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const uint64_t workspace_bytes = kernels::cuda::kCublasLtWorkspaceBytes;
    FLM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &workspace_bytes, sizeof(workspace_bytes)));
    std::array<cublasLtMatmulHeuristicResult_t, 16> results{};
    int found = 0;
    FLM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, product.description, product.layout_a, product.layout_b,
                                                    product.layout_out, product.layout_out, preference,
                                                    int(results.size()), results.data(), &found));
    if (found == 0) fmt::print("{}: cuBLASLt's heuristic has no algorithm\n", problem.str());
    const float alpha = 1, beta = 0;
    std::vector<std::function<void()>> runs;
    for (int index = 0; index < found; ++index)
      runs.push_back([&, index] {
        FLM_CUBLAS_CHECK(cublasLtMatmul(handle, product.description, &alpha, b.data(), product.layout_a, a.data(),
                                        product.layout_b, &beta, out.data(), product.layout_out, out.data(),
                                        product.layout_out, &results[index].algo, workspace.data(), workspace_bytes,
                                        cuda_stream));
      });
    const std::vector<double> medians = median_ms(runs, device, stream, 3, 20);
    const double flops = 2.0 * double(m) * double(n) * double(k);
    const auto tflops = [&](double ms) { return flops / (ms * 1e-3) / 1e12; };
    if (found > 0)
      fmt::print("{} ({} candidates): burst first {:.1f} TF/s, best {:.1f} TF/s ({:.3f}x)\n", problem.str(), found,
                 tflops(medians[0]), tflops(*std::min_element(medians.begin(), medians.end())),
                 medians[0] / *std::min_element(medians.begin(), medians.end()));
    if (sustained_seconds > 0)
      for (int index = 0; index < found; ++index) {
        const benchmarks::SustainedResult held = benchmarks::sustained(runs[size_t(index)], medians[size_t(index)],
                                                                       sustained_seconds);
        fmt::print("  candidate {:>2}: burst {:7.1f} TF/s | sustained {:7.1f} TF/s, {:.3f} pJ/FLOP, {:.0f} W, "
                   "{:.0f} MHz{}{}\n",
                   index, tflops(medians[size_t(index)]), tflops(held.ms_per_run), held.joules_per_run / flops * 1e12,
                   held.watts, held.sm_clock_mhz, held.note.empty() ? "" : " ", held.note);
      }
    cublasLtMatmulPreferenceDestroy(preference);
  }
  cublasLtDestroy(handle);
  return 0;
}

// Our gemm on one shape under sustained load.
int run_sustained(int64_t m, int64_t n, int64_t k, double seconds) {
  if (cuda_devices().empty()) {
    std::fprintf(stderr, "gemm_benchmark: no CUDA device\n");
    return 1;
  }
  const Device device = Device::cuda(0);
  const Tensor a = random_matrix(m, k, 1, device), b = random_matrix(k, n, 2, device);
  Tensor out = Tensor::empty(Shape{m, n}, DType::bfloat16, device);
  const kernels::GemmArgs args{.a = a, .b = b, .out = out, .stream = compute_stream(device)};
  const auto run = [&] { kernels::gemm(args); };
  run();  // autotuning
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const double ms = benchmarks::median_ms(run, 10, 20);
  const benchmarks::SustainedResult held = benchmarks::sustained(run, ms, seconds);
  fmt::print("device: {}\nrow-major bf16 ({} x {}) @ ({} x {}), fp32 compute, bf16 out\n", device_info(device).name,
             m, k, k, n);
  fmt::print("burst median {:.3f} ms {:.1f} TF/s | sustained {:.3f} ms {:.1f} TF/s, {:.4f} J, {:.0f} W, {:.0f} MHz, "
             "{:.3f} pJ/FLOP ({} runs){}{}\n",
             ms, flops / (ms * 1e-3) / 1e12, held.ms_per_run, flops / (held.ms_per_run * 1e-3) / 1e12,
             held.joules_per_run, held.watts, held.sm_clock_mhz, held.joules_per_run / flops * 1e12, held.runs,
             held.note.empty() ? "" : " ", held.note);
  return 0;
}

}  // namespace
}  // namespace fast_llm

namespace {

// Parses the command line (usage and 2 on a bad one) and runs the mode it names.
int run_command_line(int argc, char** argv) {
  using namespace fast_llm;
  // m, n, k from argv[first...] when they are there, else 8192 each.
  const auto shape_at = [&](int first) {
    std::array<int64_t, 3> shape{8192, 8192, 8192};
    if (argc >= first + 3)
      for (int i = 0; i < 3; ++i) shape[size_t(i)] = std::atoll(argv[first + i]);
    return shape;
  };
  const auto positive = [](const std::array<int64_t, 3>& s) { return s[0] > 0 && s[1] > 0 && s[2] > 0; };
  if (argc >= 2 && std::string(argv[1]) == "--sustained") {
    const auto [m, n, k] = shape_at(2);
    const double seconds = argc >= 6 ? std::atof(argv[5]) : 1.0;
    if (!positive({m, n, k}) || !(seconds > 0 && seconds <= 600) || argc == 3 || argc == 4 || argc > 6) {
      std::fprintf(stderr, "usage: gemm_benchmark --sustained [m n k [seconds]]\n");
      return 2;
    }
    return run_sustained(m, n, k, seconds);
  }
  if (argc >= 2 && std::string(argv[1]) == "--candidates") {
    // `--candidates [--sustained [seconds]] MxNxK[+ta][+tb][+f32] ...`, or the older `m n k` triples.
    const benchmarks::SustainedCommandLine line = benchmarks::parse_sustained_command_line(argc - 1, argv + 1);
    std::vector<ProductShape> problems;
    bool valid = !std::isnan(line.seconds) && !line.positional.empty();
    const bool triples = valid && !parse_candidate_problem(line.positional[0]);
    if (triples) {
      valid = line.positional.size() % 3 == 0;
      for (size_t index = 0; valid && index + 2 < line.positional.size(); index += 3) {
        const ProductShape problem{std::atoll(line.positional[index].c_str()),
                                       std::atoll(line.positional[index + 1].c_str()),
                                       std::atoll(line.positional[index + 2].c_str())};
        valid = problem.m > 0 && problem.n > 0 && problem.k > 0;
        problems.push_back(problem);
      }
    } else {
      for (size_t index = 0; valid && index < line.positional.size(); ++index) {
        const std::optional<ProductShape> problem = parse_candidate_problem(line.positional[index]);
        valid = problem.has_value();
        if (valid) problems.push_back(*problem);
      }
    }
    if (!valid) {
      std::fprintf(stderr,
                   "usage: gemm_benchmark --candidates [--sustained [seconds]] MxNxK[+ta][+tb][+f32] ...\n"
                   "       gemm_benchmark --candidates m n k [m n k ...]\n");
      return 2;
    }
    return run_candidates(problems, line.seconds);
  }
  const auto [m, n, k] = shape_at(1);
  const int iterations = argc >= 5 ? std::atoi(argv[4]) : 50;
  if (!positive({m, n, k}) || iterations <= 0) {
    std::fprintf(stderr, "usage: gemm_benchmark [m n k [iterations]]\n");
    return 2;
  }
  return run_benchmark(m, n, k, iterations);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_command_line(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gemm_benchmark: %s\n", error.what());
    return 1;
  }
}
