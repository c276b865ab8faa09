// CPU variants of gemm (kernels/gemm.h):
//   reference: three plain loops per output element, any strides, any floating dtype; fp32 accumulation (fp64 for
//              fp64). Rows run in parallel (OpenMP); nothing else is tuned.
//   openblas:  cblas_sgemm / cblas_dgemm for fp32 / fp64 matrices that BLAS can address (row- or column-major views),
//              then the bias added row by row.
//   openblas_widened: bf16 / fp16 operands widened to fp32 (exactly) into contiguous copies, one cblas_sgemm per batch
//              entry into an fp32 result, then beta, the bias and the one rounding to out's dtype, as the contract says.
//              The copies cost O(mk + kn + mn) against the product's O(mnk), so a CPU run in bf16 runs at sgemm speed
//              instead of the reference's loops.
#include "fast_llm/kernels/gemm.h"

#include <cblas.h>

#include <limits>
#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"

namespace fast_llm::kernels::cpu {
namespace {

// Element offsets of op(x)(row, column) in batch entry `batch`, for a matrix used as given or transposed.
struct MatrixView {
  int64_t batch_stride = 0, row_stride = 0, column_stride = 0;

  static MatrixView of(const Tensor& matrix, bool transposed, bool batched) {
    const int64_t rows = matrix.stride(-2), columns = matrix.stride(-1);
    return {.batch_stride = batched ? matrix.stride(0) : 0,
            .row_stride = transposed ? columns : rows,
            .column_stride = transposed ? rows : columns};
  }
  int64_t offset(int64_t batch, int64_t row, int64_t column) const {
    return batch * batch_stride + row * row_stride + column * column_stride;
  }
};

void gemm_reference(const GemmArgs& args) {
  const GemmShape shape = gemm_shape(args);
  const MatrixView a_view = MatrixView::of(args.a, args.transpose_a, shape.batched);
  const MatrixView b_view = MatrixView::of(args.b, args.transpose_b, shape.b_batched);
  const MatrixView out_view = MatrixView::of(args.out, false, shape.batched);
  const int64_t bias_stride = args.bias ? args.bias->stride(0) : 0;

  visit_floating_dtype(args.a.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    auto multiply = [&]<class Out>(std::type_identity<Out>) {
      const T* a = args.a.data_as<T>();      // (batch, m, k) as op(a)
      const T* b = args.b.data_as<T>();      // (batch, k, n) as op(b)
      Out* out = args.out.data_as<Out>();    // (batch, m, n)
      const Out* bias = args.bias ? args.bias->data_as<Out>() : nullptr;  // (n)
      const Compute alpha = Compute(args.alpha), beta = Compute(args.beta);
#pragma omp parallel for collapse(2)
      for (int64_t batch = 0; batch < shape.batch; ++batch) {
        for (int64_t row = 0; row < shape.m; ++row) {
          for (int64_t column = 0; column < shape.n; ++column) {
            // out[i, j] = alpha sum_p a[i, p] b[p, j] + beta out[i, j] + bias[j]
            Compute sum = 0;
            for (int64_t inner = 0; inner < shape.k; ++inner)
              sum += Compute(load_value(a[a_view.offset(batch, row, inner)])) *
                     Compute(load_value(b[b_view.offset(batch, inner, column)]));
            Out& element = out[out_view.offset(batch, row, column)];
            Compute value = alpha * sum;
            // beta = 0 never reads out, so uninitialised (or NaN) outputs do not leak into the result.
            if (args.beta != 0) value += beta * Compute(load_value(element));
            if (bias) value += Compute(load_value(bias[column * bias_stride]));
            element = store_value<Out>(value);
          }
        }
      }
    };
    if (args.out.dtype() == args.a.dtype())
      multiply(std::type_identity<T>{});
    else
      multiply(std::type_identity<float>{});
  });
}

// cblas takes 32-bit sizes and leading dimensions.
bool fits_blas_int(int64_t value) { return value <= std::numeric_limits<int>::max(); }

std::optional<std::string> supports_openblas(const GemmArgs& args) {
  const GemmShape shape = gemm_shape(args);
  const DType dtype = args.a.dtype();
  if (dtype != DType::float32 && dtype != DType::float64)
    return fmt::format("a has dtype {}; openblas multiplies float32 and float64 only", dtype_name(dtype));
  // The contract gives b the dtype of a, and the bias that of out.
  if (args.out.dtype() != dtype)
    return fmt::format("out has dtype {}, a has {}; openblas writes the inputs' dtype only",
                       dtype_name(args.out.dtype()), dtype_name(dtype));
  std::string reason;
  std::optional<BlasOperand> a = blas_operand(args.a, args.transpose_a, &reason);
  if (!a) return "a: " + reason;
  std::optional<BlasOperand> b = blas_operand(args.b, args.transpose_b, &reason);
  if (!b) return "b: " + reason;
  std::optional<BlasOperand> out = blas_output(args.out, &reason);
  if (!out) return reason;
  for (int64_t size : {shape.m, shape.n, shape.k, a->leading_dimension, b->leading_dimension, out->leading_dimension})
    if (!fits_blas_int(size)) return fmt::format("a size or leading dimension of {} exceeds cblas's int", size);
  return std::nullopt;
}

void gemm_openblas(const GemmArgs& args) {
  const GemmShape shape = gemm_shape(args);
  const BlasOperand a = *blas_operand(args.a, args.transpose_a, nullptr);
  const BlasOperand b = *blas_operand(args.b, args.transpose_b, nullptr);
  const BlasOperand out = *blas_output(args.out, nullptr);
  if (shape.m == 0 || shape.n == 0) return;
  const auto transpose = [](bool flag) { return flag ? CblasTrans : CblasNoTrans; };
  const int m = int(shape.m), n = int(shape.n), k = int(shape.k);

  visit_float32_or_float64(args.a.dtype(), [&]<class T>(std::type_identity<T>) {
    const T* a_data = args.a.data_as<T>();
    const T* b_data = args.b.data_as<T>();
    T* out_data = args.out.data_as<T>();
    for (int64_t batch = 0; batch < shape.batch; ++batch) {
      const T* a_matrix = a_data + batch * a.batch_stride;
      const T* b_matrix = b_data + batch * b.batch_stride;
      T* out_matrix = out_data + batch * out.batch_stride;
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, transpose(a.transpose), transpose(b.transpose), m, n, k, float(args.alpha),
                    a_matrix, int(a.leading_dimension), b_matrix, int(b.leading_dimension), float(args.beta),
                    out_matrix, int(out.leading_dimension));
      else
        cblas_dgemm(CblasRowMajor, transpose(a.transpose), transpose(b.transpose), m, n, k, args.alpha, a_matrix,
                    int(a.leading_dimension), b_matrix, int(b.leading_dimension), args.beta, out_matrix,
                    int(out.leading_dimension));
    }
    if (!args.bias) return;
    const T* bias = args.bias->data_as<T>();  // (n)
    const int64_t bias_stride = args.bias->stride(0);
    const int64_t column_stride = args.out.stride(-1);
#pragma omp parallel for collapse(2)
    for (int64_t batch = 0; batch < shape.batch; ++batch)
      for (int64_t row = 0; row < shape.m; ++row)
        for (int64_t column = 0; column < shape.n; ++column)
          out_data[batch * out.batch_stride + row * out.leading_dimension + column * column_stride] +=
              bias[column * bias_stride];
  });
}

std::optional<std::string> supports_openblas_widened(const GemmArgs& args) {
  const GemmShape shape = gemm_shape(args);
  const DType dtype = args.a.dtype();
  if (dtype != DType::bfloat16 && dtype != DType::float16)
    return fmt::format("a has dtype {}; openblas_widened multiplies bfloat16 and float16 only", dtype_name(dtype));
  for (int64_t size : {shape.m, shape.n, shape.k})
    if (!fits_blas_int(size)) return fmt::format("a size of {} exceeds cblas's int", size);
  return std::nullopt;
}

void gemm_openblas_widened(const GemmArgs& args) {
  const GemmShape shape = gemm_shape(args);
  if (shape.m == 0 || shape.n == 0) return;
  const MatrixView a_view = MatrixView::of(args.a, args.transpose_a, shape.batched);
  const MatrixView b_view = MatrixView::of(args.b, args.transpose_b, shape.b_batched);
  const MatrixView out_view = MatrixView::of(args.out, false, shape.batched);
  const int m = int(shape.m), n = int(shape.n), k = int(shape.k);
  std::vector<float> a32(size_t(shape.m * shape.k)), b32(size_t(shape.k * shape.n)), product(size_t(shape.m * shape.n));

  visit_floating_dtype(args.a.dtype(), [&]<class T>(std::type_identity<T>) {
    const T* a = args.a.data_as<T>();
    const T* b = args.b.data_as<T>();
    auto write = [&]<class Out>(std::type_identity<Out>) {
      Out* out = args.out.data_as<Out>();
      const Out* bias = args.bias ? args.bias->data_as<Out>() : nullptr;
      const int64_t bias_stride = args.bias ? args.bias->stride(0) : 0;
      for (int64_t batch = 0; batch < shape.batch; ++batch) {
#pragma omp parallel for
        for (int64_t row = 0; row < shape.m; ++row)
          for (int64_t inner = 0; inner < shape.k; ++inner)
            a32[size_t(row * shape.k + inner)] = load_value(a[a_view.offset(batch, row, inner)]);
        if (batch == 0 || shape.b_batched) {
#pragma omp parallel for
          for (int64_t inner = 0; inner < shape.k; ++inner)
            for (int64_t column = 0; column < shape.n; ++column)
              b32[size_t(inner * shape.n + column)] = load_value(b[b_view.offset(batch, inner, column)]);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, float(args.alpha), a32.data(), k, b32.data(),
                    n, 0.0f, product.data(), n);
#pragma omp parallel for
        for (int64_t row = 0; row < shape.m; ++row)
          for (int64_t column = 0; column < shape.n; ++column) {
            Out& element = out[out_view.offset(batch, row, column)];
            float value = product[size_t(row * shape.n + column)];
            // beta = 0 never reads out, so uninitialised (or NaN) outputs do not leak into the result.
            if (args.beta != 0) value += float(args.beta) * load_value(element);
            if (bias) value += load_value(bias[column * bias_stride]);
            element = store_value<Out>(value);
          }
      }
    };
    if (args.out.dtype() == args.a.dtype())
      write(std::type_identity<T>{});
    else
      write(std::type_identity<float>{});
  });
}

}  // namespace

FLM_REGISTER_KERNEL(Gemm, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr, &gemm_reference,
                    "plain loops over (batch, row, column), fp32 accumulation (fp64 for fp64), any strides");
FLM_REGISTER_KERNEL(Gemm, DeviceType::cpu, "openblas", /*priority=*/100, KernelKind::optimized, &supports_openblas,
                    &gemm_openblas, "OpenBLAS sgemm / dgemm (float32, float64), bias added after");
FLM_REGISTER_KERNEL(Gemm, DeviceType::cpu, "openblas_widened", /*priority=*/90, KernelKind::optimized,
                    &supports_openblas_widened, &gemm_openblas_widened,
                    "bfloat16 / float16 widened to float32 copies, OpenBLAS sgemm, one rounding to out's dtype");

}  // namespace fast_llm::kernels::cpu
