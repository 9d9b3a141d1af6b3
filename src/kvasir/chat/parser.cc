#include "kvasir/chat/parser.h"

#include <algorithm>

#include "kvasir/chat/ast_visit.h"
#include "kvasir/chat/builtins.h"
#include "kvasir/chat/lexer.h"

namespace kvasir::chat {

namespace {

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::Data:
      return "template data / text";
    case Tok::BlockBegin:
      return "begin of statement block";
    case Tok::BlockEnd:
      return "end of statement block";
    case Tok::VarBegin:
      return "begin of print statement";
    case Tok::VarEnd:
      return "end of print statement";
    case Tok::Name:
    case Tok::Op:
      return t.text;
    case Tok::String:
      return "string";
    case Tok::Int:
      return "integer";
    case Tok::Float:
      return "float";
    case Tok::Eof:
      return "end of template";
  }
  return "token";
}

std::string quote(const std::string& s) {
  return repr_string(s);
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse() {
    Body body = subparse({});
    if (cur().type != Tok::Eof) fail(cur(), std::string("unexpected ") + quote(describe(cur())));
    check_unknown(body, false);
    return body;
  }

 private:
  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::vector<std::string>> end_token_stack_;
  std::vector<std::string> tag_stack_;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxParseDepth) {
        p.fail(p.cur(), std::string("template nesting is too deep (more than ") +
                            std::to_string(kMaxParseDepth) + " levels)");
      }
    }
    ~DepthGuard() { --p.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  const Token& cur() const { return t_[pos_]; }
  const Token& look() const { return t_[std::min(pos_ + 1, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[pos_];
    if (pos_ + 1 < t_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(const Token& t, std::string msg) const {
    throw TemplateError(ErrorKind::Syntax, std::move(msg), t.line, t.column);
  }
  [[noreturn]] void fail_expected(const std::string& what) const {
    if (cur().type == Tok::Eof)
      fail(cur(), std::string("unexpected end of template, expected ") + quote(what) + ".");
    fail(cur(), std::string("expected token ") + quote(what) + ", got " + quote(describe(cur())));
  }
  const Token& expect(Tok type, const char* what) {
    if (cur().type != type) fail_expected(what);
    return next();
  }
  const Token& expect_op(const char* op) {
    if (!is_op(op)) fail_expected(op);
    return next();
  }
  const Token& expect_name(const char* n) {
    if (!is_name(n)) fail_expected(n);
    return next();
  }

  template <class T>
  std::unique_ptr<T> make(const Token& at) {
    auto n = std::make_unique<T>();
    n->line = at.line;
    n->column = at.column;
    return n;
  }
  template <class T, class K>
  std::unique_ptr<T> make(const Token& at, K kind) {
    auto n = std::make_unique<T>(kind);
    n->line = at.line;
    n->column = at.column;
    return n;
  }

  // Every expression node goes through seal() once its children are in place: it records the
  // node's height and refuses trees higher than kMaxExprDepth (see parser.h), as soon as a chain
  // reaches the limit rather than after building all of it.
  template <class T>
  ExprPtr seal(std::unique_ptr<T> node) {
    int below = 0;
    for_each_child(static_cast<const Expr&>(*node),
                   [&](const Expr& c) { below = std::max(below, c.height); });
    node->height = below + 1;
    if (node->height > kMaxExprDepth) {
      throw TemplateError(ErrorKind::Syntax,
                          std::string("expression is nested too deeply (more than ") +
                              std::to_string(kMaxExprDepth) +
                              " levels of operators, filters, tests, calls or subscripts)",
                          node->line, node->column);
    }
    return node;
  }

  // ---- statements ----

  [[noreturn]] void fail_unknown_tag(const Token& at, const std::string* name) {
    std::vector<std::string> expected;
    for (const auto& ends : end_token_stack_)
      for (const auto& e : ends) expected.push_back(e);
    std::string msg = name ? std::string("Encountered unknown tag ") + quote(*name) + "."
                           : std::string("Unexpected end of template.");
    if (!end_token_stack_.empty()) {
      std::string looking;
      for (const auto& e : end_token_stack_.back()) {
        if (!looking.empty()) looking += " or ";
        looking += quote(e);
      }
      if (name && std::find(expected.begin(), expected.end(), *name) != expected.end()) {
        msg +=
            " You probably made a nesting mistake. Jinja is expecting this tag, but currently "
            "looking for " +
            looking + ".";
      } else {
        msg += std::string(" Jinja was looking for the following tags: ") + looking + ".";
      }
    }
    if (!tag_stack_.empty())
      msg += std::string(" The innermost block that needs to be closed is ") +
             quote(tag_stack_.back()) + ".";
    fail(at, msg);
  }

  Body subparse(const std::vector<std::string>& end_tokens) {
    DepthGuard guard(*this);
    bool pushed = !end_tokens.empty();
    if (pushed) end_token_stack_.push_back(end_tokens);
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == Tok::Data) {
        auto s = make<TextStmt>(tok);
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == Tok::VarBegin) {
        next();
        auto s = make<PrintStmt>(tok);
        s->expr = parse_tuple(false, true, {}, false);
        expect(Tok::VarEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (tok.type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name &&
            std::find(end_tokens.begin(), end_tokens.end(), cur().text) != end_tokens.end()) {
          if (pushed) end_token_stack_.pop_back();
          return body;
        }
        parse_statement(body);
        expect(Tok::BlockEnd, "end of statement block");
      } else if (tok.type == Tok::Eof) {
        break;
      } else {
        fail(tok, std::string("unexpected ") + quote(describe(tok)));
      }
    }
    if (pushed) end_token_stack_.pop_back();
    return body;
  }

  // Parses a body up to one of end_tokens; leaves the end token current (or consumes it).
  Body parse_statements(const std::vector<std::string>& end_tokens, bool drop_needle) {
    skip_op(":");
    expect(Tok::BlockEnd, "end of statement block");
    Body body = subparse(end_tokens);
    if (cur().type == Tok::Eof) {
      end_token_stack_.push_back(end_tokens);
      fail_unknown_tag(cur(), nullptr);
    }
    if (drop_needle) next();
    return body;
  }

  void parse_statement(Body& out) {
    const Token& tok = cur();
    if (tok.type != Tok::Name) fail(tok, "tag name expected");
    const std::string name = tok.text;
    static const char* const kKnown[] = {"for",      "if",     "set",       "macro",
                                         "call",     "filter", "with",      "break",
                                         "continue", "print",  "generation"};
    if (std::find_if(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return name == k; }) == std::end(kKnown)) {
      if (name == "extends" || name == "include" || name == "import" || name == "from" ||
          name == "block") {
        fail(tok, std::string("'") + name +
                      "' is not supported in chat templates (there is no template loader)");
      }
      if (name == "autoescape") fail(tok, "'autoescape' is not supported in chat templates");
      fail_unknown_tag(tok, &name);
    }
    tag_stack_.push_back(name);
    if (name == "for") {
      out.push_back(parse_for());
    } else if (name == "if") {
      out.push_back(parse_if());
    } else if (name == "set") {
      out.push_back(parse_set());
    } else if (name == "macro") {
      out.push_back(parse_macro());
    } else if (name == "call") {
      out.push_back(parse_call_block());
    } else if (name == "filter") {
      auto s = make<FilterBlockStmt>(next());
      s->filter = parse_filter(nullptr, true);
      s->body = parse_statements({"endfilter"}, true);
      out.push_back(std::move(s));
    } else if (name == "with") {
      out.push_back(parse_with());
    } else if (name == "break" || name == "continue") {
      const Token& t = next();
      if (loop_depth_ == 0) fail(t, std::string("'") + name + "' is outside of a loop");
      out.push_back(
          make<LoopControlStmt>(t, name == "break" ? StmtKind::Break : StmtKind::Continue));
    } else if (name == "print") {
      const Token& t = next();
      bool first = true;
      while (cur().type != Tok::BlockEnd) {
        if (!first) expect_op(",");
        first = false;
        auto s = make<PrintStmt>(t);
        s->expr = parse_expression(true);
        out.push_back(std::move(s));
      }
    } else {  // generation: Hugging Face's assistant-mask marker; renders its body
      auto s = make<ScopeStmt>(next());
      s->body = parse_statements({"endgeneration"}, true);
      out.push_back(std::move(s));
    }
    tag_stack_.pop_back();
  }

  StmtPtr parse_for() {
    auto s = make<ForStmt>(next());
    s->target = parse_assign_target(true, "in", false);
    expect_name("in");
    s->iter = parse_tuple(false, false, "recursive", false);
    if (skip_name("if")) s->filter = parse_expression(true);
    s->recursive = skip_name("recursive");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().text != "endfor") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_if() {
    auto s = make<IfStmt>(next());
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      const Token& t = next();
      if (t.text == "elif") continue;
      if (t.text == "else") s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    const Token& at = next();
    Target target = parse_assign_target(true, nullptr, true);
    if (skip_op("=")) {
      auto s = make<SetStmt>(at);
      s->target = std::move(target);
      s->value = parse_tuple(false, true, {}, false);
      return s;
    }
    auto s = make<SetBlockStmt>(at);
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  void parse_signature(MacroDef& def) {
    expect_op("(");
    while (!is_op(")")) {
      if (!def.params.empty()) expect_op(",");
      const Token& n = expect(Tok::Name, "name");
      def.params.push_back(n.text);
      if (skip_op("=")) {
        def.defaults.push_back(parse_expression(true));
      } else if (!def.defaults.empty()) {
        fail(n, "non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    auto s = make<MacroStmt>(next());
    s->def.line = s->line;
    s->def.name = expect(Tok::Name, "name").text;
    parse_signature(s->def);
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->def.body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved;
    scan_special_names(s->def);
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = make<CallBlockStmt>(next());
    s->caller.name = "caller";
    s->caller.line = s->line;
    if (is_op("(")) parse_signature(s->caller);
    const Token& at = cur();
    s->call = parse_expression(true);
    if (s->call->kind != ExprKind::Call) fail(at, "expected call");
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->caller.body = parse_statements({"endcall"}, true);
    loop_depth_ = saved;
    scan_special_names(s->caller);
    return s;
  }

  StmtPtr parse_with() {
    auto s = make<WithStmt>(next());
    while (cur().type != Tok::BlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      Target t = parse_assign_target(true, nullptr, false);
      expect_op("=");
      s->assigns.emplace_back(std::move(t), parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  // Which of varargs/kwargs/caller a macro body refers to (they enable extra arguments). Like
  // Jinja2, this looks everywhere inside, nested macros and call blocks included.
  static void scan_special_names(const Expr& e, MacroDef& def) {
    if (e.kind == ExprKind::Name) {
      const auto& n = static_cast<const NameExpr&>(e).name;
      if (n == "varargs") def.uses_varargs = true;
      if (n == "kwargs") def.uses_kwargs = true;
      if (n == "caller") def.uses_caller = true;
      return;
    }
    for_each_child(e, [&](const Expr& c) { scan_special_names(c, def); });
  }
  static void scan_special_names(const Body& body, MacroDef& def) {
    for (const auto& s : body) {
      for_each_child(
          *s, [&](const Expr& e, ChildFrame) { scan_special_names(e, def); },
          [&](const Body& b, ChildFrame) { scan_special_names(b, def); });
    }
  }
  static void scan_special_names(MacroDef& def) {
    for (const auto& d : def.defaults) scan_special_names(*d, def);
    scan_special_names(def.body, def);
  }

  // Unknown filters and tests are errors when the template is compiled, except inside an `if`
  // statement or an inline if-expression ("soft" frames in Jinja2's compiler), where they only
  // fail if reached at render time. Loops, macros, call/filter/set blocks and `with` open frames
  // of their own (ChildFrame::Own), which are not soft.
  static void check_unknown(const Expr& e, bool soft) {
    if (!soft && e.kind == ExprKind::Filter && !static_cast<const FilterExpr&>(e).fn)
      unknown_error("filter", static_cast<const FilterExpr&>(e).name, e);
    if (!soft && e.kind == ExprKind::Test && !static_cast<const TestExpr&>(e).fn)
      unknown_error("test", static_cast<const TestExpr&>(e).name, e);
    bool child_soft = soft || e.kind == ExprKind::Cond;
    for_each_child(e, [&](const Expr& c) { check_unknown(c, child_soft); });
  }
  static void check_unknown(const Body& body, bool soft) {
    for (const auto& s : body) {
      bool here = soft || s->kind == StmtKind::If;
      for_each_child(
          *s,
          [&](const Expr& e, ChildFrame f) {
            check_unknown(e, here && f == ChildFrame::Enclosing);
          },
          [&](const Body& b, ChildFrame f) {
            check_unknown(b, here && f == ChildFrame::Enclosing);
          });
    }
  }
  [[noreturn]] static void unknown_error(const char* what, const std::string& name,
                                         const Node& at) {
    throw TemplateError(ErrorKind::Syntax,
                        std::string("No ") + what + " named " + quote(name) + ".", at.line,
                        at.column);
  }

  // ---- assignment targets ----

  Target parse_target_primary(bool with_namespace) {
    const Token& tok = cur();
    Target t;
    t.line = tok.line;
    t.column = tok.column;
    if (tok.type == Tok::Name) {
      static const char* const kConsts[] = {"true", "false", "True", "False", "none", "None"};
      for (const char* c : kConsts)
        if (tok.text == c) fail(tok, "can't assign to 'const'");
      next();
      if (with_namespace && is_op(".")) {
        next();
        t.kind = Target::Kind::NsAttr;
        t.name = tok.text;
        t.attr = expect(Tok::Name, "name").text;
        return t;
      }
      t.kind = Target::Kind::Name;
      t.name = tok.text;
      return t;
    }
    if (tok.type == Tok::Op && tok.text == "(") {
      DepthGuard guard(*this);
      next();
      Target inner = parse_assign_target(true, nullptr, with_namespace, true);
      expect_op(")");
      return inner;
    }
    fail(tok, std::string("can't assign to ") + quote(describe(tok)));
  }

  Target parse_assign_target(bool with_tuple, const char* extra_end, bool with_namespace,
                             bool explicit_parens = false) {
    if (!with_tuple) return parse_target_primary(with_namespace);
    const Token& at = cur();
    std::vector<Target> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_target_primary(with_namespace));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens)
        fail(cur(), std::string("Expected an expression, got ") + quote(describe(cur())));
    }
    Target t;
    t.kind = Target::Kind::Tuple;
    t.items = std::move(items);
    t.line = at.line;
    t.column = at.column;
    return t;
  }

  // ---- expressions ----

  bool is_tuple_end(const char* extra_end) const {
    if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) return true;
    return extra_end && is_name(extra_end);
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const char* extra_end,
                      bool explicit_parens) {
    const Token& at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens)
        fail(cur(), std::string("Expected an expression, got ") + quote(describe(cur())));
    }
    auto t = make<SeqExpr>(at, ExprKind::Tuple);
    t->items = std::move(items);
    return seal(std::move(t));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    DepthGuard guard(*this);
    const Token& at = cur();
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      auto c = make<CondExpr>(at);
      c->test = parse_or();
      if (skip_name("else")) c->otherwise = parse_condexpr();
      c->then = std::move(expr1);
      expr1 = seal(std::move(c));
    }
    return expr1;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      auto b = make<BinaryExpr>(next(), ExprKind::Or);
      b->left = std::move(left);
      b->right = parse_and();
      left = seal(std::move(b));
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      auto b = make<BinaryExpr>(next(), ExprKind::And);
      b->left = std::move(left);
      b->right = parse_not();
      left = seal(std::move(b));
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto u = make<UnaryExpr>(next(), ExprKind::Not);
      u->operand = parse_not();
      return seal(std::move(u));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    std::vector<std::pair<CmpOp, ExprPtr>> ops;
    while (true) {
      CmpOp op;
      if (is_op("==")) {
        op = CmpOp::Eq;
      } else if (is_op("!=")) {
        op = CmpOp::Ne;
      } else if (is_op("<")) {
        op = CmpOp::Lt;
      } else if (is_op("<=")) {
        op = CmpOp::Le;
      } else if (is_op(">")) {
        op = CmpOp::Gt;
      } else if (is_op(">=")) {
        op = CmpOp::Ge;
      } else if (is_name("in")) {
        op = CmpOp::In;
      } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
        next();
        op = CmpOp::NotIn;
      } else {
        break;
      }
      next();
      ops.emplace_back(op, parse_math1());
    }
    if (ops.empty()) return first;
    auto c = make<CompareExpr>(at);
    c->first = std::move(first);
    c->rest = std::move(ops);
    return seal(std::move(c));
  }

  ExprPtr binary(const Token& at, BinOp op, ExprPtr l, ExprPtr r) {
    auto b = make<BinaryExpr>(at, ExprKind::Binary);
    b->op = op;
    b->left = std::move(l);
    b->right = std::move(r);
    return seal(std::move(b));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      BinOp op = at.text == "+" ? BinOp::Add : BinOp::Sub;
      left = binary(at, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Token& at = cur();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto c = make<ConcatExpr>(at);
    c->parts.push_back(std::move(first));
    while (skip_op("~")) c->parts.push_back(parse_math2());
    return seal(std::move(c));
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      BinOp op = at.text == "*"    ? BinOp::Mul
                 : at.text == "/"  ? BinOp::Div
                 : at.text == "//" ? BinOp::FloorDiv
                                   : BinOp::Mod;
      left = binary(at, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      left = binary(at, BinOp::Pow, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& at = next();
      auto u = make<UnaryExpr>(at, at.text == "-" ? ExprKind::Neg : ExprKind::Pos);
      u->operand = parse_unary(false);
      node = seal(std::move(u));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    switch (tok.type) {
      case Tok::Name: {
        next();
        if (tok.text == "true" || tok.text == "True" || tok.text == "false" ||
            tok.text == "False") {
          auto c = make<ConstExpr>(tok);
          c->value = Value::boolean(tok.text == "true" || tok.text == "True");
          return c;
        }
        if (tok.text == "none" || tok.text == "None") {
          auto c = make<ConstExpr>(tok);
          c->value = Value::none();
          return c;
        }
        auto n = make<NameExpr>(tok);
        n->name = tok.text;
        return n;
      }
      case Tok::String: {
        std::string s;
        while (cur().type == Tok::String) s += next().text;
        auto c = make<ConstExpr>(tok);
        c->value = Value::string(std::move(s));
        return c;
      }
      case Tok::Int: {
        auto c = make<ConstExpr>(next());
        c->value = Value::integer(tok.int_value);
        return c;
      }
      case Tok::Float: {
        auto c = make<ConstExpr>(next());
        c->value = Value::number(tok.float_value);
        return c;
      }
      case Tok::Op:
        if (tok.text == "(") {
          next();
          ExprPtr e = parse_tuple(false, true, nullptr, true);
          expect_op(")");
          return e;
        }
        if (tok.text == "[") {
          auto l = make<SeqExpr>(next(), ExprKind::List);
          while (!is_op("]")) {
            if (!l->items.empty()) expect_op(",");
            if (is_op("]")) break;
            l->items.push_back(parse_expression(true));
          }
          expect_op("]");
          return seal(std::move(l));
        }
        if (tok.text == "{") {
          auto d = make<DictExpr>(next());
          while (!is_op("}")) {
            if (!d->items.empty()) expect_op(",");
            if (is_op("}")) break;
            ExprPtr k = parse_expression(true);
            expect_op(":");
            d->items.emplace_back(std::move(k), parse_expression(true));
          }
          expect_op("}");
          return seal(std::move(d));
        }
        break;
      default:
        break;
    }
    if (tok.type == Tok::Eof) fail(tok, "unexpected end of template");
    fail(tok, std::string("unexpected ") + quote(describe(tok)));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& tok = next();
    if (tok.text == ".") {
      const Token& attr = next();
      if (attr.type == Tok::Name) {
        auto g = make<GetattrExpr>(tok);
        g->object = std::move(node);
        g->name = attr.text;
        return seal(std::move(g));
      }
      if (attr.type != Tok::Int) fail(attr, "expected name or number");
      auto g = make<GetitemExpr>(tok);
      g->object = std::move(node);
      auto c = make<ConstExpr>(attr);
      c->value = Value::integer(attr.int_value);
      g->key = std::move(c);
      return seal(std::move(g));
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto g = make<GetitemExpr>(tok);
    g->object = std::move(node);
    if (args.size() == 1) {
      g->key = std::move(args[0]);
    } else {
      auto t = make<SeqExpr>(tok, ExprKind::Tuple);
      t->items = std::move(args);
      g->key = seal(std::move(t));
    }
    return seal(std::move(g));
  }

  ExprPtr parse_subscribed() {
    const Token& at = cur();
    ExprPtr start;
    if (is_op(":")) {
      next();
    } else {
      start = parse_expression(true);
      if (!is_op(":")) return start;
      next();
    }
    auto s = make<SliceExpr>(at);
    s->start = std::move(start);
    if (!is_op(":") && !is_op("]") && !is_op(",")) s->stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) s->step = parse_expression(true);
    }
    return seal(std::move(s));
  }

  CallArgsExpr parse_call_args() {
    const Token& open = expect_op("(");
    CallArgsExpr a;
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail(open, "invalid syntax for function call expression");
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        ensure(!a.dyn_args && !a.dyn_kwargs);
        next();
        a.dyn_args = parse_expression(true);
      } else if (is_op("**")) {
        ensure(!a.dyn_kwargs);
        next();
        a.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
        ensure(!a.dyn_kwargs);
        std::string key = next().text;
        next();
        a.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!a.dyn_args && !a.dyn_kwargs && a.kwargs.empty());
        a.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
    return a;
  }

  ExprPtr parse_call(ExprPtr node) {
    auto c = make<CallExpr>(cur());
    c->args = parse_call_args();
    c->callee = std::move(node);
    return seal(std::move(c));
  }

  std::string dotted_name() {
    std::string name = expect(Tok::Name, "name").text;
    while (skip_op(".")) name += std::string(".") + expect(Tok::Name, "name").text;
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      const Token& at = cur();
      auto f = make<FilterExpr>(at);
      f->name = dotted_name();
      f->fn = find_filter(f->name);  // unknown: checked by check_unknown() after parsing
      if (is_op("(")) f->args = parse_call_args();
      f->operand = std::move(node);
      node = seal(std::move(f));
      start_inline = false;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const Token& is_tok = next();
    bool negated = skip_name("not");
    const Token& at = cur();
    auto t = make<TestExpr>(is_tok);
    t->name = dotted_name();
    t->fn = find_test(t->name);  // unknown: checked by check_unknown() after parsing
    t->line = at.line;
    t->column = at.column;
    const Token& c = cur();
    bool arg_start = c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int ||
                     c.type == Tok::Float ||
                     (c.type == Tok::Op && (c.text == "[" || c.text == "{"));
    if (is_op("(")) {
      t->args = parse_call_args();
    } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(c, "You cannot chain multiple tests with is");
      ExprPtr arg = parse_postfix(parse_primary());
      t->args.args.push_back(std::move(arg));
    }
    t->operand = std::move(node);
    ExprPtr test = seal(std::move(t));
    if (!negated) return test;
    auto n = make<UnaryExpr>(is_tok, ExprKind::Not);
    n->operand = std::move(test);
    return seal(std::move(n));
  }
};

}  // namespace

Body parse_template(std::string_view source) {
  return Parser(tokenize(source)).parse();
}

}  // namespace kvasir::chat
