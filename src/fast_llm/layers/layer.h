// Layers: explicit forward and backward, no autograd tape.
//
// A Module owns parameters (declared in its constructor with `declare`) and sub-modules. A Layer is a module the
// engine runs: the GPT model is the list [embeddings, decoder blocks..., head], and stages group consecutive
// layers. Conventions (DESIGN.md §4.1):
//   - `forward(context, input)` returns the output activation and keeps what backward needs, keyed by the
//     micro-batch (several micro-batches may be in flight before their backward, breadth-first);
//   - `backward(context, grad_output)` returns the gradient of the input (=) and accumulates parameter gradients
//     (+=) into the bound grad views, then drops the saved state of that micro-batch;
//   - activations are (tokens, hidden) in the compute dtype; the embeddings layer ignores its input (it reads the
//     micro-batch's tokens) and the head returns an empty tensor from forward (it adds its losses to the context)
//     and ignores grad_output in backward (the gradient of the logits was computed in forward).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "fast_llm/layers/context.h"
#include "fast_llm/layers/parameter.h"

namespace fast_llm::layers {

class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }
  // This module's parameters and its sub-modules', in declaration order.
  std::vector<Parameter*> parameters();

 protected:
  // Declares a parameter named `<module name>.<local_name>`; the reference stays valid for the module's life.
  Parameter& declare(std::string_view local_name, Shape shape, Initialization initialization, bool weight_decay = true,
                     double lr_scale = 1.0);
  // Registers a sub-module (owned by the caller, usually a member) for `parameters()`.
  void add_child(Module& child) { children_.push_back(&child); }
  // `<module name>.<local_name>`, for naming sub-modules.
  std::string child_name(std::string_view local_name) const;

 private:
  std::string name_;
  std::deque<Parameter> parameters_;
  std::vector<Module*> children_;
};

class Layer : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(LayerContext& context, const Tensor& input) = 0;
  virtual Tensor backward(LayerContext& context, const Tensor& grad_output) = 0;
  // Model FLOPs of forward + backward for one micro-batch (matmuls and attention), for the TFLOP/s log field.
  virtual double flops(const MicroBatch& batch) const { return 0.0; }
  // Whether a training forward draws random numbers (dropout): its masks follow LayerContext::dropout_seed, which the
  // engine derives per step on the host, so such a step cannot be replayed from a CUDA graph.
  virtual bool uses_dropout() const { return false; }
  // Whether a forward copies device values to the host and waits for them (the mixture of experts' row counts per
  // expert, which size its gemms): such a step cannot be captured in a CUDA graph.
  virtual bool reads_device_values_on_host() const { return false; }
  // Whether a training forward already adds to parameter gradients (the head's fused loss computes its weight
  // gradients there): the engine must have the gradient buffer ready before the forward, not only the backward.
  virtual bool accumulates_gradients_in_forward() const { return false; }
  // Parameters this layer reads (and adds gradients to) that another layer declares: the head's output weights when
  // they are tied to the word embeddings. The engine needs them in the buffers of the declaring layer's stage.
  virtual std::vector<Parameter*> borrowed_parameters() const { return {}; }
};

}  // namespace fast_llm::layers
