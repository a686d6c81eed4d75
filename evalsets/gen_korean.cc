// korean: a branch report of customer records in Korean, one paragraph per person (name,
// address, date, amount, phone), and a Korean question whose answer is one of those facts,
// copied exactly from the person's paragraph.
#include <set>
#include <string>
#include <vector>

#include "evalsets/gen_common.h"

namespace kvgate::evalsets::gen {
namespace {

const char* const kSurnames[] = {"김", "이", "박", "최", "정", "강", "조", "윤", "장", "임", "한", "오", "서", "신"};
const char* const kGivenNames[] = {"민준", "서연", "도윤", "지우", "하준", "서윤", "시우", "지민", "예준", "수아",
                                   "주원", "하은", "지호", "채원", "준서", "다은", "현우", "유진", "건우", "소율"};
struct Road {
  const char* region;
  const char* road;
};
const Road kRoads[] = {{"서울특별시 강남구", "테헤란로"},       {"서울특별시 마포구", "월드컵북로"},
                       {"서울특별시 종로구", "세종대로"},       {"부산광역시 해운대구", "센텀중앙로"},
                       {"대구광역시 수성구", "달구벌대로"},     {"인천광역시 연수구", "컨벤시아대로"},
                       {"광주광역시 서구", "상무중앙로"},       {"대전광역시 유성구", "대학로"},
                       {"경기도 성남시 분당구", "판교역로"},    {"제주특별자치도 제주시", "연삼로"}};
const char* const kJobs[] = {"회사원", "교사", "간호사", "개발자", "디자이너", "회계사", "요리사", "연구원"};
const char* const kBranches[] = {"본점", "강남지점", "해운대지점", "판교지점", "종로지점"};

struct Person {
  std::string name, address, date, amount, phone, job;
  int64_t age = 0;
};

std::string korean_date(int day_of_year) {
  int month = 0, day = 0;
  month_day_2024(day_of_year, month, day);
  return "2024년 " + std::to_string(month) + "월 " + std::to_string(day) + "일";
}

std::string record(Rng& rng, const Person& p) {
  switch (rng.below(3)) {
    case 0:
      return p.name + " 씨는 " + p.date + "에 " + p.address + "에 있는 사무실과 임대 계약을 맺었다. 계약 금액은 " +
             p.amount + "이며, 연락처는 " + p.phone + "이다.";
    case 1:
      return p.date + ", " + p.name + " 씨(" + std::to_string(p.age) + "세, " + p.job + ")가 " + p.address +
             "(으)로 주소를 옮겼다. 보증금은 " + p.amount + "이고 전화번호는 " + p.phone + "이다.";
    default:
      return p.name + " 씨(" + p.job + ")는 " + p.date + "에 " + p.address + " 소재 영업점을 방문해 " + p.amount +
             "을 송금했다. 연락처: " + p.phone + ".";
  }
}

}  // namespace

EvalItem make_korean_item(Rng& rng, size_t target) {
  // Each record is ~60 Hangul syllables plus digits: ~170 estimated tokens.
  const size_t n_people = std::clamp<size_t>(target > 150 ? (target - 150) / 170 : 2, 2, 200);
  std::vector<Person> people;
  std::set<std::string> names, phones;
  while (people.size() < n_people) {
    Person p;
    p.name = std::string(pick(rng, kSurnames)) + pick(rng, kGivenNames);
    if (names.size() == std::size(kSurnames) * std::size(kGivenNames)) break;
    if (!names.insert(p.name).second) continue;
    const Road& road = pick(rng, kRoads);
    p.address = std::string(road.region) + " " + road.road + " " + std::to_string(between(rng, 1, 320));
    p.date = korean_date(static_cast<int>(between(rng, 0, 365)));
    p.amount = thousands_text(between(rng, 10, 9999) * 10000 + between(rng, 0, 9) * 1000) + "원";
    do p.phone = "010-" + pad(between(rng, 1000, 9999), 4) + "-" + pad(between(rng, 0, 9999), 4);
    while (!phones.insert(p.phone).second);
    p.job = pick(rng, kJobs);
    p.age = between(rng, 24, 68);
    people.push_back(p);
  }
  std::string text = std::string("다음은 ") + pick(rng, kBranches) + "의 고객 기록 보고서이다.\n\n";
  for (const Person& p : people) text += record(rng, p) + "\n\n";
  const Person& who = people[rng.below(people.size())];
  std::string question, answer, field;
  switch (rng.below(4)) {
    case 0: question = who.name + " 씨의 연락처는 무엇입니까?"; answer = who.phone; field = "phone"; break;
    case 1: question = who.name + " 씨의 기록에 적힌 날짜는 언제입니까?"; answer = who.date; field = "date"; break;
    case 2: question = who.name + " 씨의 기록에 나오는 주소는 무엇입니까?"; answer = who.address; field = "address"; break;
    default: question = who.name + " 씨의 기록에 나오는 금액은 얼마입니까?"; answer = who.amount; field = "amount"; break;
  }
  text += "질문: " + question + "\n정확한 값만 답하십시오.";
  return answer_item("당신은 주어진 자료에 대한 질문에 답합니다. 정확한 값만 답하십시오.", text, answer,
                     {{"person", who.name}, {"field", field}, {"records", people.size()}});
}

EvalItem make_long_korean_item(Rng& rng, size_t target, int depth) {
  // Given names from two syllables, so that thousands of records keep unique names.
  static const char* const kFirst[] = {"민", "서", "도", "지", "하", "시", "예", "수", "주", "채",
                                       "준", "다", "현", "유", "건", "소", "은", "태", "우", "연"};
  static const char* const kSecond[] = {"준", "연", "윤", "우", "민", "아", "원", "은",
                                        "호", "서", "진", "희", "영", "빈", "율", "린"};
  const std::string system = "당신은 주어진 자료에 대한 질문에 답합니다. 정확한 값만 답하십시오.";
  const std::string intro = std::string("다음은 ") + pick(rng, kBranches) + "의 고객 기록 보고서이다.\n\n";
  // The question is ~25 syllables and the answer up to ~20 (an address).
  const size_t fixed = 12 + estimate_tokens(system) + estimate_tokens(intro) + 130;
  std::vector<Person> people;
  std::vector<std::string> units;
  std::set<std::string> names, phones;
  const size_t max_names = std::size(kSurnames) * std::size(kFirst) * std::size(kSecond);
  size_t filled = 0;
  while (names.size() < max_names) {
    Person p;
    p.name = std::string(pick(rng, kSurnames)) + pick(rng, kFirst) + pick(rng, kSecond);
    if (!names.insert(p.name).second) continue;
    const Road& road = pick(rng, kRoads);
    p.address = std::string(road.region) + " " + road.road + " " + std::to_string(between(rng, 1, 320));
    p.date = korean_date(static_cast<int>(between(rng, 0, 365)));
    p.amount = thousands_text(between(rng, 10, 9999) * 10000 + between(rng, 0, 9) * 1000) + "원";
    do p.phone = "010-" + pad(between(rng, 1000, 9999), 4) + "-" + pad(between(rng, 0, 9999), 4);
    while (!phones.insert(p.phone).second);
    p.job = pick(rng, kJobs);
    p.age = between(rng, 24, 68);
    std::string unit = record(rng, p) + "\n\n";
    const size_t t = estimate_tokens(unit);
    if (people.size() >= 2 && fixed + filled + t > target) break;
    filled += t;
    people.push_back(p);
    units.push_back(std::move(unit));
  }
  // The asked person's record starts at the depth.
  const Person& who = people[std::min(depth_index(units, depth), people.size() - 1)];
  std::string question, answer, field;
  switch (rng.below(4)) {
    case 0: question = who.name + " 씨의 연락처는 무엇입니까?"; answer = who.phone; field = "phone"; break;
    case 1: question = who.name + " 씨의 기록에 적힌 날짜는 언제입니까?"; answer = who.date; field = "date"; break;
    case 2: question = who.name + " 씨의 기록에 나오는 주소는 무엇입니까?"; answer = who.address; field = "address"; break;
    default: question = who.name + " 씨의 기록에 나오는 금액은 얼마입니까?"; answer = who.amount; field = "amount"; break;
  }
  const std::string text = intro + join_units(units) + "질문: " + question + "\n정확한 값만 답하십시오.";
  return answer_item(system, text, answer, {{"person", who.name}, {"field", field}, {"records", people.size()}});
}

}  // namespace kvgate::evalsets::gen
