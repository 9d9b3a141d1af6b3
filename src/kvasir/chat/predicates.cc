// Jinja2's built-in tests (`value is test(args)`): defined, none, string, mapping, iterable,
// sequence, number, odd/even, divisibleby, comparisons, ...
#include "kvasir/chat/builtin_support.h"
#include "kvasir/chat/py_str.h"
#include "kvasir/chat/unicode.h"

namespace kvasir::chat {

namespace {

using Args = CallArgs;

bool t_defined(Interpreter&, const Value& v, Args&) {
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, Args&) {
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, Args&) {
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, Args&) {
  return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, Args&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, Args&) {
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, Args&) {
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, Args&) {
  return v.is_float();
}
bool t_number(Interpreter&, const Value& v, Args&) {
  return v.is_number();
}
bool t_string(Interpreter&, const Value& v, Args&) {
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, Args&) {
  return v.is_dict();
}
bool t_sequence(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_dict() || is_sequence_value(v);
}
bool t_iterable(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_dict() || v.is_list() ||
         (v.is_object() && v.object().is_generator());
}
bool t_callable(Interpreter&, const Value& v, Args&) {
  return v.is_object() && v.object().callable();
}
bool t_escaped(Interpreter&, const Value& v, Args&) {
  return v.is_markup();
}

const Value& test_arg(Args& a, const char* test) {
  auto p = bind_args(test, a, {"other"}, 1);
  a.pos = {*p[0]};
  return a.pos[0];
}

bool t_sameas(Interpreter&, const Value& v, Args& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::List:
      return v.list_ptr() == o.list_ptr();
    case Value::Kind::Dict:
      return v.dict_ptr() == o.dict_ptr();
    case Value::Kind::Object:
      return v.object_ptr() == o.object_ptr();
    case Value::Kind::Int:
      return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Kind::Float:
      return false;
    case Value::Kind::Undefined:
      return false;
    default:
      return equals(v, o);
  }
}

bool t_in(Interpreter& in, const Value& v, Args& a) {
  const Value& seq = test_arg(a, "in");
  return in.contains(seq, v);
}

bool t_lower(Interpreter&, const Value& v, Args&) {
  std::string s = to_str(v);
  charge_scan(s.size());
  return str_has_cased(unicode::decode(s), false);
}
bool t_upper(Interpreter&, const Value& v, Args&) {
  std::string s = to_str(v);
  charge_scan(s.size());
  return str_has_cased(unicode::decode(s), true);
}

bool t_odd(Interpreter& in, const Value& v, Args&) {
  return equals(in.binary(BinOp::Mod, v, Value::integer(2)), Value::integer(1));
}
bool t_even(Interpreter& in, const Value& v, Args&) {
  return equals(in.binary(BinOp::Mod, v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(Interpreter& in, const Value& v, Args& a) {
  auto p = bind_args("divisibleby", a, {"num"}, 1);
  return equals(in.binary(BinOp::Mod, v, *p[0]), Value::integer(0));
}

bool t_eq(Interpreter&, const Value& v, Args& a) {
  return equals(v, test_arg(a, "eq"));
}
bool t_ne(Interpreter&, const Value& v, Args& a) {
  return !equals(v, test_arg(a, "ne"));
}
bool cmp_test(const Value& v, Args& a, const char* name, const char* sym,
              bool (*fn)(const Value&, const Value&)) {
  const Value& o = test_arg(a, name);
  if (v.is_undefined()) v.fail_undefined();
  if (o.is_undefined()) o.fail_undefined();
  bool comparable = (v.is_number() && o.is_number()) || (v.is_string() && o.is_string()) ||
                    (v.is_list() && o.is_list());
  if (!comparable)
    raise(ErrorKind::Type, "'{}' not supported between instances of '{}' and '{}'", sym,
          type_name(v), type_name(o));
  return fn(v, o);
}
bool t_gt(Interpreter&, const Value& v, Args& a) {
  return cmp_test(v, a, "gt", ">", [](const Value& x, const Value& y) { return less(y, x); });
}
bool t_ge(Interpreter&, const Value& v, Args& a) {
  return cmp_test(v, a, "ge", ">=", [](const Value& x, const Value& y) { return !less(x, y); });
}
bool t_lt(Interpreter&, const Value& v, Args& a) {
  return cmp_test(v, a, "lt", "<", [](const Value& x, const Value& y) { return less(x, y); });
}
bool t_le(Interpreter&, const Value& v, Args& a) {
  return cmp_test(v, a, "le", "<=", [](const Value& x, const Value& y) { return !less(y, x); });
}
bool t_filter(Interpreter&, const Value& v, Args&) {
  return v.is_string() && find_filter(v.str());
}
bool t_test(Interpreter&, const Value& v, Args&) {
  return v.is_string() && find_test(v.str());
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"filter", t_filter},
    {"test", t_test},
    {"none", t_none},
    {"boolean", t_boolean},
    {"false", t_false},
    {"true", t_true},
    {"integer", t_integer},
    {"float", t_float},
    {"lower", t_lower},
    {"upper", t_upper},
    {"string", t_string},
    {"mapping", t_mapping},
    {"number", t_number},
    {"sequence", t_sequence},
    {"iterable", t_iterable},
    {"callable", t_callable},
    {"sameas", t_sameas},
    {"escaped", t_escaped},
    {"in", t_in},
    {"==", t_eq},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"!=", t_ne},
    {"ne", t_ne},
    {">", t_gt},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {"ge", t_ge},
    {">=", t_ge},
    {"<", t_lt},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<=", t_le},
    {"le", t_le},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

}  // namespace kvasir::chat
