// The parsed form of a chat template (formats/tokenizer/chat_template.h): what the parser
// (chat_template.cpp) builds and the evaluator (chat_template_eval.cpp) walks.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qt::chat_detail {

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    Literal,  // value
    Name,     // name
    List,     // args: the items
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (null args: omitted)
    Call,     // name(args), or args[0].name(args[1..]) when method
    Filter,   // args[0] | name(args[1..])
    Test,     // args[0] is [not] name(args[1..])
    Unary,    // op args[0]: "not", "-", "+"
    Binary,   // args[0] op args[1]
    Cond,     // args[0] if args[1] else args[2] (args[2] null: undefined)
  } kind;
  std::string name;  // Name, Attr, Call, Filter, Test; the operator of Unary / Binary
  nlohmann::ordered_json value;
  bool negated = false;  // Test: `is not`
  bool method = false;   // Call on args[0]
  std::vector<ExprP> args;
  std::vector<std::string> kwarg_names;  // Call/Filter: names of trailing keyword arguments
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum Kind { Text, Output, If, For, Set } kind;
  std::string text;                              // Text
  ExprP expr;                                    // Output, Set: the value; For: the iterable
  std::vector<std::string> vars;                 // For: the loop variables; Set: the target (name or name.attr)
  std::vector<std::pair<ExprP, Body>> branches;  // If: (condition, body) per if/elif
  Body body, else_body;                          // For: body and {% else %}; If: else
};

struct Program {
  Body body;
};

}  // namespace qt::chat_detail
