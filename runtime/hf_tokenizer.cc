#include "runtime/hf_tokenizer.h"

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"

namespace kvgate::runtime {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581

// tokenizers' pre-tokenizer patterns of the supported families, as tokenizer.json spells them.
constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

Json read_json(const fs::path& p) { return read_hf_json(p.string()); }

// A template or token given as a string or as {"content": ...}.
std::optional<std::string> token_text(const Json& j, const std::string& key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const Json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

class TokenizerJson {
 public:
  TokenizerJson(const fs::path& path) : file_(path.string()), j_(read_json(path)) {
    if (!j_.is_object()) fail("", "not a JSON object");
  }
  [[noreturn]] void fail(const std::string& where, const std::string& problem) const {
    throw_input_error(file_ + ": " + (where.empty() ? "" : where + ": ") + problem);
  }
  [[noreturn]] void unsupported(const std::string& where, const Json& what, const std::string& supported) const {
    fail(where, echo_user_text(what.dump()) + " is not supported by kvgate's tokenizer (supported: " + supported + ")");
  }
  const Json& json() const { return j_; }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  Json j_;
};

std::string type_of(const Json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }

void read_normalizer(const TokenizerJson& tj, const Json& n, VocabData& d) {
  if (n.is_null()) return;
  const std::string type = type_of(n);
  const std::string supported = "null, NFC, Replace \" \" with \"\\u2581\", Prepend \"\\u2581\", a Sequence of them";
  if (type == "Sequence") {
    if (!n.contains("normalizers") || !n["normalizers"].is_array()) tj.unsupported("normalizer", n, supported);
    for (const Json& x : n["normalizers"]) read_normalizer(tj, x, d);
  } else if (type == "NFC") {
    d.nfc = true;
  } else if (type == "Replace") {
    const bool space = n.contains("pattern") && n["pattern"].is_object() && n["pattern"].value("String", "") == " ";
    if (!space || n.value("content", "") != kSpace) tj.unsupported("normalizer", n, supported);
    d.space_replacement = kSpace;
  } else if (type == "Prepend") {
    if (n.value("prepend", "") != kSpace) tj.unsupported("normalizer", n, supported);
    d.prepend = VocabData::Prepend::unconditional;
  } else {
    tj.unsupported("normalizer", n, supported);
  }
}

void read_pre_tokenizer(const TokenizerJson& tj, const Json& p, VocabData& d) {
  const std::string supported =
      "null, ByteLevel (GPT-2 pattern), Digits(individual) + ByteLevel, Split(Llama 3 or Qwen2 pattern, Isolated) + "
      "ByteLevel(use_regex false), Metaspace(split false), Split(\" \") after a \\u2581 normalizer";
  d.byte_level = false;
  d.pre = "none";
  if (p.is_null()) return;
  std::vector<Json> steps;
  if (type_of(p) == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array()) tj.unsupported("pre_tokenizer", p, supported);
    for (const Json& x : p["pretokenizers"]) steps.push_back(x);
  } else {
    steps.push_back(p);
  }
  auto byte_level = [&](const Json& b, bool regex) {
    if (type_of(b) != "ByteLevel" || b.value("add_prefix_space", false) || b.value("use_regex", true) != regex)
      tj.unsupported("pre_tokenizer", p, supported);
    d.byte_level = true;
  };
  if (steps.size() == 1 && type_of(steps[0]) == "ByteLevel") {
    byte_level(steps[0], true);
    d.pre = "gpt2";
  } else if (steps.size() == 2 && type_of(steps[0]) == "Digits") {
    if (!steps[0].value("individual_digits", false)) tj.unsupported("pre_tokenizer", p, supported);
    byte_level(steps[1], true);
    d.pre = "smollm";
  } else if (steps.size() == 2 && type_of(steps[0]) == "Split") {
    const Json& s = steps[0];
    const std::string regex = s.contains("pattern") && s["pattern"].is_object() ? s["pattern"].value("Regex", "") : "";
    if (s.value("behavior", "") != "Isolated" || s.value("invert", false)) tj.unsupported("pre_tokenizer", p, supported);
    if (regex == kLlama3Pattern) d.pre = "llama3";
    else if (regex == kQwen2Pattern) d.pre = "qwen2";
    else tj.unsupported("pre_tokenizer.Split.pattern", s["pattern"], "Llama 3's and Qwen2's patterns");
    byte_level(steps[1], false);
  } else if (steps.size() == 1 && type_of(steps[0]) == "Metaspace") {
    const Json& m = steps[0];
    if (m.value("replacement", "") != kSpace || m.value("split", true)) tj.unsupported("pre_tokenizer", p, supported);
    const std::string scheme = m.value("prepend_scheme", m.value("add_prefix_space", true) ? "always" : "never");
    d.space_replacement = kSpace;
    d.prepend = scheme == "always" ? VocabData::Prepend::always
                : scheme == "first" ? VocabData::Prepend::first
                : scheme == "never" ? VocabData::Prepend::never
                                    : (tj.unsupported("pre_tokenizer.prepend_scheme", m["prepend_scheme"], "always, first, never"),
                                       VocabData::Prepend::never);
  } else if (steps.size() == 1 && type_of(steps[0]) == "Split" && d.space_replacement == kSpace &&
             steps[0].contains("pattern") && steps[0]["pattern"].is_object() && steps[0]["pattern"].value("String", "") == " " &&
             !steps[0].value("invert", false)) {
    // Gemma: the normalizer already wrote every space as U+2581, so splitting on " " finds none.
  } else {
    tj.unsupported("pre_tokenizer", p, supported);
  }
}

// add_bos from the post-processor's single-sequence template: a leading special token.
std::optional<std::string> template_bos(const TokenizerJson& tj, const Json& p) {
  if (p.is_null()) return std::nullopt;
  const std::string type = type_of(p);
  if (type == "Sequence") {
    std::optional<std::string> bos;
    for (const Json& x : p.value("processors", Json::array())) {
      auto b = template_bos(tj, x);
      if (b) bos = b;
    }
    return bos;
  }
  if (type == "ByteLevel") return std::nullopt;
  if (type != "TemplateProcessing")
    tj.unsupported("post_processor", p, "TemplateProcessing, ByteLevel, a Sequence of them");
  const Json& single = p.value("single", Json::array());
  std::optional<std::string> bos;
  bool seen_sequence = false;
  for (const Json& item : single) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
    } else if (item.contains("SpecialToken")) {
      if (seen_sequence)
        tj.fail("post_processor", "its template appends " + echo_user_text(item.dump()) +
                                      " after the text; kvgate adds no tokens after a prompt");
      bos = item["SpecialToken"].value("id", "");
    }
  }
  return bos;
}

}  // namespace

Json read_hf_json(const std::string& path) {
  const std::string text = read_whole_file(path, kMaxConfigFileBytes);
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw_input_error_at(path, e.byte > 0 ? e.byte - 1 : 0, std::string("not valid JSON: ") + e.what());
  }
}

Tokenizer hf_tokenizer(const std::string& dir, const std::vector<int32_t>& eos_ids) {
  const fs::path path = fs::path(dir) / "tokenizer.json";
  if (!fs::exists(path))
    throw_input_error(dir + ": no tokenizer.json (kvgate reads tokenizers' tokenizer.json; a slow-tokenizer-only "
                            "checkpoint needs it saved with a fast tokenizer)");
  const TokenizerJson tj(path);
  const Json& j = tj.json();
  Json config = Json::object();
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    config = read_json(config_path);
    if (!config.is_object()) throw_input_error(config_path.string() + ": not a JSON object");
  }

  VocabData d;
  d.source = path.string();
  d.model = TokenizerModel::bpe;
  const Json& model = j.value("model", Json());
  if (type_of(model) != "BPE") tj.unsupported("model.type", model.value("type", Json()), "BPE");
  if (!model.value("dropout", Json()).is_null()) tj.fail("model.dropout", "BPE dropout makes tokenization random");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(affix) && !model[affix].is_null() && model[affix] != "")
      tj.fail(std::string("model.") + affix, "subword prefixes/suffixes are not supported");
  d.byte_fallback = model.value("byte_fallback", false);
  d.fuse_unk = model.value("fuse_unk", false);
  d.ignore_merges = model.value("ignore_merges", false);
  d.drop_missing_bytes = true;

  // Ids: the model's vocabulary, then the added tokens (which may extend it).
  std::map<int64_t, std::string> by_id;
  std::map<int64_t, TokenType> types;
  if (!model.contains("vocab") || !model["vocab"].is_object()) tj.fail("model.vocab", "missing or not an object");
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX / 2))
      tj.fail("model.vocab", "'" + echo_user_text(token) + "' has id " + echo_user_text(id.dump()));
    by_id[id.get<int64_t>()] = token;
  }
  for (const Json& a : j.value("added_tokens", Json::array())) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") || !a["content"].is_string())
      tj.fail("added_tokens", echo_user_text(a.dump()) + " has no id and content");
    const std::string content = a["content"].get<std::string>();
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (a.value(flag, false))
        tj.fail("added_tokens", "token '" + echo_user_text(content) + "' sets " + flag +
                                    ", which kvgate's tokenizer does not implement");
    const int64_t id = a["id"].get<int64_t>();
    if (id > INT32_MAX / 2) tj.fail("added_tokens", "token '" + echo_user_text(content) + "' has id " + std::to_string(id));
    by_id[id] = content;
    types[id] = a.value("special", false) ? TokenType::control : TokenType::user_defined;
  }
  if (by_id.empty()) tj.fail("model.vocab", "empty vocabulary");
  const int64_t n = by_id.rbegin()->first + 1;
  if (static_cast<int64_t>(by_id.size()) != n) {
    int64_t gap = 0;
    while (by_id.count(gap)) ++gap;
    tj.fail("model.vocab", "ids are not contiguous: no token has id " + std::to_string(gap) + " of 0.." + std::to_string(n - 1));
  }
  for (auto& [id, token] : by_id) {
    d.tokens.push_back(token);
    TokenType type = TokenType::normal;
    if (auto it = types.find(id); it != types.end()) type = it->second;
    else if (d.byte_fallback && token.size() == 6 && token.starts_with("<0x") && token.ends_with(">")) type = TokenType::byte;
    d.types.push_back(type);
  }
  std::map<std::string, int32_t> id_of;
  for (size_t i = 0; i < d.tokens.size(); ++i) id_of[d.tokens[i]] = static_cast<int32_t>(i);
  for (const Json& m : model.value("merges", Json::array())) {
    if (m.is_string()) {
      d.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      d.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      tj.fail("model.merges", "entry " + echo_user_text(m.dump()) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  auto lookup = [&](const std::optional<std::string>& text, const std::string& where) -> std::optional<int32_t> {
    if (!text) return std::nullopt;
    const auto it = id_of.find(*text);
    if (it == id_of.end()) throw_input_error(where + ": token '" + echo_user_text(*text) + "' is not in " + path.string());
    return it->second;
  };
  if (model.contains("unk_token") && model["unk_token"].is_string())
    d.unk_id = lookup(model["unk_token"].get<std::string>(), path.string() + ": model.unk_token");

  read_normalizer(tj, j.value("normalizer", Json()), d);
  read_pre_tokenizer(tj, j.value("pre_tokenizer", Json()), d);
  if (d.byte_level && (d.byte_fallback || !d.space_replacement.empty()))
    tj.fail("pre_tokenizer", "a byte-level BPE with byte_fallback or a U+2581 normalizer is not a pipeline kvgate knows");

  const std::string cfg = config_path.string();
  d.bos_id = lookup(token_text(config, "bos_token"), cfg + ": bos_token");
  d.pad_id = lookup(token_text(config, "pad_token"), cfg + ": pad_token");
  if (config.contains("add_eos_token") && config["add_eos_token"] == true)
    throw_input_error(cfg + ": add_eos_token: true; kvgate adds no token after a prompt");
  const std::optional<std::string> post_bos = template_bos(tj, j.value("post_processor", Json()));
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    d.add_bos = config["add_bos_token"].get<bool>();
  } else {
    d.add_bos = post_bos.has_value();
  }
  if (d.add_bos) {
    if (post_bos) d.bos_id = lookup(post_bos, path.string() + ": post_processor");
    if (!d.bos_id) throw_input_error(cfg + ": add_bos_token is true, but no bos_token is named");
  }
  if (!eos_ids.empty()) {
    d.eos_id = eos_ids.front();
    d.more_end_of_generation.assign(eos_ids.begin() + 1, eos_ids.end());
  } else {
    d.eos_id = lookup(token_text(config, "eos_token"), cfg + ": eos_token");
  }
  return Tokenizer::from_vocab(std::move(d));
}

ChatTemplate hf_chat_template(const std::string& dir) {
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  Json config = Json::object();
  if (fs::exists(config_path)) config = read_json(config_path);
  if (!config.is_object()) throw_input_error(config_path.string() + ": not a JSON object");
  // transformers passes tokenizer.special_tokens_map to the template: the named special tokens
  // that are set.
  std::vector<std::pair<std::string, std::string>> special;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (auto text = token_text(config, key)) special.emplace_back(key, *text);
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  if (fs::exists(jinja)) return ChatTemplate::from_jinja(read_whole_file(jinja.string(), kMaxConfigFileBytes), jinja.string(), special);
  if (config.contains("chat_template")) {
    const Json& t = config["chat_template"];
    const std::string source = config_path.string() + ": chat_template";
    if (t.is_string()) return ChatTemplate::from_jinja(t.get<std::string>(), source, special);
    if (t.is_array())
      for (const Json& named : t)
        if (named.is_object() && named.value("name", "") == "default" && named.contains("template") && named["template"].is_string())
          return ChatTemplate::from_jinja(named["template"].get<std::string>(), source + " (default)", special);
    throw_input_error(source + ": neither a template string nor a list with a \"default\" template");
  }
  throw_input_error(dir + ": no chat template (chat_template.jinja, or chat_template in tokenizer_config.json); "
                          "cannot format chat messages for this model");
}

}  // namespace kvgate::runtime
