// A tiny stand-in model for the engine tests, written with host loops in fp64 so every gradient is exact enough to
// compare at 1e-12: embeddings -> linear layers -> a scalar head with a squared-error objective on the labels.
//
//   embedding: x[t] = table[token[t]]                                (vocab, hidden) table
//   linear:    y[t] = W x[t] + b                                     (hidden, hidden) W, (hidden) b
//   head:      p[t] = w . x[t] + c;  loss "mse" += (p[t] - label[t] / 100)^2 over labels != -100
//
// The head computes the gradient of its input in forward (as the real head does), scaled by loss_gradient_scale.
// Every layer can append "<name> F|B <micro-batch index>" to an event list, so tests can check the schedule order.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fast_llm/engine/base_model.h"
#include "fast_llm/layers/layer.h"

namespace fast_llm::testing {

struct LayerEvents {
  std::vector<std::string> events;
  std::vector<double> loss_gradient_scales;
  std::vector<uint64_t> dropout_seeds;
};

inline Tensor new_fp64(const Shape& shape) { return Tensor::empty(shape, DType::float64); }

class TestLayer : public layers::Layer {
 public:
  TestLayer(std::string name, LayerEvents* events) : Layer(std::move(name)), events_(events) {}

 protected:
  void record(const layers::LayerContext& context, const char* direction) {
    if (!events_) return;
    events_->events.push_back(name() + " " + direction + " " + std::to_string(context.batch.index));
    events_->loss_gradient_scales.push_back(context.loss_gradient_scale);
    events_->dropout_seeds.push_back(context.dropout_seed);
  }
  LayerEvents* events_;
};

class TestEmbedding : public TestLayer {
 public:
  TestEmbedding(std::string name, int64_t vocab, int64_t hidden, LayerEvents* events)
      : TestLayer(std::move(name), events),
        hidden_(hidden),
        table_(declare("weight", Shape{vocab, hidden}, layers::Initialization::normal(0.5))) {}

  Tensor forward(layers::LayerContext& context, const Tensor& input) override {
    record(context, "F");
    const int64_t tokens = context.batch.num_tokens();
    const int64_t* ids = context.batch.tokens.data_as<int64_t>();
    const double* table = table_.weight.data_as<double>();
    Tensor output = new_fp64(Shape{tokens, hidden_});
    double* out = output.data_as<double>();
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < hidden_; ++h) out[t * hidden_ + h] = table[ids[t] * hidden_ + h];
    return output;
  }

  Tensor backward(layers::LayerContext& context, const Tensor& grad_output) override {
    record(context, "B");
    const int64_t tokens = context.batch.num_tokens();
    const int64_t* ids = context.batch.tokens.data_as<int64_t>();
    const double* grad = grad_output.data_as<double>();
    double* table_grad = table_.grad.data_as<double>();
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < hidden_; ++h) table_grad[ids[t] * hidden_ + h] += grad[t * hidden_ + h];
    return Tensor();
  }

 private:
  int64_t hidden_;
  layers::Parameter& table_;
};

class TestLinear : public TestLayer {
 public:
  TestLinear(std::string name, int64_t hidden, LayerEvents* events)
      : TestLayer(std::move(name), events),
        hidden_(hidden),
        weight_(declare("weight", Shape{hidden, hidden}, layers::Initialization::normal(0.3))),
        bias_(declare("bias", Shape{hidden}, layers::Initialization::uniform(-0.1, 0.1), /*weight_decay=*/false,
                      /*lr_scale=*/0.5)) {}

  Tensor forward(layers::LayerContext& context, const Tensor& input) override {
    record(context, "F");
    const int64_t tokens = input.size(0);
    const double* x = input.data_as<double>();
    const double* w = weight_.weight.data_as<double>();
    const double* b = bias_.weight.data_as<double>();
    Tensor output = new_fp64(Shape{tokens, hidden_});
    double* y = output.data_as<double>();
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < hidden_; ++i) {
        double sum = b[i];
        for (int64_t j = 0; j < hidden_; ++j) sum += w[i * hidden_ + j] * x[t * hidden_ + j];
        y[t * hidden_ + i] = sum;
      }
    if (context.training) saved_[context.batch.index] = input;
    return output;
  }

  Tensor backward(layers::LayerContext& context, const Tensor& grad_output) override {
    record(context, "B");
    Tensor input = saved_.at(context.batch.index);
    saved_.erase(context.batch.index);
    const int64_t tokens = input.size(0);
    const double* x = input.data_as<double>();
    const double* g = grad_output.data_as<double>();
    const double* w = weight_.weight.data_as<double>();
    double* w_grad = weight_.grad.data_as<double>();
    double* b_grad = bias_.grad.data_as<double>();
    Tensor grad_input = new_fp64(Shape{tokens, hidden_});
    double* dx = grad_input.data_as<double>();
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < hidden_; ++i) {
        b_grad[i] += g[t * hidden_ + i];
        for (int64_t j = 0; j < hidden_; ++j) w_grad[i * hidden_ + j] += g[t * hidden_ + i] * x[t * hidden_ + j];
      }
      for (int64_t j = 0; j < hidden_; ++j) {
        double sum = 0;
        for (int64_t i = 0; i < hidden_; ++i) sum += g[t * hidden_ + i] * w[i * hidden_ + j];
        dx[t * hidden_ + j] = sum;
      }
    }
    return grad_input;
  }

  double flops(const layers::MicroBatch& batch) const override {
    return 6.0 * double(batch.num_tokens()) * double(hidden_ * hidden_);
  }

 private:
  int64_t hidden_;
  layers::Parameter& weight_;
  layers::Parameter& bias_;
  std::map<int64_t, Tensor> saved_;
};

class TestHead : public TestLayer {
 public:
  TestHead(std::string name, int64_t hidden, LayerEvents* events)
      : TestLayer(std::move(name), events),
        hidden_(hidden),
        weight_(declare("weight", Shape{hidden}, layers::Initialization::normal(0.2))),
        bias_(declare("bias", Shape{1}, layers::Initialization::fill(0.25), /*weight_decay=*/false)) {}

  Tensor forward(layers::LayerContext& context, const Tensor& input) override {
    record(context, "F");
    const int64_t tokens = input.size(0);
    const double* x = input.data_as<double>();
    const int64_t* labels = context.batch.labels.data_as<int64_t>();
    const double* w = weight_.weight.data_as<double>();
    const double c = bias_.weight.data_as<double>()[0];
    Tensor grad_input = new_fp64(Shape{tokens, hidden_});
    double* dx = grad_input.data_as<double>();
    double loss = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      double prediction = c;
      for (int64_t h = 0; h < hidden_; ++h) prediction += w[h] * x[t * hidden_ + h];
      double dp = 0;
      if (labels[t] != -100) {
        double residual = prediction - double(labels[t]) / 100.0;
        loss += residual * residual;
        dp = 2.0 * residual * context.loss_gradient_scale;
      }
      for (int64_t h = 0; h < hidden_; ++h) dx[t * hidden_ + h] = dp * w[h];
      if (context.training && dp != 0) {
        double* w_grad = weight_.grad.data_as<double>();
        for (int64_t h = 0; h < hidden_; ++h) w_grad[h] += dp * x[t * hidden_ + h];
        bias_.grad.data_as<double>()[0] += dp;
      }
    }
    context.losses->get("mse", context.device).data_as<double>()[0] += loss;
    if (context.training) saved_[context.batch.index] = grad_input;
    return Tensor();
  }

  Tensor backward(layers::LayerContext& context, const Tensor& grad_output) override {
    record(context, "B");
    Tensor grad_input = saved_.at(context.batch.index);
    saved_.erase(context.batch.index);
    return grad_input;
  }

 private:
  int64_t hidden_;
  layers::Parameter& weight_;
  layers::Parameter& bias_;
  std::map<int64_t, Tensor> saved_;
};

// embedding, `num_linear` linear layers, head.
class TestModel : public engine::BaseModel {
 public:
  TestModel(int64_t vocab, int64_t hidden, int num_linear, LayerEvents* events = nullptr) {
    layers_.push_back(std::make_unique<TestEmbedding>("embeddings", vocab, hidden, events));
    for (int i = 0; i < num_linear; ++i)
      layers_.push_back(std::make_unique<TestLinear>("decoder." + std::to_string(i), hidden, events));
    layers_.push_back(std::make_unique<TestHead>("head", hidden, events));
  }
  std::vector<layers::Layer*> layers() override {
    std::vector<layers::Layer*> result;
    for (auto& layer : layers_) result.push_back(layer.get());
    return result;
  }

 private:
  std::vector<std::unique_ptr<layers::Layer>> layers_;
};

}  // namespace fast_llm::testing
