#include "evalsets/generate.h"

#include "core/error.h"
#include "core/hash.h"
#include "evalsets/gen_common.h"

namespace kvgate::evalsets {

namespace gen {

std::string cents_text(int64_t cents) {
  const bool negative = cents < 0;
  const uint64_t v = negative ? static_cast<uint64_t>(-cents) : static_cast<uint64_t>(cents);
  std::string out = negative ? "-" : "";
  out += std::to_string(v / 100);
  out += v % 100 < 10 ? ".0" : ".";
  out += std::to_string(v % 100);
  return out;
}

std::string thousands_text(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string pad(int64_t value, int width) {
  const std::string digits = std::to_string(value);
  const size_t zeros = static_cast<int>(digits.size()) < width ? static_cast<size_t>(width) - digits.size() : 0;
  return std::string(zeros, '0').append(digits);
}

void month_day_2024(int day_of_year, int& month, int& day) {
  static const int kDays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int d = day_of_year % 366;
  month = 0;
  while (d >= kDays[month]) d -= kDays[month++];
  month += 1;
  day = d + 1;
}

std::string iso_date(int day_of_year_2024) {
  int month = 0, day = 0;
  month_day_2024(day_of_year_2024, month, day);
  return "2024-" + pad(month, 2) + "-" + pad(day, 2);
}

size_t target_tokens(Rng& rng, TokenRange range) {
  return range.min + static_cast<size_t>(rng.below(range.max - range.min + 1));
}

Message system_message(std::string content) { return Message{"system", std::move(content), {}, {}, {}}; }
Message user_message(std::string content) { return Message{"user", std::move(content), {}, {}, {}}; }
Message assistant_message(std::string content) { return Message{"assistant", std::move(content), {}, {}, {}}; }

EvalItem answer_item(std::string system, std::string user, std::string answer, nlohmann::json meta) {
  EvalItem item;
  item.messages = {system_message(std::move(system)), user_message(std::move(user)), assistant_message(answer)};
  item.score = ScoreKind::answer;
  item.answer = std::move(answer);
  item.has_answer = true;
  item.meta = std::move(meta);
  return item;
}

}  // namespace gen

const std::vector<std::string>& generator_domains() {
  static const std::vector<std::string> kDomains = {"tables", "diffs", "korean", "policy", "agentic", "lookup"};
  return kDomains;
}

TokenRange default_token_range(const std::string& domain) {
  if (domain == "agentic") return {1500, 4000};
  if (domain == "lookup") return {100, 300};
  return {300, 1200};
}

EvalItem generate_item(const std::string& domain, uint64_t seed, size_t index, TokenRange tokens) {
  // The stream of item i mixes the domain name, the seed and i, so items are independent.
  const std::string key = domain + ":" + std::to_string(seed) + ":" + std::to_string(index);
  Rng rng(xxhash64(key));
  const size_t target = gen::target_tokens(rng, tokens);
  EvalItem item;
  if (domain == "tables") item = gen::make_tables_item(rng, target);
  else if (domain == "diffs") item = gen::make_diffs_item(rng, target);
  else if (domain == "korean") item = gen::make_korean_item(rng, target);
  else if (domain == "policy") item = gen::make_policy_item(rng, target);
  else if (domain == "agentic") item = gen::make_agentic_item(rng, target);
  else if (domain == "lookup") item = gen::make_lookup_item(rng, target, index);
  else throw_usage_error("unknown eval domain \"" + echo_user_text(domain) + "\" (tables, diffs, korean, policy, agentic, lookup, all)");
  item.id = domain + "-s" + std::to_string(seed) + "-" + gen::pad(static_cast<int64_t>(index), 4);
  item.domain = domain;
  item.meta["seed"] = seed;
  item.meta["index"] = index;
  return item;
}

std::vector<EvalItem> generate(const GenerateOptions& options) {
  if (options.n == 0 || options.n > 100000) throw_usage_error("--n must be between 1 and 100000");
  std::vector<std::string> domains;
  if (options.domain == "all") {
    domains = generator_domains();
  } else {
    bool known = false;
    for (const std::string& d : generator_domains()) known = known || d == options.domain;
    if (!known)
      throw_usage_error("unknown eval domain \"" + echo_user_text(options.domain) + "\" (tables, diffs, korean, policy, agentic, lookup, all)");
    domains.push_back(options.domain);
  }
  std::vector<EvalItem> items;
  for (const std::string& domain : domains) {
    TokenRange range = options.tokens;
    if (range.min == 0 && range.max == 0) range = default_token_range(domain);
    if (range.min < 64 || range.max < range.min || range.max > 32768)
      throw_usage_error("token range must satisfy 64 <= tokens-min <= tokens-max <= 32768 (got " +
                        std::to_string(range.min) + ".." + std::to_string(range.max) + ")");
    for (size_t i = 0; i < options.n; ++i) items.push_back(generate_item(domain, options.seed, i, range));
  }
  return items;
}

}  // namespace kvgate::evalsets
