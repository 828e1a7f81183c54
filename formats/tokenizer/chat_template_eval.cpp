// The chat template's evaluator: walks the Node / Expr tree of chat_template_ast.h with values
// held as JSON plus an "undefined" state (Jinja's Undefined: empty when printed, false when
// tested, an error when indexed), with Python's semantics where Jinja defers to them
// (str + str, list + list, `in`, truthiness, str() of True / None).
#include <cmath>
#include <map>

#include "formats/error.h"
#include "formats/tokenizer/chat_template.h"
#include "formats/tokenizer/chat_template_ast.h"

namespace qt {
namespace chat_detail {
namespace {

using json = nlohmann::ordered_json;

struct Value {
  bool undefined = false;
  json j;
  static Value undef() { return {true, nullptr}; }
};

[[noreturn]] void type_error(const std::string& what) { user_error("chat template: {}", what); }

bool truthy(const Value& v) {
  if (v.undefined || v.j.is_null()) return false;
  if (v.j.is_boolean()) return v.j.get<bool>();
  if (v.j.is_number_integer()) return v.j.get<int64_t>() != 0;
  if (v.j.is_number()) return v.j.get<double>() != 0;
  if (v.j.is_string()) return !v.j.get_ref<const std::string&>().empty();
  return !v.j.empty();  // list, dict
}

std::string py_repr(const json& j);

// Python's str() of a value (what {{ }} and ~ print).
std::string to_str(const Value& v) {
  if (v.undefined) return "";
  const json& j = v.j;
  if (j.is_string()) return j.get<std::string>();
  return py_repr(j);
}

std::string py_repr(const json& j) {
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_integer()) return std::to_string(j.get<int64_t>());
  if (j.is_number()) return fmt::format("{}", j.get<double>());
  if (j.is_string()) return fmt::format("'{}'", j.get_ref<const std::string&>());
  std::string s = j.is_array() ? "[" : "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) s += ", ";
    first = false;
    if (j.is_object()) s += "'" + it.key() + "': ";
    s += py_repr(*it);
  }
  return s + (j.is_array() ? "]" : "}");
}

// Python's json.dumps(x, ensure_ascii=False[, indent=n]): ", " and ": " separators.
std::string py_json(const json& j, int indent, int depth) {
  if (!j.is_array() && !j.is_object()) return j.dump(-1, ' ', false);
  if (j.empty()) return j.is_array() ? "[]" : "{}";
  auto newline = [&](int d) { return indent >= 0 ? fmt::format("\n{:{}}", "", indent * d) : std::string(); };
  const std::string nl = newline(depth + 1);
  std::string s = j.is_array() ? "[" : "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    s += first ? nl : indent >= 0 ? fmt::format(",{}", nl) : std::string(", ");
    first = false;
    if (j.is_object()) s += json(it.key()).dump(-1, ' ', false) + ": ";
    s += py_json(*it, indent, depth + 1);
  }
  s += newline(depth);
  return s + (j.is_array() ? "]" : "}");
}

bool equal(const Value& a, const Value& b) {
  if (a.undefined || b.undefined) return a.undefined && b.undefined;
  if (a.j.is_number() && b.j.is_number()) return a.j.get<double>() == b.j.get<double>();
  return a.j == b.j;
}

const std::string& str_of(const Value& v, const char* what) {
  if (v.undefined || !v.j.is_string()) type_error(std::string(what) + " needs a string");
  return v.j.get_ref<const std::string&>();
}

std::string strip(std::string s, const std::string& chars, bool left, bool right) {
  auto in = [&](char c) { return chars.find(c) != std::string::npos; };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && in(s[b])) ++b;
  if (right)
    while (e > b && in(s[e - 1])) --e;
  return s.substr(b, e - b);
}

const std::string kWhitespace = " \t\n\r\f\v";

class Evaluator {
 public:
  explicit Evaluator(const json& ctx) {
    scopes_.emplace_back();
    for (auto it = ctx.begin(); it != ctx.end(); ++it) scopes_.back()[it.key()] = Value{false, *it};
  }

  void run(const Body& body, std::string& out) {
    for (const auto& n : body) node(*n, out);
  }

 private:
  void node(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Text: out += n.text; break;
      case Node::Output: out += to_str(eval(*n.expr)); break;
      case Node::If:
        for (const auto& [cond, body] : n.branches)
          if (truthy(eval(*cond))) return run(body, out);
        run(n.else_body, out);
        break;
      case Node::Set: {
        Value v = eval(*n.expr);
        if (n.vars.size() == 1) {
          scopes_.back()[n.vars[0]] = std::move(v);
        } else {  // name.attr = value on a dict variable
          Value* d = lookup(n.vars[0]);
          if (!d || d->undefined || !d->j.is_object())
            type_error("{% set " + n.vars[0] + "." + n.vars[1] + " %} needs a dict");
          d->j[n.vars[1]] = v.j;
        }
        break;
      }
      case Node::For: loop(n, out); break;
    }
  }

  void loop(const Node& n, std::string& out) {
    const Value it = eval(*n.expr);
    json items;
    if (it.undefined || it.j.is_null()) type_error("a loop over an undefined value");
    if (it.j.is_array())
      items = it.j;
    else if (it.j.is_object())
      for (auto e = it.j.begin(); e != it.j.end(); ++e) items.push_back(e.key());  // iterating a dict: its keys
    else if (it.j.is_string())
      for (char c : it.j.get<std::string>()) items.push_back(std::string(1, c));
    else
      type_error("a loop over a " + std::string(it.j.type_name()));
    if (items.empty()) return run(n.else_body, out);
    const size_t len = items.size();
    for (size_t i = 0; i < len; ++i) {
      scopes_.emplace_back();  // a loop's body has its own scope, as in Jinja
      auto& s = scopes_.back();
      if (n.vars.size() == 1) {
        s[n.vars[0]] = Value{false, items[i]};
      } else {
        if (!items[i].is_array() || items[i].size() != n.vars.size())
          type_error("cannot unpack a loop item into " + std::to_string(n.vars.size()) + " names");
        for (size_t k = 0; k < n.vars.size(); ++k) s[n.vars[k]] = Value{false, items[i][k]};
      }
      s["loop"] = Value{false, json{{"index0", i},
                                    {"index", i + 1},
                                    {"first", i == 0},
                                    {"last", i + 1 == len},
                                    {"length", len},
                                    {"revindex", len - i},
                                    {"revindex0", len - i - 1}}};
      run(n.body, out);
      scopes_.pop_back();
    }
  }

  Value* lookup(const std::string& name) {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      auto f = s->find(name);
      if (f != s->end()) return &f->second;
    }
    return nullptr;
  }

  static Value item(const Value& obj, const Value& key) {
    if (obj.undefined) type_error("indexing an undefined value with " + py_repr(key.j));
    const json& o = obj.j;
    if (o.is_object() && key.j.is_string()) {
      auto f = o.find(key.j.get<std::string>());
      return f == o.end() ? Value::undef() : Value{false, *f};
    }
    if ((o.is_array() || o.is_string()) && key.j.is_number_integer()) {
      const int64_t n = o.is_array() ? int64_t(o.size()) : int64_t(o.get_ref<const std::string&>().size());
      int64_t i = key.j.get<int64_t>();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undef();
      return o.is_array() ? Value{false, o[size_t(i)]} : Value{false, std::string(1, o.get<std::string>()[size_t(i)])};
    }
    return Value::undef();
  }

  Value slice(const Expr& e) {
    const Value o = eval(*e.args[0]);
    if (o.undefined || !(o.j.is_array() || o.j.is_string())) type_error("slicing a value that is not a list or string");
    const bool is_str = o.j.is_string();
    const int64_t n = is_str ? int64_t(o.j.get_ref<const std::string&>().size()) : int64_t(o.j.size());
    auto num = [&](const ExprP& p, int64_t dflt) {
      if (!p) return dflt;
      const Value v = eval(*p);
      if (v.undefined || v.j.is_null()) return dflt;
      if (!v.j.is_number_integer()) type_error("a slice bound that is not an integer");
      return v.j.get<int64_t>();
    };
    const int64_t step = num(e.args[3], 1);
    if (step == 0) type_error("a slice step of 0");
    auto clamp = [&](int64_t i, int64_t lo, int64_t hi) { return std::max(lo, std::min(hi, i < 0 ? i + n : i)); };
    const int64_t start = step > 0 ? clamp(num(e.args[1], 0), 0, n) : clamp(num(e.args[1], n - 1), -1, n - 1);
    const int64_t stop =
        step > 0 ? clamp(num(e.args[2], n), 0, n) : (e.args[2] ? clamp(num(e.args[2], -1), -1, n - 1) : -1);
    json r = is_str ? json(std::string()) : json::array();
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (is_str)
        r.get_ref<std::string&>() += o.j.get_ref<const std::string&>()[size_t(i)];
      else
        r.push_back(o.j[size_t(i)]);
    }
    return {false, r};
  }

  std::vector<Value> args_of(const Expr& e, size_t from) {
    std::vector<Value> a;
    for (size_t i = from; i < e.args.size(); ++i) a.push_back(eval(*e.args[i]));
    return a;
  }
  // The keyword argument `name` of e (its position among args counted from the end), else undefined.
  Value kwarg(const Expr& e, const std::string& name) {
    const size_t nk = e.kwarg_names.size();
    for (size_t k = 0; k < nk; ++k)
      if (e.kwarg_names[k] == name) return eval(*e.args[e.args.size() - nk + k]);
    return Value::undef();
  }

  Value filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const std::string& f = e.name;
    const size_t n_pos = e.args.size() - 1 - e.kwarg_names.size();
    auto pos = [&](size_t i) { return i < n_pos ? eval(*e.args[1 + i]) : Value::undef(); };
    if (f == "trim") return {false, strip(str_of(v, "trim"), kWhitespace, true, true)};
    if (f == "upper" || f == "lower") {
      std::string s = str_of(v, "upper/lower");
      for (char& c : s)
        c = char(f == "upper" ? std::toupper(static_cast<unsigned char>(c))
                              : std::tolower(static_cast<unsigned char>(c)));
      return {false, s};
    }
    if (f == "length" || f == "count") {
      if (v.undefined) return {false, 0};
      if (v.j.is_string()) return {false, v.j.get_ref<const std::string&>().size()};
      if (v.j.is_array() || v.j.is_object()) return {false, v.j.size()};
      type_error("length of a " + std::string(v.j.type_name()));
    }
    if (f == "string") return {false, to_str(v)};
    if (f == "tojson") {
      Value ind = kwarg(e, "indent");
      if (ind.undefined) ind = pos(0);
      return {false, py_json(v.j, ind.undefined || ind.j.is_null() ? -1 : ind.j.get<int>(), 0)};
    }
    if (f == "items") {
      if (v.undefined || !v.j.is_object()) type_error("items of a value that is not a dict");
      json r = json::array();
      for (auto it = v.j.begin(); it != v.j.end(); ++it) r.push_back(json::array({it.key(), *it}));
      return {false, r};
    }
    if (f == "first" || f == "last") {
      if (v.undefined || !v.j.is_array()) type_error(f + " of a value that is not a list");
      if (v.j.empty()) return Value::undef();
      return {false, f == "first" ? v.j.front() : v.j.back()};
    }
    if (f == "join") {
      if (v.undefined || !v.j.is_array()) type_error("join of a value that is not a list");
      const Value sep = pos(0);
      std::string s;
      for (size_t i = 0; i < v.j.size(); ++i) s += (i ? to_str(sep) : "") + to_str({false, v.j[i]});
      return {false, s};
    }
    if (f == "default" || f == "d") {
      const Value b = pos(1);
      return v.undefined || (truthy(b) && !truthy(v)) ? pos(0) : v;
    }
    user_error("chat template: the filter '{}' is not supported (quanttool renders a Jinja subset)", f);
  }

  bool test(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const std::string& t = e.name;
    const json& j = v.j;
    if (t == "defined") return !v.undefined;
    if (t == "undefined") return v.undefined;
    if (v.undefined) return false;
    if (t == "none") return j.is_null();
    if (t == "string") return j.is_string();
    if (t == "number") return j.is_number();
    if (t == "integer") return j.is_number_integer();
    if (t == "boolean") return j.is_boolean();
    if (t == "true" || t == "false") return j.is_boolean() && j.get<bool>() == (t == "true");
    if (t == "mapping") return j.is_object();
    if (t == "sequence" || t == "iterable") return j.is_array() || j.is_string() || j.is_object();
    if (t == "odd" || t == "even") return j.is_number_integer() && (j.get<int64_t>() % 2 != 0) == (t == "odd");
    user_error("chat template: the test '{}' is not supported (quanttool renders a Jinja subset)", t);
  }

  Value call(const Expr& e) {
    if (!e.method) {
      if (e.name == "raise_exception") {
        const std::vector<Value> a = args_of(e, 0);
        user_error("chat template: raise_exception: {}", a.empty() ? std::string() : to_str(a[0]));
      }
      user_error("chat template: the function '{}' is not supported (quanttool renders a Jinja subset)", e.name);
    }
    const Value self = eval(*e.args[0]);
    const std::vector<Value> a = args_of(e, 1);
    const std::string& m = e.name;
    if (!self.undefined && self.j.is_object()) {
      if (m == "get") {
        if (a.empty()) type_error("dict.get needs a key");
        const Value r = item(self, a[0]);
        return r.undefined ? (a.size() > 1 ? a[1] : Value{false, nullptr}) : r;
      }
      if (m == "items")
        return {false, [&] {
                  json r = json::array();
                  for (auto it = self.j.begin(); it != self.j.end(); ++it) r.push_back(json::array({it.key(), *it}));
                  return r;
                }()};
      if (m == "keys" || m == "values") {
        json r = json::array();
        for (auto it = self.j.begin(); it != self.j.end(); ++it) r.push_back(m == "keys" ? json(it.key()) : *it);
        return {false, r};
      }
    }
    const std::string& s = str_of(self, ("the method ." + m + "()").c_str());
    auto arg_str = [&](size_t i, const std::string& dflt) {
      return i < a.size() && !a[i].j.is_null() ? str_of(a[i], m.c_str()) : dflt;
    };
    if (m == "strip") return {false, strip(s, arg_str(0, kWhitespace), true, true)};
    if (m == "lstrip") return {false, strip(s, arg_str(0, kWhitespace), true, false)};
    if (m == "rstrip") return {false, strip(s, arg_str(0, kWhitespace), false, true)};
    if (m == "startswith") return {false, s.rfind(arg_str(0, ""), 0) == 0};
    if (m == "endswith") {
      const std::string x = arg_str(0, "");
      return {false, s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0};
    }
    if (m == "upper" || m == "lower") {
      std::string r = s;
      for (char& c : r)
        c = char(m == "upper" ? std::toupper(static_cast<unsigned char>(c))
                              : std::tolower(static_cast<unsigned char>(c)));
      return {false, r};
    }
    if (m == "replace") {
      const std::string from = arg_str(0, ""), to = arg_str(1, "");
      if (from.empty()) type_error("replace of an empty string");
      std::string r;
      size_t i = 0;
      for (size_t f; (f = s.find(from, i)) != std::string::npos; i = f + from.size()) r += s.substr(i, f - i) + to;
      return {false, r + s.substr(i)};
    }
    if (m == "split") {
      const std::string sep = arg_str(0, "");
      if (sep.empty()) type_error(".split() without a separator is not supported");
      json r = json::array();
      size_t i = 0;
      for (size_t f; (f = s.find(sep, i)) != std::string::npos; i = f + sep.size()) r.push_back(s.substr(i, f - i));
      r.push_back(s.substr(i));
      return {false, r};
    }
    user_error("chat template: the method '.{}()' is not supported (quanttool renders a Jinja subset)", m);
  }

  static double num(const Value& v, const std::string& op) {
    if (v.undefined || !v.j.is_number())
      type_error("'" + op + "' needs numbers, got " + (v.undefined ? "undefined" : py_repr(v.j)));
    return v.j.get<double>();
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (op == "~") return {false, to_str(a) + to_str(b)};
    if (op == "==") return {false, equal(a, b)};
    if (op == "!=") return {false, !equal(a, b)};
    if (op == "in" || op == "not in") {
      bool r = false;
      if (b.undefined) type_error("'in' an undefined value");
      if (b.j.is_string())
        r = b.j.get<std::string>().find(str_of(a, "'in' a string")) != std::string::npos;
      else if (b.j.is_object())
        r = a.j.is_string() && b.j.contains(a.j.get<std::string>());
      else if (b.j.is_array())
        for (const json& x : b.j) r = r || equal(a, Value{false, x});
      else
        type_error("'in' a " + std::string(b.j.type_name()));
      return {false, r != (op == "not in")};
    }
    if (op == "+" && !a.undefined && !b.undefined) {
      if (a.j.is_string() && b.j.is_string()) return {false, a.j.get<std::string>() + b.j.get<std::string>()};
      if (a.j.is_array() && b.j.is_array()) {
        json r = a.j;
        r.insert(r.end(), b.j.begin(), b.j.end());
        return {false, r};
      }
    }
    if ((op == "<" || op == ">" || op == "<=" || op == ">=") && a.j.is_string() && b.j.is_string()) {
      const int c = a.j.get<std::string>().compare(b.j.get<std::string>());
      return {false, op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0};
    }
    const double x = num(a, op), y = num(b, op);
    const bool ints = a.j.is_number_integer() && b.j.is_number_integer();
    if (op == "<") return {false, x < y};
    if (op == ">") return {false, x > y};
    if (op == "<=") return {false, x <= y};
    if (op == ">=") return {false, x >= y};
    if (op == "/") {
      if (y == 0) type_error("division by zero");
      return {false, x / y};
    }
    if ((op == "//" || op == "%") && y == 0) type_error("division by zero");
    if (ints) {
      const int64_t p = a.j.get<int64_t>(), q = b.j.get<int64_t>();
      if (op == "+") return {false, p + q};
      if (op == "-") return {false, p - q};
      if (op == "*") return {false, p * q};
      const int64_t fl = p / q - ((p % q != 0) && ((p < 0) != (q < 0)));  // Python's floor division
      if (op == "//") return {false, fl};
      return {false, p - fl * q};
    }
    if (op == "+") return {false, x + y};
    if (op == "-") return {false, x - y};
    if (op == "*") return {false, x * y};
    if (op == "//") return {false, std::floor(x / y)};
    return {false, x - std::floor(x / y) * y};
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Literal: return {false, e.value};
      case Expr::Name: {
        const Value* v = lookup(e.name);
        return v ? *v : Value::undef();
      }
      case Expr::List: {
        json r = json::array();
        for (const auto& a : e.args) r.push_back(eval(*a).j);
        return {false, r};
      }
      case Expr::Attr: return item(eval(*e.args[0]), Value{false, e.name});
      case Expr::Item: return item(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Slice: return slice(e);
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: return {false, test(e) != e.negated};
      case Expr::Unary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return {false, !truthy(v)};
        const double x = num(v, e.name);
        if (v.j.is_number_integer()) return {false, e.name == "-" ? -v.j.get<int64_t>() : v.j.get<int64_t>()};
        return {false, e.name == "-" ? -x : x};
      }
      case Expr::Binary: return binary(e);
      case Expr::Cond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undef();
    }
    return Value::undef();
  }

  std::vector<std::map<std::string, Value>> scopes_;
};

}  // namespace
}  // namespace chat_detail

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  std::string out;
  chat_detail::Evaluator(context).run(prog_->body, out);
  return out;
}

}  // namespace qt
