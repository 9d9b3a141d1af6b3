// Syntax tree of a parsed template. Built once by the parser, then only read (renders on several
// threads share it). Every node records the line and column it came from, for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvasir/chat/value.h"

namespace kvasir::chat {

using FilterFn = Value (*)(Interpreter& in, const Value& input, CallArgs& args);
using TestFn = bool (*)(Interpreter& in, const Value& input, CallArgs& args);

struct Node {
  int line = 0, column = 0;
};

// ---- expressions ----

enum class ExprKind {
  Const,
  Name,
  List,
  Tuple,
  Dict,
  Not,
  Neg,
  Pos,
  Binary,
  And,
  Or,
  Compare,
  Concat,
  Cond,
  Getattr,
  Getitem,
  Slice,
  Call,
  Filter,
  Test
};
enum class BinOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr : Node {
  explicit Expr(ExprKind k) : kind(k) {}
  virtual ~Expr() = default;
  ExprKind kind;
  // Levels of the subtree rooted here (a leaf is 1), set by the parser, which refuses
  // expressions higher than kMaxExprDepth so that walks over the tree stay shallow.
  int height = 1;
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr : Expr {
  ConstExpr() : Expr(ExprKind::Const) {}
  Value value;
};
struct NameExpr : Expr {
  NameExpr() : Expr(ExprKind::Name) {}
  std::string name;
};
struct SeqExpr : Expr {  // List or Tuple
  explicit SeqExpr(ExprKind k) : Expr(k) {}
  std::vector<ExprPtr> items;
};
struct DictExpr : Expr {
  DictExpr() : Expr(ExprKind::Dict) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct UnaryExpr : Expr {  // Not, Neg, Pos
  explicit UnaryExpr(ExprKind k) : Expr(k) {}
  ExprPtr operand;
};
struct BinaryExpr : Expr {  // Binary (with op), And, Or
  explicit BinaryExpr(ExprKind k) : Expr(k) {}
  BinOp op = BinOp::Add;
  ExprPtr left, right;
};
struct CompareExpr : Expr {
  CompareExpr() : Expr(ExprKind::Compare) {}
  ExprPtr first;
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
};
struct ConcatExpr : Expr {
  ConcatExpr() : Expr(ExprKind::Concat) {}
  std::vector<ExprPtr> parts;
};
struct CondExpr : Expr {
  CondExpr() : Expr(ExprKind::Cond) {}
  ExprPtr test, then, otherwise;  // otherwise may be null
};
struct GetattrExpr : Expr {
  GetattrExpr() : Expr(ExprKind::Getattr) {}
  ExprPtr object;
  std::string name;
};
struct GetitemExpr : Expr {
  GetitemExpr() : Expr(ExprKind::Getitem) {}
  ExprPtr object, key;
};
struct SliceExpr : Expr {  // only as the key of a Getitem
  SliceExpr() : Expr(ExprKind::Slice) {}
  ExprPtr start, stop, step;  // each may be null
};
struct CallArgsExpr {
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;  // *args, **kwargs (may be null)
};
struct CallExpr : Expr {
  CallExpr() : Expr(ExprKind::Call) {}
  ExprPtr callee;
  CallArgsExpr args;
};
struct FilterExpr : Expr {
  FilterExpr() : Expr(ExprKind::Filter) {}
  ExprPtr operand;  // null inside {% filter %} / {% set x | f %}: the block's output
  std::string name;
  FilterFn fn = nullptr;
  CallArgsExpr args;
};
struct TestExpr : Expr {
  TestExpr() : Expr(ExprKind::Test) {}
  ExprPtr operand;
  std::string name;
  TestFn fn = nullptr;
  CallArgsExpr args;
};

// ---- statements ----

enum class StmtKind {
  Text,
  Print,
  If,
  For,
  Set,
  SetBlock,
  Macro,
  CallBlock,
  FilterBlock,
  With,
  Break,
  Continue,
  Scope
};

struct Stmt : Node {
  explicit Stmt(StmtKind k) : kind(k) {}
  virtual ~Stmt() = default;
  StmtKind kind;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Assignment target: a name, a namespace attribute (ns.attr) or a tuple of targets.
struct Target {
  enum class Kind { Name, NsAttr, Tuple } kind = Kind::Name;
  std::string name, attr;
  std::vector<Target> items;
  int line = 0, column = 0;
};

struct TextStmt : Stmt {
  TextStmt() : Stmt(StmtKind::Text) {}
  std::string text;
};
struct PrintStmt : Stmt {
  PrintStmt() : Stmt(StmtKind::Print) {}
  ExprPtr expr;
};
struct IfStmt : Stmt {
  IfStmt() : Stmt(StmtKind::If) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if + elifs
  Body else_body;
};
struct ForStmt : Stmt {
  ForStmt() : Stmt(StmtKind::For) {}
  Target target;
  ExprPtr iter, filter;  // filter may be null
  bool recursive = false;
  Body body, else_body;
};
struct SetStmt : Stmt {
  SetStmt() : Stmt(StmtKind::Set) {}
  Target target;
  ExprPtr value;
};
struct SetBlockStmt : Stmt {
  SetBlockStmt() : Stmt(StmtKind::SetBlock) {}
  Target target;
  ExprPtr filter;  // may be null
  Body body;
};
// A macro, or the anonymous `caller` of a call block.
struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
  int line = 0;
};
struct MacroStmt : Stmt {
  MacroStmt() : Stmt(StmtKind::Macro) {}
  MacroDef def;
};
struct CallBlockStmt : Stmt {
  CallBlockStmt() : Stmt(StmtKind::CallBlock) {}
  ExprPtr call;  // a CallExpr
  MacroDef caller;
};
struct FilterBlockStmt : Stmt {
  FilterBlockStmt() : Stmt(StmtKind::FilterBlock) {}
  ExprPtr filter;
  Body body;
};
struct WithStmt : Stmt {
  WithStmt() : Stmt(StmtKind::With) {}
  std::vector<std::pair<Target, ExprPtr>> assigns;
  Body body;
};
struct ScopeStmt : Stmt {  // a body without a scope of its own ({% generation %})
  ScopeStmt() : Stmt(StmtKind::Scope) {}
  Body body;
};
struct LoopControlStmt : Stmt {  // Break or Continue
  explicit LoopControlStmt(StmtKind k) : Stmt(k) {}
};

}  // namespace kvasir::chat
