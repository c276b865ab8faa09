// Normalization module: the norm its config specifies (NormalizationConfig::spec: layer_norm or rms_norm, with or
// without learned weight, or the identity), over the last dimension of (rows, hidden) activations, through the
// kernels/normalization.h ops.
//
// Parameters (Fast-LLM): `<name>.weight` (hidden) when the spec has one, ones or zeros when zero-centred (applied as
// 1 + weight); `<name>.bias` (hidden) when the spec has one (layer_norm), zeros; neither has weight decay. A module keeps no per-micro-batch state:
// forward fills a Saved that its owning layer keeps until backward.
// Backward: grad_input (=) returned, grad_weight / grad_bias (+=) into the bound gradient views.
// Residual form, for a norm that follows a skip connection (a decoder block's norm_2, and the gradient of its norm_1):
// add_and_forward adds the residual into its input and normalises the sum in one pass, and backward adds the skip
// connection's gradient into grad_input in the same pass (kernels/normalization.h).
#pragma once

#include <string>

#include "fast_llm/layers/common/normalization_config.h"
#include "fast_llm/layers/layer.h"

namespace fast_llm::layers {

class Normalization : public Module {
 public:
  // `lr_scale` is the product of the enclosing scales; the config's own lr_scale multiplies it. gated_rms_norm is
  // refused (SSM mixers only).
  Normalization(std::string name, const NormalizationConfig& config, int64_t hidden_size, double lr_scale);

  struct Saved {
    Tensor input;       // (rows, hidden)
    Tensor statistic;   // (rows) fp32: inverse rms (rms norms) or mean (layer_norm)
    Tensor inverse_std; // (rows) fp32, layer_norm only
  };

  bool is_identity() const { return kernel_ == NormalizationSpec::Kernel::none; }
  int64_t hidden_size() const { return hidden_size_; }

  // (rows, hidden) -> (rows, hidden) in the dtype of the input; `saved` (may be null: nothing kept) is filled for
  // backward. The identity returns `input` itself.
  Tensor forward(const Tensor& input, Saved* saved, Stream stream) const;
  // input += residual in place (rounded to the dtype, as an axpy), then forward(input): `input` is left holding the
  // residual stream after the addition, which is also what backward sees as the input. The identity returns `input`.
  Tensor add_and_forward(Tensor& input, const Tensor& residual, Saved* saved, Stream stream) const;
  // grad_output (rows, hidden) -> grad_input (=); parameter gradients +=. With `grad_residual` (rows, hidden), the
  // gradient that reaches the input through a skip connection, grad_input = grad_residual + the norm's gradient. The
  // identity returns `grad_output` itself, or a new grad_output + grad_residual.
  Tensor backward(const Tensor& grad_output, const Saved& saved, Stream stream,
                  const Tensor* grad_residual = nullptr) const;

 private:
  // The norm's kernel, of `input` or in the residual form of input + residual (written into `sum`).
  Tensor normalize(const Tensor& input, const Tensor* residual, Tensor* sum, Saved* saved, Stream stream) const;

  NormalizationSpec::Kernel kernel_ = NormalizationSpec::Kernel::none;
  int64_t hidden_size_ = 0;
  double epsilon_ = 1e-5;
  bool zero_centered_ = false;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
};

}  // namespace fast_llm::layers
