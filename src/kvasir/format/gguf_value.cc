// GGUF metadata values: type names, factories, lenient accessors and display form.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"

namespace kvasir::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
      return "uint8";
    case ValueType::INT8:
      return "int8";
    case ValueType::UINT16:
      return "uint16";
    case ValueType::INT16:
      return "int16";
    case ValueType::UINT32:
      return "uint32";
    case ValueType::INT32:
      return "int32";
    case ValueType::FLOAT32:
      return "float32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::UINT64:
      return "uint64";
    case ValueType::INT64:
      return "int64";
    case ValueType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

namespace {

bool is_unsigned_type(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
         t == ValueType::UINT64;
}

bool is_signed_type(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}

// Appends `s` quoted, escaping control bytes, cut after `max_bytes` on a UTF-8 boundary.
void append_quoted(std::string& out, const std::string& s, size_t max_bytes) {
  size_t n = s.size();
  bool cut = false;
  if (n > max_bytes) {
    n = max_bytes;
    // Back off to the start of a UTF-8 sequence so the display stays valid UTF-8.
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    cut = true;
  }
  out += '"';
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  if (cut) out += fmt::format("... ({} bytes)", s.size());
}

void append_display(std::string& out, const Value& v, size_t max_items) {
  switch (v.type) {
    case ValueType::STRING:
      if (const auto* s = std::get_if<std::string>(&v.v)) {
        append_quoted(out, *s, 64);
        return;
      }
      break;
    case ValueType::ARRAY:
      if (const auto* a = std::get_if<Array>(&v.v)) {
        out += '[';
        size_t n = std::min(max_items, a->items.size());
        for (size_t i = 0; i < n; ++i) {
          if (i) out += ", ";
          append_display(out, a->items[i], max_items);
        }
        if (n < a->items.size())
          out += fmt::format("{}... ({} items)", n ? ", " : "", a->items.size());
        out += ']';
        return;
      }
      break;
    case ValueType::FLOAT32:
      if (const auto* d = std::get_if<double>(&v.v)) {
        out += fmt::format("{}", static_cast<float>(*d));  // shortest form of the float
        return;
      }
      break;
    default:
      break;
  }
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          out += x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          append_quoted(out, x, 64);
        } else if constexpr (std::is_same_v<T, Array>) {
          out += "[...]";
        } else {
          out += fmt::format("{}", x);
        }
      },
      v.v);
}

[[noreturn]] void not_numeric(const Value& v) {
  fail("metadata value of type {} is not numeric", v.type_name());
}

}  // namespace

bool Value::is_integer() const {
  return is_unsigned_type(type) || is_signed_type(type);
}

std::string Value::type_name() const {
  if (type != ValueType::ARRAY) return std::string(value_type_name(type));
  const auto* a = std::get_if<Array>(&v);
  if (!a) return "array";
  if (a->elem_type == ValueType::ARRAY) {
    // Nested arrays may differ per item; name the first one's type.
    if (!a->items.empty()) return "array[" + a->items.front().type_name() + "]";
    return "array[array]";
  }
  return fmt::format("array[{}]", value_type_name(a->elem_type));
}

std::string Value::check_consistent() const {
  auto range_error = [&](auto x) {
    return fmt::format("value {} does not fit {}", x, type_name());
  };
  switch (type) {
    case ValueType::UINT8:
    case ValueType::UINT16:
    case ValueType::UINT32:
    case ValueType::UINT64: {
      const auto* x = std::get_if<uint64_t>(&v);
      if (!x) return fmt::format("type {} must hold an unsigned integer", type_name());
      uint64_t max = type == ValueType::UINT8    ? 0xff
                     : type == ValueType::UINT16 ? 0xffff
                     : type == ValueType::UINT32 ? 0xffffffffu
                                                 : std::numeric_limits<uint64_t>::max();
      if (*x > max) return range_error(*x);
      return {};
    }
    case ValueType::INT8:
    case ValueType::INT16:
    case ValueType::INT32:
    case ValueType::INT64: {
      const auto* x = std::get_if<int64_t>(&v);
      if (!x) return fmt::format("type {} must hold a signed integer", type_name());
      int64_t lim = type == ValueType::INT8    ? 0x80
                    : type == ValueType::INT16 ? 0x8000
                    : type == ValueType::INT32 ? int64_t{0x80000000}
                                               : 0;
      if (lim && (*x < -lim || *x >= lim)) return range_error(*x);
      return {};
    }
    case ValueType::FLOAT32:
    case ValueType::FLOAT64:
      if (!std::holds_alternative<double>(v)) {
        return fmt::format("type {} must hold a double", type_name());
      }
      return {};
    case ValueType::BOOL:
      if (!std::holds_alternative<bool>(v)) return "type bool must hold a bool";
      return {};
    case ValueType::STRING:
      if (!std::holds_alternative<std::string>(v)) return "type string must hold a std::string";
      return {};
    case ValueType::ARRAY: {
      const auto* a = std::get_if<Array>(&v);
      if (!a) return "type array must hold an Array";
      if (static_cast<uint32_t>(a->elem_type) > static_cast<uint32_t>(ValueType::FLOAT64)) {
        return fmt::format("array element type {} is unknown", static_cast<uint32_t>(a->elem_type));
      }
      for (size_t i = 0; i < a->items.size(); ++i) {
        const Value& item = a->items[i];
        if (item.type != a->elem_type) {
          return fmt::format("array item {} has type {}, expected {}", i, item.type_name(),
                             value_type_name(a->elem_type));
        }
        std::string e = item.check_consistent();
        if (!e.empty()) return fmt::format("array item {}: {}", i, e);
      }
      return {};
    }
  }
  return fmt::format("unknown value type {}", static_cast<uint32_t>(type));
}

Value Value::string_array(const std::vector<std::string>& xs) {
  std::vector<Value> items;
  items.reserve(xs.size());
  for (const auto& s : xs) items.push_back(str(s));
  return array(ValueType::STRING, std::move(items));
}

Value Value::f32_array(const std::vector<float>& xs) {
  std::vector<Value> items;
  items.reserve(xs.size());
  for (float x : xs) items.push_back(f32(x));
  return array(ValueType::FLOAT32, std::move(items));
}

Value Value::i32_array(const std::vector<int32_t>& xs) {
  std::vector<Value> items;
  items.reserve(xs.size());
  for (int32_t x : xs) items.push_back(i32(x));
  return array(ValueType::INT32, std::move(items));
}

int64_t Value::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail("metadata value {} does not fit in int64", *u);
    }
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  if (const auto* d = std::get_if<double>(&v)) {
    // 2^63 is exactly representable; anything >= it (or NaN) does not fit.
    if (!(*d >= -9223372036854775808.0 && *d < 9223372036854775808.0)) {
      fail("metadata value {} does not fit in int64", *d);
    }
    return static_cast<int64_t>(*d);
  }
  not_numeric(*this);
}

uint64_t Value::as_uint() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v)) {
    if (*i < 0) fail("metadata value {} is negative, expected an unsigned value", *i);
    return static_cast<uint64_t>(*i);
  }
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  if (const auto* d = std::get_if<double>(&v)) {
    if (!(*d >= 0.0 && *d < 18446744073709551616.0)) {
      fail("metadata value {} does not fit in uint64", *d);
    }
    return static_cast<uint64_t>(*d);
  }
  not_numeric(*this);
}

double Value::as_float() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  if (const auto* d = std::get_if<double>(&v)) return *d;
  not_numeric(*this);
}

bool Value::as_bool() const {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u != 0;
  if (const auto* i = std::get_if<int64_t>(&v)) return *i != 0;
  if (const auto* d = std::get_if<double>(&v)) return *d != 0.0;
  not_numeric(*this);
}

const std::string& Value::as_string() const {
  const auto* s = std::get_if<std::string>(&v);
  if (type != ValueType::STRING || !s) {
    fail("metadata value has type {}, expected string", type_name());
  }
  return *s;
}

const Array& Value::as_array() const {
  const auto* a = std::get_if<Array>(&v);
  if (type != ValueType::ARRAY || !a)
    fail("metadata value has type {}, expected array", type_name());
  return *a;
}

std::string Value::to_display(size_t max_items) const {
  std::string out;
  append_display(out, *this, max_items);
  return out;
}

}  // namespace kvasir::gguf
