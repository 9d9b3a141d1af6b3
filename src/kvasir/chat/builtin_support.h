// Helpers shared by the built-in library (filters, tests, methods, globals): argument
// conversion with Python's defaults, results that keep markupsafe's Markup flag, and one-shot
// generators. Internal to the chat module.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/chat/builtins.h"
#include "kvasir/chat/interpreter.h"
#include "kvasir/chat/value.h"

namespace kvasir::chat {

// A generator value over items (charged to the work budget, released with the render).
Value make_generator(Interpreter& in, std::vector<Value> items, std::string name = "generator");
// A string result that stays Markup when `src` was Markup (markupsafe's str methods).
Value like(Interpreter& in, const Value& src, std::string s);

std::string arg_str(const std::optional<Value>& v, const std::string& dflt = "");
bool arg_bool(const std::optional<Value>& v, bool dflt = false);
// An int argument (None or absent: dflt); TypeError for other types.
int64_t arg_int(const std::optional<Value>& v, int64_t dflt, const char* what);
// A Python list or tuple (not a dict view).
bool is_sequence_value(const Value& v);

}  // namespace kvasir::chat
