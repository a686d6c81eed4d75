// Tokenizer, Unicode helpers and chat template. Small hand-built vocabularies pin down each rule
// (pre-tokenizer patterns, merge order, special tokens); the golden file written by llama.cpp
// (tests/golden/tokens.json) checks the whole pipeline on the default model, id for id.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/chat_template.h"
#include "runtime/gguf.h"
#include "runtime/model_store.h"
#include "runtime/tokenizer.h"
#include "runtime/unicode.h"
#include "tests/runtime/gguf_writer.h"

namespace kvgate::runtime {
namespace {

using kvgate::testing::GgufWriter;

// ---------------------------------------------------------------------------------------------
// UTF-8 and the GPT-2 byte alphabet

TEST(Utf8, AcceptsWellFormedText) {
  EXPECT_FALSE(unicode::find_invalid_utf8("").has_value());
  EXPECT_FALSE(unicode::find_invalid_utf8("plain ascii\t\r\n").has_value());
  EXPECT_FALSE(unicode::find_invalid_utf8("안녕하세요 こんにちは 🤗 é").has_value());
  EXPECT_FALSE(unicode::find_invalid_utf8("\xF4\x8F\xBF\xBF").has_value());  // U+10FFFF
}

TEST(Utf8, NamesTheFirstBadByte) {
  struct Case {
    std::string text;
    size_t offset;
  };
  const std::vector<Case> cases = {
      {"ab\xFF", 2},                // never valid
      {"a\x80", 1},                 // lone continuation byte
      {"\xC0\x80", 0},              // overlong NUL
      {"xy\xE0\x80\x80", 2},        // overlong 3-byte form
      {"\xF0\x80\x80\x80", 0},      // overlong 4-byte form
      {"ok\xED\xA0\x80", 2},        // UTF-16 surrogate
      {"\xF4\x90\x80\x80", 0},      // beyond U+10FFFF
      {"\xEA\xB0", 0},              // truncated at the end
      {"\xEA\xB0z", 0},             // truncated by ASCII
      {"한\xEA\xB0", 3},            // after a valid character
  };
  for (const Case& c : cases) {
    const auto bad = unicode::find_invalid_utf8(c.text);
    ASSERT_TRUE(bad.has_value()) << ::testing::PrintToString(c.text);
    EXPECT_EQ(*bad, c.offset) << ::testing::PrintToString(c.text);
  }
}

TEST(Utf8, DecodeAndEncodeRoundTrip) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA4\x97";  // a é € 🤗
  std::vector<size_t> starts;
  const std::vector<uint32_t> cps = unicode::decode_utf8(text, &starts);
  EXPECT_EQ(cps, (std::vector<uint32_t>{'a', 0xE9, 0x20AC, 0x1F917}));
  EXPECT_EQ(starts, (std::vector<size_t>{0, 1, 3, 6, 10}));
  std::string back;
  for (uint32_t cp : cps) unicode::append_utf8(cp, back);
  EXPECT_EQ(back, text);
}

TEST(ByteAlphabet, MatchesGpt2BytesToUnicode) {
  EXPECT_EQ(unicode::byte_to_code_point('a'), static_cast<uint32_t>('a'));
  EXPECT_EQ(unicode::byte_to_code_point('!'), static_cast<uint32_t>('!'));
  EXPECT_EQ(unicode::byte_to_code_point(0x00), 0x100u);
  EXPECT_EQ(unicode::byte_to_code_point('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(unicode::byte_to_code_point(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(unicode::byte_to_code_point(0xAD), 0x143u);  // the last remapped byte
  EXPECT_EQ(unicode::bytes_to_vocab_form(" the"), "\xC4\xA0the");
  for (int b = 0; b < 256; ++b) {
    const auto back = unicode::code_point_to_byte(unicode::byte_to_code_point(static_cast<uint8_t>(b)));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, b);
  }
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string decoded;
  EXPECT_TRUE(unicode::vocab_form_to_bytes(unicode::bytes_to_vocab_form(all), decoded));
  EXPECT_EQ(decoded, all);
  std::string foreign;
  EXPECT_FALSE(unicode::vocab_form_to_bytes("\xE2\x82\xAC", foreign));  // U+20AC is outside the alphabet
  EXPECT_EQ(foreign, "\xE2\x82\xAC");
}

TEST(CharClasses, FollowLlamaCpp) {
  EXPECT_EQ(unicode::classify('a'), unicode::CharClass::letter);
  EXPECT_EQ(unicode::classify(0xD55C), unicode::CharClass::letter);   // 한 (Lo)
  EXPECT_EQ(unicode::classify(0x3042), unicode::CharClass::letter);   // あ
  EXPECT_EQ(unicode::classify('7'), unicode::CharClass::number);
  EXPECT_EQ(unicode::classify(0xFF17), unicode::CharClass::number);   // fullwidth 7 (Nd)
  EXPECT_EQ(unicode::classify(0x00B2), unicode::CharClass::number);   // superscript 2 (No)
  EXPECT_EQ(unicode::classify(0x2167), unicode::CharClass::number);   // roman numeral 8 (Nl)
  EXPECT_EQ(unicode::classify('\t'), unicode::CharClass::whitespace);
  EXPECT_EQ(unicode::classify(0x3000), unicode::CharClass::whitespace);  // ideographic space
  EXPECT_EQ(unicode::classify(0x00A0), unicode::CharClass::whitespace);
  EXPECT_EQ(unicode::classify(0x200B), unicode::CharClass::other);    // zero-width space is not \s
  EXPECT_EQ(unicode::classify(0x1F917), unicode::CharClass::other);   // emoji
  EXPECT_EQ(unicode::classify(0x0301), unicode::CharClass::other);    // combining accent (Mn)
  EXPECT_EQ(unicode::classify('_'), unicode::CharClass::other);
}

// ---------------------------------------------------------------------------------------------
// Hand-built vocabularies

// All 256 byte tokens (ids 0..255 in byte order), then `extra` tokens, then merges.
VocabData byte_vocab(const std::string& pre, const std::vector<std::string>& merges,
                     const std::vector<std::pair<std::string, TokenType>>& extra = {}) {
  VocabData v;
  v.pre = pre;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(unicode::bytes_to_vocab_form(std::string(1, static_cast<char>(b))));
    v.types.push_back(TokenType::normal);
  }
  for (const auto& [text, type] : extra) {
    v.tokens.push_back(text);
    v.types.push_back(type);
  }
  for (const std::string& m : merges) {
    v.merges.push_back(m);
    const std::string merged = m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1);
    bool present = false;
    for (const std::string& t : v.tokens) present = present || t == merged;
    if (!present) {
      v.tokens.push_back(merged);
      v.types.push_back(TokenType::normal);
    }
  }
  return v;
}

std::vector<std::string> words(const Tokenizer& tok, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view w : tok.split_words(text)) out.emplace_back(w);
  return out;
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, Gpt2Pattern) {
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab("gpt2", {}));
  EXPECT_EQ(words(tok, "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(words(tok, "it's they're I'll"), (Words{"it", "'s", " they", "'re", " I", "'ll"}));
  // Contractions are case-sensitive in the gpt2 pattern: 'S is punctuation then a letter.
  EXPECT_EQ(words(tok, "IT'S"), (Words{"IT", "'", "S"}));
  EXPECT_EQ(words(tok, "x = 42;"), (Words{"x", " =", " 42", ";"}));
  // \s+(?!\S): a run of spaces leaves its last one to the next word; at the end it stays whole.
  EXPECT_EQ(words(tok, "a   b   "), (Words{"a", "  ", " b", "   "}));
  // Only a plain space may prefix a word; a tab stays a word of its own.
  EXPECT_EQ(words(tok, "a\n\n\tb"), (Words{"a", "\n\n", "\t", "b"}));
  EXPECT_EQ(words(tok, "\r\n"), (Words{"\r\n"}));
  EXPECT_EQ(words(tok, "안녕 세상!"), (Words{"안녕", " 세상", "!"}));
  EXPECT_EQ(words(tok, "🤗🤗 hi"), (Words{"🤗🤗", " hi"}));
  EXPECT_EQ(words(tok, ""), Words{});
}

TEST(PreTokenizer, SmollmSplitsEveryDigit) {
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab("smollm", {}));
  EXPECT_EQ(words(tok, "abc 123"), (Words{"abc", " ", "1", "2", "3"}));
  EXPECT_EQ(words(tok, "3.14"), (Words{"3", ".", "1", "4"}));
  EXPECT_EQ(words(tok, "1,234"), (Words{"1", ",", "2", "3", "4"}));
  // The gpt2 pattern runs inside each piece, so lookahead stops at a digit: "  " before "7"
  // is a whole-run whitespace word rather than leaving a space for the digit.
  EXPECT_EQ(words(tok, "x  7"), (Words{"x", "  ", "7"}));
  EXPECT_EQ(words(tok, "v2beta"), (Words{"v", "2", "beta"}));
  EXPECT_EQ(words(tok, "²"), (Words{"²"}));
}

TEST(PreTokenizer, Llama3Pattern) {
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab("llama3", {}));
  EXPECT_EQ(words(tok, "1234567"), (Words{"123", "456", "7"}));
  EXPECT_EQ(words(tok, "IT'S"), (Words{"IT", "'S"}));
  EXPECT_EQ(words(tok, "x.y"), (Words{"x", ".y"}));
  EXPECT_EQ(words(tok, "a \n\n b"), (Words{"a", " \n\n", " b"}));
  EXPECT_EQ(words(tok, "{}\n\nx"), (Words{"{}\n\n", "x"}));
}

TEST(PreTokenizer, UnknownNameIsAnInputError) {
  try {
    Tokenizer::from_vocab(byte_vocab("qwen9", {}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("qwen9"), std::string::npos) << e.what();
  }
}

TEST(Bpe, LowestRankMergesFirst) {
  // "a b" outranks "b c": "abc" -> "ab" "c" -> "abc".
  Tokenizer tok = Tokenizer::from_vocab(byte_vocab("gpt2", {"a b", "b c", "ab c"}));
  std::vector<int32_t> ids = tok.encode("abc");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(tok.token_text(ids[0]), "abc");
  // With the ranks swapped, "bc" forms first and "a bc" is not a merge.
  tok = Tokenizer::from_vocab(byte_vocab("gpt2", {"b c", "a b", "ab c"}));
  ids = tok.encode("abc");
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(tok.token_text(ids[0]), "a");
  EXPECT_EQ(tok.token_text(ids[1]), "bc");
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab("gpt2", {"a a"}));
  const std::vector<int32_t> ids = tok.encode("aaa");
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(tok.token_text(ids[0]), "aa");
  EXPECT_EQ(tok.token_text(ids[1]), "a");
}

TEST(Bpe, MergesSpellSpacesInTheByteAlphabet) {
  // " the" is spelled "Ġthe" in the vocabulary, and merges are written the same way.
  const std::string g = "\xC4\xA0";
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab("gpt2", {g + " t", "h e", g + "t he"}));
  const std::vector<int32_t> ids = tok.encode("the the");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(tok.token_text(ids[0]), "t");
  EXPECT_EQ(tok.token_text(ids[1]), "he");
  EXPECT_EQ(tok.token_text(ids[2]), g + "the");
  EXPECT_EQ(tok.decode(ids), "the the");
}

TEST(Bpe, MergeResultMissingFromVocabularyFallsBackToBytes) {
  VocabData v = byte_vocab("gpt2", {});
  v.merges.push_back("x y");  // "xy" deliberately absent from the tokens
  const Tokenizer tok = Tokenizer::from_vocab(std::move(v));
  EXPECT_EQ(tok.encode("xy"), (std::vector<int32_t>{'x', 'y'}));
}

TEST(Bpe, LongWordsStayFast) {
  // One 200 KB word: the priority queue keeps this O(n log n); a quadratic merge loop would
  // take minutes. (No timing assertion: a regression shows up as a test timeout.)
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab("gpt2", {"a a", "aa aa", "aaaa aaaa"}));
  const std::string word(200000, 'a');
  const std::vector<int32_t> ids = tok.encode(word);
  ASSERT_EQ(ids.size(), 200000u / 8);
  EXPECT_EQ(tok.token_text(ids.front()), "aaaaaaaa");
  EXPECT_EQ(tok.decode(ids), word);
}

TEST(SpecialTokens, ControlTokensOnlyWithParseSpecial) {
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab(
      "gpt2", {}, {{"<|im_start|>", TokenType::control}, {"<|im_end|>", TokenType::control}}));
  const int32_t start = *tok.find_token("<|im_start|>");
  const int32_t end = *tok.find_token("<|im_end|>");
  EXPECT_EQ(tok.encode("<|im_start|>hi<|im_end|>", true),
            (std::vector<int32_t>{start, 'h', 'i', end}));
  const std::vector<int32_t> plain = tok.encode("<|im_start|>", false);
  EXPECT_EQ(plain.size(), std::string("<|im_start|>").size());
  EXPECT_EQ(tok.decode(plain), "<|im_start|>");
  // Text either side is pre-tokenized on its own: no word spans a special token.
  EXPECT_EQ(tok.encode("a<|im_end|>b", true), (std::vector<int32_t>{'a', end, 'b'}));
}

TEST(SpecialTokens, UserDefinedAlwaysAndLongestFirst) {
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab(
      "gpt2", {}, {{"<x>", TokenType::user_defined}, {"<x><y>", TokenType::control}}));
  const int32_t x = *tok.find_token("<x>");
  const int32_t xy = *tok.find_token("<x><y>");
  EXPECT_EQ(tok.encode("<x><y><x>", true), (std::vector<int32_t>{xy, x}));
  EXPECT_EQ(tok.encode("<x>", false), (std::vector<int32_t>{x}));
}

TEST(Decode, SpecialTokensRenderOrSkip) {
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab("gpt2", {}, {{"<|im_end|>", TokenType::control}}));
  const std::vector<int32_t> ids = tok.encode("ok<|im_end|>");
  EXPECT_EQ(tok.decode(ids, true), "ok<|im_end|>");
  EXPECT_EQ(tok.decode(ids, false), "ok");
  const std::vector<int32_t> bad = {5, 9999};
  EXPECT_THROW(tok.decode(bad), Error);
}

TEST(Encode, InvalidUtf8NamesSourceAndOffset) {
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab("gpt2", {}));
  try {
    tok.encode("abc\xC3(", true, "prompt.txt");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("prompt.txt: at byte 3"), std::string::npos) << e.what();
  }
}

TEST(Encode, EveryByteSurvivesARoundTrip) {
  const Tokenizer tok = Tokenizer::from_vocab(byte_vocab("smollm", {}));
  std::string text;
  for (uint32_t cp = 1; cp < 0x800; cp += 3) unicode::append_utf8(cp, text);
  text += "\t\r\n  🤗 한국어 ١٢٣";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

// ---------------------------------------------------------------------------------------------
// Reading from GGUF

std::vector<std::string> byte_tokens() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(unicode::bytes_to_vocab_form(std::string(1, static_cast<char>(b))));
  return t;
}

TEST(FromGguf, ReadsVocabularyAndSpecialIds) {
  GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "smollm");
  std::vector<std::string> tokens = byte_tokens();
  tokens.push_back("<|endoftext|>");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  w.add_array<int32_t>("tokenizer.ggml.token_type", kvgate::testing::kI32, types);
  w.add_string_array("tokenizer.ggml.merges", {"a b"});
  w.add<uint32_t>("tokenizer.ggml.eos_token_id", kvgate::testing::kU32, 256);
  const std::vector<uint8_t> bytes = w.finish();
  const GgufFile f = GgufFile::parse(bytes, "tiny.gguf");
  const Tokenizer tok = Tokenizer::from_gguf(f);
  EXPECT_EQ(tok.vocab_size(), 257);
  EXPECT_EQ(tok.pre_tokenizer(), PreTokenizer::smollm);
  EXPECT_EQ(tok.eos_id(), 256);
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_EQ(tok.token_type(256), TokenType::control);
  EXPECT_EQ(tok.encode("ab<|endoftext|>"), (std::vector<int32_t>{'a', 'b', 256}));
}

void expect_gguf_error(GgufWriter& w, const std::string& fragment) {
  const std::vector<uint8_t> bytes = w.finish();
  const GgufFile f = GgufFile::parse(bytes, "tiny.gguf");
  try {
    Tokenizer::from_gguf(f);
    FAIL() << "expected an error mentioning " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tiny.gguf"), std::string::npos) << e.what();
  }
}

TEST(FromGguf, RejectsWhatItCannotTokenizeFaithfully) {
  {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "bert");  // WordPiece
    expect_gguf_error(w, "tokenizer.ggml.model");
  }
  {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "deepseek-llm");
    w.add_string_array("tokenizer.ggml.tokens", byte_tokens());
    w.add_string_array("tokenizer.ggml.merges", {});
    expect_gguf_error(w, "deepseek-llm");
  }
  {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string_array("tokenizer.ggml.tokens", byte_tokens());
    w.add_string_array("tokenizer.ggml.merges", {});
    w.add_array<int32_t>("tokenizer.ggml.token_type", kvgate::testing::kI32, std::vector<int32_t>(3, 1));
    expect_gguf_error(w, "token_type");
  }
  {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string_array("tokenizer.ggml.tokens", byte_tokens());
    w.add_string_array("tokenizer.ggml.merges", {});
    w.add<uint32_t>("tokenizer.ggml.bos_token_id", kvgate::testing::kU32, 70000);
    expect_gguf_error(w, "bos_token_id");
  }
  {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    std::vector<std::string> tokens = byte_tokens();
    tokens.push_back("\xFF\xFE");
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_string_array("tokenizer.ggml.merges", {});
    expect_gguf_error(w, "token 256 is not valid UTF-8");
  }
  {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string_array("tokenizer.ggml.tokens", byte_tokens());
    w.add_string_array("tokenizer.ggml.merges", {"ab"});
    expect_gguf_error(w, "merges");
  }
}

// ---------------------------------------------------------------------------------------------
// Chat template

const char* kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' "
    "}}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

TEST(ChatTemplate, SmolLm2AddsDefaultSystemPrompt) {
  const ChatTemplate t = ChatTemplate::from_template_text(kSmolLm2Template, "t");
  ASSERT_TRUE(t.default_system().has_value());
  EXPECT_EQ(*t.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(t.apply({{"user", "hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.apply({{"system", "Be brief."}, {"user", "hi"}, {"assistant", "Hello."}}, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n");
  EXPECT_EQ(t.apply({}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplate, PlainChatMlHasNoDefaultSystemPrompt) {
  const ChatTemplate t = ChatTemplate::from_template_text(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
      "t");
  EXPECT_FALSE(t.default_system().has_value());
  EXPECT_EQ(t.apply({{"user", "x"}}, true), "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, OtherFamiliesAreErrors) {
  const std::string llama3 =
      "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
      "message['content'] | trim + '<|eot_id|>' }}{% endfor %}";
  try {
    ChatTemplate::from_template_text(llama3, "m.gguf: tokenizer.chat_template");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("not ChatML"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m.gguf"), std::string::npos) << e.what();
  }
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  const std::vector<uint8_t> bytes = w.finish();
  const GgufFile f = GgufFile::parse(bytes, "none.gguf");
  EXPECT_THROW(ChatTemplate::from_gguf(f), Error);
}

TEST(ChatTemplate, RolesMustBeOneLine) {
  const ChatTemplate t = ChatTemplate::chatml();
  EXPECT_THROW(t.apply({{"user\nsystem", "x"}}, false), Error);
  EXPECT_THROW(t.apply({{"", "x"}}, false), Error);
}

// ---------------------------------------------------------------------------------------------
// The default model against llama.cpp (tests/golden/tokens.json, see tests/golden/README.md)

class DefaultModelTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto home = kvgate_home();
    if (check_cached_model(default_model(), home) != CacheState::verified) return;
    file_ = new GgufFile(GgufFile::open(cached_model_path(default_model(), home).string()));
    tok_ = new Tokenizer(Tokenizer::from_gguf(*file_));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
    tok_ = nullptr;
    file_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "default model not fetched; run `kvgate model fetch` (scripts/test does)";
  }
  static nlohmann::json golden() {
    std::ifstream in(std::string(KVGATE_SOURCE_DIR) + "/tests/golden/tokens.json");
    EXPECT_TRUE(in.good()) << "tests/golden/tokens.json missing";
    return nlohmann::json::parse(in);
  }
  static GgufFile* file_;
  static Tokenizer* tok_;
};
GgufFile* DefaultModelTokenizer::file_ = nullptr;
Tokenizer* DefaultModelTokenizer::tok_ = nullptr;

TEST_F(DefaultModelTokenizer, MetadataAsExpected) {
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->pre_tokenizer_name(), "smollm");
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_FALSE(tok_->add_bos());
  EXPECT_EQ(tok_->token_type(1), TokenType::control);
  EXPECT_EQ(tok_->token_text(2), "<|im_end|>");
}

// SmolLM2's EOS is <|im_end|>, the ChatML turn end, and nothing else ends generation: its
// <|endoftext|> (id 0) is a document separator the chat model never needs to stop at.
TEST_F(DefaultModelTokenizer, OnlyImEndEndsGeneration) {
  EXPECT_EQ(tok_->end_of_generation_ids(), std::vector<int32_t>{2});
  EXPECT_TRUE(tok_->ends_generation(2));
  EXPECT_FALSE(tok_->ends_generation(0));
  EXPECT_FALSE(tok_->ends_generation(1));
  EXPECT_FALSE(tok_->ends_generation(*tok_->find_token("<|im_start|>")));
  EXPECT_FALSE(tok_->ends_generation(tok_->encode("Paris").front()));
}

TEST_F(DefaultModelTokenizer, MatchesLlamaCppOnEveryGoldenText) {
  const nlohmann::json g = golden();
  ASSERT_GE(g["cases"].size(), 25u);
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> special = c["ids_special"];
    const std::vector<int32_t> plain = c["ids_plain"];
    EXPECT_EQ(tok_->encode(text, true), special) << "parse_special, case " << c["name"];
    EXPECT_EQ(tok_->encode(text, false), plain) << "plain, case " << c["name"];
  }
}

TEST_F(DefaultModelTokenizer, DecodeRestoresEveryGoldenText) {
  const nlohmann::json g = golden();
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok_->decode(tok_->encode(text, true)), text) << c["name"];
    EXPECT_EQ(tok_->decode(tok_->encode(text, false)), text) << c["name"];
  }
}

TEST_F(DefaultModelTokenizer, ChatTemplateFromTheModel) {
  const std::string prompt = render_chat(*file_, {{"user", "What is the capital of France?"}}, true);
  EXPECT_EQ(prompt,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<int32_t> ids = tok_->encode(prompt);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);  // two <|im_end|>
}

TEST_F(DefaultModelTokenizer, LongMixedTextRoundTrips) {
  std::string text;
  while (text.size() < 100000) {
    text += "Row 17: 1,234,567 | 3.14159 | 서울특별시 인구는 약 940만 명이다. def f(x):\r\n\treturn x ** 2  # 🤗\n";
  }
  const std::vector<int32_t> ids = tok_->encode(text);
  EXPECT_GT(ids.size(), text.size() / 6);
  EXPECT_EQ(tok_->decode(ids), text);
}

}  // namespace
}  // namespace kvgate::runtime
