// How a decoder block builds its mixer and its MLP from their configs: a registry per interface (Mixer, MlpBase), keyed
// by the config's `type:` name (what config::Dynamic::type() returns, the name its FLM_REGISTER_CONFIG gave). Each
// implementation registers itself with one line in its own .cpp:
//   FLM_REGISTER_SUBLAYER(MlpBase, Mlp, MlpConfig, "mlp");
// which builds `Mlp(const MlpConfig&, const SublayerArguments&)` for `type: mlp`. A new mixer or MLP type is then its
// own files, with no edit of the block. A type whose config is registered but whose layer is not (accepted for
// compatibility, no behaviour yet) is refused when the block is built: NotSupportedError naming the config path.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "fast_llm/config/config.h"
#include "fast_llm/core/error.h"
#include "fast_llm/layers/block/shared_resources.h"
#include "fast_llm/layers/common/tensor_parallel.h"
#include "fast_llm/layers/peft/config.h"

namespace fast_llm::layers {

// What a block gives the mixer and the MLP it builds.
struct SublayerArguments {
  std::string name;  // parameter-name prefix, e.g. `decoder.3.mixer`
  int64_t hidden_size = 0;
  double lr_scale = 1.0;  // product of the enclosing scales, the block's included; the layer's own config multiplies it
  SharedResources& shared;
  const LoraConfig* lora = nullptr;  // the model's `peft` when it is LoRA, else null
  // This rank's place in the tensor-parallel group: the layer declares its part of the parameters (tensor_parallel.h).
  // A layer that does not support it says so (supports_tensor_parallelism) and the block refuses it.
  TensorParallelism tensor_parallel;
};

namespace detail {
[[noreturn]] void throw_unsupported_sublayer(std::string_view kind, const std::string& path, const std::string& type,
                                             const std::vector<std::string>& supported);
}  // namespace detail

// `Interface` names its config base (`using Config = MixerConfig;`) and what it is, for errors (`kKind = "mixer"`).
template <class Interface>
class SublayerRegistry {
 public:
  using Config = typename Interface::Config;
  using Factory = std::unique_ptr<Interface> (*)(const Config&, const SublayerArguments&);

  static SublayerRegistry& instance() {
    static SublayerRegistry registry;
    return registry;
  }

  void add(std::string type, Factory factory) { factories_.insert_or_assign(std::move(type), factory); }

  // The layer for `config`'s type; `path` is the config field's, for the error when that type has no layer.
  std::unique_ptr<Interface> build(const config::Dynamic<Config>& config, const std::string& path,
                                   const SublayerArguments& arguments) const {
    auto found = factories_.find(config.type());
    if (found == factories_.end()) {
      std::vector<std::string> supported;
      for (const auto& [type, factory] : factories_) supported.push_back(type);
      detail::throw_unsupported_sublayer(Interface::kKind, path, config.type(), supported);
    }
    return found->second(config.get(), arguments);
  }

 private:
  std::map<std::string, Factory> factories_;
};

namespace detail {
template <class Interface, class Implementation, class ImplementationConfig>
struct SublayerRegistrar {
  explicit SublayerRegistrar(const char* type) {
    static_assert(std::is_base_of_v<Interface, Implementation>);
    static_assert(std::is_base_of_v<typename Interface::Config, ImplementationConfig>);
    SublayerRegistry<Interface>::instance().add(type, &build);
  }

  static std::unique_ptr<Interface> build(const typename Interface::Config& config,
                                          const SublayerArguments& arguments) {
    // The type name chose the config class through the config registry: another class is a registration mistake.
    FLM_ASSERT(typeid(config) == typeid(ImplementationConfig), "{}: config of type {} for a layer built from {}",
               config.path(), typeid(config).name(), typeid(ImplementationConfig).name());
    return std::make_unique<Implementation>(static_cast<const ImplementationConfig&>(config), arguments);
  }
};
}  // namespace detail

}  // namespace fast_llm::layers

#define FLM_SUBLAYER_CONCAT_INNER(a, b) a##b
#define FLM_SUBLAYER_CONCAT(a, b) FLM_SUBLAYER_CONCAT_INNER(a, b)
// Registers `Implementation` (built from `ImplementationConfig`) as the `Interface` for `type:` `type`.
#define FLM_REGISTER_SUBLAYER(Interface, Implementation, ImplementationConfig, type)                             \
  static const ::fast_llm::layers::detail::SublayerRegistrar<Interface, Implementation, ImplementationConfig>     \
      FLM_SUBLAYER_CONCAT(flm_sublayer_registrar_, __COUNTER__)(type)
