// lookup: short-range extractive questions a small instruct model can answer, so the gold
// axis of a suite carries signal on the default 135M model (docs/evalsets.md): the value of a
// cell of one order record, the value on the line a diff adds, the phone number of a Korean
// customer record. Each answer is copied verbatim from a context of a few lines (~40-70
// tokens); the item's kind cycles with its index (cell, added line, phone) so any n >= 3 holds
// all three. Measured on SmolLM2-135M-Instruct: the reference answers 15 of 16 such probes,
// where it answered none of the same facts asked among more rows or in Korean.
//
// The assistant's reply opens with a lead-in that restates the question ("The quantity of order
// A-7282 is") and only the value after it is scored (score kind "spans"): a small model asked for
// "the value only" answers with a sentence, and the gold match would then measure its phrasing,
// not whether it can still find the value under a KV config.
#include <iterator>
#include <string>
#include <vector>

#include "evalsets/gen_common.h"

namespace kvgate::evalsets::gen {
namespace {

// The reply `lead + " " + answer`, scored on " " + answer (the space belongs to the value's
// first token in the tokenizers kvgate runs).
EvalItem lead_in_item(std::string system, std::string user, const std::string& lead, const std::string& answer,
                      nlohmann::json meta) {
  EvalItem item = answer_item(std::move(system), std::move(user), lead + " " + answer, std::move(meta));
  item.score = ScoreKind::spans;
  item.spans = {{lead.size(), item.messages.back().content.size()}};
  item.answer = answer;
  return item;
}

const char* const kRegions[] = {"North", "South", "East", "West", "Central"};
const char* const kSettings[] = {"TIMEOUT_SECONDS", "MAX_RETRIES", "BATCH_SIZE", "CACHE_TTL", "PAGE_LIMIT",
                                 "MAX_WORKERS"};
struct Name {
  const char* hangul;
  const char* latin;
};
const Name kSurnames[] = {{"김", "Kim"}, {"이", "Lee"}, {"박", "Park"}, {"최", "Choi"}, {"정", "Jung"}, {"강", "Kang"}};
const Name kGivenNames[] = {{"민준", "Minjun"}, {"서연", "Seoyeon"}, {"도윤", "Doyun"}, {"지우", "Jiwoo"},
                            {"하준", "Hajun"},  {"서윤", "Seoyun"},  {"시우", "Siwoo"}, {"지민", "Jimin"}};

// One order as a record (a table row turned on its side): the value of one of its cells.
EvalItem record_cell(Rng& rng) {
  const std::string id = "A-" + pad(between(rng, 1000, 9999), 4);
  const std::string region = pick(rng, kRegions);
  const std::string quantity = std::to_string(between(rng, 2, 95));
  const bool ask_region = rng.below(2) == 1;
  const std::string column = ask_region ? "region" : "quantity";
  const std::string text = "Order " + id + "\nregion: " + region + "\nquantity: " + quantity + "\n\nWhat is the " +
                           column + " of order " + id + "?";
  return lead_in_item("Answer from the data given.", text, "The " + column + " of order " + id + " is",
                      ask_region ? region : quantity, {{"kind", "cell"}, {"key", id}, {"column", column}});
}

// A one-line change among unchanged settings: the value on the line the diff adds.
EvalItem diff_added_value(Rng& rng) {
  std::vector<std::string> names(std::begin(kSettings), std::end(kSettings));
  shuffle(rng, names);
  const std::string before = names[0], changed = names[1], after = names[2];
  const int64_t old_value = between(rng, 2, 90);
  const int64_t new_value = old_value + between(rng, 1, 9);
  const std::string text = "--- a/settings.py\n+++ b/settings.py\n@@ -1,3 +1,3 @@\n " + before + " = " +
                           std::to_string(between(rng, 2, 99)) + "\n-" + changed + " = " + std::to_string(old_value) +
                           "\n+" + changed + " = " + std::to_string(new_value) + "\n " + after + " = " +
                           std::to_string(between(rng, 2, 99)) + "\n\nWhat is the new value of " + changed + "?";
  return lead_in_item("Answer from the data given.", text, "The new value of " + changed + " is",
                      std::to_string(new_value), {{"kind", "added_line"}, {"setting", changed}});
}

// A Korean customer record (Hangul name, Korean phone format): the phone number.
EvalItem korean_phone(Rng& rng) {
  const Name& surname = pick(rng, kSurnames);
  const Name& given = pick(rng, kGivenNames);
  const std::string latin = std::string(surname.latin) + " " + given.latin;
  const std::string phone = "010-" + pad(between(rng, 1000, 9999), 4) + "-" + pad(between(rng, 1000, 9999), 4);
  const std::string text = "Name: " + latin + " (" + surname.hangul + given.hangul + ")\nPhone: " + phone +
                           "\n\nWhat is " + latin + "'s phone number?";
  return lead_in_item("Answer from the data given.", text, latin + "'s phone number is", phone,
                      {{"kind", "phone"}, {"person", latin}});
}

}  // namespace

EvalItem make_lookup_item(Rng& rng, size_t target, size_t index) {
  // The contexts are a few lines whatever the target: what is measured is whether the model
  // still finds a value it can find, not how far (the other domains measure range).
  (void)target;
  switch (index % 3) {
    case 0: return record_cell(rng);
    case 1: return diff_added_value(rng);
    default: return korean_phone(rng);
  }
}

}  // namespace kvgate::evalsets::gen
