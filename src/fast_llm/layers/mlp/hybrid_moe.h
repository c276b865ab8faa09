// Dense MLP plus routed experts (Fast-LLM's `type: hybrid_moe`, Gemma 4's MLP; the registered `hybrid_moe` MlpBase):
// output = dense(x) + routed(x), both on the same input. Parameters `mlp.dense.layer_{1,2}.*` (a dense Mlp) and
// `mlp.routed.{router,layer_1,layer_2}.weight` (a MoeMlp). The config requires routed.shared_experts 0 (the dense MLP
// plays that part) and the same gated / activation on both sides (HybridMoeMlpConfig::check). Each part keeps its own
// saved state; backward adds their input gradients.
#pragma once

#include <string>

#include "fast_llm/layers/mlp/config.h"
#include "fast_llm/layers/mlp/mixture_of_experts.h"
#include "fast_llm/layers/mlp/mlp.h"
#include "fast_llm/layers/mlp/mlp_base.h"

namespace fast_llm::layers {

class HybridMoeMlp : public MlpBase {
 public:
  HybridMoeMlp(std::string name, const HybridMoeMlpConfig& config, int64_t hidden_size, double lr_scale);
  HybridMoeMlp(const HybridMoeMlpConfig& config, const SublayerArguments& arguments);

  Tensor forward(LayerContext& context, const Tensor& input) override;
  Tensor backward(LayerContext& context, const Tensor& grad_output) override;
  double flops(const MicroBatch& batch) const override { return dense_.flops(batch) + routed_.flops(batch); }
  bool uses_dropout() const override { return routed_.uses_dropout(); }
  bool reads_device_values_on_host() const override { return true; }
  int64_t matmul_weight_count() const override {
    return dense_.matmul_weight_count() + routed_.matmul_weight_count();
  }

 private:
  Mlp dense_;
  MoeMlp routed_;
};

}  // namespace fast_llm::layers
