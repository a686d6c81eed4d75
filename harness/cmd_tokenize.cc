// `kvgate tokenize` and `kvgate detokenize`: the model's tokenizer as a user-facing tool, to see
// how a prompt or an eval item is cut into tokens (digits split one by one, Hangul falling back
// to bytes) and to turn ids from a log or a run back into text.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "core/mapped_file.h"
#include "harness/commands.h"
#include "runtime/chat_template.h"
#include "runtime/model_files.h"
#include "runtime/model_store.h"
#include "runtime/tokenizer.h"
#include "runtime/unicode.h"

namespace kvgate::harness {

namespace {

namespace rt = kvgate::runtime;

// One line per token, so control bytes, backslashes and bytes that are not (yet) a whole
// UTF-8 character are written as escapes; everything else is printed as is.
std::string escape_piece(std::string_view bytes) {
  std::string out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const auto b = static_cast<uint8_t>(bytes[pos]);
    if (b >= 0x80) {
      // Copy a whole well-formed character, or escape this one byte.
      const auto bad = rt::unicode::find_invalid_utf8(bytes.substr(pos, std::min<size_t>(4, bytes.size() - pos)));
      size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
      if (bad && *bad < len) {
        out += fmt::format("\\x{:02x}", b);
        ++pos;
      } else {
        out.append(bytes.substr(pos, len));
        pos += len;
      }
      continue;
    }
    switch (b) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\\': out += "\\\\"; break;
      default:
        if (b < 0x20 || b == 0x7F) {
          out += fmt::format("\\x{:02x}", b);
        } else {
          out.push_back(static_cast<char>(b));
        }
    }
    ++pos;
  }
  return out;
}

struct LoadedTokenizer {
  std::unique_ptr<rt::ModelFiles> files;
  rt::Tokenizer tokenizer;
};

LoadedTokenizer load_tokenizer(const std::string& model_flag) {
  std::unique_ptr<rt::ModelFiles> files = rt::ModelFiles::open(rt::resolve_model_path(model_flag));
  rt::Tokenizer tok = files->tokenizer();
  return LoadedTokenizer{std::move(files), std::move(tok)};
}

struct TokenizeOptions {
  std::string text;
  std::string file;
  std::string model;
  bool no_special = false;
  bool chat = false;
  bool json = false;
};

void run_tokenize(const TokenizeOptions& o) {
  std::string text = o.file.empty() ? o.text : read_whole_file(o.file, kMaxDataFileBytes);
  const std::string source = o.file.empty() ? "--text" : o.file;
  LoadedTokenizer loaded = load_tokenizer(o.model);
  if (o.chat) {
    if (auto bad = rt::unicode::find_invalid_utf8(text)) throw_input_error_at(source, *bad, "invalid UTF-8");
    const rt::ChatTemplate tpl = loaded.files->chat_template();
    text = tpl.apply({rt::ChatMessage{"user", text}}, true);
  }
  const std::vector<int32_t> ids = loaded.tokenizer.encode(text, !o.no_special, source);

  if (o.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(loaded.tokenizer.piece(id));
    const nlohmann::json j = {{"ids", ids}, {"pieces", pieces}, {"n_tokens", ids.size()}};
    // A piece holding part of a multi-byte character is not valid UTF-8 on its own; JSON
    // cannot carry it, so those bytes become U+FFFD (the ids are exact).
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::string out;
  for (int32_t id : ids) {
    out += std::to_string(id);
    out += '\t';
    out += escape_piece(loaded.tokenizer.piece(id));
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

// Ids as "1,2,3", "1 2 3" (any mix of commas and whitespace), a JSON array, or the object
// `kvgate tokenize --json` prints ({"ids": [...]}).
std::vector<int64_t> parse_ids(const std::string& input, const std::string& source) {
  std::vector<int64_t> ids;
  const size_t first = input.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (input[first] == '[' || input[first] == '{')) {
    const nlohmann::json j = parse_json_input(input, source);
    const nlohmann::json* list = &j;
    if (j.is_object()) {
      if (!j.contains("ids")) throw_input_error(source + ": JSON object has no \"ids\" array");
      list = &j["ids"];
    }
    if (!list->is_array()) throw_input_error(source + ": \"ids\" is not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      const nlohmann::json& v = (*list)[i];
      if (!v.is_number_integer()) throw_input_error(source + ": ids[" + std::to_string(i) + "] is not an integer");
      ids.push_back(v.get<int64_t>());
    }
    return ids;
  }
  size_t pos = 0;
  while (pos < input.size()) {
    const char c = input[pos];
    if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos;
      continue;
    }
    const size_t start = pos;
    while (pos < input.size() && input[pos] != ',' && input[pos] != ' ' && input[pos] != '\t' && input[pos] != '\n' &&
           input[pos] != '\r') {
      ++pos;
    }
    const std::string item = input.substr(start, pos - start);
    // Ten digits are enough for any int32 id; longer strings are rejected without overflow.
    const bool digits_only = item.size() <= 10 && item.find_first_not_of("0123456789") == std::string::npos;
    if (!digits_only) {
      throw_input_error_at(source, start, "\"" + item.substr(0, 40) + "\" is not a token id (a non-negative integer)");
    }
    ids.push_back(std::stoll(item));
  }
  return ids;
}

struct DetokenizeOptions {
  std::string ids;
  std::string file;
  std::string model;
  bool skip_special = false;
  bool json = false;
};

void run_detokenize(const DetokenizeOptions& o) {
  const std::string source = o.file.empty() ? "--ids" : o.file;
  const std::string input = o.file.empty() ? o.ids : read_whole_file(o.file, kMaxDataFileBytes);
  const std::vector<int64_t> raw = parse_ids(input, source);
  LoadedTokenizer loaded = load_tokenizer(o.model);
  std::vector<int32_t> ids;
  ids.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (!loaded.tokenizer.valid_id(raw[i])) {
      throw_input_error(source + ": id " + std::to_string(raw[i]) + " (item " + std::to_string(i) +
                        ") is outside the vocabulary [0, " + std::to_string(loaded.tokenizer.vocab_size()) + ")");
    }
    ids.push_back(static_cast<int32_t>(raw[i]));
  }
  const std::string text = loaded.tokenizer.decode(ids, !o.skip_special);
  if (o.json) {
    const bool valid = !rt::unicode::find_invalid_utf8(text).has_value();
    const nlohmann::json j = {{"text", text}, {"n_tokens", ids.size()}, {"valid_utf8", valid}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  // The exact bytes, with nothing appended, so detokenize(tokenize(x)) reproduces x.
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace

void add_tokenize_commands(CLI::App& app, CommandContext&) {
  auto t = std::make_shared<TokenizeOptions>();
  CLI::App* tokenize = app.add_subcommand("tokenize", "Show the token ids and pieces the model's tokenizer produces");
  auto* text_opt = tokenize->add_option("--text", t->text, "Text to tokenize");
  auto* file_opt = tokenize->add_option("--file", t->file, "File whose bytes (UTF-8) are tokenized");
  text_opt->excludes(file_opt);
  tokenize->add_option("--model", t->model, "GGUF file (default: the fetched default model)");
  tokenize->add_flag("--no-special", t->no_special,
                     "Treat control-token text such as <|im_start|> as plain text");
  tokenize->add_flag("--chat", t->chat,
                     "Wrap the text as one user message in the model's chat template, with the assistant prompt");
  tokenize->add_flag("--json", t->json, "Print {\"ids\": [...], \"pieces\": [...], \"n_tokens\": N}");
  tokenize->callback([t, text_opt, file_opt] {
    if (text_opt->count() == 0 && file_opt->count() == 0) throw_usage_error("tokenize: give --text or --file");
    run_tokenize(*t);
  });

  auto d = std::make_shared<DetokenizeOptions>();
  CLI::App* detok = app.add_subcommand("detokenize", "Turn token ids back into text");
  auto* ids_opt = detok->add_option("--ids", d->ids, "Ids separated by commas or spaces, e.g. 1,4093,198");
  auto* dfile_opt =
      detok->add_option("--file", d->file, "File with ids: separated by commas/whitespace, a JSON array, or "
                                           "the output of `kvgate tokenize --json`");
  ids_opt->excludes(dfile_opt);
  detok->add_option("--model", d->model, "GGUF file (default: the fetched default model)");
  detok->add_flag("--skip-special", d->skip_special, "Leave control tokens such as <|im_end|> out of the text");
  detok->add_flag("--json", d->json, "Print {\"text\": ..., \"n_tokens\": N, \"valid_utf8\": bool}");
  detok->callback([d, ids_opt, dfile_opt] {
    if (ids_opt->count() == 0 && dfile_opt->count() == 0) throw_usage_error("detokenize: give --ids or --file");
    run_detokenize(*d);
  });
}

}  // namespace kvgate::harness
