#pragma once
// Chat formatting for the ChatML family (the default model's, SmolLM2):
//
//   <|im_start|>system\nDEFAULT SYSTEM PROMPT<|im_end|>\n   only when the template has one and
//                                                          the first message is not a system one
//   <|im_start|>ROLE\nCONTENT<|im_end|>\n                 every message
//   <|im_start|>assistant\n                                with add_generation_prompt
//
// kvgate does not run Jinja. A GGUF's tokenizer.chat_template is recognised as ChatML when it
// writes <|im_start|> and <|im_end|> around role and content; a default system prompt is taken
// from a literal '<|im_start|>system\n...<|im_end|>' string in it. Any other template (Llama 3,
// Gemma, Mistral, ...) or a missing one is an input error, not a guess: a wrong template changes
// every token the model sees.
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
  // ChatML with the given default system prompt (none when nullopt).
  static ChatTemplate chatml(std::optional<std::string> default_system = std::nullopt);
  // Recognises `template_text` (a Jinja source); `source` names it in errors.
  static ChatTemplate from_template_text(std::string_view template_text, const std::string& source);
  // Reads tokenizer.chat_template.
  static ChatTemplate from_gguf(const GgufFile& file);

  // The prompt text. Roles must be non-empty and free of '\n' and special markers, because they
  // are written into the header line; content is copied verbatim (tokenizing the result with
  // parse_special turns markers inside content into special tokens, as llama.cpp does).
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  const std::optional<std::string>& default_system() const { return default_system_; }

 private:
  std::optional<std::string> default_system_;
};

// ChatTemplate::from_gguf(file).apply(messages, add_generation_prompt).
std::string render_chat(const GgufFile& file, const std::vector<ChatMessage>& messages, bool add_generation_prompt);

}  // namespace kvgate::runtime
