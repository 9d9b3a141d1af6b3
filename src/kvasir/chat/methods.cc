// Methods of Python's str, list and dict that sandboxed templates may call, and the sandbox
// rules for attribute access on them (mutating methods are "unsafe").
#include <algorithm>

#include "kvasir/chat/builtin_support.h"
#include "kvasir/chat/py_format.h"
#include "kvasir/chat/py_str.h"
#include "kvasir/chat/unicode.h"

namespace kvasir::chat {

namespace {

// A method of a str/list/dict bound to its object.
class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override {
    return std::string("<built-in method ") + name_ + " of " + chat::type_name(self_) + " object>";
  }
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override;

 private:
  Value self_;
  std::string name_;
};

// Converts a code point range (Python start/end arguments) to a byte range of s.
std::pair<size_t, size_t> cp_range(const std::string& s, const std::optional<Value>& start,
                                   const std::optional<Value>& end) {
  if ((!start || start->is_none()) && (!end || end->is_none())) return {0, s.size()};
  auto len = static_cast<int64_t>(unicode::length(s));
  auto norm = [&](const std::optional<Value>& v, int64_t dflt) {
    int64_t x = arg_int(v, dflt, "slice index");
    if (x < 0) x = std::max<int64_t>(0, x + len);
    return std::min(x, len);
  };
  int64_t a = norm(start, 0), b = norm(end, len);
  if (b < a) b = a;
  return {unicode::byte_offset(s, a), unicode::byte_offset(s, b)};
}

int64_t cp_index(const std::string& s, size_t byte_pos) {
  return static_cast<int64_t>(unicode::length(std::string_view(s).substr(0, byte_pos)));
}

Value str_list(Interpreter& in, const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(Value::string(p));
  in.charge(items.size());
  return make_list(std::move(items));
}

Value affix_test(Interpreter&, const std::string& s, CallArgs& args, const char* name,
                 bool prefix) {
  auto a = bind_args(name, args, {"prefix", "start", "end"}, 1);
  auto [b0, b1] = cp_range(s, a[1], a[2]);
  std::string_view view = std::string_view(s).substr(b0, b1 - b0);
  auto check = [&](const Value& p) {
    if (!p.is_string())
      raise(ErrorKind::Type, "{} first arg must be str or a tuple of str, not {}", name,
            type_name(p));
    const std::string& x = p.str();
    if (x.size() > view.size()) return false;
    return prefix ? view.substr(0, x.size()) == x : view.substr(view.size() - x.size()) == x;
  };
  if (a[0]->is_list() && a[0]->list().flavor == ListFlavor::Tuple) {
    for (const Value& p : a[0]->list().items)
      if (check(p)) return Value::boolean(true);
    return Value::boolean(false);
  }
  return Value::boolean(check(*a[0]));
}

Value str_find(const std::string& s, CallArgs& args, const char* name, bool reverse,
               bool raise_missing) {
  auto a = bind_args(name, args, {"sub", "start", "end"}, 1);
  if (!a[0]->is_string()) raise(ErrorKind::Type, "must be str, not {}", type_name(*a[0]));
  auto [b0, b1] = cp_range(s, a[1], a[2]);
  std::string_view view = std::string_view(s).substr(b0, b1 - b0);
  Searcher searcher(a[0]->str());
  size_t p = reverse ? searcher.rfind(view) : searcher.find(view);
  if (p == std::string_view::npos) {
    if (raise_missing) raise(ErrorKind::Value, "substring not found");
    return Value::integer(-1);
  }
  return Value::integer(cp_index(s, b0 + p));
}

Value call_str_method(Interpreter& in, const std::string& s, const std::string& name,
                      CallArgs& args) {
  const char* n = name.c_str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto a = bind_args(n, args, {"chars"});
    return in.make_string(py_strip(s, a[0], name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    auto a = bind_args(n, args, {"sep", "maxsplit"});
    int64_t maxsplit = arg_int(a[1], -1, "maxsplit");
    bool rev = name == "rsplit";
    if (!a[0] || a[0]->is_none())
      return str_list(in, rev ? py_rsplit_ws(s, maxsplit) : py_split_ws(s, maxsplit));
    if (!a[0]->is_string()) raise(ErrorKind::Type, "must be str or None, not {}", type_name(*a[0]));
    return str_list(in,
                    rev ? py_rsplit(s, a[0]->str(), maxsplit) : py_split(s, a[0]->str(), maxsplit));
  }
  if (name == "splitlines") {
    auto a = bind_args(n, args, {"keepends"});
    return str_list(in, py_splitlines(s, arg_bool(a[0])));
  }
  if (name == "startswith") return affix_test(in, s, args, n, true);
  if (name == "endswith") return affix_test(in, s, args, n, false);
  if (name == "upper") return in.make_string(unicode::upper(s));
  if (name == "lower" || name == "casefold") return in.make_string(unicode::lower(s));
  if (name == "title") return in.make_string(py_title(s));
  if (name == "capitalize") return in.make_string(py_capitalize(s));
  if (name == "swapcase") return in.make_string(py_swapcase(s));
  if (name == "replace") {
    auto a = bind_args(n, args, {"old", "new", "count"}, 2);
    if (!a[0]->is_string() || !a[1]->is_string())
      raise(ErrorKind::Type, "replace() argument must be str, not {}",
            type_name(a[0]->is_string() ? *a[1] : *a[0]));
    return in.make_string(
        py_replace(s, a[0]->str(), a[1]->str(), arg_int(a[2], -1, "count"), in.max_bytes()));
  }
  if (name == "find") return str_find(s, args, n, false, false);
  if (name == "rfind") return str_find(s, args, n, true, false);
  if (name == "index") return str_find(s, args, n, false, true);
  if (name == "rindex") return str_find(s, args, n, true, true);
  if (name == "count") {
    auto a = bind_args(n, args, {"sub", "start", "end"}, 1);
    if (!a[0]->is_string()) raise(ErrorKind::Type, "must be str, not {}", type_name(*a[0]));
    auto [b0, b1] = cp_range(s, a[1], a[2]);
    std::string_view view = std::string_view(s).substr(b0, b1 - b0);
    const std::string& sub = a[0]->str();
    if (sub.empty()) return Value::integer(static_cast<int64_t>(unicode::length(view)) + 1);
    Searcher searcher(sub);
    int64_t c = 0;
    for (size_t p = searcher.find(view); p != std::string_view::npos;
         p = searcher.find(view, p + sub.size()))
      ++c;
    return Value::integer(c);
  }
  if (name == "join") {
    auto a = bind_args(n, args, {"iterable"}, 1);
    std::string out;
    size_t i = 0;
    for (const Value& v : iterate(*a[0])) {
      if (!v.is_string())
        raise(ErrorKind::Type, "sequence item {}: expected str instance, {} found", i,
              type_name(v));
      if (i) out += s;
      out += v.str();
      in.check_size(out.size());
      ++i;
    }
    return in.make_string(std::move(out));
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    auto a = bind_args(n, args, {"width", "fillchar"}, 1);
    char align = name == "center" ? '^' : name == "ljust" ? '<' : '>';
    int64_t width = arg_int(a[0], 0, "width");
    in.check_bytes("str." + name + " width", std::max<int64_t>(width, 0));
    return in.make_string(py_pad(s, width, align, arg_str(a[1], " ")));
  }
  if (name == "zfill") {
    auto a = bind_args(n, args, {"width"}, 1);
    int64_t width = arg_int(a[0], 0, "width");
    in.check_bytes("str.zfill width", std::max<int64_t>(width, 0));
    auto len = static_cast<int64_t>(unicode::length(s));
    if (width <= len) return Value::string(s);
    std::string sign, body = s;
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
      sign = s.substr(0, 1);
      body = s.substr(1);
    }
    return in.make_string(sign + std::string(width - len, '0') + body);
  }
  if (name == "partition" || name == "rpartition") {
    auto a = bind_args(n, args, {"sep"}, 1);
    if (!a[0]->is_string()) raise(ErrorKind::Type, "must be str, not {}", type_name(*a[0]));
    const std::string& sep = a[0]->str();
    if (sep.empty()) raise(ErrorKind::Value, "empty separator");
    Searcher searcher(sep);
    size_t p = name == "partition" ? searcher.find(s) : searcher.rfind(s);
    std::vector<Value> parts;
    if (p == std::string::npos) {
      if (name == "partition") {
        parts = {Value::string(s), Value::string(""), Value::string("")};
      } else {
        parts = {Value::string(""), Value::string(""), Value::string(s)};
      }
    } else {
      parts = {Value::string(s.substr(0, p)), Value::string(sep),
               Value::string(s.substr(p + sep.size()))};
    }
    return make_tuple(std::move(parts));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto a = bind_args(n, args, {"affix"}, 1);
    if (!a[0]->is_string()) raise(ErrorKind::Type, "must be str, not {}", type_name(*a[0]));
    const std::string& x = a[0]->str();
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0)
      return Value::string(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value::string(s.substr(0, s.size() - x.size()));
    return Value::string(s);
  }
  if (name == "format") return in.make_string(brace_format(s, args, false, in.max_bytes()));
  if (name == "expandtabs") {
    auto a = bind_args(n, args, {"tabsize"});
    int64_t tab = arg_int(a[0], 8, "tabsize");
    std::u32string out;
    size_t col = 0;
    for (char32_t c : unicode::decode(s)) {
      if (c == '\t') {
        if (tab > 0) {
          size_t add = tab - (col % tab);
          in.check_bytes("str.expandtabs result size", out.size() + add);
          out.append(add, U' ');
          col += add;
        }
      } else {
        out.push_back(c);
        col = (c == '\n' || c == '\r') ? 0 : col + 1;
      }
      in.check_size(out.size());
    }
    return in.make_string(unicode::encode(out));
  }
  if (!args.pos.empty() || !args.kw.empty()) {
    if (name.rfind("is", 0) == 0)
      raise(ErrorKind::Type, "str.{}() takes no arguments ({} given)", name, args.pos.size());
  }
  std::u32string u = unicode::decode(s);
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return Value::boolean(str_pred(s, unicode::is_digit));
  if (name == "isalpha") return Value::boolean(str_pred(s, unicode::is_alpha));
  if (name == "isalnum") return Value::boolean(str_pred(s, unicode::is_alnum));
  if (name == "isspace") return Value::boolean(str_pred(s, unicode::is_space));
  if (name == "islower") return Value::boolean(str_has_cased(u, false));
  if (name == "isupper") return Value::boolean(str_has_cased(u, true));
  if (name == "isascii")
    return Value::boolean(std::all_of(u.begin(), u.end(), [](char32_t c) { return c < 0x80; }));
  if (name == "isprintable")
    return Value::boolean(std::all_of(u.begin(), u.end(), unicode::is_printable));
  if (name == "istitle")
    return Value::boolean(!s.empty() && py_title(s) == s && str_has_cased(u, false) == false &&
                          std::any_of(u.begin(), u.end(), unicode::is_cased));
  if (name == "isidentifier") {
    bool ok = !u.empty() && (u[0] == '_' || unicode::is_alpha(u[0]));
    for (char32_t c : u) ok = ok && (c == '_' || unicode::is_alnum(c));
    return Value::boolean(ok);
  }
  raise(ErrorKind::Runtime, "str.{}() is not supported by Kvasir's template engine", name);
}

Value call_list_method(Interpreter& in, const Value& self, const std::string& name,
                       CallArgs& args) {
  const auto& items = self.list().items;
  if (name == "index" || name == "count") in.charge(items.size());  // they scan the list
  if (name == "index") {
    auto a = bind_args("index", args, {"value", "start", "stop"}, 1);
    auto n = static_cast<int64_t>(items.size());
    auto norm = [&](const std::optional<Value>& v, int64_t dflt) {
      int64_t x = arg_int(v, dflt, "index");
      if (x < 0) x = std::max<int64_t>(0, x + n);
      return std::min(x, n);
    };
    for (int64_t i = norm(a[1], 0), e = norm(a[2], n); i < e; ++i)
      if (equals(items[i], *a[0])) return Value::integer(i);
    raise(ErrorKind::Value, "{} is not in {}", repr(*a[0]), type_name(self));
  }
  if (name == "count") {
    auto a = bind_args("count", args, {"value"}, 1);
    int64_t c = 0;
    for (const Value& v : items)
      if (equals(v, *a[0])) ++c;
    return Value::integer(c);
  }
  if (name == "copy") {
    bind_args("copy", args, {});
    return self;
  }
  raise(ErrorKind::Runtime, "list.{}() is not supported", name);
}

Value dict_view(const Value& self, ListFlavor flavor) {
  std::vector<Value> items;
  items.reserve(self.dict().size());
  for (const auto& [k, v] : self.dict().entries()) {
    if (flavor == ListFlavor::DictItems) {
      items.push_back(make_tuple({k, v}));
    } else {
      items.push_back(flavor == ListFlavor::DictKeys ? k : v);
    }
  }
  return make_list(std::move(items), flavor);
}

Value call_dict_method(Interpreter& in, const Value& self, const std::string& name,
                       CallArgs& args) {
  if (name == "items" || name == "keys" || name == "values") {
    bind_args(name, args, {});
    in.charge(self.dict().size());
    return dict_view(self, name == "items"  ? ListFlavor::DictItems
                           : name == "keys" ? ListFlavor::DictKeys
                                            : ListFlavor::DictValues);
  }
  if (name == "get") {
    auto a = bind_args("get", args, {"key", "default"}, 1);
    if (const Value* v = self.dict().find(*a[0])) return *v;
    return a[1] ? *a[1] : Value::none();
  }
  if (name == "copy") {
    bind_args("copy", args, {});
    return self;
  }
  raise(ErrorKind::Runtime, "dict.{}() is not supported", name);
}

// markupsafe's Markup methods: the same as str's, but results stay Markup and the arguments
// that get inserted (replacement text, fill characters, joined items, format fields) are escaped.
Value call_markup_method(Interpreter& in, const Value& self, const std::string& name,
                         CallArgs& args) {
  auto escape_arg = [](Value& v) {
    if (v.is_string() && !v.is_markup()) v = Value::markup(html_escape(v.str()));
  };
  if (name == "join") {
    auto a = bind_args("join", args, {"iterable"}, 1);
    std::string out;
    bool first = true;
    for (const Value& v : iterate(*a[0])) {
      if (!first) out += self.str();
      first = false;
      out += v.is_markup() ? v.str() : html_escape(to_str(v));
      in.check_size(out.size());
    }
    return like(in, self, std::move(out));
  }
  if (name == "format") return like(in, self, brace_format(self.str(), args, true, in.max_bytes()));
  if (name == "replace" && args.pos.size() >= 2) escape_arg(args.pos[1]);
  if ((name == "ljust" || name == "rjust" || name == "center") && args.pos.size() >= 2)
    escape_arg(args.pos[1]);
  Value r = call_str_method(in, self.str(), name, args);
  static const char* const kMarkupResults[] = {
      "capitalize", "title",  "lower",    "upper",        "replace",      "ljust",
      "rjust",      "lstrip", "rstrip",   "center",       "strip",        "expandtabs",
      "swapcase",   "zfill",  "casefold", "removeprefix", "removesuffix", "partition",
      "rpartition", "split",  "rsplit",   "splitlines"};
  if (std::none_of(std::begin(kMarkupResults), std::end(kMarkupResults),
                   [&](const char* n) { return name == n; }))
    return r;
  if (r.is_string()) return Value::markup(r.str());
  if (r.is_list()) {
    std::vector<Value> items;
    for (const Value& x : r.list().items)
      items.push_back(x.is_string() ? Value::markup(x.str()) : x);
    return make_list(std::move(items), r.list().flavor);
  }
  return r;
}

Value BoundMethod::call(Interpreter& in, CallArgs& args) {
  in.charge(1);
  in.charge_operands(self_, args);
  if (self_.is_markup()) return call_markup_method(in, self_, name_, args);
  if (self_.is_string()) return call_str_method(in, self_.str(), name_, args);
  if (self_.is_list()) return call_list_method(in, self_, name_, args);
  if (self_.is_dict()) return call_dict_method(in, self_, name_, args);
  raise(ErrorKind::Runtime, "{}.{}() is not supported", chat::type_name(self_), name_);
}

bool in_list(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value unsafe(const Value& self, std::string_view name) {
  return Value::undefined("access to attribute " + repr_string(name) + " of " +
                              repr_string(type_name(self)) + " object is unsafe.",
                          ErrorKind::Security);
}

}  // namespace

std::optional<Value> builtin_attribute(const Value& self, std::string_view name) {
  auto method = [&]() {
    return Value::object(std::make_shared<BoundMethod>(self, std::string(name)));
  };
  if (name.size() >= 2 && name.substr(0, 2) == "__") {
    if (self.is_string() || self.is_list() || self.is_dict() || self.is_number() || self.is_none())
      return unsafe(self, name);
    return std::nullopt;
  }
  switch (self.kind()) {
    case Value::Kind::String:
      if (in_list(name, {"strip",       "lstrip",     "rstrip",       "split",        "rsplit",
                         "splitlines",  "startswith", "endswith",     "upper",        "lower",
                         "casefold",    "title",      "capitalize",   "swapcase",     "replace",
                         "find",        "rfind",      "index",        "rindex",       "count",
                         "join",        "center",     "ljust",        "rjust",        "zfill",
                         "partition",   "rpartition", "removeprefix", "removesuffix", "format",
                         "expandtabs",  "isdigit",    "isdecimal",    "isnumeric",    "isalpha",
                         "isalnum",     "isspace",    "islower",      "isupper",      "isascii",
                         "isprintable", "istitle",    "isidentifier", "encode",       "format_map",
                         "maketrans",   "translate"}))
        return method();
      return std::nullopt;
    case Value::Kind::List: {
      ListFlavor f = self.list().flavor;
      if (f == ListFlavor::List) {
        if (in_list(name, {"index", "count", "copy"})) return method();
        if (in_list(name,
                    {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"}))
          return unsafe(self, name);
      } else if (f == ListFlavor::Tuple) {
        if (in_list(name, {"index", "count"})) return method();
      }
      return std::nullopt;
    }
    case Value::Kind::Dict:
      if (in_list(name, {"items", "keys", "values", "get", "copy"})) return method();
      if (in_list(name, {"clear", "pop", "popitem", "setdefault", "update"}))
        return unsafe(self, name);
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace kvasir::chat
