#pragma once
// The Jinja subset Hugging Face chat templates are written in, rendered as transformers renders
// them (jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, its tojson,
// raise_exception, namespace and the loopcontrols extension), so a prompt is byte for byte the
// one the served engine builds. Checked against jinja2 by tests/runtime/jinja_test.cc on the
// real templates of the supported families (tests/golden/hf/chat).
//
// Supported: text, {{ }}, {% %} and {# #} with '-' whitespace control; if/elif/else, for (with
// an `if` filter, else, tuple targets, loop.index/index0/first/last/length/revindex/revindex0/
// previtem/nextitem), set (names, namespace attributes, tuple targets), break/continue,
// generation (transformers' tag: its body renders as is). Expressions: literals (strings,
// numbers, true/false/none, lists, tuples, dicts), attribute and item access, slicing with
// steps, calls, `a if c else b`, or/and/not, comparisons, in/not in, + - * / // % ** ~,
// filters (trim, length/count, tojson, default/d, string, list, join, first, last, upper, lower,
// capitalize, replace, items, selectattr/rejectattr, select/reject, map(attribute=), int, float,
// abs, safe), tests (defined, undefined, none, string, number, integer, float, boolean, true,
// false, mapping, iterable, sequence, odd, even, divisibleby, equalto/eq, ne, in), globals
// raise_exception, namespace, range, dict, and the string/dict methods templates call (strip,
// lstrip, rstrip, split, startswith, endswith, upper, lower, replace, title, items, keys,
// values, get). strftime_now is left undefined on purpose: templates that ask for it fall back
// to their fixed date, so a prompt does not change with the day it is rendered (transformers
// renders today's date there).
//
// Anything else (macros, includes, call blocks, ...) is refused when the template is parsed,
// naming the construct and where it is.
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvgate::runtime::jinja {

struct Node;

class Template {
 public:
  // Parses `source`; `name` (e.g. "DIR/tokenizer_config.json: chat_template") prefixes every
  // error with NAME:LINE:COLUMN. Throws Error (input) on a syntax error or an unsupported
  // construct.
  static Template parse(std::string_view source, std::string name);

  // Renders with `context`'s members as the template's variables (JSON values: objects keep
  // their key order, as Python dicts do). Throws Error (input) naming NAME:LINE:COLUMN on
  // raise_exception, an undefined variable used as a value, or an operation on the wrong types.
  std::string render(const nlohmann::ordered_json& context) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const Node> root_;
};

}  // namespace kvgate::runtime::jinja
