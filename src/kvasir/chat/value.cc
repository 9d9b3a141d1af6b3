#include "kvasir/chat/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kvasir/chat/py_format.h"
#include "kvasir/chat/unicode.h"

namespace kvasir::chat {

namespace {

thread_local RenderBudget* tls_budget = nullptr;

int child_depth(const Value& v) {
  if (v.is_list()) return v.list().depth;
  if (v.is_dict()) return v.dict().depth();
  return 0;
}

[[noreturn]] void too_deep() {
  raise(ErrorKind::Limit, "values nested deeper than {} levels", kMaxNesting);
}

// Guards the recursion of repr/equals through objects (a namespace may contain itself).
struct RecursionGuard {
  static inline thread_local int depth = 0;
  RecursionGuard() {
    if (++depth > 2 * kMaxNesting) {
      --depth;
      too_deep();
    }
  }
  ~RecursionGuard() { --depth; }
  RecursionGuard(const RecursionGuard&) = delete;
  RecursionGuard& operator=(const RecursionGuard&) = delete;
};

void append_repr(std::string& out, const Value& v);

void append_list_repr(std::string& out, const ListData& l) {
  const char* open = "[";
  const char* close = "]";
  switch (l.flavor) {
    case ListFlavor::List:
      break;
    case ListFlavor::Tuple:
      open = "(";
      close = l.items.size() == 1 ? ",)" : ")";
      break;
    case ListFlavor::DictItems:
      open = "dict_items([";
      close = "])";
      break;
    case ListFlavor::DictKeys:
      open = "dict_keys([";
      close = "])";
      break;
    case ListFlavor::DictValues:
      open = "dict_values([";
      close = "])";
      break;
  }
  out += open;
  charge_work(l.items.size());
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, l.items[i]);
    check_built_size(out.size());
  }
  out += close;
}

void append_repr(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      out += "Undefined";
      return;
    case Value::Kind::String:
      if (v.is_markup()) out += "Markup(";
      charge_work(v.str().size() / 4);  // repr classifies every character: slower than a scan
      out += repr_string(v.str());
      if (v.is_markup()) out += ")";
      return;
    case Value::Kind::List:
      append_list_repr(out, v.list());
      return;
    case Value::Kind::Dict: {
      out += '{';
      charge_work(v.dict().size());
      bool first = true;
      for (const auto& [k, val] : v.dict().entries()) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, k);
        out += ": ";
        append_repr(out, val);
        check_built_size(out.size());
      }
      out += '}';
      return;
    }
    case Value::Kind::Object: {
      RecursionGuard guard;
      out += v.object().repr();
      return;
    }
    default:
      append_str(out, v);
      return;
  }
}

const char* list_type_name(ListFlavor f) {
  switch (f) {
    case ListFlavor::List:
      return "list";
    case ListFlavor::Tuple:
      return "tuple";
    case ListFlavor::DictItems:
      return "dict_items";
    case ListFlavor::DictKeys:
      return "dict_keys";
    case ListFlavor::DictValues:
      return "dict_values";
  }
  return "list";
}

// Lists and tuples compare only with their own kind; the dict views compare like lists here.
bool same_sequence_kind(const ListData& a, const ListData& b) {
  return (a.flavor == ListFlavor::Tuple) == (b.flavor == ListFlavor::Tuple);
}

}  // namespace

RenderBudget* RenderBudget::current() {
  return tls_budget;
}

RenderBudget::Installed::Installed(RenderBudget* budget) : saved_(tls_budget) {
  tls_budget = budget;
}

RenderBudget::Installed::~Installed() {
  tls_budget = saved_;
}

void charge_work(size_t steps) {
  if (tls_budget && steps) tls_budget->charge(steps);
}

void check_built_size(size_t bytes) {
  if (tls_budget) tls_budget->check_size(bytes);
}

Value Value::undefined(std::string message, ErrorKind kind) {
  return Value(U{std::make_shared<const UndefinedInfo>(UndefinedInfo{kind, std::move(message)})});
}

void Value::fail_undefined() const {
  const UndefinedInfo* info = undefined_info();
  if (!info) raise(ErrorKind::Undefined, "value is undefined");
  raise(info->kind, info->message);
}

Value make_list(std::vector<Value> items, ListFlavor flavor) {
  auto l = std::make_shared<ListData>();
  int depth = 0;
  for (const Value& v : items) depth = std::max(depth, child_depth(v));
  if (depth + 1 > kMaxNesting) too_deep();
  l->items = std::move(items);
  l->flavor = flavor;
  l->depth = depth + 1;
  return Value::list(std::move(l));
}

std::string hash_key(const Value& key) {
  charge_work(1);
  switch (key.kind()) {
    case Value::Kind::Undefined:
      return "U";
    case Value::Kind::None:
      return "N";
    case Value::Kind::Bool:
    case Value::Kind::Int:
      return std::string("I") + std::to_string(key.as_int());
    case Value::Kind::Float: {
      double d = key.as_float();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
        return std::string("I") + std::to_string(static_cast<int64_t>(d));
      return std::string("F") + float_repr(d);
    }
    case Value::Kind::String:
      charge_scan(key.str().size());
      return std::string("S") + key.str();
    case Value::Kind::List: {
      const ListData& l = key.list();
      if (l.flavor != ListFlavor::Tuple)
        raise(ErrorKind::Type, "unhashable type: '{}'", list_type_name(l.flavor));
      charge_work(l.items.size());
      std::string k = "T";
      for (const Value& item : l.items) {
        std::string sub = hash_key(item);
        k += std::to_string(sub.size());
        k += ':';
        k += sub;
        check_built_size(k.size());
      }
      return k;
    }
    case Value::Kind::Dict:
      raise(ErrorKind::Type, "unhashable type: 'dict'");
    case Value::Kind::Object:
      return fmt::format("O{}", static_cast<const void*>(key.object_ptr().get()));
  }
  return "?";
}

const Value* DictData::find(const Value& key) const {
  auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* DictData::find(std::string_view key) const {
  std::string k;
  k.reserve(key.size() + 1);
  k += 'S';
  k += key;
  auto it = index_.find(k);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void DictData::set(const Value& key, Value value) {
  int d = std::max(child_depth(key), child_depth(value)) + 1;
  if (d > kMaxNesting) too_deep();
  depth_ = std::max(depth_, d);
  auto [it, inserted] = index_.emplace(hash_key(key), entries_.size());
  if (inserted) {
    entries_.emplace_back(key, std::move(value));
  } else {
    entries_[it->second].second = std::move(value);
  }
}

Value Object::call(Interpreter&, CallArgs&) {
  raise(ErrorKind::Type, "'{}' object is not callable", type_name());
}

void append_str(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return;
    case Value::Kind::None:
      out += "None";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float:
      out += float_repr(v.as_float());
      return;
    case Value::Kind::String:
      out += v.str();
      return;
    default:
      append_repr(out, v);
      return;
  }
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  append_str(out, v);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

std::string repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out += quote;
  for (char32_t c : unicode::decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!unicode::is_printable(c)) {
      if (c < 0x100) {
        out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
      } else if (c < 0x10000) {
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
      } else {
        out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
      }
    } else {
      unicode::append(out, c);
    }
  }
  out += quote;
  return out;
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return v.as_bool();
    case Value::Kind::Int:
      return v.as_int() != 0;
    case Value::Kind::Float:
      return v.as_float() != 0.0;
    case Value::Kind::String:
      return !v.str().empty();
    case Value::Kind::List:
      return !v.list().items.empty();
    case Value::Kind::Dict:
      return v.dict().size() != 0;
    case Value::Kind::Object:
      return true;
  }
  return false;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      if (a.str_ptr() == b.str_ptr()) return true;
      if (a.str().size() != b.str().size()) return false;
      charge_scan(a.str().size());
      return a.str() == b.str();
    case Value::Kind::List: {
      const ListData& x = a.list();
      const ListData& y = b.list();
      if (&x == &y) return true;
      if (!same_sequence_kind(x, y) || x.items.size() != y.items.size()) return false;
      charge_work(x.items.size());
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const DictData& x = a.dict();
      const DictData& y = b.dict();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      charge_work(x.size());
      for (const auto& [k, v] : x.entries()) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::Object:
      return a.object_ptr() == b.object_ptr();
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_float() < b.as_float();
  }
  if (a.is_string() && b.is_string()) {
    charge_scan(std::min(a.str().size(), b.str().size()));
    return a.str() < b.str();  // UTF-8 keeps code point order
  }
  if (a.is_list() && b.is_list() && same_sequence_kind(a.list(), b.list())) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    charge_work(std::min(x.size(), y.size()));
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  raise(ErrorKind::Type, "'<' not supported between instances of '{}' and '{}'", type_name(a),
        type_name(b));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return v.is_markup() ? "Markup" : "str";
    case Value::Kind::List:
      return list_type_name(v.list().flavor);
    case Value::Kind::Dict:
      return "dict";
    case Value::Kind::Object:
      return v.object().type_name();
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_object()) return v.object().type_repr();
  return type_name(v) + " object";
}

std::optional<size_t> length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      charge_scan(v.str().size());
      return unicode::length(v.str());
    case Value::Kind::List:
      return v.list().items.size();
    case Value::Kind::Dict:
      return v.dict().size();
    default:
      return std::nullopt;
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::List:
      charge_work(v.list().items.size());  // before copying
      return v.list().items;
    case Value::Kind::Dict: {
      charge_work(v.dict().size());
      std::vector<Value> keys;
      keys.reserve(v.dict().size());
      for (const auto& e : v.dict().entries()) keys.push_back(e.first);
      return keys;
    }
    case Value::Kind::String: {
      // One string per character: charged (at most one step per byte) before it is built.
      charge_work(v.str().size());
      std::vector<Value> chars;
      std::string buf;
      for (char32_t c : unicode::decode(v.str())) {
        buf.clear();
        unicode::append(buf, c);
        chars.push_back(Value::string(buf));
      }
      return chars;
    }
    case Value::Kind::Object:
      if (auto items = v.object().iterate()) {
        charge_work(items->size());
        return std::move(*items);
      }
      break;
    default:
      break;
  }
  raise(ErrorKind::Type, "'{}' object is not iterable", type_name(v));
}

}  // namespace kvasir::chat
