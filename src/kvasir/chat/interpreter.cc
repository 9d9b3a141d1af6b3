#include "kvasir/chat/interpreter.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "kvasir/chat/builtins.h"
#include "kvasir/chat/py_format.h"
#include "kvasir/chat/py_str.h"
#include "kvasir/chat/unicode.h"

namespace kvasir::chat {

namespace {

// A macro (or a call block's `caller`) bound to the scope it was defined in.
class Macro : public Object {
 public:
  Macro(const MacroDef* def, std::shared_ptr<Scope> closure)
      : def_(def), closure_(std::move(closure)) {}
  std::string type_name() const override { return "Macro"; }
  std::string type_repr() const override { return "jinja2.runtime.Macro object"; }
  std::string repr() const override {
    return std::string("<Macro ") + repr_string(def_->name) + ">";
  }
  std::optional<Value> attr(std::string_view name) const override {
    if (name == "name") return Value::string(def_->name);
    if (name == "arguments") {
      std::vector<Value> names;
      for (const auto& p : def_->params) names.push_back(Value::string(p));
      return make_tuple(std::move(names));
    }
    if (name == "catch_varargs") return Value::boolean(def_->uses_varargs);
    if (name == "catch_kwargs") return Value::boolean(def_->uses_kwargs);
    if (name == "caller") return Value::boolean(def_->uses_caller);
    return std::nullopt;
  }
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override {
    if (!closure_) raise(ErrorKind::Runtime, "macro called after the render ended");
    return in.call_macro(*def_, closure_, args);
  }
  void release() override { closure_.reset(); }

 private:
  const MacroDef* def_;
  std::shared_ptr<Scope> closure_;
};

// Jinja2's LoopContext: the `loop` variable inside a for loop.
class LoopObject : public Object {
 public:
  LoopObject(std::vector<Value> items, int depth0, const ForStmt* stmt,
             std::shared_ptr<Scope> scope)
      : items_(std::move(items)), depth0_(depth0), stmt_(stmt), scope_(std::move(scope)) {}

  void set_index(size_t i) { index0_ = i; }
  std::string type_name() const override { return "LoopContext"; }
  std::string type_repr() const override { return "jinja2.runtime.LoopContext object"; }
  std::string repr() const override {
    return std::string("<LoopContext ") + std::to_string(index0_ + 1) + "/" +
           std::to_string(items_.size()) + ">";
  }

  std::optional<Value> attr(std::string_view name) const override {
    auto n = static_cast<int64_t>(items_.size());
    auto i = static_cast<int64_t>(index0_);
    if (name == "index") return Value::integer(i + 1);
    if (name == "index0") return Value::integer(i);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(depth0_ + 1);
    if (name == "depth0") return Value::integer(depth0_);
    if (name == "previtem") {
      if (i == 0) return Value::undefined("there is no previous item");
      return items_[index0_ - 1];
    }
    if (name == "nextitem") {
      if (i + 1 >= n) return Value::undefined("there is no next item");
      return items_[index0_ + 1];
    }
    if (name == "cycle" || name == "changed") {
      auto self = std::const_pointer_cast<LoopObject>(
          std::static_pointer_cast<const LoopObject>(self_.lock()));
      if (!self) return std::nullopt;
      auto fn = name == "cycle" ? &LoopObject::cycle : &LoopObject::changed;
      return Value::object(
          std::make_shared<NativeFunction>(std::string(name), fn, Value::object(self)));
    }
    return std::nullopt;
  }

  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override {
    if (!stmt_->recursive)
      raise(ErrorKind::Type, "The loop must have the 'recursive' marker to be called recursively.");
    if (args.pos.size() != 1 || !args.kw.empty())
      raise(ErrorKind::Type, "loop() takes exactly one argument");
    return in.make_string(in.recurse_loop(*stmt_, scope_, args.pos[0], depth0_ + 1));
  }
  void release() override {
    items_.clear();
    scope_.reset();
    last_changed_.reset();
  }
  void set_self(const std::shared_ptr<LoopObject>& self) { self_ = self; }

 private:
  static Value cycle(Interpreter&, const Value& self, CallArgs& args) {
    auto& loop = static_cast<LoopObject&>(self.object());
    if (args.pos.empty()) raise(ErrorKind::Type, "no items for cycling given");
    return args.pos[loop.index0_ % args.pos.size()];
  }
  static Value changed(Interpreter&, const Value& self, CallArgs& args) {
    auto& loop = static_cast<LoopObject&>(self.object());
    Value current = make_tuple(args.pos);
    if (loop.last_changed_ && equals(*loop.last_changed_, current)) return Value::boolean(false);
    loop.last_changed_ = current;
    return Value::boolean(true);
  }

  std::vector<Value> items_;
  size_t index0_ = 0;
  int depth0_;
  const ForStmt* stmt_;
  std::shared_ptr<Scope> scope_;
  std::optional<Value> last_changed_;
  std::weak_ptr<Object> self_;
};

Value undefined_attr(const Value& obj, std::string_view name) {
  return Value::undefined(repr_string(object_type_repr(obj)) + " has no attribute " +
                          repr_string(name));
}

Value undefined_item(const Value& obj, const Value& key) {
  if (key.is_string()) return undefined_attr(obj, key.str());
  return Value::undefined(object_type_repr(obj) + " has no element " + repr(key));
}

const char* binop_symbol(BinOp op) {
  switch (op) {
    case BinOp::Add:
      return "+";
    case BinOp::Sub:
      return "-";
    case BinOp::Mul:
      return "*";
    case BinOp::Div:
      return "/";
    case BinOp::FloorDiv:
      return "//";
    case BinOp::Mod:
      return "%";
    case BinOp::Pow:
      return "** or pow()";
  }
  return "?";
}

[[noreturn]] void unsupported(BinOp op, const Value& a, const Value& b) {
  raise(ErrorKind::Type, "unsupported operand type(s) for {}: '{}' and '{}'", binop_symbol(op),
        type_name(a), type_name(b));
}

int64_t checked(bool overflow, int64_t v) {
  if (overflow) raise(ErrorKind::Overflow, "integer overflow (Kvasir's integers are 64-bit)");
  return v;
}

double py_floor_div(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  if (div == 0) floordiv = std::copysign(0.0, a / b);
  return floordiv;
}

double py_float_mod(double a, double b) {
  double mod = std::fmod(a, b);
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = std::copysign(0.0, b);
  }
  return mod;
}

bool orderable(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return true;
  if (a.is_string() && b.is_string()) return true;
  if (a.is_list() && b.is_list())
    return (a.list().flavor == ListFlavor::Tuple) == (b.list().flavor == ListFlavor::Tuple);
  return false;
}

bool ordered(CmpOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (!orderable(a, b)) {
    const char* sym = op == CmpOp::Lt ? "<" : op == CmpOp::Le ? "<=" : op == CmpOp::Gt ? ">" : ">=";
    raise(ErrorKind::Type, "'{}' not supported between instances of '{}' and '{}'", sym,
          type_name(a), type_name(b));
  }
  switch (op) {
    case CmpOp::Lt:
      return less(a, b);
    case CmpOp::Le:
      return !less(b, a);
    case CmpOp::Gt:
      return less(b, a);
    default:
      return !less(a, b);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Interpreter::DepthGuard {
  Interpreter& in;
  explicit DepthGuard(Interpreter& i) : in(i) {
    if (++in.depth_ > in.opts_.max_depth) {
      --in.depth_;
      raise(ErrorKind::Limit, "template recursion is too deep (more than {} nested evaluations)",
            in.opts_.max_depth);
    }
  }
  ~DepthGuard() { --in.depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

Interpreter::~Interpreter() {
  for (auto& o : objects_) o->release();
}

std::string Interpreter::render(const Body& body, const Value& context) {
  RenderBudget::Installed budget(this);
  scope_ = std::make_shared<Scope>();
  for (const auto& [k, v] : context.dict().entries()) scope_->vars[k.str()] = v;
  std::string out;
  out_ = &out;
  exec_body(body);
  out_ = nullptr;
  return out;
}

void Interpreter::charge(size_t steps) {
  if (steps > opts_.max_steps - std::min(steps_, opts_.max_steps)) {
    steps_ = opts_.max_steps + 1;  // saturate: a huge charge must not wrap around
    raise(ErrorKind::Limit, "rendering took more than {} steps", opts_.max_steps);
  }
  steps_ += steps;
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > opts_.max_output_bytes)
    raise(ErrorKind::Limit, "output larger than {} bytes", opts_.max_output_bytes);
}

void Interpreter::check_bytes(std::string_view what, uint64_t bytes) const {
  check_limit(what, bytes, opts_.max_output_bytes);
}

void Interpreter::check_items(std::string_view what, uint64_t items) const {
  check_limit(what, items, opts_.max_steps);
}

void Interpreter::charge_operands(const Value& input, const CallArgs& args) {
  size_t bytes = input.is_string() ? input.str().size() : 0;
  for (const Value& v : args.pos)
    if (v.is_string()) bytes += v.str().size();
  for (const auto& kv : args.kw)
    if (kv.second.is_string()) bytes += kv.second.str().size();
  charge_scan(bytes);
}

Value Interpreter::make_string(std::string s) {
  check_size(s.size());
  charge(s.size() / 16);
  return Value::string(std::move(s));
}

std::tm Interpreter::now() const {
  std::time_t t;
  bool utc = true;
  if (opts_.now) {
    t = static_cast<std::time_t>(*opts_.now);
  } else if (const char* env = std::getenv("KVASIR_TEMPLATE_NOW"); env && *env) {
    char* end = nullptr;
    long long v = std::strtoll(env, &end, 10);
    if (*end != '\0')
      raise(ErrorKind::Runtime, "KVASIR_TEMPLATE_NOW must be Unix seconds, got '{}'", env);
    t = static_cast<std::time_t>(v);
  } else {
    t = std::time(nullptr);
    utc = false;
  }
  std::tm tm{};
  if (utc) {
    gmtime_r(&t, &tm);
  } else {
    localtime_r(&t, &tm);
  }
  return tm;
}

void Interpreter::emit(std::string_view text) {
  out_->append(text);
  check_size(out_->size());
}

void Interpreter::emit_value(const Value& v) {
  append_str(*out_, v);
  check_size(out_->size());
}

template <class F>
std::string Interpreter::capture(F&& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    body();
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

// ---- statements ----

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  DepthGuard guard(*this);
  charge(1);
  try {
    switch (s.kind) {
      case StmtKind::Text:
        emit(static_cast<const TextStmt&>(s).text);
        break;
      case StmtKind::Print:
        emit_value(eval(*static_cast<const PrintStmt&>(s).expr));
        break;
      case StmtKind::If: {
        const auto& st = static_cast<const IfStmt&>(s);
        for (const auto& [test, body] : st.branches) {
          if (truthy(eval(*test))) return exec_body(body);
        }
        return exec_body(st.else_body);
      }
      case StmtKind::For: {
        const auto& st = static_cast<const ForStmt&>(s);
        exec_for(st, eval(*st.iter), 0);
        break;
      }
      case StmtKind::Set: {
        const auto& st = static_cast<const SetStmt&>(s);
        assign(st.target, eval(*st.value));
        break;
      }
      case StmtKind::SetBlock: {
        const auto& st = static_cast<const SetBlockStmt&>(s);
        Value v = make_string(capture([&] { exec_body(st.body); }));
        if (st.filter) v = eval_filter_chain(st.filter.get(), v);
        assign(st.target, v);
        break;
      }
      case StmtKind::Macro: {
        const auto& st = static_cast<const MacroStmt&>(s);
        scope_->vars[st.def.name] = Value::object(track(std::make_shared<Macro>(&st.def, scope_)));
        break;
      }
      case StmtKind::CallBlock: {
        const auto& st = static_cast<const CallBlockStmt&>(s);
        const auto& call = static_cast<const CallExpr&>(*st.call);
        Value callee = eval(*call.callee);
        CallArgs args = eval_args(call.args);
        args.kw.emplace_back("caller",
                             Value::object(track(std::make_shared<Macro>(&st.caller, scope_))));
        emit_value(this->call(callee, args));
        break;
      }
      case StmtKind::FilterBlock: {
        const auto& st = static_cast<const FilterBlockStmt&>(s);
        Value v = make_string(capture([&] { exec_body(st.body); }));
        emit_value(eval_filter_chain(st.filter.get(), v));
        break;
      }
      case StmtKind::With: {
        const auto& st = static_cast<const WithStmt&>(s);
        std::vector<Value> values;
        for (const auto& [t, e] : st.assigns) values.push_back(eval(*e));
        auto saved = scope_;
        scope_ = std::make_shared<Scope>(Scope{saved, {}});
        try {
          for (size_t i = 0; i < values.size(); ++i) assign(st.assigns[i].first, values[i]);
          Flow f = exec_body(st.body);
          scope_ = saved;
          return f;
        } catch (...) {
          scope_ = saved;
          throw;
        }
      }
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
      case StmtKind::Scope:
        return exec_body(static_cast<const ScopeStmt&>(s).body);
    }
  } catch (const TemplateError& e) {
    if (e.line() == 0) throw e.located(s.line, s.column);
    throw;
  }
  return Flow::Normal;
}

void Interpreter::exec_for(const ForStmt& s, const Value& iterable, int depth0) {
  std::vector<Value> items = iterate(iterable);
  charge(items.size());
  auto outer = scope_;
  auto restore = [&] { scope_ = outer; };
  try {
    if (s.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        scope_ = std::make_shared<Scope>(Scope{outer, {}});
        assign(s.target, item);
        if (truthy(eval(*s.filter))) kept.push_back(item);
      }
      items = std::move(kept);
      restore();
    }
    if (items.empty()) {
      scope_ = std::make_shared<Scope>(Scope{outer, {}});
      exec_body(s.else_body);
      restore();
      return;
    }
    auto loop = track(std::make_shared<LoopObject>(items, depth0, &s, outer));
    loop->set_self(loop);
    Value loop_value = Value::object(loop);
    for (size_t i = 0; i < items.size(); ++i) {
      scope_ = std::make_shared<Scope>(Scope{outer, {}});
      loop->set_index(i);
      scope_->vars["loop"] = loop_value;
      assign(s.target, items[i]);
      if (exec_body(s.body) == Flow::Break) break;
    }
    restore();
  } catch (...) {
    restore();
    throw;
  }
}

std::string Interpreter::recurse_loop(const ForStmt& stmt, const std::shared_ptr<Scope>& scope,
                                      const Value& iterable, int depth0) {
  DepthGuard guard(*this);
  auto saved = scope_;
  scope_ = scope;
  try {
    std::string out = capture([&] { exec_for(stmt, iterable, depth0); });
    scope_ = saved;
    return out;
  } catch (...) {
    scope_ = saved;
    throw;
  }
}

void Interpreter::assign(const Target& t, const Value& v) {
  switch (t.kind) {
    case Target::Kind::Name:
      scope_->vars[t.name] = v;
      return;
    case Target::Kind::NsAttr: {
      Value ns = lookup(t.name);
      auto* obj = ns.is_object() ? dynamic_cast<Namespace*>(&ns.object()) : nullptr;
      if (!obj) raise(ErrorKind::Runtime, "cannot assign attribute on non-namespace object");
      obj->set(t.attr, v);
      return;
    }
    case Target::Kind::Tuple: {
      if (!v.is_undefined() && !v.is_list() && !v.is_dict() && !v.is_string() &&
          !(v.is_object() && v.object().is_generator()))
        raise(ErrorKind::Type, "cannot unpack non-iterable {} object", type_name(v));
      std::vector<Value> items = iterate(v);
      size_t n = t.items.size();
      if (items.size() < n)
        raise(ErrorKind::Value, "not enough values to unpack (expected {}, got {})", n,
              items.size());
      if (items.size() > n) raise(ErrorKind::Value, "too many values to unpack (expected {})", n);
      for (size_t i = 0; i < n; ++i) assign(t.items[i], items[i]);
      return;
    }
  }
}

Value Interpreter::call_macro(const MacroDef& def, const std::shared_ptr<Scope>& closure,
                              CallArgs& args) {
  DepthGuard guard(*this);
  auto saved = scope_;
  scope_ = std::make_shared<Scope>(Scope{closure, {}});
  try {
    size_t n = def.params.size();
    std::vector<bool> given(n, false);
    std::vector<Value> extra_pos;
    for (size_t i = 0; i < args.pos.size(); ++i) {
      if (i < n) {
        scope_->vars[def.params[i]] = args.pos[i];
        given[i] = true;
      } else {
        extra_pos.push_back(args.pos[i]);
      }
    }
    if (!extra_pos.empty() && !def.uses_varargs)
      raise(ErrorKind::Type, "macro {} takes not more than {} argument(s)", repr_string(def.name),
            n);
    Value caller;
    bool have_caller = false;
    auto kwargs = std::make_shared<DictData>();
    for (auto& [k, v] : args.kw) {
      auto it = std::find(def.params.begin(), def.params.end(), k);
      if (it != def.params.end()) {
        size_t i = it - def.params.begin();
        if (given[i])
          raise(ErrorKind::Type, "macro {} got multiple values for argument {}",
                repr_string(def.name), repr_string(k));
        scope_->vars[k] = v;
        given[i] = true;
      } else if (k == "caller" && def.uses_caller) {
        caller = v;
        have_caller = true;
      } else if (def.uses_kwargs) {
        kwargs->set(Value::string(k), v);
      } else {
        raise(ErrorKind::Type, "macro {} takes no keyword argument {}", repr_string(def.name),
              repr_string(k));
      }
    }
    size_t first_default = n - def.defaults.size();
    for (size_t i = 0; i < n; ++i) {
      if (given[i]) continue;
      if (i >= first_default) {
        scope_->vars[def.params[i]] = eval(*def.defaults[i - first_default]);
      } else {
        scope_->vars[def.params[i]] =
            Value::undefined("parameter " + repr_string(def.params[i]) + " was not provided");
      }
    }
    if (def.uses_varargs) scope_->vars["varargs"] = make_tuple(std::move(extra_pos));
    if (def.uses_kwargs) scope_->vars["kwargs"] = Value::dict(std::move(kwargs));
    if (def.uses_caller)
      scope_->vars["caller"] = have_caller ? caller : Value::undefined("No caller defined");
    std::string out = capture([&] { exec_body(def.body); });
    scope_ = saved;
    return make_string(std::move(out));
  } catch (...) {
    scope_ = saved;
    throw;
  }
}

// ---- expressions ----

Value Interpreter::lookup(const std::string& name) {
  for (Scope* s = scope_.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (auto g = find_global(name)) return *g;
  return Value::undefined(repr_string(name) + " is undefined");
}

Value Interpreter::eval(const Expr& e) {
  DepthGuard guard(*this);
  charge(1);
  try {
    return eval_inner(e);
  } catch (const TemplateError& err) {
    if (err.line() == 0) throw err.located(e.line, e.column);
    throw;
  }
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Const:
      return static_cast<const ConstExpr&>(e).value;
    case ExprKind::Name:
      return lookup(static_cast<const NameExpr&>(e).name);
    case ExprKind::List:
    case ExprKind::Tuple: {
      const auto& s = static_cast<const SeqExpr&>(e);
      std::vector<Value> items;
      items.reserve(s.items.size());
      for (const auto& i : s.items) items.push_back(eval(*i));
      return make_list(std::move(items),
                       e.kind == ExprKind::Tuple ? ListFlavor::Tuple : ListFlavor::List);
    }
    case ExprKind::Dict: {
      auto d = std::make_shared<DictData>();
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        Value key = eval(*k);
        d->set(key, eval(*v));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::Not:
      return Value::boolean(!truthy(eval(*static_cast<const UnaryExpr&>(e).operand)));
    case ExprKind::Neg:
    case ExprKind::Pos: {
      Value v = eval(*static_cast<const UnaryExpr&>(e).operand);
      if (v.is_undefined()) v.fail_undefined();
      bool neg = e.kind == ExprKind::Neg;
      if (v.is_integral()) {
        int64_t x = v.as_int();
        if (!neg) return Value::integer(x);
        return Value::integer(checked(x == INT64_MIN, -x));
      }
      if (v.is_float()) return Value::number(neg ? -v.as_float() : v.as_float());
      raise(ErrorKind::Type, "bad operand type for unary {}: '{}'", neg ? "-" : "+", type_name(v));
    }
    case ExprKind::Binary: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value l = eval(*b.left);
      Value r = eval(*b.right);
      return binary(b.op, l, r);
    }
    case ExprKind::And: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value l = eval(*b.left);
      return truthy(l) ? eval(*b.right) : l;
    }
    case ExprKind::Or: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value l = eval(*b.left);
      return truthy(l) ? l : eval(*b.right);
    }
    case ExprKind::Compare:
      return eval_compare(static_cast<const CompareExpr&>(e));
    case ExprKind::Concat: {
      std::string s;
      for (const auto& p : static_cast<const ConcatExpr&>(e).parts) {
        append_str(s, eval(*p));
        check_size(s.size());
      }
      return make_string(std::move(s));
    }
    case ExprKind::Cond: {
      const auto& c = static_cast<const CondExpr&>(e);
      if (truthy(eval(*c.test))) return eval(*c.then);
      if (c.otherwise) return eval(*c.otherwise);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprKind::Getattr: {
      const auto& g = static_cast<const GetattrExpr&>(e);
      return getattr(eval(*g.object), g.name);
    }
    case ExprKind::Getitem: {
      const auto& g = static_cast<const GetitemExpr&>(e);
      Value obj = eval(*g.object);
      if (g.key->kind == ExprKind::Slice)
        return eval_slice(obj, static_cast<const SliceExpr&>(*g.key));
      return getitem(obj, eval(*g.key));
    }
    case ExprKind::Slice:
      raise(ErrorKind::Runtime, "a slice is only valid inside []");
    case ExprKind::Call: {
      const auto& c = static_cast<const CallExpr&>(e);
      Value callee = eval(*c.callee);
      CallArgs args = eval_args(c.args);
      return call(callee, args);
    }
    case ExprKind::Filter: {
      const auto& f = static_cast<const FilterExpr&>(e);
      Value input = f.operand ? eval(*f.operand) : Value();
      CallArgs args = eval_args(f.args);
      if (!f.fn) raise(ErrorKind::Runtime, "No filter named {} found.", repr_string(f.name));
      charge_operands(input, args);
      return f.fn(*this, input, args);
    }
    case ExprKind::Test: {
      const auto& t = static_cast<const TestExpr&>(e);
      Value input = eval(*t.operand);
      CallArgs args = eval_args(t.args);
      if (!t.fn) raise(ErrorKind::Runtime, "No test named {} found.", repr_string(t.name));
      return Value::boolean(t.fn(*this, input, args));
    }
  }
  raise(ErrorKind::Runtime, "unknown expression");
}

Value Interpreter::eval_filter_chain(const Expr* filter, const Value& input) {
  DepthGuard guard(*this);
  charge(1);
  const auto& f = static_cast<const FilterExpr&>(*filter);
  Value v = f.operand ? eval_filter_chain(f.operand.get(), input) : input;
  CallArgs args = eval_args(f.args);
  try {
    if (!f.fn) raise(ErrorKind::Runtime, "No filter named {} found.", repr_string(f.name));
    charge_operands(v, args);
    return f.fn(*this, v, args);
  } catch (const TemplateError& err) {
    if (err.line() == 0) throw err.located(f.line, f.column);
    throw;
  }
}

CallArgs Interpreter::eval_args(const CallArgsExpr& a) {
  CallArgs out;
  out.pos.reserve(a.args.size());
  for (const auto& x : a.args) out.pos.push_back(eval(*x));
  for (const auto& [k, x] : a.kwargs) out.kw.emplace_back(k, eval(*x));
  if (a.dyn_args) {
    for (Value& v : iterate(eval(*a.dyn_args))) out.pos.push_back(std::move(v));
  }
  if (a.dyn_kwargs) {
    Value d = eval(*a.dyn_kwargs);
    if (!d.is_dict())
      raise(ErrorKind::Type, "argument after ** must be a mapping, not {}", type_name(d));
    for (const auto& [k, v] : d.dict().entries()) {
      if (!k.is_string()) raise(ErrorKind::Type, "keywords must be strings");
      out.kw.emplace_back(k.str(), v);
    }
  }
  return out;
}

Value Interpreter::eval_compare(const CompareExpr& c) {
  Value left = eval(*c.first);
  for (const auto& [op, expr] : c.rest) {
    Value right = eval(*expr);
    bool ok;
    switch (op) {
      case CmpOp::Eq:
        ok = equals(left, right);
        break;
      case CmpOp::Ne:
        ok = !equals(left, right);
        break;
      case CmpOp::In:
        ok = contains(right, left);
        break;
      case CmpOp::NotIn:
        ok = !contains(right, left);
        break;
      default:
        ok = ordered(op, left, right);
        break;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_slice(const Value& obj, const SliceExpr& s) {
  if (obj.is_undefined()) obj.fail_undefined();
  auto bound = [&](const ExprPtr& e) -> std::optional<Value> {
    if (!e) return std::nullopt;
    return eval(*e);
  };
  std::optional<Value> start = bound(s.start), stop = bound(s.stop), step = bound(s.step);
  auto slice_repr = [&] {
    auto r = [](const std::optional<Value>& v) { return v ? repr(*v) : std::string("None"); };
    return std::string("slice(") + r(start) + ", " + r(stop) + ", " + r(step) + ")";
  };
  bool sequence = obj.is_string() || (obj.is_list() && (obj.list().flavor == ListFlavor::List ||
                                                        obj.list().flavor == ListFlavor::Tuple));
  auto is_index = [](const std::optional<Value>& v) {
    return !v || v->is_none() || v->is_integral();
  };
  if (!sequence || !is_index(start) || !is_index(stop) || !is_index(step))
    return Value::undefined(object_type_repr(obj) + " has no element " + slice_repr());
  auto get = [](const std::optional<Value>& v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    return v->as_int();
  };
  int64_t st = get(step).value_or(1);
  if (st == 0) raise(ErrorKind::Value, "slice step cannot be zero");
  std::u32string chars;
  int64_t len;
  if (obj.is_string()) {
    charge_scan(obj.str().size());
    chars = unicode::decode(obj.str());
    len = static_cast<int64_t>(chars.size());
  } else {
    len = static_cast<int64_t>(obj.list().items.size());
  }
  auto adjust = [&](std::optional<int64_t> v, bool is_start) -> int64_t {
    if (!v) return st < 0 ? (is_start ? len - 1 : -1) : (is_start ? 0 : len);
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= len) {
      x = st < 0 ? len - 1 : len;
    }
    return x;
  };
  int64_t a = adjust(get(start), true), b = adjust(get(stop), false);
  // The slice's length, charged before its indices are built.
  __int128 count = 0;
  if (st > 0 && b > a) count = ((__int128)b - a + st - 1) / st;
  if (st < 0 && a > b) count = ((__int128)a - b - st - 1) / -(__int128)st;
  charge(static_cast<size_t>(count));
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(count));
  for (__int128 k = 0; k < count; ++k) idx.push_back(static_cast<int64_t>(a + k * st));
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out.push_back(chars[i]);
    if (obj.is_markup()) return Value::markup(unicode::encode(out));
    return make_string(unicode::encode(out));
  }
  std::vector<Value> out;
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(obj.list().items[i]);
  return make_list(std::move(out), obj.list().flavor);
}

// ---- services ----

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) callee.fail_undefined();
  if (callee.is_object() && callee.object().callable()) return callee.object().call(*this, args);
  raise(ErrorKind::Type, "'{}' object is not callable", type_name(callee));
}

namespace {
// Python's getattr(obj, name) under the sandbox: methods, object attributes, named-tuple
// fields; dunder attributes are refused. nullopt when Python has no such attribute.
std::optional<Value> python_attr(const Value& obj, std::string_view name) {
  if (obj.is_object()) {
    if (auto v = obj.object().attr(name)) return v;
  } else if (auto v = builtin_attribute(obj, name)) {
    return v;
  }
  if (obj.is_list()) {
    const ListData& l = obj.list();
    for (size_t i = 0; i < l.field_names.size() && i < l.items.size(); ++i)
      if (l.field_names[i] == name) return l.items[i];
  }
  if (name.size() >= 2 && name.substr(0, 2) == "__") {
    return Value::undefined(std::string("access to attribute ") + repr_string(name) + " of " +
                                repr_string(type_name(obj)) + " object is unsafe.",
                            ErrorKind::Security);
  }
  return std::nullopt;
}
}  // namespace

Value Interpreter::getattr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (auto v = python_attr(obj, name)) return *v;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return undefined_attr(obj, name);
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.fail_undefined();
  switch (obj.kind()) {
    case Value::Kind::Dict:
      if (!key.is_list() && !key.is_dict()) {
        if (const Value* v = obj.dict().find(key)) return *v;
      } else if (key.is_list() && key.list().flavor == ListFlavor::Tuple) {
        if (const Value* v = obj.dict().find(key)) return *v;
      }
      break;
    case Value::Kind::List: {
      const ListData& l = obj.list();
      if (key.is_integral() && (l.flavor == ListFlavor::List || l.flavor == ListFlavor::Tuple)) {
        int64_t i = key.as_int();
        auto n = static_cast<int64_t>(l.items.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return l.items[i];
      }
      break;
    }
    case Value::Kind::String:
      if (key.is_integral()) {
        charge_scan(obj.str().size());
        std::u32string chars = unicode::decode(obj.str());
        int64_t i = key.as_int();
        auto n = static_cast<int64_t>(chars.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          std::string c = unicode::encode(chars.substr(i, 1));
          return obj.is_markup() ? Value::markup(std::move(c)) : Value::string(std::move(c));
        }
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {
    if (auto v = python_attr(obj, key.str())) return *v;
  }
  return undefined_item(obj, key);
}

Value Interpreter::apply_filter(std::string_view name, const Value& input, CallArgs& args) {
  FilterFn fn = find_filter(name);
  if (!fn) raise(ErrorKind::Runtime, "No filter named {}.", repr_string(name));
  charge(1);
  charge_operands(input, args);
  return fn(*this, input, args);
}

bool Interpreter::apply_test(std::string_view name, const Value& input, CallArgs& args) {
  TestFn fn = find_test(name);
  if (!fn) raise(ErrorKind::Runtime, "No test named {}.", repr_string(name));
  charge(1);
  return fn(*this, input, args);
}

bool Interpreter::contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::String:
      if (!item.is_string())
        raise(ErrorKind::Type, "'in <string>' requires string as left operand, not {}",
              type_name(item));
      charge_scan(container.str().size() + item.str().size());
      return Searcher(item.str()).find(container.str()) != std::string::npos;
    case Value::Kind::List:
      if (container.list().flavor == ListFlavor::DictItems && !item.is_list()) return false;
      charge(container.list().items.size());
      for (const Value& v : container.list().items)
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::Dict:
      return container.dict().find(item) != nullptr;
    case Value::Kind::Object:
      if (auto items = container.object().iterate()) {
        charge(items->size());
        for (const Value& v : *items)
          if (equals(v, item)) return true;
        return false;
      }
      break;
    default:
      break;
  }
  raise(ErrorKind::Type, "argument of type '{}' is not iterable", type_name(container));
}

Value Interpreter::binary(BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  bool nums = a.is_number() && b.is_number();
  bool ints = a.is_integral() && b.is_integral();
  switch (op) {
    case BinOp::Add: {
      if (ints) {
        int64_t r;
        bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
        return Value::integer(checked(overflow, r));
      }
      if (nums) return Value::number(a.as_float() + b.as_float());
      if (a.is_string() && b.is_string()) {
        check_size(a.str().size() + b.str().size());
        if (a.is_markup() || b.is_markup()) {  // markupsafe escapes the plain operand
          std::string r = (a.is_markup() ? a.str() : html_escape(a.str())) +
                          (b.is_markup() ? b.str() : html_escape(b.str()));
          check_size(r.size());
          charge(r.size() / 16);
          return Value::markup(std::move(r));
        }
        return make_string(a.str() + b.str());
      }
      if (a.is_markup()) unsupported(op, a, b);
      if (a.is_string())
        raise(ErrorKind::Type, "can only concatenate str (not \"{}\") to str", type_name(b));
      if (a.is_list() &&
          (a.list().flavor == ListFlavor::List || a.list().flavor == ListFlavor::Tuple)) {
        const ListData& x = a.list();
        if (!b.is_list() || b.list().flavor != x.flavor)
          raise(ErrorKind::Type, "can only concatenate {} (not \"{}\") to {}", type_name(a),
                type_name(b), type_name(a));
        charge(x.items.size() + b.list().items.size());  // before copying
        std::vector<Value> items = x.items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        return make_list(std::move(items), x.flavor);
      }
      unsupported(op, a, b);
    }
    case BinOp::Sub: {
      if (ints) {
        int64_t r;
        bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
        return Value::integer(checked(overflow, r));
      }
      if (nums) return Value::number(a.as_float() - b.as_float());
      unsupported(op, a, b);
    }
    case BinOp::Mul: {
      if (ints) {
        int64_t r;
        bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
        return Value::integer(checked(overflow, r));
      }
      if (nums) return Value::number(a.as_float() * b.as_float());
      const Value* seq = nullptr;
      const Value* count = nullptr;
      if (a.is_string() || a.is_list()) {
        seq = &a;
        count = &b;
      } else if (b.is_string() || b.is_list()) {
        seq = &b;
        count = &a;
      }
      if (!seq || (seq->is_list() && seq->list().flavor != ListFlavor::List &&
                   seq->list().flavor != ListFlavor::Tuple))
        unsupported(op, a, b);
      if (!count->is_integral())
        raise(ErrorKind::Type, "can't multiply sequence by non-int of type '{}'",
              type_name(*count));
      int64_t n = std::max<int64_t>(0, count->as_int());
      if (seq->is_string()) {
        size_t unit = seq->str().size();
        check_bytes("string repetition size", saturating_mul(unit, n));
        std::string s;
        s.reserve(unit * n);
        for (int64_t i = 0; i < n; ++i) s += seq->str();
        if (seq->is_markup()) {
          charge(s.size() / 16);
          return Value::markup(std::move(s));
        }
        return make_string(std::move(s));
      }
      const ListData& l = seq->list();
      check_items("list repetition length", saturating_mul(l.items.size(), n));
      charge(l.items.size() * n);
      std::vector<Value> items;
      items.reserve(l.items.size() * n);
      for (int64_t i = 0; i < n; ++i) items.insert(items.end(), l.items.begin(), l.items.end());
      return make_list(std::move(items), l.flavor);
    }
    case BinOp::Div: {
      if (!nums) unsupported(op, a, b);
      if (b.as_float() == 0.0)
        raise(ErrorKind::ZeroDivision, ints ? "division by zero" : "float division by zero");
      return Value::number(a.as_float() / b.as_float());
    }
    case BinOp::FloorDiv: {
      if (!nums) unsupported(op, a, b);
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) raise(ErrorKind::ZeroDivision, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) checked(true, 0);
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value::integer(q);
      }
      if (b.as_float() == 0.0) raise(ErrorKind::ZeroDivision, "float floor division by zero");
      return Value::number(py_floor_div(a.as_float(), b.as_float()));
    }
    case BinOp::Mod: {
      if (a.is_string()) {
        charge_scan(a.str().size());
        std::string r = percent_format(a.str(), b, a.is_markup(), max_bytes());
        if (a.is_markup()) {
          check_size(r.size());
          return Value::markup(std::move(r));
        }
        return make_string(std::move(r));
      }
      if (!nums) unsupported(op, a, b);
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) raise(ErrorKind::ZeroDivision, "integer modulo by zero");
        if (y == -1) return Value::integer(0);
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::integer(m);
      }
      if (b.as_float() == 0.0) raise(ErrorKind::ZeroDivision, "float modulo");
      return Value::number(py_float_mod(a.as_float(), b.as_float()));
    }
    case BinOp::Pow: {
      if (!nums) unsupported(op, a, b);
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), e = b.as_int(), r = 1;
        while (e > 0) {
          if ((e & 1) && __builtin_mul_overflow(r, base, &r)) checked(true, 0);
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) checked(true, 0);
        }
        return Value::integer(r);
      }
      double x = a.as_float(), y = b.as_float();
      if (x == 0.0 && y < 0)
        raise(ErrorKind::ZeroDivision, "0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y)) raise(ErrorKind::Value, "complex results are not supported");
      double r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
        raise(ErrorKind::Overflow, "(34, 'Numerical result out of range')");
      return Value::number(r);
    }
  }
  unsupported(op, a, b);
}

}  // namespace kvasir::chat
