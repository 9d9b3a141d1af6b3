// Jinja2's built-in filters (`value|filter(args)`), with the argument names and defaults of
// Jinja2 3.1, plus Hugging Face's `tojson`.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "kvasir/chat/builtin_support.h"
#include "kvasir/chat/json_value.h"
#include "kvasir/chat/py_format.h"
#include "kvasir/chat/py_str.h"
#include "kvasir/chat/unicode.h"

namespace kvasir::chat {

namespace {

// Jinja2's make_attrgetter: "a.b.0" -> getitem(getitem(getitem(x, "a"), "b"), 0).
struct AttrGetter {
  std::vector<Value> parts;
  std::optional<Value> dflt;
  bool lower = false;

  AttrGetter(const std::optional<Value>& attribute, std::optional<Value> default_value,
             bool lowercase)
      : dflt(std::move(default_value)), lower(lowercase) {
    if (!attribute || attribute->is_none()) return;
    if (attribute->is_string()) {
      const std::string& s = attribute->str();
      size_t start = 0;
      while (true) {
        size_t dot = s.find('.', start);
        std::string part =
            s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        int64_t index = 0;
        auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
        if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) &&
            ec == std::errc() && end == part.data() + part.size()) {
          parts.push_back(Value::integer(index));
        } else {  // a number too large for an index finds nothing, as in Jinja2
          parts.push_back(Value::string(part));
        }
        if (dot == std::string::npos) break;
        start = dot + 1;
      }
    } else {
      parts.push_back(*attribute);
    }
  }

  Value operator()(Interpreter& in, const Value& item) const {
    Value v = item;
    for (const Value& p : parts) {
      v = in.getitem(v, p);
      if (dflt && !dflt->is_none() && v.is_undefined()) v = *dflt;
    }
    if (lower && v.is_string()) v = Value::string(unicode::lower(v.str()));
    return v;
  }
};

// ---- filters ----

using Args = CallArgs;

Value f_abs(Interpreter&, const Value& v, Args& a) {
  bind_args("abs", a, {});
  if (v.is_integral()) {
    int64_t x = v.as_int();
    if (x == INT64_MIN) raise(ErrorKind::Overflow, "integer overflow");
    return Value::integer(x < 0 ? -x : x);
  }
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  raise(ErrorKind::Type, "bad operand type for abs(): '{}'", type_name(v));
}

Value f_attr(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("attr", a, {"name"}, 1);
  std::string name = to_str(*p[0]);
  if (v.is_undefined()) v.fail_undefined();
  if (v.is_dict()) {  // only real attributes (methods), never keys
    if (auto m = builtin_attribute(v, name)) return *m;
    return Value::undefined(repr_string(object_type_repr(v)) + " has no attribute " +
                            repr_string(name));
  }
  return in.getattr(v, name);
}

Value f_batch(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("batch", a, {"linecount", "fill_with"}, 1);
  int64_t n = arg_int(p[0], 1, "linecount");
  if (n <= 0) raise(ErrorKind::Value, "batch size must be positive");
  std::vector<Value> out, cur;
  for (const Value& item : iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(make_list(std::move(cur)));
      cur.clear();
    }
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (p[1] && !p[1]->is_none()) {
      in.check_items("batch size", n);
      in.charge(n - cur.size());
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*p[1]);
    }
    out.push_back(make_list(std::move(cur)));
  }
  return make_generator(in, std::move(out));
}

Value f_capitalize(Interpreter& in, const Value& v, Args& a) {
  bind_args("capitalize", a, {});
  return like(in, v, py_capitalize(to_str(v)));
}

Value f_center(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("center", a, {"width"});
  int64_t width = arg_int(p[0], 80, "width");
  in.check_bytes("center width", std::max<int64_t>(width, 0));
  return like(in, v, py_pad(to_str(v), width, '^', " "));
}

Value f_length(Interpreter&, const Value& v, Args& a) {
  bind_args("length", a, {});
  if (auto n = length(v)) return Value::integer(static_cast<int64_t>(*n));
  raise(ErrorKind::Type, "object of type '{}' has no len()", type_name(v));
}

Value f_default(Interpreter&, const Value& v, Args& a) {
  auto p = bind_args("default", a, {"default_value", "boolean"});
  if (v.is_undefined() || (arg_bool(p[1]) && !truthy(v))) return p[0] ? *p[0] : Value::string("");
  return v;
}

Value f_dictsort(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("dictsort", a, {"case_sensitive", "by", "reverse"});
  bool cs = arg_bool(p[0]);
  std::string by = arg_str(p[1], "key");
  if (by != "key" && by != "value")
    raise(ErrorKind::FilterArgument, "You can only sort by either \"key\" or \"value\"");
  if (v.is_undefined()) v.fail_undefined();
  if (!v.is_dict())
    raise(ErrorKind::Runtime, "AttributeError: '{}' object has no attribute 'items'", type_name(v));
  std::vector<std::pair<Value, Value>> items(v.dict().entries().begin(), v.dict().entries().end());
  size_t pos = by == "key" ? 0 : 1;
  auto key = [&](const std::pair<Value, Value>& e) {
    const Value& x = pos == 0 ? e.first : e.second;
    return (!cs && x.is_string()) ? Value::string(unicode::lower(x.str())) : x;
  };
  bool reverse = arg_bool(p[2]);
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(key(y), key(x)) : less(key(x), key(y));
  });
  std::vector<Value> out;
  for (auto& [k, val] : items) out.push_back(make_tuple({k, val}));
  in.charge(out.size());
  return make_list(std::move(out));
}

Value f_escape(Interpreter& in, const Value& v, Args& a) {
  bind_args("escape", a, {});
  if (v.is_markup()) return v;
  std::string s = html_escape(to_str(v));
  in.check_size(s.size());
  return Value::markup(std::move(s));
}

Value f_forceescape(Interpreter& in, const Value& v, Args& a) {
  bind_args("forceescape", a, {});
  std::string s = html_escape(to_str(v));
  in.check_size(s.size());
  return Value::markup(std::move(s));
}

Value f_first(Interpreter&, const Value& v, Args& a) {
  bind_args("first", a, {});
  if (v.is_object() && v.object().is_generator()) {
    if (auto x = static_cast<Generator&>(v.object()).next()) return *x;
  } else {
    std::vector<Value> items = iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Interpreter&, const Value& v, Args& a) {
  bind_args("last", a, {});
  if (v.is_object()) raise(ErrorKind::Type, "'{}' object is not reversible", type_name(v));
  std::vector<Value> items = iterate(v);
  if (!items.empty()) return items.back();
  return Value::undefined("No last item, sequence was empty.");
}

// Python's float(str): optional whitespace, sign, digits/inf/nan, underscores between digits.
std::optional<double> parse_py_float(const std::string& s) {
  std::string t = py_strip(s, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      if (i == 0 || i + 1 >= t.size() || !isdigit(static_cast<unsigned char>(t[i - 1])) ||
          !isdigit(static_cast<unsigned char>(t[i + 1])))
        return std::nullopt;
      continue;
    }
    clean += t[i];
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = unicode::lower(clean);
  std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  double sign = lower[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * INFINITY;
  if (body == "nan") return NAN;
  for (char c : body)
    if (!(isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-'))
      return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

Value f_float(Interpreter&, const Value& v, Args& a) {
  auto p = bind_args("float", a, {"default"});
  Value dflt = p[0] ? *p[0] : Value::number(0.0);
  if (v.is_undefined()) v.fail_undefined();
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string()) {
    if (auto d = parse_py_float(v.str())) return Value::number(*d);
  }
  return dflt;
}

Value f_int(Interpreter&, const Value& v, Args& a) {
  auto p = bind_args("int", a, {"default", "base"});
  Value dflt = p[0] ? *p[0] : Value::integer(0);
  int64_t base = arg_int(p[1], 10, "base");
  if (v.is_undefined()) v.fail_undefined();
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(std::trunc(d)));
  }
  if (v.is_string()) {
    std::string t = py_strip(v.str(), std::nullopt, true, true);
    std::string clean;
    for (char c : t)
      if (c != '_') clean += c;
    if (!clean.empty()) {
      std::string digits = clean;
      bool neg = false;
      if (digits[0] == '+' || digits[0] == '-') {
        neg = digits[0] == '-';
        digits = digits.substr(1);
      }
      int b = static_cast<int>(base);
      if (digits.size() > 2 && digits[0] == '0') {
        char x = static_cast<char>(std::tolower(static_cast<unsigned char>(digits[1])));
        int prefixed = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
        if (prefixed && (b == 0 || b == prefixed)) {
          b = prefixed;
          digits = digits.substr(2);
        }
      }
      if (b == 0) b = 10;
      if (!digits.empty() && b >= 2 && b <= 36) {
        errno = 0;
        char* end = nullptr;
        long long x = std::strtoll(digits.c_str(), &end, b);
        if (end == digits.c_str() + digits.size() && errno == 0 &&
            std::isalnum(static_cast<unsigned char>(digits[0])))
          return Value::integer(neg ? -x : x);
      }
    }
    if (auto d = parse_py_float(v.str())) {  // "42.23"|int gives 42
      if (std::isfinite(*d) && std::fabs(*d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(std::trunc(*d)));
    }
  }
  return dflt;
}

Value f_format(Interpreter& in, const Value& v, Args& a) {
  if (!a.pos.empty() && !a.kw.empty())
    raise(ErrorKind::FilterArgument,
          "can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    auto d = std::make_shared<DictData>();
    for (const auto& [k, x] : a.kw) d->set(Value::string(k), x);
    return like(
        in, v, percent_format(to_str(v), Value::dict(std::move(d)), v.is_markup(), in.max_bytes()));
  }
  return like(in, v, percent_format(to_str(v), make_tuple(a.pos), v.is_markup(), in.max_bytes()));
}

Value f_groupby(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("groupby", a, {"attribute", "default", "case_sensitive"}, 1);
  AttrGetter key(p[0], p[1], !arg_bool(p[2]));
  std::vector<std::pair<Value, Value>> items;
  for (const Value& x : iterate(v)) items.emplace_back(key(in, x), x);
  std::stable_sort(items.begin(), items.end(),
                   [](const auto& x, const auto& y) { return less(x.first, y.first); });
  std::vector<Value> groups;
  size_t i = 0;
  while (i < items.size()) {
    size_t j = i;
    std::vector<Value> members;
    while (j < items.size() && equals(items[j].first, items[i].first))
      members.push_back(items[j++].second);
    Value grouper = items[i].first;
    if (!arg_bool(p[2]) && grouper.is_string()) {
      // Jinja2 reports the first item's original key (before lower-casing).
      AttrGetter original(p[0], p[1], false);
      grouper = original(in, items[i].second);
    }
    Value group = make_tuple({grouper, make_list(std::move(members))});
    auto named = std::make_shared<ListData>(group.list());
    named->field_names = {"grouper", "list"};
    groups.push_back(Value::list(std::move(named)));
    i = j;
  }
  return make_list(std::move(groups));
}

Value f_indent(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("indent", a, {"width", "first", "blank"});
  std::string indention;
  if (p[0] && p[0]->is_string()) {
    indention = p[0]->str();
  } else {
    int64_t w = arg_int(p[0], 4, "width");
    in.check_bytes("indent width", std::max<int64_t>(w, 0));
    indention.assign(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
  }
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (arg_bool(p[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += std::string("\n") + indention;
      rv += lines[i];
      in.check_size(rv.size());
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        if (!lines[i].empty()) rv += indention;
        rv += lines[i];
        in.check_size(rv.size());
      }
    }
  }
  if (arg_bool(p[1])) rv = indention + rv;
  return like(in, v, std::move(rv));
}

Value f_items(Interpreter& in, const Value& v, Args& a) {
  bind_args("items", a, {});
  if (v.is_undefined()) return make_generator(in, {});
  if (!v.is_dict()) raise(ErrorKind::Type, "Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [k, x] : v.dict().entries()) items.push_back(make_tuple({k, x}));
  return make_generator(in, std::move(items));
}

Value f_join(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("join", a, {"d", "attribute"});
  std::string sep = arg_str(p[0]);
  std::optional<AttrGetter> getter;
  if (p[1] && !p[1]->is_none()) getter.emplace(p[1], std::nullopt, false);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    append_str(out, getter ? (*getter)(in, item) : item);
    in.check_size(out.size());
  }
  return in.make_string(std::move(out));
}

Value f_list(Interpreter& in, const Value& v, Args& a) {
  bind_args("list", a, {});
  std::vector<Value> items = iterate(v);
  in.charge(items.size());
  return make_list(std::move(items));
}

Value f_lower(Interpreter& in, const Value& v, Args& a) {
  bind_args("lower", a, {});
  return like(in, v, unicode::lower(to_str(v)));
}

Value f_upper(Interpreter& in, const Value& v, Args& a) {
  bind_args("upper", a, {});
  return like(in, v, unicode::upper(to_str(v)));
}

Value f_map(Interpreter& in, const Value& v, Args& a) {
  std::vector<Value> items = iterate(v);
  std::vector<Value> out;
  out.reserve(items.size());
  if (a.pos.empty()) {
    std::optional<Value> attribute, dflt;
    for (auto& [k, x] : a.kw) {
      if (k == "attribute") {
        attribute = x;
      } else if (k == "default") {
        dflt = x;
      } else {
        raise(ErrorKind::FilterArgument, "Unexpected keyword argument {}", repr_string(k));
      }
    }
    if (!attribute) raise(ErrorKind::FilterArgument, "map requires a filter argument");
    AttrGetter getter(attribute, dflt, false);
    for (const Value& item : items) out.push_back(getter(in, item));
  } else {
    std::string name = to_str(a.pos[0]);
    for (const Value& item : items) {
      CallArgs rest{std::vector<Value>(a.pos.begin() + 1, a.pos.end()), a.kw};
      out.push_back(in.apply_filter(name, item, rest));
    }
  }
  return make_generator(in, std::move(out));
}

Value min_max(Interpreter& in, const Value& v, Args& a, bool is_max) {
  auto p = bind_args(is_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  AttrGetter key(p[1], std::nullopt, !arg_bool(p[0]));
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = key(in, items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(in, items[i]);
    if (is_max ? less(best_key, k) : less(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value f_max(Interpreter& in, const Value& v, Args& a) {
  return min_max(in, v, a, true);
}
Value f_min(Interpreter& in, const Value& v, Args& a) {
  return min_max(in, v, a, false);
}

Value select_reject(Interpreter& in, const Value& v, Args& a, bool select, bool by_attr) {
  if (!truthy(v)) return make_generator(in, {});
  size_t off = 0;
  std::optional<AttrGetter> getter;
  if (by_attr) {
    if (a.pos.empty()) raise(ErrorKind::FilterArgument, "Missing parameter for attribute name");
    getter.emplace(a.pos[0], std::nullopt, false);
    off = 1;
  }
  std::optional<std::string> test;
  std::vector<Value> test_args;
  if (a.pos.size() > off) {
    test = to_str(a.pos[off]);
    test_args.assign(a.pos.begin() + off + 1, a.pos.end());
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    Value x = getter ? (*getter)(in, item) : item;
    bool ok;
    if (test) {
      CallArgs targs{test_args, a.kw};
      ok = in.apply_test(*test, x, targs);
    } else {
      ok = truthy(x);
    }
    if (ok == select) out.push_back(item);
  }
  return make_generator(in, std::move(out));
}

Value f_select(Interpreter& in, const Value& v, Args& a) {
  return select_reject(in, v, a, true, false);
}
Value f_reject(Interpreter& in, const Value& v, Args& a) {
  return select_reject(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, Args& a) {
  return select_reject(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, Args& a) {
  return select_reject(in, v, a, false, true);
}

Value f_replace(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("replace", a, {"old", "new", "count"}, 2);
  std::string out = py_replace(to_str(v), to_str(*p[0]), to_str(*p[1]), arg_int(p[2], -1, "count"),
                               in.max_bytes());
  return in.make_string(std::move(out));
}

Value f_reverse(Interpreter& in, const Value& v, Args& a) {
  bind_args("reverse", a, {});
  if (v.is_string()) {
    std::u32string u = unicode::decode(v.str());
    std::reverse(u.begin(), u.end());
    return in.make_string(unicode::encode(u));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.is_object()) return make_list(std::move(items));  // list(value).reverse()
  return make_generator(in, std::move(items),
                        v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
}

Value f_round(Interpreter&, const Value& v, Args& a) {
  auto p = bind_args("round", a, {"precision", "method"});
  int64_t precision = arg_int(p[0], 0, "precision");
  std::string method = arg_str(p[1], "common");
  if (method != "common" && method != "ceil" && method != "floor")
    raise(ErrorKind::FilterArgument, "method must be common, ceil or floor");
  if (v.is_undefined()) v.fail_undefined();
  if (!v.is_number()) {
    if (method == "common")
      raise(ErrorKind::Type, "type {} doesn't define __round__ method", type_name(v));
    raise(ErrorKind::Type, "must be real number, not {}", type_name(v));
  }
  if (method == "common") {
    if (v.is_integral() && precision >= 0) return Value::integer(v.as_int());
    double d = v.as_float();
    if (!std::isfinite(d)) return Value::number(d);
    if (precision >= 0 && precision < 300) {
      // printf rounds the exact binary value half-to-even, like Python's round().
      char buf[400];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), d);
      return Value::number(std::strtod(buf, nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value::number(std::nearbyint(d / scale) * scale);
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_float() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Interpreter& in, const Value& v, Args& a) {
  bind_args("safe", a, {});
  if (v.is_markup()) return v;
  std::string s = to_str(v);
  in.check_size(s.size());
  return Value::markup(std::move(s));
}

Value f_slice(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("slice", a, {"slices", "fill_with"}, 1);
  int64_t slices = arg_int(p[0], 1, "slices");
  if (slices <= 0) raise(ErrorKind::ZeroDivision, "integer division or modulo by zero");
  in.check_items("slice count", slices);
  std::vector<Value> seq = iterate(v);
  auto length = static_cast<int64_t>(seq.size());
  int64_t per = length / slices, extra = length % slices, offset = 0;
  in.charge(static_cast<size_t>(slices));
  std::vector<Value> out;
  for (int64_t k = 0; k < slices; ++k) {
    int64_t start = offset + k * per;
    if (k < extra) ++offset;
    int64_t end = offset + (k + 1) * per;
    std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
    if (p[1] && !p[1]->is_none() && k >= extra) tmp.push_back(*p[1]);
    out.push_back(make_list(std::move(tmp)));
  }
  return make_generator(in, std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("sort", a, {"reverse", "case_sensitive", "attribute"});
  bool reverse = arg_bool(p[0]);
  std::vector<Value> items = iterate(v);
  // A comma-separated attribute list sorts by several keys.
  std::vector<AttrGetter> getters;
  if (p[2] && p[2]->is_string()) {
    for (const std::string& part : py_split(p[2]->str(), ",", -1))
      getters.emplace_back(Value::string(part), std::nullopt, !arg_bool(p[1]));
  } else {
    getters.emplace_back(p[2], std::nullopt, !arg_bool(p[1]));
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& x : items) {
    std::vector<Value> ks;
    for (const auto& g : getters) ks.push_back(g(in, x));
    keyed.emplace_back(ks.size() == 1 ? ks[0] : make_list(std::move(ks)), x);
  }
  in.charge(items.size());
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& [k, x] : keyed) out.push_back(x);
  return make_list(std::move(out));
}

Value f_string(Interpreter& in, const Value& v, Args& a) {
  bind_args("string", a, {});
  return v.is_string() ? v : in.make_string(to_str(v));
}

Value f_striptags(Interpreter& in, const Value& v, Args& a) {
  bind_args("striptags", a, {});
  std::string s = to_str(v), out;
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, 4, "<!--") == 0) {
      size_t e = s.find("-->", i + 4);
      if (e == std::string::npos) break;
      i = e + 3;
    } else if (s[i] == '<') {
      size_t e = s.find('>', i + 1);
      if (e == std::string::npos) {
        out += s.substr(i);
        break;
      }
      i = e + 1;
    } else {
      out += s[i++];
    }
  }
  std::string joined;
  for (const std::string& w : py_split_ws(out, -1)) {
    if (!joined.empty()) joined += ' ';
    joined += w;
  }
  static const std::pair<const char*, const char*> kEntities[] = {{"&lt;", "<"},    {"&gt;", ">"},
                                                                  {"&quot;", "\""}, {"&#34;", "\""},
                                                                  {"&#39;", "'"},   {"&amp;", "&"}};
  for (const auto& [e, r] : kEntities) joined = py_replace(joined, e, r, -1, in.max_bytes());
  return in.make_string(std::move(joined));
}

Value f_sum(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("sum", a, {"attribute", "start"});
  std::optional<AttrGetter> getter;
  if (p[0] && !p[0]->is_none()) getter.emplace(p[0], std::nullopt, false);
  Value total = p[1] ? *p[1] : Value::integer(0);
  for (const Value& item : iterate(v))
    total = in.binary(BinOp::Add, total, getter ? (*getter)(in, item) : item);
  return total;
}

Value f_title(Interpreter& in, const Value& v, Args& a) {
  bind_args("title", a, {});
  // Jinja2's do_title: words start after runs of whitespace, '-', '(', '{', '[' or '<'.
  auto is_sep = [](char32_t c) {
    return unicode::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::u32string u = unicode::decode(to_str(v)), out;
  bool start = true;
  bool prev_sep = false;
  for (size_t i = 0; i < u.size(); ++i) {
    bool sep = is_sep(u[i]);
    if (i > 0 && sep != prev_sep) start = true;
    if (start) {
      unicode::append_upper(out, u[i]);
    } else {
      out.push_back(unicode::to_lower(u[i]));
    }
    start = false;
    prev_sep = sep;
  }
  return in.make_string(unicode::encode(out));
}

Value f_tojson(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = arg_bool(p[0]);
  if (p[1] && !p[1]->is_none()) {
    if (p[1]->is_string()) {
      o.indent = p[1]->str();
    } else {
      int64_t n = arg_int(p[1], 0, "indent");
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 1024)), ' ');
    }
  }
  if (p[2] && !p[2]->is_none()) {
    std::vector<Value> seps = iterate(*p[2]);
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      raise(ErrorKind::Value, "separators must be a pair of strings");
    o.item_separator = seps[0].str();
    o.key_separator = seps[1].str();
  }
  o.sort_keys = arg_bool(p[3]);
  return in.make_string(to_json(v, o));
}

Value f_trim(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("trim", a, {"chars"});
  return like(in, v, py_strip(to_str(v), p[0], true, true));
}

Value f_truncate(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("truncate", a, {"length", "killwords", "end", "leeway"});
  int64_t length = arg_int(p[0], 255, "length");
  std::string end = arg_str(p[2], "...");
  int64_t leeway = arg_int(p[3], 5, "leeway");
  auto end_len = static_cast<int64_t>(unicode::length(end));
  if (length < end_len)
    raise(ErrorKind::Runtime, "AssertionError: expected length >= {}, got {}", end_len, length);
  if (leeway < 0) raise(ErrorKind::Runtime, "AssertionError: expected leeway >= 0, got {}", leeway);
  std::string s = to_str(v);
  std::u32string u = unicode::decode(s);
  if (static_cast<int64_t>(u.size()) <= length + leeway)
    return v.is_string() ? v : in.make_string(s);
  std::u32string head = u.substr(0, static_cast<size_t>(length - end_len));
  if (v.is_markup()) end = html_escape(end);
  if (arg_bool(p[1])) return like(in, v, unicode::encode(head) + end);
  size_t sp = head.rfind(U' ');
  if (sp != std::u32string::npos) head = head.substr(0, sp);
  return like(in, v, unicode::encode(head) + end);
}

Value f_unique(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("unique", a, {"case_sensitive", "attribute"});
  AttrGetter key(p[1], std::nullopt, !arg_bool(p[0]));
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    if (seen.insert(hash_key(key(in, item))).second) out.push_back(item);
  }
  return make_generator(in, std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, Args& a) {
  bind_args("wordcount", a, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : unicode::decode(to_str(v))) {
    bool w = c == '_' || unicode::is_alnum(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"groupby", f_groupby},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"striptags", f_striptags},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

}  // namespace kvasir::chat
