#include "runtime/chat_template.h"

#include <cctype>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/gguf.h"
#include "runtime/jinja.h"

namespace kvgate::runtime {

namespace {

constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>";

// Jinja string literals may spell the newline after the role either as a real newline or as
// the escape "\n"; both mean the same rendered text.
std::optional<std::string> find_default_system(std::string_view tpl) {
  for (std::string_view newline : {std::string_view("\n"), std::string_view("\\n")}) {
    const std::string header = std::string(kStart) + "system" + std::string(newline);
    const size_t at = tpl.find(header);
    if (at == std::string_view::npos) continue;
    const size_t body = at + header.size();
    const size_t end = tpl.find(kEnd, body);
    if (end == std::string_view::npos) continue;
    std::string_view prompt = tpl.substr(body, end - body);
    // A Jinja expression there (e.g. + messages[0]['content'] +) means the template copies the
    // user's system message rather than supplying a default of its own.
    if (prompt.find('\'') != std::string_view::npos || prompt.find('"') != std::string_view::npos ||
        prompt.find("{{") != std::string_view::npos || prompt.find("{%") != std::string_view::npos) {
      continue;
    }
    std::string out;
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] == '\\' && i + 1 < prompt.size() && prompt[i + 1] == 'n') {
        out.push_back('\n');
        ++i;
      } else {
        out.push_back(prompt[i]);
      }
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace

ChatTemplate ChatTemplate::chatml(std::optional<std::string> default_system) {
  ChatTemplate t;
  t.default_system_ = std::move(default_system);
  return t;
}

ChatTemplate ChatTemplate::gemma() {
  ChatTemplate t;
  t.style_ = Style::gemma;
  return t;
}

ChatTemplate ChatTemplate::from_template_text(std::string_view tpl, const std::string& source) {
  return recognise(tpl, source);
}

ChatTemplate ChatTemplate::from_jinja(std::string_view tpl, const std::string& source,
                                      std::vector<std::pair<std::string, std::string>> special_tokens) {
  ChatTemplate t;
  t.style_ = Style::jinja;
  t.jinja_ = std::make_shared<const jinja::Template>(jinja::Template::parse(tpl, source));
  t.special_tokens_ = std::move(special_tokens);
  return t;
}

ChatTemplate ChatTemplate::recognise(std::string_view tpl, const std::string& source) {
  if (tpl.find("<start_of_turn>") != std::string_view::npos) return gemma();
  if (tpl.find(kStart) == std::string_view::npos || tpl.find(kEnd) == std::string_view::npos) {
    std::string head(tpl.substr(0, 60));
    for (char& c : head) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    throw_input_error(source + ": chat template is not ChatML (no <|im_start|>/<|im_end|>); kvgate formats only "
                      "the ChatML family. Template starts: \"" + head + (tpl.size() > 60 ? "...\"" : "\""));
  }
  return chatml(find_default_system(tpl));
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file) {
  const auto tpl = file.get_string("tokenizer.chat_template");
  if (!tpl) {
    const std::string arch(file.get_string("general.architecture").value_or(""));
    bool has_turns = false;
    if (const GgufArray* tokens = file.get_array("tokenizer.ggml.tokens"); tokens && arch.rfind("gemma", 0) == 0) {
      bool start = false, end = false;
      for (std::string_view t : tokens->strings) {
        start = start || t == "<start_of_turn>";
        end = end || t == "<end_of_turn>";
      }
      has_turns = start && end;
    }
    if (has_turns) return gemma();
    throw_input_error(file.name() + ": tokenizer.chat_template: missing; cannot format chat messages for this model");
  }
  return from_template_text(*tpl, file.name() + ": tokenizer.chat_template");
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  if (style_ == Style::jinja) {
    // What transformers' apply_chat_template passes: the messages, no tools or documents, the
    // flag and the tokenizer's special tokens.
    nlohmann::ordered_json context = nlohmann::ordered_json::object();
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
    context["messages"] = std::move(list);
    context["tools"] = nullptr;
    context["documents"] = nullptr;
    context["add_generation_prompt"] = add_generation_prompt;
    for (const auto& [name, text] : special_tokens_) context[name] = text;
    return jinja_->render(context);
  }
  return style_ == Style::gemma ? apply_gemma(messages, add_generation_prompt)
                                : apply_chatml(messages, add_generation_prompt);
}

std::string ChatTemplate::apply_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  // isspace-trimming, as llama.cpp's trim().
  auto trim = [](const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return s.substr(b, e - b);
  };
  std::string out, system;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role.empty() || m.role.find('\n') != std::string::npos || m.role.find("<start_of_turn>") != std::string::npos)
      throw_input_error("chat message " + std::to_string(i) + ": role \"" + m.role +
                        "\" must be non-empty, one line and free of <start_of_turn>");
    if (m.role == "system") {
      system += trim(m.content);
      continue;
    }
    const std::string role = m.role == "assistant" ? "model" : m.role;
    out.append("<start_of_turn>").append(role).append("\n");
    if (!system.empty() && role != "model") {
      out.append(system).append("\n\n");
      system.clear();
    }
    out.append(trim(m.content)).append("<end_of_turn>\n");
  }
  if (add_generation_prompt) out.append("<start_of_turn>model\n");
  return out;
}

std::string ChatTemplate::apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  // The SmolLM2 template adds it inside its message loop, so an empty conversation gets none.
  if (default_system_ && !messages.empty() && messages.front().role != "system") {
    out.append(kStart).append("system\n").append(*default_system_).append(kEnd).append("\n");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role.empty() || m.role.find('\n') != std::string::npos || m.role.find("<|") != std::string::npos) {
      throw_input_error("chat message " + std::to_string(i) + ": role \"" + echo_user_text(m.role) +
                        "\" must be non-empty, one line and free of <| markers");
    }
    out.append(kStart).append(m.role).append("\n").append(m.content).append(kEnd).append("\n");
  }
  if (add_generation_prompt) out.append(kStart).append("assistant\n");
  return out;
}

std::string render_chat(const GgufFile& file, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  return ChatTemplate::from_gguf(file).apply(messages, add_generation_prompt);
}

}  // namespace kvgate::runtime
