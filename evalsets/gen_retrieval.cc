// retrieval: RULER-style synthetic long-context tasks over a haystack of plain filler prose
// (composed here, digit-free so that no filler number can be mistaken for a needle):
//   niah_single      one "special magic" needle, asked back;
//   niah_multikey    the asked needle among needles with other keys;
//   niah_multivalue  four values for one key, asked back in the order they appear;
//   variable_tracking  a chain of VAR assignments (and a distractor chain), asked for every
//                      variable that ends up holding a value;
//   two_hop          "P works in the O office" far from "the door code of the O office is V".
// Needle values are 7-digit numbers, UUIDs or Korean word pairs.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "evalsets/gen_common.h"

namespace kvgate::evalsets::gen {
namespace {

const char* const kPlaces[] = {"The river",    "The old bridge", "The market square", "The northern road", "The library",
                               "The bakery",   "The harbour",    "The hill path",     "The town hall",     "The orchard",
                               "The station",  "The workshop",   "The chapel",        "The lighthouse",    "The school",
                               "The mill",     "The ferry",      "The garden",        "The museum",        "The inn"};
const char* const kHappenings[] = {
    "was busy long before sunrise",        "looked different after the rain",   "drew visitors from the whole valley",
    "needed repairs every spring",         "stayed open late through summer",   "was painted a pale shade of green",
    "smelled of bread and wood smoke",     "was quiet for most of the week",    "filled with music on feast days",
    "was where the children met",          "had changed hands many times",      "was mentioned in every old letter",
    "lost its roof in a winter storm",     "was rebuilt with stone from the quarry", "was the pride of the old mayor",
    "gave its name to the nearby street",  "was lit with lanterns at dusk",     "stood empty after the floods",
    "welcomed travellers from the coast",  "was known for its patient keeper"};
const char* const kOpeners[] = {"", "", "Later, ", "In the evening, ", "Most days, ", "According to the locals, ",
                                "Every autumn, ", "For a while, ", "Even now, ", "Once again, "};
const char* const kAdjectives[] = {"amber",  "brisk",  "calm",   "dusky", "eager",  "frosty", "gentle", "hollow",
                                   "ivory",  "jolly",  "keen",   "lively", "mellow", "noble", "olive",  "proud",
                                   "quiet",  "rustic", "silver", "tidy",  "upbeat", "vivid",  "woolly", "zesty"};
const char* const kKeyNouns[] = {"lantern", "harbor", "meadow", "falcon", "compass", "thimble", "orchid", "glacier",
                                 "pebble",  "saddle", "violin", "beacon", "quarry",  "walnut",  "tunnel", "marble"};
const char* const kKoreanAdjectives[] = {"푸른", "조용한", "따뜻한", "오래된", "작은", "밝은", "깊은", "빠른", "둥근", "맑은"};
const char* const kKoreanNouns[] = {"등대", "바람개비", "소나무", "징검다리", "은하수", "주전자", "나침반", "우체통",
                                    "연못", "돛단배", "종소리", "기와집"};
const char* const kFirstNames[] = {"Alice", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Grace", "Hiro",
                                   "Ines",  "Jonas", "Keira", "Luca",   "Maya",  "Nadia", "Omar",  "Priya"};
const char* const kLastNames[] = {"Abbott", "Brennan", "Castillo", "Dalton", "Eriksen", "Fischer", "Garland", "Holloway",
                                  "Iverson", "Jensen", "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov"};
const char* const kOffices[] = {"Lisbon", "Oslo",   "Nairobi", "Quito",    "Hanoi",   "Tbilisi", "Dublin", "Perth",
                                "Osaka",  "Bergen", "Porto",   "Valencia", "Krakow",  "Tallinn", "Austin", "Denver"};

enum class ValueKind { number, uuid, korean };
const char* const kTasks[] = {"niah_single", "niah_multikey", "niah_multivalue", "variable_tracking", "two_hop"};

std::string filler_paragraph(Rng& rng) {
  std::string p;
  const int64_t sentences = between(rng, 4, 7);
  for (int64_t i = 0; i < sentences; ++i) {
    std::string opener = pick(rng, kOpeners);
    std::string place = pick(rng, kPlaces);
    if (!opener.empty()) place[0] = static_cast<char>(place[0] - 'A' + 'a');
    p += (i ? " " : "") + opener + place + " " + pick(rng, kHappenings) + ".";
  }
  return p + "\n\n";
}

std::string make_value(Rng& rng, ValueKind kind) {
  switch (kind) {
    case ValueKind::number: return std::to_string(between(rng, 1000000, 9999999));
    case ValueKind::uuid: {
      static const char kHex[] = "0123456789abcdef";
      std::string u;
      for (int i = 0; i < 32; ++i) {
        if (i == 8 || i == 12 || i == 16 || i == 20) u += '-';
        u += kHex[rng.below(16)];
      }
      return u;
    }
    default: return std::string(pick(rng, kKoreanAdjectives)) + " " + pick(rng, kKoreanNouns);
  }
}

const char* value_label(ValueKind kind, bool plural) {
  switch (kind) {
    case ValueKind::number: return plural ? "numbers" : "number";
    case ValueKind::uuid: return plural ? "UUIDs" : "UUID";
    default: return plural ? "Korean words" : "Korean word";
  }
}

std::string needle(ValueKind kind, const std::string& key, const std::string& value) {
  return std::string("One of the special magic ") + value_label(kind, true) + " for " + key + " is: " + value + ".\n\n";
}

// Draws values until one is new, so that every needle of an item is unambiguous.
std::string unique_value(Rng& rng, ValueKind kind, std::set<std::string>& used) {
  std::string v;
  do v = make_value(rng, kind);
  while (!used.insert(v).second);
  return v;
}

std::string unique_key(Rng& rng, std::set<std::string>& used) {
  std::string k;
  do k = std::string(pick(rng, kAdjectives)) + "-" + pick(rng, kKeyNouns);
  while (!used.insert(k).second);
  return k;
}

std::string variable_name(Rng& rng, std::set<std::string>& used) {
  std::string name;
  do {
    name.clear();
    for (int i = 0; i < 5; ++i) name += static_cast<char>('A' + rng.below(26));
  } while (name == "VALUE" || !used.insert(name).second);
  return name;
}

// Inserts at the index depth_index gives, but never before `floor` (keeps chains in order).
size_t insert_at_depth(std::vector<std::string>& units, const std::string& unit, int depth, size_t floor = 0) {
  const size_t at = std::max(depth_index(units, depth), floor);
  units.insert(units.begin() + static_cast<long>(at), unit);
  return at;
}

void insert_at_random(Rng& rng, std::vector<std::string>& units, const std::string& unit) {
  units.insert(units.begin() + static_cast<long>(rng.below(units.size() + 1)), unit);
}

}  // namespace

EvalItem make_retrieval_item(Rng& rng, size_t target, int depth, size_t cycle) {
  const size_t task = cycle % std::size(kTasks);
  const ValueKind kind = static_cast<ValueKind>(cycle % 3);
  std::set<std::string> keys, values;
  // Evidence first (its size is known before the haystack is filled), then placed by depth.
  std::string intro, question, answer;
  nlohmann::json meta = {{"task", kTasks[task]}};
  std::vector<std::string> distractors;  // placed at random, or at decoy_depths in order
  std::vector<int> decoy_depths;
  std::vector<std::pair<std::string, int>> evidence;  // (unit, depth), placed in this order
  if (task <= 2) {
    intro = std::string("Some special magic ") + value_label(kind, true) +
            " are hidden within the following text. Make sure to memorize them. I will quiz you about them afterwards.\n\n";
    const std::string key = unique_key(rng, keys);
    const std::string value = unique_value(rng, kind, values);
    meta["key"] = key;
    meta["value_kind"] = value_label(kind, false);
    if (task == 0) {
      question = std::string("What is the special magic ") + value_label(kind, false) + " for " + key +
                 " mentioned in the provided text?";
      answer = value;
    } else if (task == 1) {
      for (int i = 0; i < 3; ++i) distractors.push_back(needle(kind, unique_key(rng, keys), unique_value(rng, kind, values)));
      question = std::string("What is the special magic ") + value_label(kind, false) + " for " + key +
                 " mentioned in the provided text?";
      answer = value;
    } else {
      for (int i = 0; i < 3; ++i) distractors.push_back(needle(kind, key, unique_value(rng, kind, values)));
      question = std::string("What are all the special magic ") + value_label(kind, true) + " for " + key +
                 " mentioned in the provided text? List them in the order they appear, separated by commas.";
    }
    evidence.push_back({needle(kind, key, value), depth});
  } else if (task == 3) {
    intro = "Memorize and track the chains of variable assignments hidden in the following text.\n\n";
    std::set<std::string> names;
    const int64_t value = between(rng, 10000, 99999);
    int64_t other = value;
    while (other == value) other = between(rng, 10000, 99999);
    std::vector<std::string> chain, decoy;
    for (int i = 0; i < 4; ++i) chain.push_back(variable_name(rng, names));
    for (int i = 0; i < 4; ++i) decoy.push_back(variable_name(rng, names));
    // The decoy chain goes in at sorted random depths, in order, before the asked chain.
    for (int i = 0; i < 4; ++i) decoy_depths.push_back(static_cast<int>(rng.below(1001)));
    std::sort(decoy_depths.begin(), decoy_depths.end());
    for (int i = 0; i < 4; ++i)
      distractors.push_back("VAR " + decoy[i] + " = " + (i == 0 ? std::to_string(other) : "VAR " + decoy[i - 1]) + ".\n\n");
    // The chain ends at the depth and starts half a document before it (or at the start).
    const int first = std::max(0, depth - 500);
    for (int i = 0; i < 4; ++i)
      evidence.push_back({"VAR " + chain[i] + " = " + (i == 0 ? std::to_string(value) : "VAR " + chain[i - 1]) + ".\n\n",
                          first + (depth - first) * i / 3});
    question = "Find all variables that are assigned the value " + std::to_string(value) +
               " in the text above, directly or through other variables. List their names in the order they are "
               "assigned, separated by spaces.";
    for (size_t i = 0; i < chain.size(); ++i) answer += (i ? " " : "") + chain[i];
    meta["value"] = std::to_string(value);
  } else {
    intro = "The following text mentions where people work and the door codes of offices. Read it carefully.\n\n";
    std::vector<size_t> offices(std::size(kOffices));
    for (size_t i = 0; i < offices.size(); ++i) offices[i] = i;
    shuffle(rng, offices);
    std::set<std::string> people;
    std::vector<std::string> names;
    for (int i = 0; i < 6; ++i) {
      std::string name;
      do name = std::string(pick(rng, kFirstNames)) + " " + pick(rng, kLastNames);
      while (!people.insert(name).second);
      names.push_back(name);
    }
    std::vector<std::string> codes;
    for (int i = 0; i < 6; ++i) codes.push_back(unique_value(rng, kind, values));
    auto works = [&](int i) { return names[i] + " works in the " + kOffices[offices[i]] + " office.\n\n"; };
    auto code = [&](int i) {
      return std::string("The door code of the ") + kOffices[offices[i]] + " office is " + codes[i] + ".\n\n";
    };
    for (int i = 1; i < 6; ++i) {
      distractors.push_back(works(i));
      distractors.push_back(code(i));
    }
    evidence.push_back({code(0), depth});
    evidence.push_back({works(0), partner_depth(depth)});
    question = "What is the door code of the office where " + names[0] + " works?";
    answer = codes[0];
    meta["person"] = names[0];
    meta["office"] = kOffices[offices[0]];
    meta["value_kind"] = value_label(kind, false);
  }
  const std::string system = "You answer questions about the text you are given. Reply with the exact answer only.";
  const std::string tail = "Question: " + question + "\nAnswer with the exact answer only.";
  size_t fixed = 12 + estimate_tokens(system) + estimate_tokens(intro) + estimate_tokens(tail);
  for (const auto& d : distractors) fixed += estimate_tokens(d);
  for (const auto& e : evidence) fixed += estimate_tokens(e.first);
  fixed += task == 2 ? 4 * estimate_tokens(evidence[0].first) / 3 : estimate_tokens(answer);  // the gold answer
  std::vector<std::string> units;
  size_t filled = 0;
  while (true) {
    std::string p = filler_paragraph(rng);
    const size_t t = estimate_tokens(p);
    if (units.size() >= 2 && fixed + filled + t > target) break;
    filled += t;
    units.push_back(std::move(p));
  }
  size_t floor = 0;
  for (size_t i = 0; i < distractors.size(); ++i) {
    if (decoy_depths.empty()) insert_at_random(rng, units, distractors[i]);
    else floor = insert_at_depth(units, distractors[i], decoy_depths[i], floor) + 1;
  }
  floor = 0;
  for (const auto& [unit, d] : evidence) floor = insert_at_depth(units, unit, d, task == 3 ? floor : 0) + 1;
  std::string document = join_units(units);
  if (task == 2) {
    // The values in the order they appear in the document.
    std::vector<std::pair<size_t, std::string>> found;
    const std::string prefix = std::string("One of the special magic ") + value_label(kind, true) + " for " +
                               meta["key"].get<std::string>() + " is: ";
    for (size_t at = document.find(prefix); at != std::string::npos; at = document.find(prefix, at + 1)) {
      const size_t begin = at + prefix.size();
      found.push_back({at, document.substr(begin, document.find(".\n", begin) - begin)});
    }
    for (size_t i = 0; i < found.size(); ++i) answer += (i ? ", " : "") + found[i].second;
  }
  while (document.ends_with("\n")) document.pop_back();
  return answer_item(system, intro + document + "\n\n" + tail, answer, meta);
}

}  // namespace kvgate::evalsets::gen
