// The tree-walking interpreter behind ChatTemplate::render. One Interpreter renders one template
// once; it owns that render's scopes, output buffer and budget counters, so renders never share
// mutable state. Scoping follows Jinja2: `if` shares its scope, each `for` iteration, macro call
// and `with` body gets a fresh child scope, and macros see their defining scope (late bound).
// The builtins (filters, tests, methods) call back into it for attribute/item access and calls,
// which keeps the sandbox rules in one place.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvasir/chat/ast.h"
#include "kvasir/chat/chat_template.h"
#include "kvasir/chat/value.h"

namespace kvasir::chat {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
};

// The interpreter is its render's RenderBudget (value.h): value operations on this thread charge
// it while render() runs.
class Interpreter : public RenderBudget {
 public:
  explicit Interpreter(const RenderOptions& options) : opts_(options) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // `context` must be a dict of variables.
  std::string render(const Body& body, const Value& context);

  // ---- services for builtins ----
  Value call(const Value& callee, CallArgs& args);
  // Jinja2's sandboxed environment.getattr / getitem (with their fallbacks and Undefined).
  Value getattr(const Value& obj, std::string_view name);
  Value getitem(const Value& obj, const Value& key);
  Value apply_filter(std::string_view name, const Value& input, CallArgs& args);
  bool apply_test(std::string_view name, const Value& input, CallArgs& args);
  Value binary(BinOp op, const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item);
  // A new string value, checked against the size limit and charged to the work budget.
  Value make_string(std::string s);
  void check_size(size_t bytes) const override;
  void charge(size_t steps) override;
  // Checks an amplification before it allocates (see limits.h): a string of `bytes` bytes
  // against max_output_bytes, a sequence of `items` items against max_steps. The Limit error
  // names `what` ("format width", "string repetition size", ...).
  void check_bytes(std::string_view what, uint64_t bytes) const;
  void check_items(std::string_view what, uint64_t items) const;
  size_t max_bytes() const { return opts_.max_output_bytes; }
  // Charges a builtin call (filter, method) for the strings it reads: its input and arguments.
  void charge_operands(const Value& input, const CallArgs& args);
  // Registers an object so its references are dropped when the render ends (breaks cycles).
  template <class T>
  std::shared_ptr<T> track(std::shared_ptr<T> obj) {
    objects_.push_back(obj);
    return obj;
  }
  std::tm now() const;
  const RenderOptions& options() const { return opts_; }

  // Calls a macro (or a call block's caller) with arguments.
  Value call_macro(const MacroDef& def, const std::shared_ptr<Scope>& closure, CallArgs& args);
  // Renders a recursive loop's body for `loop(iterable)`.
  std::string recurse_loop(const ForStmt& stmt, const std::shared_ptr<Scope>& scope,
                           const Value& iterable, int depth0);

 private:
  enum class Flow { Normal, Break, Continue };
  struct DepthGuard;

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  void exec_for(const ForStmt& s, const Value& iterable, int depth0);
  void assign(const Target& t, const Value& v);
  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_slice(const Value& obj, const SliceExpr& s);
  Value eval_compare(const CompareExpr& c);
  Value eval_filter_chain(const Expr* filter, const Value& input);
  CallArgs eval_args(const CallArgsExpr& a);
  Value lookup(const std::string& name);
  void emit(std::string_view text);
  void emit_value(const Value& v);
  template <class F>
  std::string capture(F&& body);

  const RenderOptions& opts_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  size_t steps_ = 0;
  int depth_ = 0;
  std::vector<std::shared_ptr<Object>> objects_;
};

}  // namespace kvasir::chat
