#include "kvasir/chat/json_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kvasir/chat/py_format.h"
#include "kvasir/chat/unicode.h"

namespace kvasir::chat {

Value from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
    case T::discarded:
      return Value::none();
    case T::boolean:
      return Value::boolean(j.get<bool>());
    case T::number_integer:
      return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case T::number_float:
      return Value::number(j.get<double>());
    case T::string:
      return Value::string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return make_list(std::move(items));
    }
    case T::object: {
      auto d = std::make_shared<DictData>();
      for (auto it = j.begin(); it != j.end(); ++it)
        d->set(Value::string(it.key()), from_json(it.value()));
      return Value::dict(std::move(d));
    }
    case T::binary:
      raise(ErrorKind::Type, "binary JSON values are not supported");
  }
  return Value::none();
}

namespace {

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : unicode::decode(s)) {
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
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
          }
        } else {
          unicode::append(out, c);
        }
    }
  }
  out += '"';
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return float_repr(d);
}

struct Dumper {
  const JsonDumpOptions& o;
  std::string item_sep, key_sep;
  std::string out;

  void newline(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) {
      out += *o.indent;
      check_built_size(out.size());
    }
  }

  // Dict keys become strings the way json.dumps converts them.
  std::string key_string(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::String:
        return k.str();
      case Value::Kind::None:
        return "null";
      case Value::Kind::Bool:
        return k.as_bool() ? "true" : "false";
      case Value::Kind::Int:
        return std::to_string(k.as_int());
      case Value::Kind::Float:
        return float_json(k.as_float());
      default:
        raise(ErrorKind::Type, "keys must be str, int, float, bool or None, not {}", type_name(k));
    }
  }

  void dump(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::None:
        out += "null";
        return;
      case Value::Kind::Bool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::Int:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::Float:
        out += float_json(v.as_float());
        return;
      case Value::Kind::String:
        charge_scan(v.str().size());
        dump_string(out, v.str(), o.ensure_ascii);
        return;
      case Value::Kind::List: {
        const auto& items = v.list().items;
        if (v.list().flavor != ListFlavor::List && v.list().flavor != ListFlavor::Tuple) break;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        charge_work(items.size());
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (o.indent) newline(level + 1);
          dump(items[i], level + 1);
          check_built_size(out.size());
        }
        if (o.indent) newline(level);
        out += ']';
        return;
      }
      case Value::Kind::Dict: {
        const auto& entries = v.dict().entries();
        if (entries.empty()) {
          out += "{}";
          return;
        }
        std::vector<std::pair<std::string, const Value*>> items;
        items.reserve(entries.size());
        for (const auto& [k, val] : entries) items.emplace_back(key_string(k), &val);
        if (o.sort_keys) {
          std::stable_sort(items.begin(), items.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        }
        out += '{';
        charge_work(items.size());
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (o.indent) newline(level + 1);
          dump_string(out, items[i].first, o.ensure_ascii);
          out += key_sep;
          dump(*items[i].second, level + 1);
          check_built_size(out.size());
        }
        if (o.indent) newline(level);
        out += '}';
        return;
      }
      default:
        break;
    }
    raise(ErrorKind::Type, "Object of type {} is not JSON serializable", type_name(v));
  }
};

}  // namespace

std::string to_json(const Value& v, const JsonDumpOptions& options) {
  Dumper d{options,
           options.item_separator.value_or(options.indent ? "," : ", "),
           options.key_separator.value_or(": "),
           {}};
  d.dump(v, 0);
  return std::move(d.out);
}

}  // namespace kvasir::chat
