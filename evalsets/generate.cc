#include "evalsets/generate.h"

#include <algorithm>

#include "core/error.h"
#include "core/hash.h"
#include "evalsets/gen_common.h"
#include "evalsets/sweep.h"

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

size_t depth_index(const std::vector<std::string>& units, int depth_permille) {
  size_t total = 0;
  for (const std::string& u : units) total += estimate_tokens(u);
  const size_t goal = total * static_cast<size_t>(depth_permille) / 1000;
  size_t before = 0, best = 0, best_gap = goal;
  for (size_t i = 0; i < units.size(); ++i) {
    before += estimate_tokens(units[i]);
    const size_t gap = before > goal ? before - goal : goal - before;
    if (gap < best_gap) best = i + 1, best_gap = gap;
  }
  return best;
}

int partner_depth(int depth_permille) { return depth_permille >= 500 ? depth_permille - 500 : depth_permille + 500; }

std::string join_units(const std::vector<std::string>& units) {
  std::string out;
  for (const std::string& u : units) out += u;
  return out;
}

}  // namespace gen

const std::vector<std::string>& generator_domains() {
  static const std::vector<std::string> kDomains = {"tables", "diffs", "korean", "policy", "agentic", "lookup"};
  return kDomains;
}

const std::vector<std::string>& long_generator_domains() {
  static const std::vector<std::string> kDomains = {"retrieval",   "long_tables", "long_diffs",
                                                    "long_policy", "long_korean", "long_agentic"};
  return kDomains;
}

bool is_long_domain(const std::string& domain) {
  if (domain == "long") return true;
  for (const std::string& d : long_generator_domains())
    if (d == domain) return true;
  return false;
}

bool is_known_domain(const std::string& domain) {
  if (domain == "all" || is_long_domain(domain)) return true;
  for (const std::string& d : generator_domains())
    if (d == domain) return true;
  return false;
}

std::string domain_list_text() {
  std::string out;
  for (const std::string& d : generator_domains()) out += d + ", ";
  out += "all, ";
  for (const std::string& d : long_generator_domains()) out += d + ", ";
  return out + "long";
}

TokenRange default_token_range(const std::string& domain) {
  if (domain == "agentic") return {1500, 4000};
  // Long items default to what the default model (SmolLM2-135M, 8192-token context) can read,
  // with room for the ~1.1x real/estimated token ratio and the greedy answer.
  if (is_long_domain(domain)) return {4000, 6500};
  if (domain == "lookup") return {100, 300};
  return {300, 1200};
}

size_t max_tokens_for(const std::string& domain) { return is_long_domain(domain) ? 131072 : 32768; }

std::string token_range_problem(const std::string& domain, TokenRange range) {
  const size_t max = max_tokens_for(domain);
  if (range.min < 64 || range.max < range.min || range.max > max)
    return "token range must satisfy 64 <= tokens-min <= tokens-max <= " + std::to_string(max) + " for domain " + domain +
           " (got " + std::to_string(range.min) + ".." + std::to_string(range.max) + ")";
  return "";
}

int parse_depth(const std::string& text) {
  // Decimal text, not a double, so that the thousandths (part of item ids) are exact.
  const auto bad = [&] {
    throw_usage_error("--depth must be a fraction from 0 to 1 with at most 3 decimals (got \"" + echo_user_text(text) + "\")");
  };
  if (text.empty() || text.size() > 5) bad();
  const size_t dot = text.find('.');
  const std::string whole = text.substr(0, dot), frac = dot == std::string::npos ? "" : text.substr(dot + 1);
  if (whole != "0" && whole != "1" && !(whole.empty() && dot != std::string::npos)) bad();
  if (dot != std::string::npos && (frac.empty() || frac.size() > 3)) bad();
  int thousandths = 0;
  for (size_t i = 0; i < 3; ++i) {
    const char c = i < frac.size() ? frac[i] : '0';
    if (c < '0' || c > '9') bad();
    thousandths = thousandths * 10 + (c - '0');
  }
  const int value = (whole == "1" ? 1000 : 0) + thousandths;
  if (value > 1000) bad();
  return value;
}

std::vector<int> parse_depths(const std::string& text) {
  std::vector<int> out;
  size_t from = 0;
  while (true) {
    const size_t comma = text.find(',', from);
    const int depth = parse_depth(text.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    for (const int d : out)
      if (d == depth) throw_usage_error("--depth lists " + echo_user_text(text.substr(from, comma - from)) + " twice");
    out.push_back(depth);
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

EvalItem generate_item(const std::string& domain, uint64_t seed, size_t index, TokenRange tokens, int depth_permille) {
  // The stream of item i mixes the domain name, the seed and i, so items are independent.
  const std::string key = domain + ":" + std::to_string(seed) + ":" + std::to_string(index);
  Rng rng(xxhash64(key));
  const size_t target = gen::target_tokens(rng, tokens);
  EvalItem item;
  const bool is_long = is_long_domain(domain) && domain != "long";
  int depth = kNoDepth;
  if (is_long) {
    const int drawn = static_cast<int>(rng.below(11)) * 100;  // drawn even when given, see generate.h
    depth = depth_permille == kNoDepth ? drawn : depth_permille;
  }
  if (domain == "tables") item = gen::make_tables_item(rng, target);
  else if (domain == "diffs") item = gen::make_diffs_item(rng, target);
  else if (domain == "korean") item = gen::make_korean_item(rng, target);
  else if (domain == "policy") item = gen::make_policy_item(rng, target);
  else if (domain == "agentic") item = gen::make_agentic_item(rng, target);
  // Question kinds cycle with seed + index, so that short suite entries with different seeds
  // still cover every kind.
  else if (domain == "lookup") item = gen::make_lookup_item(rng, target, index);
  else if (domain == "retrieval") item = gen::make_retrieval_item(rng, target, depth, static_cast<size_t>(seed) + index);
  else if (domain == "long_tables") item = gen::make_long_tables_item(rng, target, depth, static_cast<size_t>(seed) + index);
  else if (domain == "long_diffs") item = gen::make_long_diffs_item(rng, target, depth);
  else if (domain == "long_policy") item = gen::make_long_policy_item(rng, target, depth);
  else if (domain == "long_korean") item = gen::make_long_korean_item(rng, target, depth);
  else if (domain == "long_agentic") item = gen::make_long_agentic_item(rng, target, depth);
  else throw_usage_error("unknown eval domain \"" + echo_user_text(domain) + "\" (" + domain_list_text() + ")");
  // A given depth is part of the id, so one suite can sweep depths over the same documents.
  item.id = domain + "-s" + std::to_string(seed) + "-";
  if (is_long && depth_permille != kNoDepth) item.id.append("d").append(gen::pad(depth_permille, 3)).append("-");
  item.id += gen::pad(static_cast<int64_t>(index), 4);
  item.domain = domain;
  item.meta["seed"] = seed;
  item.meta["index"] = index;
  if (is_long) {
    item.meta["depth"] = depth / 1000.0;
    item.meta["target_tokens"] = target;
  }
  return item;
}

std::optional<int> generated_depth_permille(std::string_view id) {
  // DOMAIN-sSEED-dDDD-NNNN with DOMAIN a long generator's.
  const auto digits = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  for (const std::string& domain : long_generator_domains()) {
    if (id.size() <= domain.size() + 2 || id.substr(0, domain.size() + 2) != domain + "-s") continue;
    const std::string_view rest = id.substr(domain.size() + 2);  // SEED-dDDD-NNNN
    const size_t dash = rest.find('-');
    if (dash == std::string_view::npos || !digits(rest.substr(0, dash))) return std::nullopt;
    const std::string_view tail = rest.substr(dash + 1);  // dDDD-NNNN (d1000 at the end of the document)
    const size_t cut = tail.find('-');
    if (tail.empty() || tail[0] != 'd' || cut == std::string_view::npos || (cut != 4 && cut != 5) ||
        !digits(tail.substr(1, cut - 1)) || tail.size() - cut - 1 < 4 || !digits(tail.substr(cut + 1)))
      return std::nullopt;
    const int depth = std::stoi(std::string(tail.substr(1, cut - 1)));
    return depth <= 1000 && (cut == 4 || depth == 1000) ? std::optional<int>(depth) : std::nullopt;
  }
  return std::nullopt;
}

namespace {

// A generated long item's document as a depth sweep: the same document (the draw is the
// item's), scored at every depth instead of asked about.
EvalItem sweep_of(const EvalItem& generated, uint64_t seed, size_t index) {
  nlohmann::json meta = {{"seed", seed}, {"index", index}, {"target_tokens", generated.meta["target_tokens"]}};
  return make_sweep_item(generated.domain + "-s" + std::to_string(seed) + "-sweep-" + gen::pad(static_cast<int64_t>(index), 4),
                         generated.domain, item_document(generated), std::move(meta));
}

}  // namespace

std::vector<EvalItem> generate(const GenerateOptions& options) {
  if (options.n == 0 || options.n > 100000) throw_usage_error("--n must be between 1 and 100000");
  if (!is_known_domain(options.domain))
    throw_usage_error("unknown eval domain \"" + echo_user_text(options.domain) + "\" (" + domain_list_text() + ")");
  if (!options.depths_permille.empty()) {
    if (!is_long_domain(options.domain))
      throw_usage_error("--depth applies to the long domains (retrieval, long_*, long), not " + options.domain);
    for (const int d : options.depths_permille)
      if (d < 0 || d > 1000) throw_usage_error("--depth must be between 0 and 1");
  }
  if (options.sweep) {
    if (!is_long_domain(options.domain))
      throw_usage_error("--sweep applies to the long domains (retrieval, long_*, long), not " + options.domain);
    if (!options.depths_permille.empty())
      throw_usage_error("--sweep scores every depth of each document; it takes no --depth");
  }
  std::vector<std::string> domains;
  if (options.domain == "all") domains = generator_domains();
  else if (options.domain == "long") domains = long_generator_domains();
  else domains.push_back(options.domain);
  std::vector<int> depths = options.depths_permille;
  if (depths.empty()) depths.push_back(kNoDepth);
  std::vector<EvalItem> items;
  for (const std::string& domain : domains) {
    TokenRange range = options.tokens;
    if (range.min == 0 && range.max == 0) range = default_token_range(domain);
    if (const std::string problem = token_range_problem(domain, range); !problem.empty()) throw_usage_error(problem);
    for (size_t i = 0; i < options.n; ++i)
      for (const int depth : depths) {
        EvalItem item = generate_item(domain, options.seed, i, range, depth);
        items.push_back(options.sweep ? sweep_of(item, options.seed, i) : std::move(item));
      }
  }
  return items;
}

}  // namespace kvgate::evalsets
