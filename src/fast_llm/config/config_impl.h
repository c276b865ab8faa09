// Template machinery behind config.h: typed field handles, codecs for nested and dynamic configs, the type registry.
// Included by config.h only.
#pragma once

#include <typeinfo>

#include "fast_llm/config/checks.h"

namespace fast_llm::config {

// ---------------------------------------------------------------------------------------------------------------
// Registry of `type:` names for a polymorphic config base. Bases declare `static constexpr std::string_view
// kDefaultType` ("" when `type` is required).

template <class Base>
class TypeRegistry {
 public:
  struct Entry {
    std::unique_ptr<Base> (*create)();
    std::unique_ptr<Base> (*clone)(const Base&);
    const std::type_info* type;
  };

  static TypeRegistry& instance() {
    static TypeRegistry registry;
    return registry;
  }

  void add(std::string name, Entry entry) { entries_.insert_or_assign(std::move(name), entry); }
  // An old or alternative name that reads as `name` (written back as `name`).
  void add_alias(std::string alias, std::string name) { aliases_.insert_or_assign(std::move(alias), std::move(name)); }

  // Canonical name for `name` (aliases resolved), or nothing if unknown.
  std::optional<std::string> canonical(std::string_view name) const {
    auto alias = aliases_.find(std::string(name));
    std::string resolved = alias == aliases_.end() ? std::string(name) : alias->second;
    if (entries_.contains(resolved)) return resolved;
    return std::nullopt;
  }
  const Entry& entry(const std::string& canonical_name) const { return entries_.at(canonical_name); }
  std::vector<std::string> names() const {
    std::vector<std::string> result;
    for (const auto& [name, entry] : entries_) result.push_back(name);
    return result;
  }

 private:
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> aliases_;
};

namespace detail {
template <class Base, class Derived>
struct ConfigRegistrar {
  ConfigRegistrar(const char* name) {
    static_assert(std::is_base_of_v<Base, Derived>);
    TypeRegistry<Base>::instance().add(
        name, {[]() -> std::unique_ptr<Base> { return std::make_unique<Derived>(); },
               [](const Base& other) -> std::unique_ptr<Base> {
                 return std::make_unique<Derived>(static_cast<const Derived&>(other));
               },
               &typeid(Derived)});
  }
};
struct ConfigAliasRegistrar {
  template <class Base>
  ConfigAliasRegistrar(TypeRegistry<Base>& registry, const char* alias, const char* name) {
    registry.add_alias(alias, name);
  }
};
[[noreturn]] void throw_unknown_type(const std::string& path, std::string_view type,
                                     const std::vector<std::string>& valid);
void load_config_skipping(Config& config, const YAML::Node& node, const std::string& path, std::string_view skip);
}  // namespace detail

#define FLM_CONFIG_CONCAT_INNER(a, b) a##b
#define FLM_CONFIG_CONCAT(a, b) FLM_CONFIG_CONCAT_INNER(a, b)
// Registers `Derived` under `name` for fields of type Dynamic<Base>. Put it in the .cpp (or header) of Derived.
#define FLM_REGISTER_CONFIG(Base, Derived, name)                                                                \
  static const ::fast_llm::config::detail::ConfigRegistrar<Base, Derived> FLM_CONFIG_CONCAT(                   \
      flm_config_registrar_, __COUNTER__)(name)
// Registers an alternative (e.g. deprecated) `type:` name.
#define FLM_REGISTER_CONFIG_ALIAS(Base, alias, name)                                                            \
  static const ::fast_llm::config::detail::ConfigAliasRegistrar FLM_CONFIG_CONCAT(flm_config_alias_,             \
                                                                                   __COUNTER__)(                 \
      ::fast_llm::config::TypeRegistry<Base>::instance(), alias, name)

// ---------------------------------------------------------------------------------------------------------------
// Dynamic<Base>: a field holding one registered subclass of Base, chosen by the YAML key `type`.

template <class Base>
class Dynamic {
 public:
  // The base's default type, or empty (`type` required) when it has none.
  Dynamic() {
    if constexpr (requires { Base::kDefaultType; }) {
      if (!std::string_view(Base::kDefaultType).empty()) set_type(std::string(Base::kDefaultType));
    }
  }
  explicit Dynamic(std::string_view type) { set_type(std::string(type)); }
  Dynamic(const Dynamic& other) : type_(other.type_) {
    if (other.value_) value_ = TypeRegistry<Base>::instance().entry(type_).clone(*other.value_);
  }
  Dynamic& operator=(const Dynamic& other) {
    if (this != &other) {
      Dynamic copy(other);
      std::swap(type_, copy.type_);
      std::swap(value_, copy.value_);
    }
    return *this;
  }
  Dynamic(Dynamic&&) noexcept = default;
  Dynamic& operator=(Dynamic&&) noexcept = default;

  bool has_value() const { return value_ != nullptr; }
  const std::string& type() const { return type_; }
  Base& get() {
    FLM_ASSERT(value_, "dynamic config has no type");
    return *value_;
  }
  const Base& get() const {
    FLM_ASSERT(value_, "dynamic config has no type");
    return *value_;
  }
  Base* operator->() { return &get(); }
  const Base* operator->() const { return &get(); }
  Base& operator*() { return get(); }
  const Base& operator*() const { return get(); }

  template <class T>
  bool is() const {
    return dynamic_cast<const T*>(value_.get()) != nullptr;
  }
  template <class T>
  T* as() {
    return dynamic_cast<T*>(value_.get());
  }
  template <class T>
  const T* as() const {
    return dynamic_cast<const T*>(value_.get());
  }

  // Replaces the value with a fresh (default) instance of the registered type `type`. Throws ConfigError (with
  // `path`) if the type is unknown.
  Base& set_type(const std::string& type, const std::string& path = "") {
    auto& registry = TypeRegistry<Base>::instance();
    auto canonical = registry.canonical(type);
    if (!canonical) detail::throw_unknown_type(path.empty() ? "type" : path + ".type", type, registry.names());
    type_ = *canonical;
    value_ = registry.entry(type_).create();
    return *value_;
  }

 private:
  std::string type_;
  std::unique_ptr<Base> value_;
};

template <class T>
struct Codec<T, std::enable_if_t<std::is_base_of_v<Config, T>>> {
  static constexpr bool holds_configs = true;
  static void read(T& value, const YAML::Node& node, const std::string& path) {
    if (node.IsNull()) return;  // `field:` with nothing after keeps the defaults
    value.load(node, path);
  }
  static YAML::Node write(const T& value, const WriteOptions& options) { return value.to_yaml(options); }
  template <class Function>
  static void for_each_config(T& value, const std::string& path, const Function& function) {
    function(path, static_cast<Config&>(value));
  }
};

template <class Base>
struct Codec<Dynamic<Base>> {
  static constexpr bool holds_configs = true;
  static void read(Dynamic<Base>& value, const YAML::Node& node, const std::string& path) {
    if (node.IsNull()) return;
    if (!node.IsMap()) throw ConfigError(path, "expected a mapping (with an optional `type` key)");
    if (const YAML::Node type_node = node["type"]; type_node && !type_node.IsNull()) {
      std::string type = detail::require_scalar(type_node, path + ".type", "a type name");
      auto canonical = TypeRegistry<Base>::instance().canonical(type);
      if (!canonical) detail::throw_unknown_type(path + ".type", type, TypeRegistry<Base>::instance().names());
      // Changing the type starts from the new type's defaults; the same type updates in place.
      if (!value.has_value() || value.type() != *canonical) value.set_type(*canonical, path);
    } else if (!value.has_value()) {
      throw ConfigError(path + ".type", fmt::format("a type is required (one of: {})",
                                                    fmt::join(TypeRegistry<Base>::instance().names(), ", ")));
    }
    detail::load_config_skipping(value.get(), node, path, "type");
  }
  static YAML::Node write(const Dynamic<Base>& value, const WriteOptions& options) {
    if (!value.has_value()) return YAML::Node(YAML::NodeType::Null);
    YAML::Node fields = value->to_yaml(options);
    YAML::Node node(YAML::NodeType::Map);
    if (!options.omit_dynamic_type) node["type"] = value.type();
    for (const auto& entry : fields)
      if (entry.first.Scalar() != "type") node[entry.first.Scalar()] = entry.second;
    return node;
  }
  template <class Function>
  static void for_each_config(Dynamic<Base>& value, const std::string& path, const Function& function) {
    if (value.has_value()) function(path, static_cast<Config&>(value.get()));
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Typed field handles.

namespace detail {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {
  using value_type = T;
};

template <class T>
class TypedField final : public FieldHandle {
 public:
  TypedField(T& value, Config& owner, std::string_view name) : value_(value), owner_(owner), name_(name) {}

  void add(Check<T> check) { checks_.push_back(std::move(check)); }
  // A check on the value of an optional field, applied only when it is set.
  template <class U = T>
    requires is_optional<U>::value
  void add(Check<typename is_optional<U>::value_type> check) {
    checks_.push_back([check](const T& value) -> std::optional<std::string> {
      if (!value) return std::nullopt;
      return check(*value);
    });
  }
  void add(NotSupportedYet<T> marker) {
    unsupported_.push_back([marker](const T& value) -> std::optional<std::string> {
      if (value == marker.allowed) return std::nullopt;
      YAML::Emitter emitter;
      emitter << YAML::Flow << Codec<T>::write(value, WriteOptions{});
      return fmt::format("{} is not supported yet{}", emitter.c_str(),
                         marker.what.empty() ? std::string() : fmt::format(" ({})", marker.what));
    });
  }
  void add(NotSupportedIf<T> marker) {
    unsupported_.push_back([marker](const T& value) -> std::optional<std::string> {
      if (!marker.is_unsupported(value)) return std::nullopt;
      return fmt::format("not supported yet ({})", marker.what);
    });
  }
  // Accept plain lambdas and functions returning std::optional<std::string>.
  template <class F>
    requires(std::is_invocable_r_v<std::optional<std::string>, F, const T&> &&
             !std::is_same_v<std::decay_t<F>, Check<T>>)
  void add(F function) {
    checks_.push_back(Check<T>(std::move(function)));
  }

  void read(const YAML::Node& node, const std::string& path) override {
    Codec<T>::read(value_, node, path);
    owner_.mark_explicit(name_);
  }
  YAML::Node write(const WriteOptions& options) const override { return Codec<T>::write(value_, options); }
  void validate(const std::string& path) override {
    for (const auto& check : checks_)
      if (auto message = check(value_)) throw ConfigError(path, *message);
    if constexpr (Codec<T>::holds_configs) {
      Codec<T>::for_each_config(value_, path, [](const std::string& child_path, Config& child) {
        child.validate(child_path);
      });
    }
  }
  void for_each_config(const std::string& path,
                       const std::function<void(const std::string&, Config&)>& function) override {
    if constexpr (Codec<T>::holds_configs) Codec<T>::for_each_config(value_, path, function);
  }
  void collect_unsupported(const std::string& path, std::vector<std::string>& messages) const override {
    for (const auto& unsupported : unsupported_)
      if (auto message = unsupported(value_)) messages.push_back(fmt::format("{}: {}", path, *message));
  }
  bool holds_configs() const override { return Codec<T>::holds_configs; }

 private:
  T& value_;
  Config& owner_;
  std::string_view name_;
  std::vector<Check<T>> checks_;
  std::vector<Check<T>> unsupported_;
};

}  // namespace detail

template <class T, class... Extras>
void Visitor::operator()(T& value, std::string_view name, std::string_view description, Hint hint,
                         Extras&&... extras) {
  static_assert(requires { Codec<T>::holds_configs; }, "no Codec for this field type");
  FLM_ASSERT(owner != nullptr, "Visitor::owner must be set before Config::visit");
  detail::TypedField<T> field(value, *owner, name);
  (field.add(std::forward<Extras>(extras)), ...);
  on_field(FieldInfo{name, description, hint}, field);
}

}  // namespace fast_llm::config
