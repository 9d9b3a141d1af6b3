#include "kvasir/chat/py_format.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "kvasir/chat/limits.h"
#include "kvasir/chat/unicode.h"

namespace kvasir::chat {

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);  // e.g. "-1.2345e+17", shortest round-trip digits
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  int exp = std::stoi(std::string(sci.substr(e + 1)));
  int decpt = exp + 1;  // value = 0.DIGITS * 10^decpt
  int n = static_cast<int>(digits.size());
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(-decpt, '0');
      out += digits;
    } else if (decpt >= n) {
      out += digits;
      out.append(decpt - n, '0');
      out += ".0";
    } else {
      out += digits.substr(0, decpt);
      out += '.';
      out += digits.substr(decpt);
    }
    return out;
  }
  out += digits[0];
  if (n > 1) {
    out += '.';
    out += digits.substr(1);
  }
  int x = decpt - 1;
  out += fmt::format("e{}{:02d}", x < 0 ? '-' : '+', x < 0 ? -x : x);
  return out;
}

namespace {

// Pads `s` (measured in code points) to `width`.
std::string pad(std::string s, size_t width, char align, char32_t fill = U' ') {
  size_t len = unicode::length(s);
  if (len >= width) return s;
  size_t total = width - len;
  std::string f;
  unicode::append(f, fill);
  auto repeat = [&](size_t k) {
    std::string r;
    for (size_t i = 0; i < k; ++i) r += f;
    return r;
  };
  if (align == '<') return s + repeat(total);
  if (align == '^') return repeat(total / 2) + s + repeat(total - total / 2);
  return repeat(total) + s;
}

std::string truncate_cp(const std::string& s, size_t n) {
  return s.substr(0, unicode::byte_offset(s, n));
}

// snprintf into a string of whatever length the output needs.
template <class T>
std::string c_printf(const std::string& spec, T v) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, spec.c_str(), v);
  if (n < 0) return "";
  if (static_cast<size_t>(n) < sizeof buf) return std::string(buf, n);
  std::string big(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(big.data(), big.size(), spec.c_str(), v);
  big.resize(n);
  return big;
}

// A double has at most 1074 digits after the decimal point and 767 significant digits, so
// printf's digits beyond this precision are all zeros; glibc still computes them, slowly
// (seconds for 10^8 of them), so c_format appends them itself.
constexpr int kExactDigits = 1100;

// Pads a printf-formatted number to `width` as printf's '-' and '0' flags say.
std::string pad_c_number(std::string s, int width, const std::string& flags, bool finite) {
  if (width < 0 || s.size() >= static_cast<size_t>(width)) return s;
  size_t n = static_cast<size_t>(width) - s.size();
  if (flags.find('-') != std::string::npos) return s + std::string(n, ' ');
  if (finite && flags.find('0') != std::string::npos) {
    size_t at = !s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ') ? 1 : 0;
    return s.insert(at, n, '0');
  }
  return std::string(n, ' ') + s;
}

// A C printf of one number with the given flags/width/precision/conversion.
std::string c_format(const std::string& flags, int width, int precision, char conv, double d) {
  bool finite = std::isfinite(d);
  bool g = conv == 'g' || conv == 'G';
  bool keeps_zeros = !g || flags.find('#') != std::string::npos;  // %g strips trailing zeros
  if (precision > kExactDigits && (!finite || !keeps_zeros)) precision = kExactDigits;  // same
  if (precision > kExactDigits) {
    std::string body = c_format(flags, -1, kExactDigits, conv, d);
    size_t exp = body.find_first_of("eE");
    body.insert(exp == std::string::npos ? body.size() : exp,
                static_cast<size_t>(precision - kExactDigits), '0');
    return pad_c_number(std::move(body), width, flags, finite);
  }
  std::string spec = std::string("%") + flags;
  if (width >= 0) spec += std::to_string(width);
  if (precision >= 0) spec += std::string(".") + std::to_string(precision);
  spec += conv;
  return c_printf(spec, d);
}

std::string c_format_int(const std::string& flags, int width, int precision, char conv, int64_t v) {
  std::string spec = std::string("%") + flags;
  if (width >= 0) spec += std::to_string(width);
  if (precision >= 0) spec += std::string(".") + std::to_string(precision);
  spec += "ll";
  spec += conv;
  bool neg = v < 0 && conv != 'd';
  // %x/%o of a negative number: Python prints "-ff", C would print the two's complement.
  unsigned long long mag = neg ? 0ULL - static_cast<unsigned long long>(v) : 0;
  std::string s = conv == 'd' ? c_printf(spec, static_cast<long long>(v))
                              : c_printf(spec, neg ? mag : static_cast<unsigned long long>(v));
  if (neg) {
    size_t p = s.find_first_not_of(' ');
    s.insert(p == std::string::npos ? 0 : p, "-");
  }
  return s;
}

double to_double_arg(const Value& v, char conv) {
  if (v.is_number()) return v.as_float();
  raise(ErrorKind::Type, "must be real number, not {}", type_name(v));
  (void)conv;
}

int64_t to_int_arg(const Value& v, char conv) {
  if (v.is_integral()) return v.as_int();
  if (v.is_float() && (conv == 'd' || conv == 'i' || conv == 'u')) {
    double d = v.as_float();
    if (!std::isfinite(d)) raise(ErrorKind::Overflow, "cannot convert float infinity to integer");
    return static_cast<int64_t>(std::trunc(d));
  }
  if (conv == 'd' || conv == 'i' || conv == 'u')
    raise(ErrorKind::Type, "%{} format: a real number is required, not {}", conv, type_name(v));
  raise(ErrorKind::Type, "%{} format: an integer is required, not {}", conv, type_name(v));
}

}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// The largest format width or precision: the output limit, and never more than an int holds
// (printf takes them as int).
uint64_t field_limit(size_t max_size) {
  return std::min<uint64_t>(max_size, INT_MAX - 2 * kExactDigits);
}

// Decimal digits at fmt[i...] (saturating, so a huge number is reported, not wrapped).
uint64_t parse_count(std::string_view fmt, size_t& i) {
  uint64_t n = 0;
  while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
    n = saturating_mul(n, 10);
    n = n > UINT64_MAX - 9 ? UINT64_MAX : n + static_cast<uint64_t>(fmt[i] - '0');
    ++i;
  }
  return n;
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args, bool escape_args,
                           size_t max_size) {
  const uint64_t limit = field_limit(max_size);
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  if (args.is_list() && args.list().flavor == ListFlavor::Tuple) {
    positional = args.list().items;
  } else {
    if (args.is_dict()) mapping = &args.dict();
    positional.push_back(args);
  }
  size_t next_arg = 0;
  bool used_mapping = false;
  auto take = [&]() -> Value {
    if (next_arg >= positional.size())
      raise(ErrorKind::Type, "not enough arguments for format string");
    return positional[next_arg++];
  };
  std::string out;
  size_t i = 0;
  while (i < fmt.size()) {
    char c = fmt[i];
    if (c != '%') {
      out += c;
      ++i;
      continue;
    }
    ++i;
    if (i >= fmt.size()) raise(ErrorKind::Value, "incomplete format");
    Value arg;
    bool have_arg = false;
    if (fmt[i] == '(') {
      if (!mapping) raise(ErrorKind::Type, "format requires a mapping");
      size_t close = fmt.find(')', i);
      if (close == std::string::npos) raise(ErrorKind::Value, "incomplete format key");
      std::string key = fmt.substr(i + 1, close - i - 1);
      const Value* v = mapping->find(std::string_view(key));
      if (!v) raise(ErrorKind::Runtime, "KeyError: {}", repr_string(key));
      arg = *v;
      have_arg = true;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos)
      flags += fmt[i++];
    auto star = [&]() -> int64_t {
      Value n = take();
      if (!n.is_integral()) raise(ErrorKind::Type, "* wants int");
      return n.as_int();
    };
    int width = -1, precision = -1;
    if (i < fmt.size() && fmt[i] == '*') {
      int64_t w = star();
      if (w < 0) {  // Python: a negative * width left-justifies
        flags += '-';
        w = w == INT64_MIN ? INT64_MAX : -w;
      }
      check_limit("format width", static_cast<uint64_t>(w), limit);
      width = static_cast<int>(w);
      ++i;
    } else if (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
      uint64_t w = parse_count(fmt, i);
      check_limit("format width", w, limit);
      width = static_cast<int>(w);
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      uint64_t p = 0;
      if (i < fmt.size() && fmt[i] == '*') {
        p = static_cast<uint64_t>(std::max<int64_t>(star(), 0));  // negative: 0, as Python
        ++i;
      } else {
        p = parse_count(fmt, i);
      }
      check_limit("format precision", p, limit);
      precision = static_cast<int>(p);
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) raise(ErrorKind::Value, "incomplete format");
    char conv = fmt[i++];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!have_arg) arg = take();
    bool left = flags.find('-') != std::string::npos;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = conv == 's' ? to_str(arg) : repr(arg);
        if (escape_args && !(conv == 's' && arg.is_markup())) s = html_escape(s);
        if (precision >= 0) s = truncate_cp(s, precision);
        out += pad(s, width < 0 ? 0 : width, left ? '<' : '>');
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        char c_conv = (conv == 'i' || conv == 'u') ? 'd' : conv;
        out += c_format_int(flags, width, precision, c_conv, to_int_arg(arg, conv));
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G':
        out += c_format(flags, width, precision, conv, to_double_arg(arg, conv));
        break;
      case 'c': {
        std::string s;
        if (arg.is_integral()) {
          if (arg.as_int() < 0 || arg.as_int() > 0x10FFFF)
            raise(ErrorKind::Overflow, "%c arg not in range(0x110000)");
          unicode::append(s, static_cast<char32_t>(arg.as_int()));
        } else if (arg.is_string() && unicode::length(arg.str()) == 1) {
          s = arg.str();
        } else {
          raise(ErrorKind::Type, "%c requires int or char");
        }
        out += pad(s, width < 0 ? 0 : width, left ? '<' : '>');
        break;
      }
      default:
        raise(ErrorKind::Value, "unsupported format character '{}' (0x{:x}) at index {}", conv,
              static_cast<unsigned>(static_cast<unsigned char>(conv)), i - 1);
    }
    check_limit("formatted string size", out.size(), max_size);
  }
  if (!used_mapping && next_arg < positional.size() && !(mapping && positional.size() == 1))
    raise(ErrorKind::Type, "not all arguments converted during string formatting");
  return out;
}

namespace {

struct Spec {
  char32_t fill = U' ';
  char align = 0;
  char sign = '-';
  bool alt = false, zero = false;
  int width = -1;
  char grouping = 0;
  int precision = -1;
  char type = 0;
};

Spec parse_spec(const std::string& s, uint64_t limit) {
  Spec spec;
  std::u32string u = unicode::decode(s);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (u.size() >= 2 && is_align(u[1])) {
    spec.fill = u[0];
    spec.align = static_cast<char>(u[1]);
    i = 2;
  } else if (!u.empty() && is_align(u[0])) {
    spec.align = static_cast<char>(u[0]);
    i = 1;
  }
  if (i < u.size() && (u[i] == '+' || u[i] == '-' || u[i] == ' '))
    spec.sign = static_cast<char>(u[i++]);
  if (i < u.size() && u[i] == '#') {
    spec.alt = true;
    ++i;
  }
  if (i < u.size() && u[i] == '0') {
    spec.zero = true;
    ++i;
  }
  // Digits, saturating (so a huge number is reported, not wrapped).
  auto count = [&] {
    uint64_t n = 0;
    while (i < u.size() && u[i] >= '0' && u[i] <= '9') {
      n = saturating_mul(n, 10);
      n = n > UINT64_MAX - 9 ? UINT64_MAX : n + static_cast<uint64_t>(u[i] - '0');
      ++i;
    }
    return n;
  };
  if (i < u.size() && u[i] >= '0' && u[i] <= '9') {
    uint64_t w = count();
    check_limit("format width", w, limit);
    spec.width = static_cast<int>(w);
  }
  if (i < u.size() && (u[i] == ',' || u[i] == '_')) spec.grouping = static_cast<char>(u[i++]);
  if (i < u.size() && u[i] == '.') {
    ++i;
    uint64_t p = count();
    check_limit("format precision", p, limit);
    spec.precision = static_cast<int>(p);
  }
  if (i < u.size()) spec.type = static_cast<char>(u[i++]);
  if (i != u.size()) raise(ErrorKind::Value, "Invalid format specifier '{}'", s);
  return spec;
}

std::string group_digits(const std::string& digits, char sep) {
  std::string out;
  int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out += sep;
    out += digits[i];
  }
  return out;
}

// Applies sign, padding and alignment to a formatted number.
std::string finish_number(std::string body, bool negative, const Spec& spec) {
  std::string sign = negative ? "-" : (spec.sign == '+' ? "+" : (spec.sign == ' ' ? " " : ""));
  char align = spec.align ? spec.align : (spec.zero ? '=' : '>');
  char32_t fill = spec.zero && !spec.align ? U'0' : spec.fill;
  size_t width = spec.width < 0 ? 0 : spec.width;
  if (align == '=') {
    size_t len = sign.size() + unicode::length(body);
    std::string f;
    unicode::append(f, fill);
    std::string padding;
    for (size_t k = len; k < width; ++k) padding += f;
    return sign + padding + body;
  }
  return pad(sign + body, width, align, fill);
}

std::string format_value(const Value& v, const std::string& spec_text, uint64_t limit) {
  if (spec_text.empty()) return to_str(v);
  Spec spec = parse_spec(spec_text, limit);
  if (v.is_string()) {
    if (spec.type && spec.type != 's')
      raise(ErrorKind::Value, "Unknown format code '{}' for object of type 'str'", spec.type);
    std::string s = v.str();
    if (spec.precision >= 0) s = truncate_cp(s, spec.precision);
    return pad(s, spec.width < 0 ? 0 : spec.width, spec.align ? spec.align : '<', spec.fill);
  }
  bool integral = v.is_integral() && !(spec.type && std::string_view("eEfFgG%").find(spec.type) !=
                                                        std::string_view::npos);
  if (v.is_number() && integral) {
    int64_t x = v.as_int();
    bool neg = x < 0;
    unsigned long long mag = neg ? 0ULL - static_cast<unsigned long long>(x) : x;
    std::string body;
    char t = spec.type ? spec.type : 'd';
    switch (t) {
      case 'd':
      case 'n':
        body = std::to_string(mag);
        break;
      case 'x':
        body = fmt::format("{:x}", mag);
        break;
      case 'X':
        body = fmt::format("{:X}", mag);
        break;
      case 'o':
        body = fmt::format("{:o}", mag);
        break;
      case 'b':
        body = fmt::format("{:b}", mag);
        break;
      case 'c':
        unicode::append(body, static_cast<char32_t>(x));
        return pad(body, spec.width < 0 ? 0 : spec.width, spec.align ? spec.align : '<', spec.fill);
      default:
        raise(ErrorKind::Value, "Unknown format code '{}' for object of type 'int'", t);
    }
    if (spec.grouping && (t == 'd' || t == 'n')) body = group_digits(body, spec.grouping);
    if (spec.alt && t != 'd' && t != 'n') body = std::string("0") + t + body;
    return finish_number(body, neg, spec);
  }
  if (v.is_number()) {
    double d = v.as_float();
    bool neg = std::signbit(d) && !std::isnan(d);
    double mag = std::fabs(d);
    std::string body;
    char t = spec.type;
    int prec = spec.precision;
    std::string flags = spec.alt ? "#" : "";
    if (t == 0) {
      if (prec < 0) {
        body = float_repr(mag);
      } else {
        body = c_format(flags, -1, prec == 0 ? 1 : prec, 'g', mag);
        if (std::isfinite(mag) && body.find_first_of(".e") == std::string::npos) body += ".0";
      }
    } else if (t == '%') {
      body = c_format(flags, -1, prec < 0 ? 6 : prec, 'f', mag * 100) + "%";
    } else if (std::string_view("eEfFgG").find(t) != std::string_view::npos) {
      body = c_format(flags, -1, prec < 0 ? 6 : prec, t, mag);
    } else if (t == 'n') {
      body = c_format(flags, -1, prec < 0 ? 6 : prec, 'g', mag);
    } else {
      raise(ErrorKind::Value, "Unknown format code '{}' for object of type 'float'", t);
    }
    if (spec.grouping) {
      size_t end = body.find_first_not_of("0123456789");
      if (end == std::string::npos) end = body.size();
      body = group_digits(body.substr(0, end), spec.grouping) + body.substr(end);
    }
    return finish_number(body, neg, spec);
  }
  raise(ErrorKind::Type, "unsupported format string passed to {}.__format__", type_name(v));
}

}  // namespace

namespace {

// str.format's state across fields: argument numbering, the limits, and Markup escaping.
struct BraceFormatter {
  const CallArgs& args;
  bool escape_fields;
  size_t max_size;
  int auto_index = 0;
  bool used_auto = false, used_manual = false;

  // The value a field name ("", "0", "name", "0[key]", "name[0][1]") refers to.
  Value resolve(const std::string& field) {
    size_t first_end = field.find_first_of(".[");
    std::string head = field.substr(0, first_end);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), ::isdigit)) {
      size_t idx = 0;
      if (head.empty()) {
        if (used_manual)
          raise(ErrorKind::Value,
                "cannot switch from manual field specification to automatic field numbering");
        used_auto = true;
        idx = auto_index++;
      } else {
        if (used_auto)
          raise(ErrorKind::Value,
                "cannot switch from automatic field numbering to manual field specification");
        used_manual = true;
        auto [end, ec] = std::from_chars(head.data(), head.data() + head.size(), idx);
        if (ec != std::errc() || end != head.data() + head.size())
          raise(ErrorKind::Value, "Too many decimal digits in format string");
      }
      if (idx >= args.pos.size())
        raise(ErrorKind::Runtime,
              "IndexError: Replacement index {} out of range for positional args tuple", idx);
      v = args.pos[idx];
    } else {
      bool found = false;
      for (const auto& [name, val] : args.kw) {
        if (name == head) {
          v = val;
          found = true;
        }
      }
      if (!found) raise(ErrorKind::Runtime, "KeyError: {}", repr_string(head));
    }
    // Field accessors: only [key] on dicts and lists is supported.
    size_t p = first_end == std::string::npos ? field.size() : first_end;
    while (p < field.size()) {
      if (field[p] != '[')
        raise(ErrorKind::Runtime, "attribute access in format fields is not supported");
      size_t close = field.find(']', p);
      if (close == std::string::npos) raise(ErrorKind::Value, "Missing ']' in format string");
      std::string key = field.substr(p + 1, close - p - 1);
      p = close + 1;
      if (v.is_dict()) {
        const Value* found = v.dict().find(std::string_view(key));
        if (!found) raise(ErrorKind::Runtime, "KeyError: {}", repr_string(key));
        v = *found;
      } else if (v.is_list() && !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit)) {
        size_t k = 0;
        auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), k);
        if (ec != std::errc() || end != key.data() + key.size() || k >= v.list().items.size())
          raise(ErrorKind::Runtime, "IndexError: list index out of range");
        v = v.list().items[k];
      } else {
        raise(ErrorKind::Type, "'{}' object is not subscriptable", type_name(v));
      }
    }
    return v;
  }

  // Formats one replacement field's text (what is between its braces). `nested`: the field
  // sits inside another field's spec, where it may not nest further (Python allows one level).
  std::string field(std::string text, bool nested) {
    std::string spec, conv;
    size_t colon = text.find(':');
    if (colon != std::string::npos) {
      spec = text.substr(colon + 1);
      text = text.substr(0, colon);
    }
    size_t bang = text.find('!');
    if (bang != std::string::npos) {
      conv = text.substr(bang + 1);
      text = text.substr(0, bang);
    }
    Value v = resolve(text);
    if (spec.find('{') != std::string::npos) {
      if (nested) raise(ErrorKind::Value, "Max string recursion exceeded");
      spec = expand(spec, true);
    }
    if (conv == "r" || conv == "a") {
      v = Value::string(repr(v));
    } else if (conv == "s") {
      v = Value::string(to_str(v));
    } else if (!conv.empty()) {
      raise(ErrorKind::Value, "Unknown conversion specifier {}", conv);
    }
    uint64_t limit = field_limit(max_size);
    if (escape_fields && v.is_markup()) {
      if (!spec.empty()) raise(ErrorKind::Value, "Unsupported format specification for Markup.");
      return v.str();
    }
    if (escape_fields) return html_escape(format_value(v, spec, limit));
    return format_value(v, spec, limit);
  }

  // Replaces the fields of `fmt` (in a nested spec when `nested`).
  std::string expand(const std::string& fmt, bool nested) {
    std::string out;
    size_t i = 0;
    while (i < fmt.size()) {
      char c = fmt[i];
      if (c == '}') {
        if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
          out += '}';
          i += 2;
          continue;
        }
        raise(ErrorKind::Value, "Single '}' encountered in format string");
      }
      if (c != '{') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
        out += '{';
        i += 2;
        continue;
      }
      // The matching '}' (the spec may hold nested fields: "{:{}.{}f}").
      size_t j = i + 1;
      int depth = 1;
      while (j < fmt.size() && depth > 0) {
        if (fmt[j] == '{') ++depth;
        if (fmt[j] == '}') --depth;
        if (depth > 0) ++j;
      }
      if (j >= fmt.size()) raise(ErrorKind::Value, "expected '}' before end of string");
      out += field(fmt.substr(i + 1, j - i - 1), nested);
      check_limit("formatted string size", out.size(), max_size);
      i = j + 1;
    }
    return out;
  }
};

}  // namespace

std::string brace_format(const std::string& fmt, const CallArgs& args, bool escape_fields,
                         size_t max_size) {
  BraceFormatter f{args, escape_fields, max_size};
  return f.expand(fmt, false);
}

}  // namespace kvasir::chat
