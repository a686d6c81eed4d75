#pragma once
// The tokenizer and chat template of a Hugging Face model directory.
//
// tokenizer.json (the tokenizers library's format) is read as declared: a BPE model (vocab,
// merges as "a b" strings or pairs, byte_fallback, fuse_unk, ignore_merges, unk_token), its
// added tokens (special ones become control tokens, cut out of the text first; others
// user-defined), the normalizer (none, NFC, Replace " " -> "\u2581", Prepend "\u2581", or a
// Sequence of them) and the pre-tokenizer (ByteLevel with GPT-2's pattern, Digits + ByteLevel as
// SmolLM/StarCoder, Split with Llama 3's or Qwen2's pattern + ByteLevel, Metaspace, none).
// Those are the pipelines of the supported families; anything else (another model type or
// pattern, added tokens with lstrip/rstrip/single_word, a post-processor that appends tokens) is
// an input error naming the file and the construct, since a guessed tokenizer changes every id.
// BOS: tokenizer_config.json's add_bos_token, else whether the post-processor's template starts
// with a special token. EOS: the ids config.json / generation_config.json give (all of them end
// generation), else tokenizer_config.json's eos_token.
//
// The chat template comes from chat_template.jinja or tokenizer_config.json's chat_template
// (the "default" one of a list) and runs as written (ChatTemplate::from_jinja), with the
// special tokens tokenizer_config.json names.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat_template.h"
#include "runtime/tokenizer.h"

namespace kvgate::runtime {

Tokenizer hf_tokenizer(const std::string& dir, const std::vector<int32_t>& eos_ids);

// A JSON file of the directory; input error naming the file and byte offset when it is not JSON.
nlohmann::json read_hf_json(const std::string& path);
ChatTemplate hf_chat_template(const std::string& dir);

}  // namespace kvgate::runtime
