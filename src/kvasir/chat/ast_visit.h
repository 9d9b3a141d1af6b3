// The children of each syntax tree node, in one place, so that analyses over the tree handle only
// the node kinds they care about and leave the rest of the walk to for_each_child.
#pragma once

#include "kvasir/chat/ast.h"

namespace kvasir::chat {

// Where a statement's child belongs among Jinja2's compiler frames: the frame around the
// statement, or a frame the statement opens for it. Own: a loop's filter, body and else body;
// a macro's or call block caller's defaults and body; a set or filter block's filter and body;
// a `with` body; a {% generation %} (Scope) body. Everything else is Enclosing, including all of
// an `if` statement's tests and branches (Jinja2 compiles those in a soft copy of the frame).
enum class ChildFrame { Enclosing, Own };

// Child visitors. Contract: for_each_child(node, ...) calls back exactly once for every non-null
// direct child of `node` (expressions, and for statements also bodies, empty ones included), in
// source order, and never for grandchildren: callbacks recurse themselves where they want to. So
// an inline if gives `then`, `test`, `otherwise`, and a filter or test its operand, then its
// arguments. Two orders are the node's rather than the source's: call arguments come grouped as
// positional, keyword, *args, **kwargs (as CallArgsExpr stores them), and a call block gives its
// call before the caller's defaults and body (which Jinja2 compiles first). Analyses that report
// the first error they meet depend on this order.
//
//   for_each_child(const Expr&, f)               f(const Expr&)
//   for_each_child(const Stmt&, on_expr, on_body) on_expr(const Expr&, ChildFrame),
//                                                 on_body(const Body&, ChildFrame)
template <class F>
void for_each_arg(const CallArgsExpr& a, F&& f) {
  auto child = [&](const ExprPtr& p) {
    if (p) f(*p);
  };
  for (const auto& x : a.args) child(x);
  for (const auto& kw : a.kwargs) child(kw.second);
  child(a.dyn_args);
  child(a.dyn_kwargs);
}

template <class F>
void for_each_child(const Expr& e, F&& f) {
  auto child = [&](const ExprPtr& p) {
    if (p) f(*p);
  };
  switch (e.kind) {
    case ExprKind::Const:
    case ExprKind::Name:
      return;
    case ExprKind::List:
    case ExprKind::Tuple:
      for (const auto& i : static_cast<const SeqExpr&>(e).items) child(i);
      return;
    case ExprKind::Dict:
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        child(k);
        child(v);
      }
      return;
    case ExprKind::Not:
    case ExprKind::Neg:
    case ExprKind::Pos:
      child(static_cast<const UnaryExpr&>(e).operand);
      return;
    case ExprKind::Binary:
    case ExprKind::And:
    case ExprKind::Or: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      child(b.left);
      child(b.right);
      return;
    }
    case ExprKind::Compare: {
      const auto& c = static_cast<const CompareExpr&>(e);
      child(c.first);
      for (const auto& r : c.rest) child(r.second);
      return;
    }
    case ExprKind::Concat:
      for (const auto& p : static_cast<const ConcatExpr&>(e).parts) child(p);
      return;
    case ExprKind::Cond: {  // `then if test else otherwise`
      const auto& c = static_cast<const CondExpr&>(e);
      child(c.then);
      child(c.test);
      child(c.otherwise);
      return;
    }
    case ExprKind::Getattr:
      child(static_cast<const GetattrExpr&>(e).object);
      return;
    case ExprKind::Getitem: {
      const auto& g = static_cast<const GetitemExpr&>(e);
      child(g.object);
      child(g.key);
      return;
    }
    case ExprKind::Slice: {
      const auto& s = static_cast<const SliceExpr&>(e);
      child(s.start);
      child(s.stop);
      child(s.step);
      return;
    }
    case ExprKind::Call: {
      const auto& c = static_cast<const CallExpr&>(e);
      child(c.callee);
      for_each_arg(c.args, f);
      return;
    }
    case ExprKind::Filter: {
      const auto& fe = static_cast<const FilterExpr&>(e);
      child(fe.operand);
      for_each_arg(fe.args, f);
      return;
    }
    case ExprKind::Test: {
      const auto& t = static_cast<const TestExpr&>(e);
      child(t.operand);
      for_each_arg(t.args, f);
      return;
    }
  }
}

template <class OnExpr, class OnBody>
void for_each_child(const Stmt& s, OnExpr&& on_expr, OnBody&& on_body) {
  auto expr = [&](const ExprPtr& p, ChildFrame frame) {
    if (p) on_expr(*p, frame);
  };
  switch (s.kind) {
    case StmtKind::Text:
    case StmtKind::Break:
    case StmtKind::Continue:
      return;
    case StmtKind::Print:
      expr(static_cast<const PrintStmt&>(s).expr, ChildFrame::Enclosing);
      return;
    case StmtKind::If: {
      const auto& i = static_cast<const IfStmt&>(s);
      for (const auto& [test, body] : i.branches) {
        expr(test, ChildFrame::Enclosing);
        on_body(body, ChildFrame::Enclosing);
      }
      on_body(i.else_body, ChildFrame::Enclosing);
      return;
    }
    case StmtKind::For: {
      const auto& f = static_cast<const ForStmt&>(s);
      expr(f.iter, ChildFrame::Enclosing);
      expr(f.filter, ChildFrame::Own);
      on_body(f.body, ChildFrame::Own);
      on_body(f.else_body, ChildFrame::Own);
      return;
    }
    case StmtKind::Set:
      expr(static_cast<const SetStmt&>(s).value, ChildFrame::Enclosing);
      return;
    case StmtKind::SetBlock: {
      const auto& b = static_cast<const SetBlockStmt&>(s);
      expr(b.filter, ChildFrame::Own);
      on_body(b.body, ChildFrame::Own);
      return;
    }
    case StmtKind::Macro: {
      const auto& m = static_cast<const MacroStmt&>(s);
      for (const auto& d : m.def.defaults) expr(d, ChildFrame::Own);
      on_body(m.def.body, ChildFrame::Own);
      return;
    }
    case StmtKind::CallBlock: {
      const auto& c = static_cast<const CallBlockStmt&>(s);
      expr(c.call, ChildFrame::Enclosing);
      for (const auto& d : c.caller.defaults) expr(d, ChildFrame::Own);
      on_body(c.caller.body, ChildFrame::Own);
      return;
    }
    case StmtKind::FilterBlock: {
      const auto& f = static_cast<const FilterBlockStmt&>(s);
      expr(f.filter, ChildFrame::Own);
      on_body(f.body, ChildFrame::Own);
      return;
    }
    case StmtKind::With: {
      const auto& w = static_cast<const WithStmt&>(s);
      for (const auto& a : w.assigns) expr(a.second, ChildFrame::Enclosing);
      on_body(w.body, ChildFrame::Own);
      return;
    }
    case StmtKind::Scope:
      on_body(static_cast<const ScopeStmt&>(s).body, ChildFrame::Own);
      return;
  }
}

}  // namespace kvasir::chat
