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
// kvgate does not run Jinja. A GGUF's tokenizer.chat_template is recognised as Gemma when it
// contains <start_of_turn> (llama.cpp's test), else as ChatML when it writes <|im_start|> and
// <|im_end|> around role and content; a default system prompt is taken from a literal
// '<|im_start|>system\n...<|im_end|>' string in it. A Gemma-architecture file without a
// template whose vocabulary has <start_of_turn> and <end_of_turn> (Gemma 3 270M as published)
// gets the Gemma template: those tokens fix it. Any other template (Llama 3, Mistral, ...) or a
// missing one is an input error, not a guess: a wrong template changes every token the model
// sees.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::runtime {

class GgufFile;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
};

class ChatTemplate {
 public:
  enum class Style { chatml, gemma };
  // ChatML with the given default system prompt (none when nullopt).
  static ChatTemplate chatml(std::optional<std::string> default_system = std::nullopt);
  static ChatTemplate gemma();
  // Recognises `template_text` (a Jinja source); `source` names it in errors. A template that
  // writes {{ bos_token }} (Hugging Face's Gemma, Llama, Mistral templates) renders `bos_text`
  // first, as transformers' apply_chat_template does; callers then add no second BOS
  // (starts_with_bos).
  static ChatTemplate from_template_text(std::string_view template_text, const std::string& source,
                                         const std::string& bos_text = "");
  // Reads tokenizer.chat_template.
  static ChatTemplate from_gguf(const GgufFile& file);

  // The prompt text. Roles must be non-empty and free of '\n' and special markers, because they
  // are written into the header line; content is copied verbatim (tokenizing the result with
  // parse_special turns markers inside content into special tokens, as llama.cpp does).
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  const std::optional<std::string>& default_system() const { return default_system_; }
  // The BOS text the template renders first (empty when it renders none).
  const std::string& bos_text() const { return bos_text_; }
  Style style() const { return style_; }

 private:
  static ChatTemplate recognise(std::string_view template_text, const std::string& source);
  std::string apply_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  Style style_ = Style::chatml;
  std::optional<std::string> default_system_;
  std::string bos_text_;
};

// ChatTemplate::from_gguf(file).apply(messages, add_generation_prompt).
std::string render_chat(const GgufFile& file, const std::vector<ChatMessage>& messages, bool add_generation_prompt);

}  // namespace kvgate::runtime
