// runtime/jinja.h against jinja2 as transformers runs it (tests/golden/hf/chat/golden.json, made
// by tests/golden/hf/make_chat_goldens.py): the real chat templates of Llama 3.1, Mistral 7B
// v0.3, Mixtral 8x7B v0.1, Qwen2.5, Qwen3 and Gemma 3 over conversations that hit their
// branches, byte for byte; each supported construct on its own; and the errors.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/jinja.h"

namespace kvgate::runtime::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string chat_dir() { return std::string(KVGATE_SOURCE_DIR) + "/tests/golden/hf/chat/"; }

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Json& golden() {
  static const Json j = Json::parse(read(chat_dir() + "golden.json"));
  return j;
}

// The error kvgate raises, or "" when it renders.
std::string render_error(const std::string& source, const Json& context, std::string* text) {
  try {
    *text = Template::parse(source, "tpl.jinja").render(context);
    return "";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
}

TEST(Jinja, RealChatTemplatesRenderAsTransformers) {
  int renders = 0, raised = 0;
  for (const Json& t : golden()["templates"]) {
    const std::string file = t["file"].get<std::string>();
    const Template tpl = Template::parse(read(chat_dir() + file), file);
    for (const Json& r : t["renders"]) {
      // What transformers' apply_chat_template passes: the messages, the flag, no tools or
      // documents, and the tokenizer's special tokens.
      Json context = {{"messages", r["messages"]},
                      {"tools", nullptr},
                      {"documents", nullptr},
                      {"add_generation_prompt", r["add_generation_prompt"]}};
      for (const auto& [k, v] : t["special_tokens"].items()) context[k] = v;
      const std::string what = file + " " + r["messages"].dump() + " add_generation_prompt=" +
                               r["add_generation_prompt"].dump();
      if (r.contains("text")) {
        std::string text;
        try {
          text = tpl.render(context);
        } catch (const Error& e) {
          ADD_FAILURE() << what << ": " << e.what();
          continue;
        }
        EXPECT_EQ(text, r["text"].get<std::string>()) << what;
        ++renders;
      } else {
        // raise_exception: the template's own message, where it was raised.
        try {
          (void)tpl.render(context);
          ADD_FAILURE() << what << ": rendered, but jinja2 raised " << r["error"];
        } catch (const Error& e) {
          const std::string msg = e.what();
          EXPECT_EQ(e.exit_code(), 2);
          EXPECT_EQ(msg.rfind(file + ":", 0), 0u) << msg;
          EXPECT_NE(msg.find("raise_exception: " + r["error"].get<std::string>()), std::string::npos) << msg;
          ++raised;
        }
      }
    }
  }
  EXPECT_GE(renders, 80);
  EXPECT_GE(raised, 10);
}

TEST(Jinja, ConstructsRenderAsJinja2) {
  for (const Json& c : golden()["constructs"]) {
    std::string text;
    const std::string error = render_error(c["template"].get<std::string>(), c["context"], &text);
    EXPECT_EQ(error, "") << c["template"];
    if (error.empty()) {
      EXPECT_EQ(text, c["text"].get<std::string>()) << c["template"];
    }
  }
}

TEST(Jinja, ErrorsNameTheTemplateLineColumnAndProblem) {
  for (const Json& e : golden()["errors"]) {
    std::string text;
    const std::string error = render_error(e["template"].get<std::string>(), e["context"], &text);
    EXPECT_EQ(error.rfind("tpl.jinja:1:", 0), 0u) << e["template"] << " -> " << error << " (jinja2: " << e["jinja2"] << ")";
    if (e["problem"].is_string()) {
      EXPECT_NE(error.find(e["problem"].get<std::string>()), std::string::npos) << error;
    }
  }
  for (const Json& e : golden()["refusals"]) {
    std::string text;
    const std::string error = render_error(e["template"].get<std::string>(), Json::object(), &text);
    EXPECT_NE(error.find(e["problem"].get<std::string>()), std::string::npos) << e["template"] << " -> " << error;
  }
}

TEST(Jinja, ErrorPositionIsTheConstructsLineAndColumn) {
  std::string text;
  const std::string error = render_error("line one\n{% if true %}\n  {{ messages[0].role }}{% endif %}",
                                         Json{{"messages", Json::array()}}, &text);
  // messages[0] is undefined; .role on it fails at the attribute access on line 3.
  EXPECT_EQ(error.rfind("tpl.jinja:3:", 0), 0u) << error;
  const std::string syntax = render_error("ok\n\n  {% for x in %}", Json::object(), &text);
  EXPECT_EQ(syntax.rfind("tpl.jinja:3:15: expected an expression", 0), 0u) << syntax;
  const std::string bytes = render_error("ok \xff{{ 1 }}", Json::object(), &text);
  EXPECT_EQ(bytes, "tpl.jinja: at byte 3: the template is not valid UTF-8");
}

}  // namespace
}  // namespace kvgate::runtime::jinja
