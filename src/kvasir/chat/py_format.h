// Python's text formatting of values, reimplemented: float repr (shortest round-trip digits,
// Python's choice between fixed and exponent notation), printf-style `str % args`, and
// `str.format(*args, **kwargs)` with the common format-spec mini-language.
#pragma once

#include <string>

#include "kvasir/chat/limits.h"
#include "kvasir/chat/value.h"

namespace kvasir::chat {

// repr(float): "1.0", "0.1", "1e-05", "1e+16", "inf", "nan".
std::string float_repr(double d);
// `fmt % args` where args is a tuple, a dict (for "%(name)s") or a single value. With
// escape_args (fmt is a Markup), %s/%r conversions of non-Markup values are HTML-escaped.
// Widths and precisions larger than max_size (the render's output limit), and results that grow
// past it, fail with a Limit error before they are built.
std::string percent_format(const std::string& fmt, const Value& args, bool escape_args = false,
                           size_t max_size = kDefaultMaxOutputBytes);
// `fmt.format(*args, **kwargs)`, nested fields in specs ("{:{}}") included; with escape_fields
// (fmt is a Markup) each field is escaped. Limits as for percent_format.
std::string brace_format(const std::string& fmt, const CallArgs& args, bool escape_fields = false,
                         size_t max_size = kDefaultMaxOutputBytes);
// markupsafe.escape: & < > ' " become entities.
std::string html_escape(std::string_view s);

}  // namespace kvasir::chat
