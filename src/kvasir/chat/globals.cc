// The global functions of Hugging Face's template environment: range (sandbox-limited), dict,
// namespace, cycler, joiner, raise_exception and strftime_now.
#include <algorithm>
#include <ctime>

#include "kvasir/chat/builtin_support.h"

namespace kvasir::chat {

namespace {

// A cycler() object: cycles through its items with next().
class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  std::string type_repr() const override { return "jinja2.utils.Cycler object"; }
  std::optional<Value> attr(std::string_view name) const override;
  void release() override { items_.clear(); }
  std::vector<Value> items_;
  size_t pos_ = 0;
  std::weak_ptr<Object> self_;
};

Value cycler_next(Interpreter&, const Value& self, CallArgs&) {
  auto& c = static_cast<Cycler&>(self.object());
  if (c.items_.empty()) return Value::none();
  size_t i = c.pos_;
  c.pos_ = (c.pos_ + 1) % c.items_.size();
  return c.items_[i];
}

Value cycler_reset(Interpreter&, const Value& self, CallArgs&) {
  static_cast<Cycler&>(self.object()).pos_ = 0;
  return Value::none();
}

std::optional<Value> Cycler::attr(std::string_view name) const {
  if (name == "current") {
    if (items_.empty()) return Value::none();
    return items_[pos_];
  }
  auto self = self_.lock();
  if (!self) return std::nullopt;
  if (name == "next" || name == "__next__")
    return Value::object(
        std::make_shared<NativeFunction>("next", cycler_next, Value::object(self)));
  if (name == "reset")
    return Value::object(
        std::make_shared<NativeFunction>("reset", cycler_reset, Value::object(self)));
  if (name == "items") return make_list(items_);
  return std::nullopt;
}

// A joiner(sep): returns "" the first time it is called, then sep.
class Joiner : public Object {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  std::string type_name() const override { return "Joiner"; }
  std::string type_repr() const override { return "jinja2.utils.Joiner object"; }
  bool callable() const override { return true; }
  Value call(Interpreter&, CallArgs&) override {
    if (!used_) {
      used_ = true;
      return Value::string("");
    }
    return Value::string(sep_);
  }

 private:
  std::string sep_;
  bool used_ = false;
};

Value g_range(Interpreter& in, const Value&, CallArgs& a) {
  if (!a.kw.empty()) raise(ErrorKind::Type, "range() takes no keyword arguments");
  if (a.pos.empty()) raise(ErrorKind::Type, "range expected at least 1 argument, got 0");
  if (a.pos.size() > 3)
    raise(ErrorKind::Type, "range expected at most 3 arguments, got {}", a.pos.size());
  for (const Value& v : a.pos)
    if (!v.is_integral())
      raise(ErrorKind::Type, "'{}' object cannot be interpreted as an integer", type_name(v));
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = a.pos[0].as_int();
  } else {
    start = a.pos[0].as_int();
    stop = a.pos[1].as_int();
    if (a.pos.size() == 3) step = a.pos[2].as_int();
  }
  if (step == 0) raise(ErrorKind::Value, "range() arg 3 must not be zero");
  __int128 n = 0;
  if (step > 0 && stop > start) n = ((__int128)stop - start + step - 1) / step;
  if (step < 0 && stop < start) n = ((__int128)start - stop - step - 1) / (-step);
  if (n > 100000)
    raise(ErrorKind::Overflow,
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) items.push_back(Value::integer(start + i * step));
  in.charge(items.size());
  return make_list(std::move(items));
}

// dict(*args, **kwargs) semantics shared by dict() and namespace().
void fill_dict(DictData& d, CallArgs& a, const char* name) {
  if (a.pos.size() > 1)
    raise(ErrorKind::Type, "{} expected at most 1 argument, got {}", name, a.pos.size());
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().entries()) d.set(k, v);
    } else {
      size_t i = 0;
      for (const Value& pair : iterate(src)) {
        std::vector<Value> kv =
            pair.is_list() || pair.is_string() ? iterate(pair) : std::vector<Value>{};
        if (!pair.is_list() && !pair.is_string())
          raise(ErrorKind::Type,
                "cannot convert dictionary update sequence element #{} to a sequence", i);
        if (kv.size() != 2)
          raise(ErrorKind::Value,
                "dictionary update sequence element #{} has length {}; 2 is required", i,
                kv.size());
        d.set(kv[0], kv[1]);
        ++i;
      }
    }
  }
  for (auto& [k, v] : a.kw) d.set(Value::string(k), v);
}

Value g_dict(Interpreter&, const Value&, CallArgs& a) {
  auto d = std::make_shared<DictData>();
  fill_dict(*d, a, "dict");
  return Value::dict(std::move(d));
}

Value g_namespace(Interpreter& in, const Value&, CallArgs& a) {
  DictData d;
  fill_dict(d, a, "Namespace");
  auto ns = in.track(std::make_shared<Namespace>());
  for (const auto& [k, v] : d.entries()) {
    if (!k.is_string()) raise(ErrorKind::Type, "keywords must be strings");
    ns->set(k.str(), v);
  }
  return Value::object(ns);
}

Value g_cycler(Interpreter& in, const Value&, CallArgs& a) {
  if (a.pos.empty()) raise(ErrorKind::Runtime, "at least one item has to be provided");
  auto c = in.track(std::make_shared<Cycler>(a.pos));
  c->self_ = c;
  return Value::object(c);
}

Value g_joiner(Interpreter& in, const Value&, CallArgs& a) {
  auto p = bind_args("joiner", a, {"sep"});
  return Value::object(in.track(std::make_shared<Joiner>(arg_str(p[0], ", "))));
}

Value g_raise_exception(Interpreter&, const Value&, CallArgs& a) {
  auto p = bind_args("raise_exception", a, {"message"}, 1);
  raise(ErrorKind::Raised, to_str(*p[0]));
}

Value g_strftime_now(Interpreter& in, const Value&, CallArgs& a) {
  auto p = bind_args("strftime_now", a, {"format"}, 1);
  if (!p[0]->is_string())
    raise(ErrorKind::Type, "strftime() argument 1 must be str, not {}", type_name(*p[0]));
  const std::string& fmt = p[0]->str();
  if (fmt.empty()) return Value::string("");
  std::tm tm = in.now();
  // strftime says neither how long its output is nor whether 0 means "empty" or "too small a
  // buffer": grow the buffer, but never past the output limit.
  const size_t cap = in.max_bytes() + 1;
  size_t size = std::min(fmt.size() * 4 + 64, cap);
  std::string buf;
  for (int tries = 0; tries < 6; ++tries) {
    buf.assign(size, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    if (n > 0) {
      buf.resize(n);
      return in.make_string(std::move(buf));
    }
    if (size == cap) in.check_bytes("strftime_now result size", cap);
    size = std::min(size * 4, cap);
  }
  return Value::string("");
}

struct GlobalEntry {
  std::string_view name;
  NativeFunction::Fn fn;
};

constexpr GlobalEntry kGlobals[] = {
    {"range", g_range},
    {"dict", g_dict},
    {"namespace", g_namespace},
    {"cycler", g_cycler},
    {"joiner", g_joiner},
    {"raise_exception", g_raise_exception},
    {"strftime_now", g_strftime_now},
};

}  // namespace

std::optional<Value> find_global(std::string_view name) {
  // Stateless function objects, created once and shared by all renders (thread-safe).
  static const std::vector<std::pair<std::string_view, Value>> table = [] {
    std::vector<std::pair<std::string_view, Value>> t;
    for (const auto& g : kGlobals)
      t.emplace_back(g.name,
                     Value::object(std::make_shared<NativeFunction>(std::string(g.name), g.fn)));
    return t;
  }();
  for (const auto& [n, v] : table)
    if (n == name) return v;
  return std::nullopt;
}

}  // namespace kvasir::chat
