// The template engine's value type: what a Jinja2 template can see and compute, with Python's
// semantics. A Value is undefined (Jinja2's Undefined, carrying the message an operation on it
// raises), None, bool, int (int64), float, str (UTF-8, shared and immutable; optionally flagged as
// markupsafe's Markup, the "safe" string `|safe` and `|escape` produce), list/tuple,
// dict (insertion-ordered) or an Object (namespace, loop, macro, bound method, generator...).
//
// Lists and dicts are immutable once built (the engine mirrors Jinja2's
// ImmutableSandboxedEnvironment, where templates cannot mutate them), so copies share storage.
// Only Objects (e.g. a namespace) have mutable state. Containers record their nesting depth and
// refuse to nest deeper than kMaxNesting, so printing or destroying a value never recurses
// without bound.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "kvasir/chat/error.h"

namespace kvasir::chat {

class Value;
class Object;
class Interpreter;
struct ListData;
class DictData;
using StrPtr = std::shared_ptr<const std::string>;
using ListPtr = std::shared_ptr<const ListData>;
using DictPtr = std::shared_ptr<const DictData>;
using ObjectPtr = std::shared_ptr<Object>;

inline constexpr int kMaxNesting = 256;

struct UndefinedInfo {
  ErrorKind kind = ErrorKind::Undefined;
  std::string message;  // what operating on this value raises
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Object };

  Value() = default;  // undefined
  static Value undefined(std::string message, ErrorKind kind = ErrorKind::Undefined);
  static Value none() { return Value(N{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value number(double d) { return Value(d); }
  static Value string(std::string s) {
    return Value(std::make_shared<const std::string>(std::move(s)));
  }
  static Value string(StrPtr s) { return Value(std::move(s)); }
  // A markupsafe Markup string: concatenating it with a plain string HTML-escapes the other.
  static Value markup(std::string s) {
    Value v = string(std::move(s));
    v.markup_ = true;
    return v;
  }
  static Value list(ListPtr l) { return Value(std::move(l)); }
  static Value dict(DictPtr d) { return Value(std::move(d)); }
  static Value object(ObjectPtr o) { return Value(std::move(o)); }

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  // int, float or bool (Python's numbers.Number; bool is an int subclass).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  // int or bool: usable as an integer.
  bool is_integral() const { return is_int() || is_bool(); }
  bool is_string() const { return kind() == Kind::String; }
  bool is_markup() const { return markup_ && is_string(); }
  bool is_list() const { return kind() == Kind::List; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_object() const { return kind() == Kind::Object; }

  bool as_bool() const { return std::get<bool>(v_); }
  // For int or bool.
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }
  // For any number.
  double as_float() const { return is_float() ? std::get<double>(v_) : double(as_int()); }
  const std::string& str() const { return *std::get<StrPtr>(v_); }
  const StrPtr& str_ptr() const { return std::get<StrPtr>(v_); }
  const ListData& list() const { return *std::get<ListPtr>(v_); }
  const ListPtr& list_ptr() const { return std::get<ListPtr>(v_); }
  const DictData& dict() const { return *std::get<DictPtr>(v_); }
  const DictPtr& dict_ptr() const { return std::get<DictPtr>(v_); }
  Object& object() const { return *std::get<ObjectPtr>(v_); }
  const ObjectPtr& object_ptr() const { return std::get<ObjectPtr>(v_); }

  // The error an operation on this undefined value raises.
  [[noreturn]] void fail_undefined() const;
  const UndefinedInfo* undefined_info() const { return std::get<U>(v_).info.get(); }

 private:
  struct U {
    std::shared_ptr<const UndefinedInfo> info;
  };
  struct N {};
  template <class T>
  explicit Value(T v) : v_(std::move(v)) {}

  std::variant<U, N, bool, int64_t, double, StrPtr, ListPtr, DictPtr, ObjectPtr> v_;
  bool markup_ = false;
};

// How a list prints and behaves: Python lists, tuples and the dict views items()/keys()/values().
enum class ListFlavor : uint8_t { List, Tuple, DictItems, DictKeys, DictValues };

struct ListData {
  std::vector<Value> items;
  ListFlavor flavor = ListFlavor::List;
  int depth = 1;
  // A named tuple's field names (groupby's (grouper, list)); empty otherwise.
  std::vector<std::string> field_names;
};

// Builds a list, checking the nesting limit.
Value make_list(std::vector<Value> items, ListFlavor flavor = ListFlavor::List);
inline Value make_tuple(std::vector<Value> items) {
  return make_list(std::move(items), ListFlavor::Tuple);
}

// Key of a hashable value as Python hashes it: 1, 1.0 and True are the same key. Throws
// TypeError for unhashable values (list, dict).
std::string hash_key(const Value& key);

class DictData {
 public:
  const Value* find(const Value& key) const;  // throws TypeError for an unhashable key
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value value);  // insert or replace (keeps first position)
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  int depth() const { return depth_; }

 private:
  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
  int depth_ = 1;
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// Values with behaviour of their own. Subclasses live next to what creates them.
class Object {
 public:
  virtual ~Object() = default;
  // Python's type(x).__name__ ("Namespace", "generator", ...), used in error messages.
  virtual std::string type_name() const = 0;
  // Jinja2's object_type_repr: "jinja2.utils.Namespace object", "generator object".
  virtual std::string type_repr() const { return type_name() + " object"; }
  virtual std::string repr() const {
    std::string r(1, '<');
    r += type_name();
    r += " object>";
    return r;
  }
  // Attribute lookup; nullopt when there is no such attribute.
  virtual std::optional<Value> attr(std::string_view name) const {
    (void)name;
    return std::nullopt;
  }
  virtual bool callable() const { return false; }
  virtual Value call(Interpreter& in, CallArgs& args);
  // Iteration: nullopt when not iterable. Generators are consumed by iterating.
  virtual std::optional<std::vector<Value>> iterate() { return std::nullopt; }
  virtual bool is_generator() const { return false; }
  // Drops references to other values at the end of a render (breaks reference cycles).
  virtual void release() {}
};

// The budget of the render running on this thread. Some operations on values cost far more than
// their operands' top-level size, because lists and dicts share storage: `[[big] * 1000] * 1000`
// is cheap to build but huge to print, serialize, compare or hash. Those operations (repr/str,
// tojson, ==, <, hashing, iteration) charge the work they do here and check the size of the
// strings they build as they go, so a hostile template ends in a Limit error instead of running
// for hours or exhausting memory. Interpreter::render installs its interpreter for the duration
// of the render; outside a render (tests of the value layer) nothing is charged.
class RenderBudget {
 public:
  virtual void charge(size_t steps) = 0;            // Limit error once the work budget is spent
  virtual void check_size(size_t bytes) const = 0;  // Limit error for a too large string
  static RenderBudget* current();                   // this thread's, or null

  // Installs a budget on this thread until destroyed (restoring the previous one).
  class Installed {
   public:
    explicit Installed(RenderBudget* budget);
    ~Installed();
    Installed(const Installed&) = delete;
    Installed& operator=(const Installed&) = delete;

   private:
    RenderBudget* saved_;
  };

 protected:
  ~RenderBudget() = default;
};

// Bytes read by a scan (searching, decoding, comparing, copying) cost one step per
// kScanBytesPerStep; a string that is built costs one step per 16 bytes (Interpreter::make_string).
inline constexpr size_t kScanBytesPerStep = 16;
// Charges this thread's render budget, if any.
void charge_work(size_t steps);
inline void charge_scan(size_t bytes) {
  charge_work(bytes / kScanBytesPerStep);
}
void check_built_size(size_t bytes);

// Python's str(x) (Undefined prints as "").
std::string to_str(const Value& v);
void append_str(std::string& out, const Value& v);
// Python's repr(x).
std::string repr(const Value& v);
std::string repr_string(std::string_view s);
bool truthy(const Value& v);
// Python's ==. Undefined equals only another Undefined.
bool equals(const Value& a, const Value& b);
// Python's <; throws TypeError ("'<' not supported between instances of ...").
bool less(const Value& a, const Value& b);
// Python's type name: "str", "int", "NoneType", "Undefined", ...
std::string type_name(const Value& v);
// Jinja2's object_type_repr (used in UndefinedError messages).
std::string object_type_repr(const Value& v);
// len(); nullopt when the value has no length.
std::optional<size_t> length(const Value& v);
// The items iteration yields (dict keys, string characters; undefined yields nothing). Throws
// TypeError for values that are not iterable. Consumes generators.
std::vector<Value> iterate(const Value& v);

}  // namespace kvasir::chat
