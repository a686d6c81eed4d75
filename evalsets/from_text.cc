// evalset from-text: continuation and fact-completion items from the user's documents.
// Rule (docs/evalsets.md): paragraphs are read in order; each item's text is up to
// context_tokens of preceding paragraphs plus one more paragraph. The "continuation" item
// scores that whole paragraph (cut at a sentence end when long); the "fact" item scores the
// first number in it, with the text ending at the end of that number's sentence. With --sweep
// each file is instead cut into documents of context_tokens, each a depth sweep.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "evalsets/importers.h"
#include "evalsets/sweep.h"
#include "evalsets/utf8.h"

namespace kvgate::evalsets {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMinScoredBytes = 20;
constexpr size_t kMaxDocumentBytes = 64u << 20;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// End (exclusive) of the sentence that contains `pos`: after ". ", "? ", "! " or a newline.
size_t sentence_end(const std::string& p, size_t pos) {
  for (size_t i = pos; i < p.size(); ++i) {
    if (p[i] == '\n') return i;
    if ((p[i] == '.' || p[i] == '?' || p[i] == '!') && (i + 1 == p.size() || p[i + 1] == ' ' || p[i + 1] == '\n')) {
      // A '.' between digits (3.5) does not end a sentence; the check above already requires a space.
      return i + 1;
    }
  }
  return p.size();
}

// The longest prefix of p no longer than max_bytes that ends at a sentence end, or at a
// code-point boundary when no sentence ends early enough.
size_t cut_point(const std::string& p, size_t max_bytes) {
  if (p.size() <= max_bytes) return p.size();
  size_t best = 0;
  for (size_t end = sentence_end(p, 0); end <= max_bytes && end < p.size(); end = sentence_end(p, end + 1)) best = end;
  if (best > 0) return best;
  size_t cut = max_bytes;
  while (cut > 0 && !on_code_point_boundary(p, cut)) --cut;
  return cut;
}

std::string read_document(const fs::path& path) { return read_whole_file(path.string(), kMaxDocumentBytes); }

std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& c : ext)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return ext;
}

// --sweep: the file's paragraphs (normalized as split_paragraphs does) cut into consecutive
// documents of at most context_tokens estimated tokens. A document under kSweepMinFillPercent of
// that (a file's tail, or a short file) is skipped as short, so that every document reaches the
// same depth and every position bucket up to it holds all of them.
void add_sweep_items(const std::string& text, size_t file_index, const std::string& relative,
                     const FromTextOptions& options, ImportReport& report) {
  std::string document;
  for (const std::string& p : split_paragraphs(text)) document += (document.empty() ? "" : "\n\n") + p;
  size_t from = 0;
  for (size_t chunk = 0; from < document.size(); ++chunk) {
    size_t cut = sweep_cut(document, from, options.context_tokens);
    if (cut == from) {
      // Not one word fits: the word is skipped as huge.
      cut = document.find_first_of(" \n", from + 1);
      if (cut == std::string::npos) cut = document.size();
      ++report.skipped_huge;
    } else {
      std::string piece = document.substr(from, cut - from);
      if (estimate_tokens(piece) * 100 < options.context_tokens * kSweepMinFillPercent ||
          sweep_begin(piece) == std::string::npos) {
        ++report.skipped_short;
      } else {
        nlohmann::json meta = {{"source", "text"}, {"file", relative}, {"rule", "sweep"}, {"chunk", chunk}, {"offset", from}};
        report.items.push_back(make_sweep_item("text-" + std::to_string(file_index) + "-sweep-" + std::to_string(chunk),
                                               "text", std::move(piece), std::move(meta)));
      }
    }
    from = document.find_first_not_of(" \n", cut);
    if (from == std::string::npos) break;
  }
}

}  // namespace

std::vector<std::string> split_paragraphs(const std::string& text) {
  std::vector<std::string> paragraphs;
  std::string current;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (line.empty()) {
      if (!current.empty()) paragraphs.push_back(std::move(current));
      current.clear();
    } else {
      if (!current.empty()) current += '\n';
      current += line;
    }
    pos = end + 1;
  }
  if (!current.empty()) paragraphs.push_back(std::move(current));
  return paragraphs;
}

ImportReport items_from_text(const FromTextOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(options.dir, ec)) throw_input_error(options.dir + ": not a directory");
  if (options.context_tokens < 16) throw_usage_error("--context-tokens must be at least 16");
  if (options.sweep && options.context_tokens < 4 * kSweepWarmupTokens)
    throw_usage_error("--context-tokens must be at least " + std::to_string(4 * kSweepWarmupTokens) +
                      " with --sweep (four times the sweep's warm-up)");
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(options.dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string ext = lower_extension(it->path());
    if (it->is_regular_file() && (ext == ".txt" || ext == ".md")) files.push_back(it->path());
  }
  if (ec) throw_input_error(options.dir + ": cannot list (" + ec.message() + ")");
  // Byte order of relative paths, so the output does not depend on the directory's order.
  std::sort(files.begin(), files.end(), [&](const fs::path& a, const fs::path& b) {
    return fs::relative(a, options.dir).string() < fs::relative(b, options.dir).string();
  });
  ImportReport report;
  for (size_t file_index = 0; file_index < files.size(); ++file_index) {
    const std::string relative = fs::relative(files[file_index], options.dir).string();
    const std::string text = read_document(files[file_index]);
    const size_t bad = find_invalid_utf8(text);
    if (bad != std::string::npos) throw_input_error_at(files[file_index].string(), bad, "invalid UTF-8");
    ++report.sources;
    if (options.sweep) {
      add_sweep_items(text, file_index, relative, options, report);
      continue;
    }
    const std::vector<std::string> paragraphs = split_paragraphs(text);
    size_t window_start = 0;
    for (size_t k = 1; k < paragraphs.size(); ++k) {
      // Context: the paragraphs before k, dropping the oldest until it fits the budget.
      size_t context_tokens = 0;
      for (size_t i = window_start; i < k; ++i) context_tokens += estimate_tokens(paragraphs[i]) + 1;
      while (window_start + 1 < k && context_tokens > options.context_tokens) {
        context_tokens -= estimate_tokens(paragraphs[window_start]) + 1;
        ++window_start;
      }
      // Items start once the context holds at least half the budget, so short paragraphs are
      // gathered rather than each becoming an item with almost no context.
      if (context_tokens < options.context_tokens / 2 && k + 1 < paragraphs.size()) continue;
      std::string context;
      for (size_t i = window_start; i < k; ++i) context += paragraphs[i] + "\n\n";
      const std::string& next = paragraphs[k];
      const size_t cut = cut_point(next, options.max_span_bytes);
      const std::string id_base = "text-" + std::to_string(file_index) + "-" + std::to_string(k);
      nlohmann::json meta = {{"source", "text"}, {"file", relative}, {"paragraph", k}};
      if (cut < kMinScoredBytes) {
        ++report.skipped_short;
      } else {
        EvalItem item;
        item.id = id_base + "-continuation";
        item.domain = "text";
        item.text = context + next.substr(0, cut);
        item.has_text = true;
        item.score = ScoreKind::spans;
        item.spans = {{context.size(), item.text.size()}};
        item.answer = next.substr(0, cut);
        item.has_answer = true;
        item.meta = meta;
        item.meta["rule"] = "continuation";
        report.items.push_back(std::move(item));
      }
      const auto digit = std::find_if(next.begin(), next.end(), is_digit);
      if (digit != next.end()) {
        const size_t begin = static_cast<size_t>(digit - next.begin());
        size_t end = begin;
        // A number: digits with single inner separators (1,250,000  3.5  2024-03-15  10:30).
        while (end < next.size() &&
               (is_digit(next[end]) || ((next[end] == ',' || next[end] == '.' || next[end] == '-' ||
                                         next[end] == ':' || next[end] == '/') &&
                                        end + 1 < next.size() && is_digit(next[end + 1]))))
          ++end;
        EvalItem item;
        item.id = id_base + "-fact";
        item.domain = "text";
        item.text = context + next.substr(0, sentence_end(next, end));
        item.has_text = true;
        item.score = ScoreKind::spans;
        item.spans = {{context.size() + begin, context.size() + end}};
        item.answer = next.substr(begin, end - begin);
        item.has_answer = true;
        item.meta = meta;
        item.meta["rule"] = "fact";
        report.items.push_back(std::move(item));
      }
      window_start = k;  // the next item's context starts with this paragraph
    }
  }
  return report;
}

}  // namespace kvgate::evalsets
