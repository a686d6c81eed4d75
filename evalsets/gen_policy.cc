// policy: a numbered company policy (sections, clauses 1.1, sub-items (a)) in which some
// rules carry a limit or deadline "except as provided in X.Y", and X.Y elsewhere states the
// exception. Questions ask for the rule in a case that needs the cross-referenced clause (or,
// as a control, the case the base clause itself covers).
#include <algorithm>
#include <string>
#include <vector>

#include "evalsets/gen_common.h"

namespace kvgate::evalsets::gen {
namespace {

enum class Unit { dollars, days, hours };

struct Topic {
  const char* section_title;
  const char* base;       // "{V}" = base value, "{X}" = exception clause id
  const char* exception;  // "{V}" = exception value, "{B}" = base clause id
  const char* base_question;
  const char* exception_question;
  Unit unit;
  int64_t lo, hi;  // base value range; the exception is strictly larger
};

const Topic kTopics[] = {
    {"Travel", "An employee may claim travel expenses of no more than {V} per trip, except as provided in {X}.",
     "For international travel approved in writing by a director, the limit in {B} is {V} per trip.",
     "What is the most an employee may claim for a domestic trip?",
     "What is the most an employee may claim for an international trip approved in writing by a director?",
     Unit::dollars, 800, 3000},
    {"Equipment", "A team lead may approve equipment purchases of no more than {V} per item, except as provided in {X}.",
     "Where equipment replaces an item that failed in service, a team lead may approve up to {V} per item, notwithstanding {B}.",
     "Up to what amount per item may a team lead approve a new equipment purchase?",
     "Up to what amount per item may a team lead approve equipment that replaces an item that failed in service?",
     Unit::dollars, 500, 2500},
    {"Expense claims", "Expense claims must be submitted within {V} of the expense, except as provided in {X}.",
     "Claims for conference expenses may be submitted within {V} of the conference's last day, instead of the period in {B}.",
     "Within what period must an ordinary expense claim be submitted?",
     "Within what period may a claim for conference expenses be submitted?", Unit::days, 14, 45},
    {"Refunds", "Customers may request a refund within {V} of delivery, except as provided in {X}.",
     "Products found defective may be returned for a refund within {V} of delivery, extending the period in {B}.",
     "Within what period may a customer request a refund for a product that is not defective?",
     "Within what period may a customer return a defective product for a refund?", Unit::days, 7, 30},
    {"Data retention", "Access logs are kept for no more than {V}, except as provided in {X}.",
     "Access logs subject to an open security investigation are kept for {V}, overriding {B}.",
     "For how long are ordinary access logs kept at most?",
     "For how long are access logs kept when they are subject to an open security investigation?", Unit::days, 30, 120},
    {"Incidents", "Staff must report a security incident within {V} of discovering it, except as provided in {X}.",
     "An incident that involves no personal data may be reported within {V}, instead of the period in {B}.",
     "Within what period must staff report a security incident that involves personal data?",
     "Within what period may staff report a security incident that involves no personal data?", Unit::hours, 4, 48},
    {"Gifts", "Employees may accept gifts worth no more than {V} per year from one supplier, except as provided in {X}.",
     "Gifts received at an official ceremony may be worth up to {V}, notwithstanding {B}.",
     "What is the most a gift from one supplier may be worth in a year?",
     "What is the most a gift received at an official ceremony may be worth?", Unit::dollars, 50, 400},
};

const char* const kFiller[] = {
    "The policy owner reviews this section every {N} months.",
    "Approvals under this section are recorded in the finance system within {N} business days.",
    "Records created under this section are kept for {N} years.",
    "A manager who grants an approval under this section may not delegate it to more than {N} people.",
    "Questions about this section go to the policy office, which answers within {N} business days.",
    "Training on this section is repeated every {N} months for affected staff.",
};

std::string value_text(Unit unit, int64_t v) {
  switch (unit) {
    case Unit::dollars: {
      std::string s = "$";  // appended, not "$" + ..., which trips g++ 12's -Wrestrict false positive
      return s += thousands_text(v);
    }
    case Unit::days: return std::to_string(v) + " days";
    default: return std::to_string(v) + " hours";
  }
}

std::string substitute(std::string s, const std::string& key, const std::string& value) {
  const size_t at = s.find(key);
  if (at != std::string::npos) s.replace(at, key.size(), value);
  return s;
}

int64_t round_value(Unit unit, int64_t v) { return unit == Unit::dollars && v >= 100 ? v / 50 * 50 : v; }

struct Clause {
  std::string id, text;
};

}  // namespace

EvalItem make_policy_item(Rng& rng, size_t target) {
  std::vector<size_t> topic_order(std::size(kTopics));
  for (size_t i = 0; i < topic_order.size(); ++i) topic_order[i] = i;
  shuffle(rng, topic_order);
  const size_t n_topics = std::min<size_t>(topic_order.size(), std::clamp<size_t>(target / 250 + 1, 2, 7));
  // ~25 tokens per filler clause; sections get clauses until the target is reached.
  const size_t n_sections = std::clamp<size_t>(target / 150, n_topics + 1, 40);
  const size_t total_clauses = std::max<size_t>(n_sections * 2, target > 150 ? (target - 150) / 25 : 0);
  std::vector<std::vector<std::string>> section_clauses(n_sections);  // texts with {ref} markers resolved later
  std::vector<std::string> titles(n_sections);
  // Base clauses go in the first sections, each in its own section; exceptions go later, each
  // in a different section, so answering needs the cross-reference.
  struct Placed {
    size_t topic, base_section, base_pos, exc_section, exc_pos;
    int64_t base_value, exc_value;
  };
  std::vector<Placed> placed;
  for (size_t t = 0; t < n_topics; ++t) {
    const Topic& topic = kTopics[topic_order[t]];
    Placed p{};
    p.topic = topic_order[t];
    p.base_value = round_value(topic.unit, between(rng, topic.lo, topic.hi));
    p.exc_value = round_value(topic.unit, p.base_value + between(rng, std::max<int64_t>(1, topic.lo / 2), topic.hi));
    if (p.exc_value <= p.base_value) p.exc_value = p.base_value + (topic.unit == Unit::dollars ? 50 : 1);
    p.base_section = t;
    titles[t] = topic.section_title;
    placed.push_back(p);
  }
  for (size_t s = n_topics; s < n_sections; ++s) titles[s] = s + 1 == n_sections ? "Exceptions" : "General provisions";
  // Filler first so that the clause positions below are final when ids are assigned.
  for (size_t c = 0; c < total_clauses; ++c)
    section_clauses[c % n_sections].push_back(
        substitute(pick(rng, kFiller), "{N}", std::to_string(between(rng, 2, 36))));
  for (Placed& p : placed) {
    auto& base_list = section_clauses[p.base_section];
    p.base_pos = rng.below(base_list.size() + 1);
    base_list.insert(base_list.begin() + static_cast<long>(p.base_pos), "{BASE}");
    p.exc_section = n_topics + rng.below(n_sections - n_topics);
  }
  for (Placed& p : placed) {
    auto& list = section_clauses[p.exc_section];
    const size_t pos = rng.below(list.size() + 1);
    list.insert(list.begin() + static_cast<long>(pos), "{EXC" + std::to_string(p.topic) + "}");
  }
  // Resolve positions to clause ids now that every list is complete.
  auto find_id = [&](size_t section, const std::string& marker) {
    const auto& list = section_clauses[section];
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i] == marker) return std::to_string(section + 1) + "." + std::to_string(i + 1);
    return std::string();
  };
  std::string text = "EMPLOYEE AND CUSTOMER POLICY\n\n";
  std::vector<std::string> base_ids(std::size(kTopics)), exc_ids(std::size(kTopics));
  for (const Placed& p : placed) {
    base_ids[p.topic] = find_id(p.base_section, "{BASE}");
    exc_ids[p.topic] = find_id(p.exc_section, "{EXC" + std::to_string(p.topic) + "}");
  }
  for (size_t s = 0; s < n_sections; ++s) {
    text += std::to_string(s + 1) + ". " + titles[s] + "\n";
    for (size_t i = 0; i < section_clauses[s].size(); ++i) {
      std::string body = section_clauses[s][i];
      for (const Placed& p : placed) {
        const Topic& topic = kTopics[p.topic];
        if (body == "{BASE}" && s == p.base_section)
          body = substitute(substitute(topic.base, "{V}", value_text(topic.unit, p.base_value)), "{X}", exc_ids[p.topic]);
        else if (body == "{EXC" + std::to_string(p.topic) + "}")
          body = substitute(substitute(topic.exception, "{V}", value_text(topic.unit, p.exc_value)), "{B}", base_ids[p.topic]);
      }
      text += std::to_string(s + 1) + "." + std::to_string(i + 1) + " " + body + "\n";
      if (i == 0 && s % 3 == 2)
        text += "  (a) the request names the cost centre;\n  (b) the request is dated;\n  (c) the approver is named.\n";
    }
    text += "\n";
  }
  const Placed& asked = placed[rng.below(placed.size())];
  const Topic& topic = kTopics[asked.topic];
  const bool exception = rng.below(4) != 0;
  const std::string question = exception ? topic.exception_question : topic.base_question;
  const std::string answer = value_text(topic.unit, exception ? asked.exc_value : asked.base_value);
  text += "Question: " + question + "\nAnswer with the exact value only.";
  return answer_item("You answer questions about the policy you are given. Reply with the exact value only.", text, answer,
                     {{"question", exception ? "exception" : "base"},
                      {"base_clause", base_ids[asked.topic]},
                      {"exception_clause", exc_ids[asked.topic]}});
}

EvalItem make_long_policy_item(Rng& rng, size_t target, int depth) {
  static const char* const kTitles[] = {"General provisions", "Approvals", "Records", "Reviews", "Training",
                                        "Delegation", "Reporting", "Exceptions"};
  constexpr size_t kPerSection = 8;
  std::vector<size_t> topic_order(std::size(kTopics));
  for (size_t i = 0; i < topic_order.size(); ++i) topic_order[i] = i;
  shuffle(rng, topic_order);
  // The asked topic plus up to three others whose rules and exceptions are placed at random.
  const size_t n_topics = 4;
  struct Placed {
    size_t topic;
    int64_t base_value, exc_value;
  };
  std::vector<Placed> placed;
  for (size_t t = 0; t < n_topics; ++t) {
    const Topic& topic = kTopics[topic_order[t]];
    Placed p{topic_order[t], round_value(topic.unit, between(rng, topic.lo, topic.hi)), 0};
    p.exc_value = round_value(topic.unit, p.base_value + between(rng, std::max<int64_t>(1, topic.lo / 2), topic.hi));
    if (p.exc_value <= p.base_value) p.exc_value = p.base_value + (topic.unit == Unit::dollars ? 50 : 1);
    placed.push_back(p);
  }
  const Topic& asked = kTopics[placed[0].topic];
  const std::string system = "You answer questions about the policy you are given. Reply with the exact value only.";
  const std::string tail = std::string("Question: ") + asked.exception_question + "\nAnswer with the exact value only.";
  // Each clause carries ~6 tokens of numbering; section headings ~8 per 8 clauses.
  size_t fixed = 12 + estimate_tokens(system) + estimate_tokens(tail) + 20;
  for (const Placed& p : placed) fixed += 2 * 6 + estimate_tokens(kTopics[p.topic].base) + estimate_tokens(kTopics[p.topic].exception) + 10;
  std::vector<std::string> clauses;  // bodies; "{BASEk}" / "{EXCk}" mark topic k's clauses until ids are known
  size_t filled = 0;
  while (true) {
    std::string body = substitute(pick(rng, kFiller), "{N}", std::to_string(between(rng, 2, 36)));
    const size_t t = estimate_tokens(body) + 6 + (clauses.size() % kPerSection == 0 ? 8 : 0);
    if (clauses.size() >= 4 && fixed + filled + t > target) break;
    filled += t;
    clauses.push_back(std::move(body));
  }
  auto index_of = [&](const std::string& marker) {
    return static_cast<size_t>(std::find(clauses.begin(), clauses.end(), marker) - clauses.begin());
  };
  // Other topics: a rule, and its exception somewhere after it.
  for (size_t t = 1; t < n_topics; ++t) {
    const size_t a = rng.below(clauses.size() + 1);
    clauses.insert(clauses.begin() + static_cast<long>(a), "{BASE" + std::to_string(t) + "}");
    const size_t b = a + 1 + rng.below(clauses.size() - a);
    clauses.insert(clauses.begin() + static_cast<long>(b), "{EXC" + std::to_string(t) + "}");
  }
  // The asked exception starts at the depth; the rule it overrides sits half a document before
  // it (or at the start), so that reading the exception right needs the whole span.
  const size_t exc_at = depth_index(clauses, depth);
  clauses.insert(clauses.begin() + static_cast<long>(exc_at), "{EXC0}");
  const size_t base_at = std::min(depth_index(clauses, std::max(0, depth - 500)), index_of("{EXC0}"));
  clauses.insert(clauses.begin() + static_cast<long>(base_at), "{BASE0}");
  auto id_of = [&](size_t i) { return std::to_string(i / kPerSection + 1) + "." + std::to_string(i % kPerSection + 1); };
  std::string text = "EMPLOYEE AND CUSTOMER POLICY\n\n";
  for (size_t i = 0; i < clauses.size(); ++i) {
    if (i % kPerSection == 0) {
      if (i > 0) text += "\n";
      text += std::to_string(i / kPerSection + 1) + ". " + pick(rng, kTitles) + "\n";
    }
    std::string body = clauses[i];
    for (size_t t = 0; t < n_topics; ++t) {
      const Topic& topic = kTopics[placed[t].topic];
      const std::string k = std::to_string(t);
      if (body == "{BASE" + k + "}")
        body = substitute(substitute(topic.base, "{V}", value_text(topic.unit, placed[t].base_value)), "{X}",
                          id_of(index_of("{EXC" + k + "}")));
      else if (body == "{EXC" + k + "}")
        body = substitute(substitute(topic.exception, "{V}", value_text(topic.unit, placed[t].exc_value)), "{B}",
                          id_of(index_of("{BASE" + k + "}")));
    }
    text += id_of(i) + " " + body + "\n";
  }
  text += "\n" + tail;
  return answer_item(system, text, value_text(asked.unit, placed[0].exc_value),
                     {{"question", "exception"},
                      {"base_clause", id_of(index_of("{BASE0}"))},
                      {"exception_clause", id_of(index_of("{EXC0}"))},
                      {"clauses", clauses.size()}});
}

}  // namespace kvgate::evalsets::gen
