// The built-in library a template can call: Jinja2's filters (filters.cc) and tests
// (predicates.cc), the globals Hugging Face provides (globals.cc: range, dict, namespace, cycler,
// joiner, raise_exception, strftime_now), and the methods of Python's str/list/dict that a
// sandboxed Jinja2 template may call (methods.cc). Mutating methods (list.append, dict.update,
// ...) are refused with a SecurityError as in ImmutableSandboxedEnvironment. The objects below
// are implemented in builtin_support.cc.
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "kvasir/chat/ast.h"
#include "kvasir/chat/value.h"

namespace kvasir::chat {

FilterFn find_filter(std::string_view name);  // nullptr when unknown
TestFn find_test(std::string_view name);      // nullptr when unknown
std::optional<Value> find_global(std::string_view name);

// Attribute lookup on a str/list/dict/number: a bound method, an "unsafe" undefined for
// attributes the sandbox forbids, or nullopt when Python has no such attribute.
std::optional<Value> builtin_attribute(const Value& self, std::string_view name);

// Binds call arguments to named parameters like a Python signature: positional first, then
// keywords by name. Throws TypeError on unknown keywords or too many positionals.
std::vector<std::optional<Value>> bind_args(std::string_view func, CallArgs& args,
                                            std::initializer_list<std::string_view> params,
                                            size_t required = 0);

// A function implemented in C++ (globals, bound methods, loop.cycle ...).
class NativeFunction : public Object {
 public:
  using Fn = Value (*)(Interpreter& in, const Value& self, CallArgs& args);
  NativeFunction(std::string name, Fn fn, Value self = Value())
      : name_(std::move(name)), fn_(fn), self_(std::move(self)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override { return std::string("<built-in method ") + name_ + ">"; }
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override { return fn_(in, self_, args); }
  void release() override { self_ = Value(); }

 private:
  std::string name_;
  Fn fn_;
  Value self_;
};

// Jinja2's Namespace: the one mutable object a template can create (`set ns.attr = ...`).
class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  std::string type_repr() const override { return "jinja2.utils.Namespace object"; }
  std::string repr() const override;
  std::optional<Value> attr(std::string_view name) const override;
  void set(const std::string& name, Value v);
  void release() override { attrs_ = DictData(); }

 private:
  DictData attrs_;
};

// A one-shot iterator (what Jinja2's map/select/... filters return): always true, has no len(),
// and yields its items only once.
class Generator : public Object {
 public:
  explicit Generator(std::vector<Value> items, std::string name = "generator")
      : items_(std::move(items)), name_(std::move(name)) {}
  std::string type_name() const override { return name_; }
  std::optional<std::vector<Value>> iterate() override;
  bool is_generator() const override { return true; }
  void release() override { items_.clear(); }
  // Next item (nullopt when exhausted).
  std::optional<Value> next();

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
  std::string name_;
};

}  // namespace kvasir::chat
