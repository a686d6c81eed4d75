// tables: long order tables (CSV or Markdown) with a lookup, a filtered column sum or a row
// copy. Money is integer cents so every sum in an answer is exact.
#include <string>
#include <vector>

#include "evalsets/gen_common.h"

namespace kvgate::evalsets::gen {
namespace {

struct OrderRow {
  std::string order_id, date, product, region;
  int64_t quantity = 0;
  int64_t unit_cents = 0;
  int64_t amount_cents() const { return quantity * unit_cents; }
};

const char* const kRegions[] = {"North", "South", "East", "West", "Central"};
const char* const kColumns[] = {"order_id", "date", "product_code", "region", "quantity", "unit_price", "amount"};

std::string cell(const OrderRow& r, size_t column) {
  switch (column) {
    case 0: return r.order_id;
    case 1: return r.date;
    case 2: return r.product;
    case 3: return r.region;
    case 4: return std::to_string(r.quantity);
    case 5: return cents_text(r.unit_cents);
    default: return cents_text(r.amount_cents());
  }
}

std::string render_row(const OrderRow& r, bool markdown) {
  std::string line = markdown ? "| " : "";
  for (size_t c = 0; c < 7; ++c) {
    if (c > 0) line += markdown ? " | " : ",";
    line += cell(r, c);
  }
  if (markdown) line += " |";
  return line;
}

std::string render_header(bool markdown) {
  std::string line = markdown ? "| " : "";
  for (size_t c = 0; c < 7; ++c) {
    if (c > 0) line += markdown ? " | " : ",";
    line += kColumns[c];
  }
  if (!markdown) return line;
  line += " |\n|";
  for (size_t c = 0; c < 7; ++c) line += c >= 4 ? "---:|" : "---|";
  return line;
}

}  // namespace

EvalItem make_tables_item(Rng& rng, size_t target) {
  const bool markdown = rng.below(2) == 1;
  const int64_t first_order = between(rng, 10000, 89999);
  int day = static_cast<int>(between(rng, 0, 200));
  // A row is ~35 digits plus separators: ~45 estimated tokens (a little more as Markdown).
  const size_t overhead_tokens = 90;
  const size_t per_row_tokens = markdown ? 50 : 44;
  const size_t rows = std::max<size_t>(8, target > overhead_tokens ? (target - overhead_tokens) / per_row_tokens : 8);
  std::vector<OrderRow> table;
  int64_t order = first_order;
  for (size_t i = 0; i < rows; ++i) {
    OrderRow r;
    order += between(rng, 1, 7);
    day += static_cast<int>(between(rng, 0, 1));
    r.order_id = "ORD-" + std::to_string(order);
    r.date = iso_date(day);
    r.product = std::string(1, static_cast<char>('A' + rng.below(26))) +
                std::string(1, static_cast<char>('A' + rng.below(26))) + "-" + pad(between(rng, 100, 9999), 4);
    r.region = pick(rng, kRegions);
    r.quantity = between(rng, 1, 480);
    r.unit_cents = between(rng, 99, 250000);
    table.push_back(r);
  }
  std::string text = std::string("The following table lists customer orders (") + (markdown ? "Markdown" : "CSV") +
                     "). Amount is quantity times unit price.\n\n" + render_header(markdown) + "\n";
  for (const OrderRow& r : table) text += render_row(r, markdown) + "\n";

  const uint64_t kind = rng.below(3);
  const OrderRow& row = table[rng.below(table.size())];
  std::string question, answer;
  nlohmann::json meta = {{"format", markdown ? "markdown" : "csv"}, {"rows", rows}};
  if (kind == 0) {
    const size_t column = 1 + rng.below(6);
    question = std::string("What is the ") + kColumns[column] + " of order " + row.order_id + "?";
    answer = cell(row, column);
    meta["question"] = "lookup";
    meta["key"] = row.order_id;
    meta["column"] = kColumns[column];
  } else if (kind == 1) {
    const bool money = rng.below(2) == 1;
    const std::string region = row.region;
    int64_t sum = 0;
    for (const OrderRow& r : table)
      if (r.region == region) sum += money ? r.amount_cents() : r.quantity;
    question = std::string("What is the sum of the ") + (money ? "amount" : "quantity") +
               " column over all rows whose region is " + region + "?";
    answer = money ? cents_text(sum) : std::to_string(sum);
    meta["question"] = "sum";
    meta["column"] = money ? "amount" : "quantity";
    meta["region"] = region;
  } else {
    question = "Copy the row for order " + row.order_id + " exactly as it appears in the table.";
    answer = render_row(row, markdown);
    meta["question"] = "row";
    meta["key"] = row.order_id;
  }
  text += "\nQuestion: " + question + "\nAnswer with the exact value only.";
  return answer_item("You answer questions about the data you are given. Reply with the exact value only.", text, answer, meta);
}

EvalItem make_long_tables_item(Rng& rng, size_t target, int depth, size_t cycle) {
  const bool markdown = rng.below(2) == 1;
  const uint64_t kind = cycle % 3;
  const size_t block = static_cast<size_t>(between(rng, 3, 6));  // rows summed by a sum question
  const std::string intro = std::string("The following table lists customer orders (") + (markdown ? "Markdown" : "CSV") +
                            "). Amount is quantity times unit price.\n\n" + render_header(markdown) + "\n";
  const std::string system = "You answer questions about the data you are given. Reply with the exact value only.";
  // The question and answer are at most ~120 estimated tokens (a copied row, two order ids).
  const size_t fixed = 12 + estimate_tokens(system) + estimate_tokens(intro) + 120;
  std::vector<std::string> lines;
  std::vector<OrderRow> table;
  int64_t order = between(rng, 10000, 89999);
  int day = static_cast<int>(between(rng, 0, 200));
  size_t filled = 0;
  while (true) {
    OrderRow r;
    order += between(rng, 1, 7);
    if (rng.below(8) == 0) day = (day + 1) % 366;
    r.order_id = "ORD-" + std::to_string(order);
    r.date = iso_date(day);
    r.product = std::string(1, static_cast<char>('A' + rng.below(26))) +
                std::string(1, static_cast<char>('A' + rng.below(26))) + "-" + pad(between(rng, 100, 9999), 4);
    r.region = pick(rng, kRegions);
    r.quantity = between(rng, 1, 480);
    r.unit_cents = between(rng, 99, 250000);
    std::string line = render_row(r, markdown) + "\n";
    const size_t t = estimate_tokens(line);
    if (table.size() >= block + 1 && fixed + filled + t > target) break;
    filled += t;
    table.push_back(r);
    lines.push_back(std::move(line));
  }
  // The evidence row (the first of a summed block) starts at the depth.
  size_t at = std::min(depth_index(lines, depth), table.size() - 1);
  std::string text = intro + join_units(lines);
  std::string question, answer;
  nlohmann::json meta = {{"format", markdown ? "markdown" : "csv"}, {"rows", table.size()}};
  const OrderRow& row = table[at];
  if (kind == 0) {
    const size_t column = 1 + rng.below(6);
    question = std::string("What is the ") + kColumns[column] + " of order " + row.order_id + "?";
    answer = cell(row, column);
    meta["question"] = "lookup";
    meta["key"] = row.order_id;
    meta["column"] = kColumns[column];
  } else if (kind == 1) {
    at = std::min(at, table.size() - block);
    const bool money = rng.below(2) == 1;
    int64_t sum = 0;
    for (size_t i = at; i < at + block; ++i) sum += money ? table[i].amount_cents() : table[i].quantity;
    question = std::string("What is the sum of the ") + (money ? "amount" : "quantity") + " column over the " +
               std::to_string(block) + " consecutive rows from order " + table[at].order_id + " to order " +
               table[at + block - 1].order_id + " (both included)?";
    answer = money ? cents_text(sum) : std::to_string(sum);
    meta["question"] = "block_sum";
    meta["column"] = money ? "amount" : "quantity";
    meta["first"] = table[at].order_id;
    meta["last"] = table[at + block - 1].order_id;
  } else {
    question = "Copy the row for order " + row.order_id + " exactly as it appears in the table.";
    answer = render_row(row, markdown);
    meta["question"] = "row";
    meta["key"] = row.order_id;
  }
  text += "\nQuestion: " + question + "\nAnswer with the exact value only.";
  return answer_item(system, text, answer, meta);
}

}  // namespace kvgate::evalsets::gen
