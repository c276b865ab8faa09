// Op: gemm, the matrix product behind every linear layer.
//
//   out = alpha * op(a) @ op(b) + beta * out + bias        op(x) = x, or x^T with transpose_*
//
// Shapes are row-major: op(a) is (m, k), op(b) is (k, n), out is (m, n); bias (n) is added to every row of out.
// Batched: a and out are (batch, ., .), b is (batch, ., .) or a single matrix shared by the batch; any batch strides.
// Matrices may be views: a row-major matrix (last stride 1) or a transposed view (second-to-last stride 1) are what the
// fast variants take; the reference takes any strides.
// With beta = 0, out is only written: its old contents (NaN included) are never read.
//
// dtypes: a and b alike, one of bfloat16, float16, float32 (float64 on the CPU); out of the inputs' dtype or float32
// (bf16 products accumulated into fp32 gradient buffers); bias of out's dtype. Products accumulate in fp32 (fp64 for
// fp64 inputs); alpha, beta and the bias apply in that precision before the one rounding to out's dtype.
#pragma once

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

enum class GemmRagged { none, m, k };

struct GemmArgs {
  const Tensor& a;                // (m, k), or (k, m) with transpose_a; (batch, ., .) batched
  const Tensor& b;                // (k, n), or (n, k) with transpose_b; (batch, ., .) or shared by the batch
  Tensor& out;                    // (m, n) or (batch, m, n)
  const Tensor* bias = nullptr;   // (n) or nullptr
  bool transpose_a = false;
  bool transpose_b = false;
  double alpha = 1.0;
  double beta = 0.0;
  // Which size changes from call to call (the rows routed to one expert: m in the forward and input-gradient
  // products, k in the weight gradient's): a variant that chooses its algorithm per problem may choose it once per
  // bucket of that size instead of per exact size.
  GemmRagged ragged = GemmRagged::none;
  Stream stream = {};
};

struct Gemm {
  static constexpr std::string_view name = "gemm";
  using Args = GemmArgs;
};

// The contract above (shapes, dtypes, devices), checked once by the entry function before dispatch: throws
// `[gemm] ...` (mismatched inner sizes, wrong ranks, tensors on different devices, wrong bias length, dtypes).
void check_gemm(const GemmArgs& args);

inline void gemm(const GemmArgs& args) {
  check_gemm(args);
  dispatch<Gemm>(args, args.out.device());
}

// The sizes of a gemm whose arguments meet the contract; shared by the variants.
struct GemmShape {
  int64_t batch = 1;  // 1 when unbatched
  int64_t m = 0, n = 0, k = 0;
  bool batched = false;
  bool b_batched = false;  // b has its own matrix per batch entry (else one matrix for all)
};
GemmShape gemm_shape(const GemmArgs& args);

// How a BLAS library sees one operand: a row-major matrix with leading dimension `leading_dimension`, used transposed
// or not. A transposed view (second-to-last stride 1) is the row-major transpose of its storage, used with the
// opposite flag. `batch_stride` is 0 for a matrix shared by the whole batch.
struct BlasOperand {
  bool transpose = false;
  int64_t leading_dimension = 0;
  int64_t batch_stride = 0;
};
// The layout of `matrix` (rank 2, or 3 when batched) multiplied as `transposed`, or why BLAS cannot take it (neither
// of its two last strides is 1, or they overlap).
std::optional<BlasOperand> blas_operand(const Tensor& matrix, bool transposed, std::string* reason);
// The same for the output, which BLAS writes row-major only.
std::optional<BlasOperand> blas_output(const Tensor& out, std::string* reason);

}  // namespace fast_llm::kernels
