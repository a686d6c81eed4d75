#pragma once
// Chat formatting for two template families, as llama.cpp's built-in templates render them.
//
// ChatML (the default model's, SmolLM2; Qwen):
//
//   <|im_start|>system\nDEFAULT SYSTEM PROMPT<|im_end|>\n   only when the template has one and
//                                                          the first message is not a system one
//   <|im_start|>ROLE\nCONTENT<|im_end|>\n                 every message
//   <|im_start|>assistant\n                                with add_generation_prompt
//
// Gemma (llama.cpp's LLM_CHAT_TEMPLATE_GEMMA):
//
//   <start_of_turn>ROLE\nCONTENT<end_of_turn>\n           every message, content trimmed of
//                                                          surrounding whitespace; "assistant"
//                                                          is written "model"
//   system messages have no turn: their trimmed text, then "\n\n", opens the next user turn
//   <start_of_turn>model\n                                 with add_generation_prompt
//
// BOS is not part of the text: callers prepend it when the tokenizer's add_bos says so.
//
// A GGUF's tokenizer.chat_template is recognised (llama.cpp renders GGUF templates with these
// built-in formats, and kvgate's GGUF path is checked against llama.cpp): Gemma when it contains
// <start_of_turn> (llama.cpp's test), else ChatML when it writes <|im_start|> and <|im_end|>
// around role and content; a default system prompt is taken from a literal
// '<|im_start|>system\n...<|im_end|>' string in it. A Gemma-architecture file without a template
// whose vocabulary has <start_of_turn> and <end_of_turn> (Gemma 3 270M as published) gets the
// Gemma template: those tokens fix it. Any other GGUF template (Llama 3, Mistral, ...) or a
// missing one is an input error, not a guess: a wrong template changes every token the model
// sees.
//
// A Hugging Face directory's template is run as written (Style::jinja, runtime/jinja.h), as
// transformers' apply_chat_template runs it: the engines serving that checkpoint build their
// prompts that way.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

namespace kvgate::runtime {

class GgufFile;
namespace jinja {
class Template;
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
};

class ChatTemplate {
 public:
  enum class Style { chatml, gemma, jinja };
  // ChatML with the given default system prompt (none when nullopt).
  static ChatTemplate chatml(std::optional<std::string> default_system = std::nullopt);
  static ChatTemplate gemma();
  // Recognises `template_text` (a Jinja source) as ChatML or Gemma; `source` names it in errors.
  static ChatTemplate from_template_text(std::string_view template_text, const std::string& source);
  // Runs `template_text` with runtime/jinja.h; `special_tokens` (name, text: bos_token,
  // eos_token, ...) are its variables besides messages and add_generation_prompt, as
  // transformers passes the tokenizer's special tokens. Throws Error (input) naming `source`,
  // line and column when the template is malformed or outside the supported subset.
  static ChatTemplate from_jinja(std::string_view template_text, const std::string& source,
                                 std::vector<std::pair<std::string, std::string>> special_tokens);
  // Reads tokenizer.chat_template.
  static ChatTemplate from_gguf(const GgufFile& file);

  // The prompt text. Built-in styles: roles must be non-empty and free of '\n' and special
  // markers, because they are written into the header line; content is copied verbatim
  // (tokenizing the result with parse_special turns markers inside content into special tokens,
  // as llama.cpp does). Jinja: whatever the template writes, BOS text included where it writes
  // {{ bos_token }} (callers then add no second BOS); its raise_exception (e.g. roles that do not
  // alternate) is an input error naming the template.
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  const std::optional<std::string>& default_system() const { return default_system_; }
  Style style() const { return style_; }

 private:
  static ChatTemplate recognise(std::string_view template_text, const std::string& source);
  std::string apply_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  Style style_ = Style::chatml;
  std::optional<std::string> default_system_;
  std::shared_ptr<const jinja::Template> jinja_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
};

// ChatTemplate::from_gguf(file).apply(messages, add_generation_prompt).
std::string render_chat(const GgufFile& file, const std::vector<ChatMessage>& messages, bool add_generation_prompt);

}  // namespace kvgate::runtime
