#include "evalsets/unified_diff.h"

#include <algorithm>
#include <cstddef>

namespace kvgate::evalsets {
namespace {

enum class Op { equal, remove, add };
struct Edit {
  Op op;
  size_t old_index;  // line index in old (equal/remove) — for add, the old position it precedes
  size_t new_index;  // line index in new (equal/add) — for remove, the new position it precedes
};

std::string range_text(size_t start_line, size_t count) {
  // GNU convention: an empty range names the line before it; a one-line range omits ",1".
  if (count == 0) return std::to_string(start_line) + ",0";
  if (count == 1) return std::to_string(start_line + 1);
  return std::to_string(start_line + 1) + "," + std::to_string(count);
}

}  // namespace

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

std::string unified_hunks(const std::vector<std::string>& a, const std::vector<std::string>& b, int context) {
  const size_t n = a.size(), m = b.size();
  // lcs[i][j] = length of the longest common subsequence of a[i..] and b[j..].
  std::vector<std::vector<uint32_t>> lcs(n + 1, std::vector<uint32_t>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::vector<Edit> edits;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      edits.push_back({Op::equal, i++, j++});
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      edits.push_back({Op::remove, i++, j});
    } else {
      edits.push_back({Op::add, i, j++});
    }
  }
  std::string out;
  const size_t ctx = static_cast<size_t>(context);
  size_t e = 0;
  while (e < edits.size()) {
    while (e < edits.size() && edits[e].op == Op::equal) ++e;
    if (e == edits.size()) break;
    // Extend the hunk while the next change is within 2 * context equal lines.
    size_t first = e >= ctx ? e - ctx : 0;
    size_t last_change = e;
    size_t k = e;
    while (k < edits.size()) {
      if (edits[k].op != Op::equal) {
        last_change = k;
        ++k;
        continue;
      }
      size_t run = k;
      while (run < edits.size() && edits[run].op == Op::equal) ++run;
      if (run == edits.size() || run - k > 2 * ctx) break;
      k = run;
    }
    const size_t end = std::min(edits.size(), last_change + 1 + ctx);
    size_t old_count = 0, new_count = 0;
    for (size_t x = first; x < end; ++x) {
      if (edits[x].op != Op::add) ++old_count;
      if (edits[x].op != Op::remove) ++new_count;
    }
    out += "@@ -" + range_text(edits[first].old_index, old_count) + " +" + range_text(edits[first].new_index, new_count) +
           " @@\n";
    for (size_t x = first; x < end; ++x) {
      const char mark = edits[x].op == Op::equal ? ' ' : edits[x].op == Op::remove ? '-' : '+';
      out += mark;
      out += edits[x].op == Op::add ? b[edits[x].new_index] : a[edits[x].old_index];
      out += '\n';
    }
    e = end;
  }
  return out;
}

}  // namespace kvgate::evalsets
