// The contract of gemm (kernels/gemm.h), checked once per call by the entry function, and the sizes and BLAS layouts
// the variants share.
#include "fast_llm/kernels/gemm.h"

#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {
namespace {

constexpr std::string_view kOp = "gemm";

// op(x)'s (rows, columns) for a matrix (., rows, columns) stored as given.
std::pair<int64_t, int64_t> operand_size(const Tensor& matrix, bool transposed) {
  const int64_t rows = matrix.size(-2), columns = matrix.size(-1);
  return transposed ? std::pair{columns, rows} : std::pair{rows, columns};
}

}  // namespace

void check_gemm(const GemmArgs& args) {
  FLM_CHECK(args.a.defined() && args.b.defined() && args.out.defined(), kOp, "a, b and out must all be defined");
  const Device device = args.out.device();
  FLM_CHECK(args.a.device() == device && args.b.device() == device, kOp, "a is on {}, b on {}, out on {}",
            args.a.device().str(), args.b.device().str(), device.str());
  const int out_rank = args.out.rank();
  FLM_CHECK(out_rank == 2 || out_rank == 3, kOp, "out has shape {}, expected (m, n) or (batch, m, n)",
            args.out.shape().str());
  const bool batched = out_rank == 3;
  FLM_CHECK(args.a.rank() == out_rank, kOp, "a has shape {}, out has {}: expected a of rank {}", args.a.shape().str(),
            args.out.shape().str(), out_rank);
  FLM_CHECK(args.b.rank() == 2 || (batched && args.b.rank() == 3), kOp, "b has shape {}, expected a matrix{}",
            args.b.shape().str(), batched ? " or (batch, ., .)" : "");
  if (batched) {
    FLM_CHECK(args.a.size(0) == args.out.size(0), kOp, "a has shape {}, out has {}: batch sizes differ",
              args.a.shape().str(), args.out.shape().str());
    FLM_CHECK(args.b.rank() == 2 || args.b.size(0) == args.out.size(0), kOp,
              "b has shape {}, out has {}: batch sizes differ", args.b.shape().str(), args.out.shape().str());
  }
  const auto [a_rows, a_columns] = operand_size(args.a, args.transpose_a);
  const auto [b_rows, b_columns] = operand_size(args.b, args.transpose_b);
  FLM_CHECK(a_rows == args.out.size(-2) && b_rows == a_columns && b_columns == args.out.size(-1), kOp,
            "cannot multiply a {}{} by b {}{} into out {}", args.a.shape().str(), args.transpose_a ? "^T" : "",
            args.b.shape().str(), args.transpose_b ? "^T" : "", args.out.shape().str());
  if (args.bias) {
    FLM_CHECK(args.bias->defined() && args.bias->device() == device, kOp, "bias must be defined and on {}",
              device.str());
    FLM_CHECK(args.bias->rank() == 1 && args.bias->size(0) == args.out.size(-1), kOp,
              "bias has shape {}, expected ({})", args.bias->shape().str(), args.out.size(-1));
  }
  const OpContract contract(kOp, device);
  contract.floating("a", args.a);
  contract.same_dtype("b", args.b, "a", args.a);
  FLM_CHECK(args.out.dtype() == args.a.dtype() || args.out.dtype() == DType::float32, kOp,
            "out has dtype {}, expected {} (the inputs') or float32", dtype_name(args.out.dtype()),
            dtype_name(args.a.dtype()));
  if (args.bias) contract.same_dtype("bias", *args.bias, "out", args.out);
}

GemmShape gemm_shape(const GemmArgs& args) {
  const bool batched = args.out.rank() == 3;
  return GemmShape{.batch = batched ? args.out.size(0) : 1,
                   .m = args.out.size(-2),
                   .n = args.out.size(-1),
                   .k = operand_size(args.a, args.transpose_a).second,
                   .batched = batched,
                   .b_batched = args.b.rank() == 3};
}

std::optional<BlasOperand> blas_operand(const Tensor& matrix, bool transposed, std::string* reason) {
  const int64_t rows = matrix.size(-2), columns = matrix.size(-1);
  const int64_t row_stride = matrix.stride(-2), column_stride = matrix.stride(-1);
  BlasOperand operand;
  operand.batch_stride = matrix.rank() == 3 ? matrix.stride(0) : 0;
  // A dimension of size 1 has no meaningful stride: the matrix is then row-major (and column-major) whatever it is.
  if ((column_stride == 1 || columns == 1) && (rows == 1 || row_stride >= std::max<int64_t>(columns, 1))) {
    operand.transpose = transposed;
    operand.leading_dimension = rows == 1 ? std::max<int64_t>(columns, 1) : row_stride;
    return operand;
  }
  if ((row_stride == 1 || rows == 1) && (columns == 1 || column_stride >= std::max<int64_t>(rows, 1))) {
    // Stored column-major: the row-major transpose of the storage, used with the opposite flag.
    operand.transpose = !transposed;
    operand.leading_dimension = columns == 1 ? std::max<int64_t>(rows, 1) : column_stride;
    return operand;
  }
  if (reason)
    *reason = fmt::format("a matrix with shape {} and strides {} is neither row- nor column-major",
                          matrix.shape().str(), matrix.strides().str());
  return std::nullopt;
}

std::optional<BlasOperand> blas_output(const Tensor& out, std::string* reason) {
  const int64_t rows = out.size(-2), columns = out.size(-1);
  const int64_t row_stride = out.stride(-2), column_stride = out.stride(-1);
  if ((column_stride == 1 || columns == 1) && (rows == 1 || row_stride >= std::max<int64_t>(columns, 1)))
    return BlasOperand{.transpose = false,
                       .leading_dimension = rows == 1 ? std::max<int64_t>(columns, 1) : row_stride,
                       .batch_stride = out.rank() == 3 ? out.stride(0) : 0};
  if (reason)
    *reason = fmt::format("out with shape {} and strides {} is not row-major", out.shape().str(),
                          out.strides().str());
  return std::nullopt;
}

}  // namespace fast_llm::kernels
