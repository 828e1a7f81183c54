// The chat template's parser: the source split into text and tags (with Jinja's whitespace
// rules), the tags' expressions into Expr trees by Jinja2's grammar (jinja2/parser.py: parse_
// condexpr, parse_or, ..., parse_filter_expr), the statements into a Node tree.
#include "formats/tokenizer/chat_template.h"

#include <cctype>
#include <set>

#include "formats/error.h"
#include "formats/tokenizer/chat_template_ast.h"

namespace qt {
namespace chat_detail {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void unsupported(const std::string& what) {
  user_error("chat template: {} is not supported (quanttool renders a Jinja subset)", what);
}

// One piece of the source: text, or a tag's inside.
struct Piece {
  enum Kind { Text, Expr, Stmt, Comment } kind;
  std::string s;
  bool strip_before = false, strip_after = false;  // {%- / -%}
  bool keep_before = false;                        // {%+ (no lstrip_blocks)
};

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::vector<Piece> split_pieces(std::string src) {
  // Jinja drops one newline at the very end of a template (keep_trailing_newline=False).
  if (src.size() >= 2 && src.compare(src.size() - 2, 2, "\r\n") == 0)
    src.resize(src.size() - 2);
  else if (!src.empty() && src.back() == '\n')
    src.pop_back();
  std::vector<Piece> out;
  size_t i = 0;
  while (i < src.size()) {
    size_t open = src.find('{', i);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open == std::string::npos || open + 1 >= src.size()) {
      out.push_back({Piece::Text, src.substr(i)});
      break;
    }
    if (open > i) out.push_back({Piece::Text, src.substr(i, open - i)});
    const char t = src[open + 1];
    Piece p{t == '{' ? Piece::Expr : t == '%' ? Piece::Stmt : Piece::Comment, ""};
    const std::string close = t == '{' ? "}}" : t == '%' ? "%}" : "#}";
    size_t j = open + 2;
    if (j < src.size() && src[j] == '-')
      p.strip_before = true, ++j;
    else if (j < src.size() && src[j] == '+')
      p.keep_before = true, ++j;
    // The closing delimiter, outside string literals (comments have none).
    size_t k = j;
    char quote = 0;
    for (; k + 1 < src.size(); ++k) {
      const char c = src[k];
      if (quote) {
        if (c == '\\')
          ++k;
        else if (c == quote)
          quote = 0;
      } else if (p.kind != Piece::Comment && (c == '\'' || c == '"')) {
        quote = c;
      } else if (src.compare(k, 2, close) == 0) {
        break;
      }
    }
    if (k + 1 >= src.size()) user_error("chat template: unclosed '{{{}' at byte {}", t, open);
    size_t end = k;
    if (end > j && src[end - 1] == '-') p.strip_after = true, --end;
    p.s = src.substr(j, end - j);
    out.push_back(std::move(p));
    i = k + 2;
  }
  // Whitespace: '-' strips all whitespace on that side; otherwise a block tag or comment drops
  // the newline right after it (trim_blocks) and the spaces/tabs before it on its line
  // (lstrip_blocks), as transformers configures its Jinja environment.
  for (size_t n = 0; n < out.size(); ++n) {
    if (out[n].kind != Piece::Text) continue;
    std::string& s = out[n].s;
    // Jinja's lexer: whitespace before a block tag is at a line start when a newline precedes it
    // in this text, or the text follows the template start or a block tag that ate its newline.
    bool line_start = n == 0;
    if (n > 0) {
      const Piece& prev = out[n - 1];
      if (prev.strip_after) {
        size_t b = 0;
        while (b < s.size() && is_ws(s[b])) ++b;
        s.erase(0, b);
      } else if (prev.kind != Piece::Expr) {
        if (s.compare(0, 1, "\n") == 0)
          s.erase(0, 1), line_start = true;
        else if (s.compare(0, 2, "\r\n") == 0)
          s.erase(0, 2), line_start = true;
      }
    }
    if (n + 1 < out.size()) {
      const Piece& next = out[n + 1];
      if (next.strip_before) {
        while (!s.empty() && is_ws(s.back())) s.pop_back();
      } else if (next.kind != Piece::Expr && !next.keep_before) {
        size_t b = s.size();
        while (b > 0 && (s[b - 1] == ' ' || s[b - 1] == '\t')) --b;
        if (b > 0 ? s[b - 1] == '\n' : line_start) s.resize(b);
      }
    }
  }
  return out;
}

// Expression tokens.
struct Tok {
  enum Kind { Name, Str, Num, Op, End } kind;
  std::string s;
  json num;
};

std::vector<Tok> lex(const std::string& s) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (is_ws(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::Name, s.substr(i, j - i), nullptr});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      bool is_float = j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]));
      if (is_float)
        for (++j; j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])); ++j) {
        }
      const std::string t = s.substr(i, j - i);
      out.push_back({Tok::Num, t, is_float ? json(std::stod(t)) : json(std::stoll(t))});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[++j];
          v += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          v += s[j];
        }
      }
      if (j >= s.size()) user_error("chat template: unterminated string in '{}'", s);
      out.push_back({Tok::Str, v, nullptr});
      i = j + 1;
    } else {
      static const char* ops[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*", "/", "%", "~", "<",
                                  ">",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", "|", ":", "="};
      bool found = false;
      for (const char* op : ops) {
        const size_t n = std::char_traits<char>::length(op);
        if (s.compare(i, n, op) == 0) {
          if (std::string(op) == "**" || std::string(op) == "{" || std::string(op) == "}")
            unsupported(std::string("'") + op + "'");
          out.push_back({Tok::Op, op, nullptr});
          i += n, found = true;
          break;
        }
      }
      if (!found) user_error("chat template: unexpected character '{}' in '{}'", c, s);
    }
  }
  out.push_back({Tok::End, "", nullptr});
  return out;
}

ExprP make(Expr::Kind k, std::string name = {}) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->name = std::move(name);
  return e;
}

class ExprParser {
 public:
  ExprParser(const std::string& src) : src_(src), t_(lex(src)) {}
  const Tok& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool at_op(const char* op) const { return peek().kind == Tok::Op && peek().s == op; }
  bool at_name(const char* n) const { return peek().kind == Tok::Name && peek().s == n; }
  bool at_end() const { return peek().kind == Tok::End; }
  Tok next() { return t_[std::min(p_++, t_.size() - 1)]; }
  void expect_op(const char* op) {
    if (!at_op(op)) fail(std::string("expected '") + op + "'");
  }
  std::string name() {
    if (peek().kind != Tok::Name) fail("expected a name");
    return next().s;
  }
  [[noreturn]] void fail(const std::string& what) const {
    user_error("chat template: {} at '{}' in '{}'", what, peek().s, src_);
  }
  void done() {
    if (!at_end()) fail("unexpected token");
  }

  ExprP expr() {  // parse_condexpr
    ExprP a = or_expr();
    while (at_name("if")) {
      next();
      auto e = make(Expr::Cond);
      e->args.push_back(std::move(a));
      e->args.push_back(or_expr());
      if (at_name("else"))
        next(), e->args.push_back(expr());
      else
        e->args.push_back(nullptr);
      a = std::move(e);
    }
    return a;
  }

 private:
  ExprP binary(std::string op, ExprP a, ExprP b) {
    auto e = make(Expr::Binary, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  ExprP or_expr() {
    ExprP a = and_expr();
    while (at_name("or")) next(), a = binary("or", std::move(a), and_expr());
    return a;
  }
  ExprP and_expr() {
    ExprP a = not_expr();
    while (at_name("and")) next(), a = binary("and", std::move(a), not_expr());
    return a;
  }
  ExprP not_expr() {
    if (!at_name("not")) return compare();
    next();
    auto e = make(Expr::Unary, "not");
    e->args.push_back(not_expr());
    return e;
  }
  ExprP compare() {
    ExprP a = math1();
    for (;;) {
      if (peek().kind == Tok::Op && (peek().s == "==" || peek().s == "!=" || peek().s == "<" || peek().s == ">" ||
                                     peek().s == "<=" || peek().s == ">=")) {
        const std::string op = next().s;
        a = binary(op, std::move(a), math1());
      } else if (at_name("in")) {
        next(), a = binary("in", std::move(a), math1());
      } else if (at_name("not") && peek(1).kind == Tok::Name && peek(1).s == "in") {
        next(), next(), a = binary("not in", std::move(a), math1());
      } else {
        return a;
      }
    }
  }
  ExprP math1() {
    ExprP a = concat();
    while (at_op("+") || at_op("-")) {
      const std::string op = next().s;
      a = binary(op, std::move(a), concat());
    }
    return a;
  }
  ExprP concat() {
    ExprP a = math2();
    while (at_op("~")) next(), a = binary("~", std::move(a), math2());
    return a;
  }
  ExprP math2() {
    ExprP a = unary();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const std::string op = next().s;
      a = binary(op, std::move(a), unary());
    }
    return a;
  }
  ExprP unary() {
    if (at_op("-") || at_op("+")) {
      auto e = make(Expr::Unary, next().s);
      e->args.push_back(unary());
      return e;
    }
    return filters(postfix(primary()));
  }
  ExprP primary() {
    const Tok t = next();
    if (t.kind == Tok::Str) {
      auto e = make(Expr::Literal);
      e->value = t.s;
      while (peek().kind == Tok::Str) e->value = e->value.get<std::string>() + next().s;  // 'a' 'b'
      return e;
    }
    if (t.kind == Tok::Num) {
      auto e = make(Expr::Literal);
      e->value = t.num;
      return e;
    }
    if (t.kind == Tok::Name) {
      auto e = make(Expr::Literal);
      if (t.s == "true" || t.s == "True")
        e->value = true;
      else if (t.s == "false" || t.s == "False")
        e->value = false;
      else if (t.s == "none" || t.s == "None")
        e->value = nullptr;
      else
        return make(Expr::Name, t.s);
      return e;
    }
    if (t.kind == Tok::Op && t.s == "(") {
      ExprP e = expr();
      if (at_op(",")) unsupported("a tuple");
      expect_op(")");
      next();
      return e;
    }
    if (t.kind == Tok::Op && t.s == "[") {
      auto e = make(Expr::List);
      while (!at_op("]")) {
        e->args.push_back(expr());
        if (!at_op(",")) break;
        next();
      }
      expect_op("]");
      next();
      return e;
    }
    --p_;
    fail("expected a value");
  }
  // (args) after a call or filter: positional, then name=value.
  void call_args(Expr& e) {
    if (!at_op("(")) return;
    next();
    while (!at_op(")")) {
      if (peek().kind == Tok::Name && peek(1).kind == Tok::Op && peek(1).s == "=") {
        e.kwarg_names.push_back(next().s);
        next();
      } else if (!e.kwarg_names.empty()) {
        fail("a positional argument after a keyword one");
      }
      e.args.push_back(expr());
      if (!at_op(",")) break;
      next();
    }
    expect_op(")");
    next();
  }
  ExprP postfix(ExprP a) {
    for (;;) {
      if (at_op(".")) {
        next();
        const std::string n = name();
        if (at_op("(")) {
          auto e = make(Expr::Call, n);
          e->method = true;
          e->args.push_back(std::move(a));
          call_args(*e);
          a = std::move(e);
        } else {
          auto e = make(Expr::Attr, n);
          e->args.push_back(std::move(a));
          a = std::move(e);
        }
      } else if (at_op("[")) {
        next();
        ExprP parts[3];
        int colons = 0;
        for (;;) {
          if (at_op(":")) {
            if (++colons > 2) fail("too many ':'");
            next();
          } else if (at_op("]")) {
            break;
          } else {
            if (parts[colons]) fail("expected ':' or ']'");
            parts[colons] = expr();
          }
        }
        next();
        auto e = make(colons ? Expr::Slice : Expr::Item);
        e->args.push_back(std::move(a));
        if (!colons && !parts[0]) fail("empty []");
        for (int k = 0; k < (colons ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
        a = std::move(e);
      } else if (at_op("(")) {
        if (a->kind != Expr::Name) unsupported("calling an expression");
        auto e = make(Expr::Call, a->name);
        call_args(*e);
        a = std::move(e);
      } else {
        return a;
      }
    }
  }
  ExprP filters(ExprP a) {
    for (;;) {
      if (at_op("|")) {
        next();
        auto e = make(Expr::Filter, name());
        e->args.push_back(std::move(a));
        call_args(*e);
        a = std::move(e);
      } else if (at_name("is")) {
        next();
        auto e = make(Expr::Test);
        if (at_name("not")) next(), e->negated = true;
        // `is none` / `is true`: names the lexer would read as literals.
        e->name = name();
        e->args.push_back(std::move(a));
        if (at_op("(")) call_args(*e);
        a = std::move(e);
      } else {
        return a;
      }
    }
  }

  std::string src_;
  std::vector<Tok> t_;
  size_t p_ = 0;
};

ExprP parse_expr(const std::string& s) {
  ExprParser p(s);
  ExprP e = p.expr();
  p.done();
  return e;
}

// Statements: the pieces in order, a body until one of `ends`.
class StmtParser {
 public:
  explicit StmtParser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  // Parses until a statement whose keyword is in `ends` (returned, its parser left after the
  // keyword in *rest) or the end of the template (returns "").
  std::string body(Body& out, const std::set<std::string>& ends, std::unique_ptr<ExprParser>* rest) {
    while (i_ < pieces_.size()) {
      Piece& p = pieces_[i_++];
      if (p.kind == Piece::Comment) continue;
      if (p.kind == Piece::Text) {
        if (p.s.empty()) continue;
        auto n = std::make_unique<Node>();
        n->kind = Node::Text;
        n->text = p.s;
        out.push_back(std::move(n));
        continue;
      }
      if (p.kind == Piece::Expr) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Output;
        n->expr = parse_expr(p.s);
        out.push_back(std::move(n));
        continue;
      }
      auto ep = std::make_unique<ExprParser>(p.s);
      const std::string kw = ep->name();
      if (ends.count(kw)) {
        *rest = std::move(ep);
        return kw;
      }
      if (kw == "if")
        out.push_back(parse_if(*ep));
      else if (kw == "for")
        out.push_back(parse_for(*ep));
      else if (kw == "set")
        out.push_back(parse_set(*ep));
      else if (kw == "endif" || kw == "endfor" || kw == "elif" || kw == "else")
        user_error("chat template: unexpected {{% {} %}}", kw);
      else
        unsupported("{% " + kw + " %}");
    }
    if (!ends.empty()) user_error("chat template: missing {{% {} %}}", *ends.begin());
    return "";
  }

 private:
  // A block's last branch ended at `kw` (rest: that tag's remainder): `end`, or {% else %} and the
  // else body up to `end`.
  void else_tail(const std::string& kw, std::unique_ptr<ExprParser>& rest, Body& else_body, const char* end) {
    rest->done();
    if (kw == "else") {
      body(else_body, {end}, &rest);
      rest->done();
    }
  }
  std::unique_ptr<Node> parse_if(ExprParser& ep) {
    auto n = std::make_unique<Node>();
    n->kind = Node::If;
    ExprP cond = ep.expr();
    ep.done();
    for (;;) {
      Body b;
      std::unique_ptr<ExprParser> rest;
      const std::string kw = body(b, {"endif", "elif", "else"}, &rest);
      n->branches.emplace_back(std::move(cond), std::move(b));
      if (kw == "elif") {
        cond = rest->expr();
        rest->done();
        continue;
      }
      else_tail(kw, rest, n->else_body, "endif");
      return n;
    }
  }
  std::unique_ptr<Node> parse_for(ExprParser& ep) {
    auto n = std::make_unique<Node>();
    n->kind = Node::For;
    n->vars.push_back(ep.name());
    while (ep.at_op(",")) ep.next(), n->vars.push_back(ep.name());
    if (!ep.at_name("in")) ep.fail("expected 'in'");
    ep.next();
    n->expr = ep.expr();
    if (n->expr->kind == Expr::Cond) unsupported("a filtered loop ({% for x in y if c %})");
    if (ep.at_name("recursive")) unsupported("a recursive loop");
    ep.done();
    std::unique_ptr<ExprParser> rest;
    const std::string kw = body(n->body, {"endfor", "else"}, &rest);
    else_tail(kw, rest, n->else_body, "endfor");
    return n;
  }
  std::unique_ptr<Node> parse_set(ExprParser& ep) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Set;
    n->vars.push_back(ep.name());
    if (ep.at_op(".")) ep.next(), n->vars.push_back(ep.name());
    if (!ep.at_op("=")) unsupported("a {% set %} block or tuple target");
    ep.next();
    n->expr = ep.expr();
    ep.done();
    return n;
  }

  std::vector<Piece> pieces_;
  size_t i_ = 0;
};

}  // namespace
}  // namespace chat_detail

ChatTemplate::ChatTemplate(const std::string& source) : prog_(std::make_unique<chat_detail::Program>()) {
  chat_detail::StmtParser p(chat_detail::split_pieces(source));
  p.body(prog_->body, {}, nullptr);
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

}  // namespace qt
