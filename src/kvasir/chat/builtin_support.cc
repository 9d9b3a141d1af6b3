#include "kvasir/chat/builtin_support.h"

#include <algorithm>

namespace kvasir::chat {

// ---- shared objects ----

std::string Namespace::repr() const {
  std::string out = "<Namespace {";
  bool first = true;
  for (const auto& [k, v] : attrs_.entries()) {
    if (!first) out += ", ";
    first = false;
    out += chat::repr(k) + ": " + chat::repr(v);
  }
  return out + "}>";
}

std::optional<Value> Namespace::attr(std::string_view name) const {
  if (const Value* v = attrs_.find(name)) return *v;
  return std::nullopt;
}

void Namespace::set(const std::string& name, Value v) {
  attrs_.set(Value::string(name), std::move(v));
}

std::optional<std::vector<Value>> Generator::iterate() {
  std::vector<Value> rest(items_.begin() + static_cast<std::ptrdiff_t>(pos_), items_.end());
  pos_ = items_.size();
  return rest;
}

std::optional<Value> Generator::next() {
  if (pos_ >= items_.size()) return std::nullopt;
  return items_[pos_++];
}

Value make_generator(Interpreter& in, std::vector<Value> items, std::string name) {
  in.charge(items.size());
  return Value::object(in.track(std::make_shared<Generator>(std::move(items), std::move(name))));
}

// A string result that stays Markup when the input was Markup (markupsafe's str methods).
Value like(Interpreter& in, const Value& src, std::string s) {
  if (!src.is_markup()) return in.make_string(std::move(s));
  in.check_size(s.size());
  return Value::markup(std::move(s));
}

std::string arg_str(const std::optional<Value>& v, const std::string& dflt) {
  return v ? to_str(*v) : dflt;
}

bool arg_bool(const std::optional<Value>& v, bool dflt) {
  return v ? truthy(*v) : dflt;
}

int64_t arg_int(const std::optional<Value>& v, int64_t dflt, const char* what) {
  if (!v || v->is_none()) return dflt;
  if (v->is_integral()) return v->as_int();
  raise(ErrorKind::Type, "'{}' object cannot be interpreted as an integer ({})", type_name(*v),
        what);
}

bool is_sequence_value(const Value& v) {
  return v.is_list() &&
         (v.list().flavor == ListFlavor::List || v.list().flavor == ListFlavor::Tuple);
}

// ---- argument binding ----

std::vector<std::optional<Value>> bind_args(std::string_view func, CallArgs& args,
                                            std::initializer_list<std::string_view> params,
                                            size_t required) {
  std::vector<std::optional<Value>> out(params.size());
  if (args.pos.size() > params.size()) {
    raise(ErrorKind::Type, "{}() takes {} positional argument{} but {} were given", func,
          params.size(), params.size() == 1 ? "" : "s", args.pos.size());
  }
  for (size_t i = 0; i < args.pos.size(); ++i) out[i] = args.pos[i];
  for (auto& [k, v] : args.kw) {
    auto it = std::find(params.begin(), params.end(), k);
    if (it == params.end())
      raise(ErrorKind::Type, "{}() got an unexpected keyword argument {}", func, repr_string(k));
    size_t i = it - params.begin();
    if (out[i])
      raise(ErrorKind::Type, "{}() got multiple values for argument {}", func, repr_string(k));
    out[i] = v;
  }
  for (size_t i = 0; i < required; ++i) {
    if (!out[i])
      raise(ErrorKind::Type, "{}() missing required argument: {}", func,
            repr_string(*(params.begin() + i)));
  }
  return out;
}

}  // namespace kvasir::chat
