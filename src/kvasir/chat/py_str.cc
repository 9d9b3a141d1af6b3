#include "kvasir/chat/py_str.h"

#include <string.h>

#include <algorithm>

#include "kvasir/chat/limits.h"
#include "kvasir/chat/unicode.h"

namespace kvasir::chat {

namespace {

std::u32string strip_set(const std::optional<Value>& chars) {
  if (!chars || chars->is_none()) return {};
  if (!chars->is_string()) raise(ErrorKind::Type, "strip arg must be None or str");
  return unicode::decode(chars->str());
}

}  // namespace

namespace {
// Up to this length std::string_view::find / rfind (O(n*m) at worst, but m is tiny) beat the
// linear algorithms' setup.
constexpr size_t kShortNeedle = 8;
}  // namespace

Searcher::Searcher(std::string_view needle) : needle_(needle) {}

size_t Searcher::find(std::string_view hay, size_t from) const {
  if (from > hay.size()) return std::string_view::npos;
  if (needle_.size() <= kShortNeedle) return hay.find(needle_, from);
  const void* hit = ::memmem(hay.data() + from, hay.size() - from, needle_.data(), needle_.size());
  return hit == nullptr ? std::string_view::npos
                        : static_cast<size_t>(static_cast<const char*>(hit) - hay.data());
}

size_t Searcher::rfind(std::string_view hay) const {
  const size_t m = needle_.size();
  if (m <= kShortNeedle) return hay.rfind(needle_);
  if (m > hay.size()) return std::string_view::npos;
  // r(i) = needle_[m - 1 - i]: the reversed needle, matched against the reversed haystack.
  auto r = [&](size_t i) { return needle_[m - 1 - i]; };
  if (back_fail_.empty()) {
    back_fail_.assign(m, 0);
    for (size_t i = 1, k = 0; i < m; ++i) {
      while (k > 0 && r(i) != r(k)) k = back_fail_[k - 1];
      if (r(i) == r(k)) ++k;
      back_fail_[i] = k;
    }
  }
  const size_t n = hay.size();
  for (size_t j = 0, k = 0; j < n; ++j) {
    const char c = hay[n - 1 - j];
    while (k > 0 && c != r(k)) k = back_fail_[k - 1];
    if (c == r(k)) ++k;
    if (k == m) return n - 1 - j;  // the match spans hay[n-1-j, n-1-j+m)
  }
  return std::string_view::npos;
}

std::string py_strip(const std::string& s, const std::optional<Value>& chars, bool left,
                     bool right) {
  std::u32string set = strip_set(chars);
  bool ws = !chars || chars->is_none();
  auto strip_it = [&](char32_t c) {
    return ws ? unicode::is_space(c) : set.find(c) != std::u32string::npos;
  };
  std::u32string u = unicode::decode(s);
  size_t a = 0, b = u.size();
  if (left)
    while (a < b && strip_it(u[a])) ++a;
  if (right)
    while (b > a && strip_it(u[b - 1])) --b;
  if (a == 0 && b == u.size()) return s;
  return unicode::encode(std::u32string_view(u).substr(a, b - a));
}

std::vector<std::string> py_split_ws(const std::string& s, int64_t maxsplit) {
  std::u32string u = unicode::decode(s);
  std::vector<std::string> out;
  size_t i = 0, n = u.size();
  while (true) {
    while (i < n && unicode::is_space(u[i])) ++i;
    if (i >= n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      size_t end = n;
      while (end > i && unicode::is_space(u[end - 1])) --end;
      charge_work(1);  // per part, as they are made
      out.push_back(unicode::encode(u.substr(i, end - i)));
      break;
    }
    size_t j = i;
    while (j < n && !unicode::is_space(u[j])) ++j;
    charge_work(1);  // per part, as they are made
    out.push_back(unicode::encode(u.substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit_ws(const std::string& s, int64_t maxsplit) {
  std::u32string u = unicode::decode(s);
  std::vector<std::string> out;
  size_t end = u.size();
  while (true) {
    while (end > 0 && unicode::is_space(u[end - 1])) --end;
    if (end == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      size_t start = 0;
      while (start < end && unicode::is_space(u[start])) ++start;
      charge_work(1);  // per part, as they are made
      out.push_back(unicode::encode(u.substr(start, end - start)));
      break;
    }
    size_t j = end;
    while (j > 0 && !unicode::is_space(u[j - 1])) --j;
    charge_work(1);  // per part, as they are made
    out.push_back(unicode::encode(u.substr(j, end - j)));
    end = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_split(const std::string& s, const std::string& sep, int64_t maxsplit) {
  if (sep.empty()) raise(ErrorKind::Value, "empty separator");
  Searcher searcher(sep);
  std::vector<std::string> out;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t p = searcher.find(s, start);
    if (p == std::string::npos) break;
    charge_work(1);  // per part, as they are made
    out.push_back(s.substr(start, p - start));
    start = p + sep.size();
  }
  out.push_back(s.substr(start));
  return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const std::string& sep, int64_t maxsplit) {
  if (sep.empty()) raise(ErrorKind::Value, "empty separator");
  Searcher searcher(sep);
  std::vector<std::string> out;
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep.size()) break;
    size_t p = searcher.rfind(std::string_view(s).substr(0, end));
    if (p == std::string::npos) break;
    charge_work(1);  // per part, as they are made
    out.push_back(s.substr(p + sep.size(), end - p - sep.size()));
    end = p;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::u32string u = unicode::decode(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  while (i < u.size()) {
    if (unicode::is_linebreak(u[i])) {
      size_t eol = i + 1;
      if (u[i] == '\r' && eol < u.size() && u[eol] == '\n') ++eol;
      charge_work(1);  // per part, as they are made
      out.push_back(unicode::encode(u.substr(start, (keepends ? eol : i) - start)));
      start = i = eol;
    } else {
      ++i;
    }
  }
  if (start < u.size()) out.push_back(unicode::encode(u.substr(start)));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count, size_t max_size) {
  std::string out;
  if (old.empty()) {
    std::u32string u = unicode::decode(s);
    uint64_t inserts = u.size() + 1;
    if (count >= 0) inserts = std::min<uint64_t>(inserts, count);
    check_limit("str.replace result size", s.size() + saturating_mul(inserts, repl.size()),
                max_size);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < u.size()) unicode::append(out, u[i]);
    }
    return out;
  }
  Searcher searcher(old);
  if (repl.size() > old.size()) {  // the result grows: check its size before building it
    uint64_t hits = 0;
    for (size_t p = searcher.find(s);
         p != std::string::npos && (count < 0 || hits < uint64_t(count));
         p = searcher.find(s, p + old.size()))
      ++hits;
    check_limit("str.replace result size",
                s.size() + saturating_mul(hits, repl.size() - old.size()), max_size);
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = searcher.find(s, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += repl;
    start = p + old.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = unicode::decode(s);
  std::u32string out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0) {
      unicode::append_upper(out, u[i]);
    } else {
      out.push_back(unicode::to_lower(u[i]));
    }
  }
  return unicode::encode(out);
}

// str.title(): a cased character following an uncased one is upper-cased, others lower-cased.
std::string py_title(const std::string& s) {
  std::u32string out;
  bool prev_cased = false;
  for (char32_t c : unicode::decode(s)) {
    if (prev_cased) {
      out.push_back(unicode::to_lower(c));
    } else {
      unicode::append_upper(out, c);
    }
    prev_cased = unicode::is_cased(c) || c == 0xDF;
  }
  return unicode::encode(out);
}

std::string py_swapcase(const std::string& s) {
  std::u32string out;
  for (char32_t c : unicode::decode(s)) {
    if (unicode::is_upper(c)) {
      out.push_back(unicode::to_lower(c));
    } else if (unicode::is_lower(c)) {
      unicode::append_upper(out, c);
    } else {
      out.push_back(c);
    }
  }
  return unicode::encode(out);
}

std::string py_pad(const std::string& s, int64_t width, char align, const std::string& fill) {
  std::u32string f = unicode::decode(fill);
  if (f.size() != 1)
    raise(ErrorKind::Type, "The fill character must be exactly one character long");
  auto len = static_cast<int64_t>(unicode::length(s));
  if (width <= len) return s;
  int64_t marg = width - len;
  int64_t left = align == '<' ? 0 : align == '>' ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) unicode::append(out, f[0]);
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) unicode::append(out, f[0]);
  return out;
}

bool str_pred(const std::string& s, bool (*pred)(char32_t)) {
  std::u32string u = unicode::decode(s);
  return !u.empty() && std::all_of(u.begin(), u.end(), pred);
}

bool str_has_cased(const std::u32string& u, bool want_upper) {
  bool any = false;
  for (char32_t c : u) {
    if (want_upper ? unicode::is_lower(c) : unicode::is_upper(c)) return false;
    if (unicode::is_cased(c)) any = true;
  }
  return any;
}

}  // namespace kvasir::chat
