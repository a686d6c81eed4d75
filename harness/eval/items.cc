#include "harness/eval/items.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"
#include "runtime/chat_template.h"

namespace kvgate::harness {
namespace {

std::string message_text(const evalsets::Message& m) { return m.content + evalsets::tool_calls_text(m); }

// Appends text to the last context segment, or starts one (context segments are merged so a
// config runs one prefill per context stretch).
void add_context(std::vector<Segment>& out, std::string_view text) {
  if (text.empty()) return;
  if (out.empty() || out.back().target >= 0) out.push_back(Segment{});
  out.back().text.append(text);
}

}  // namespace

std::vector<Segment> segment_item(const evalsets::EvalItem& item, const runtime::Model& model,
                                  const runtime::Tokenizer& tokenizer) {
  const std::vector<evalsets::ScoredTarget> targets = evalsets::scored_targets(item);
  std::vector<Segment> segments;
  auto add_target = [&](std::string_view text, int target) {
    Segment s;
    s.text = std::string(text);
    s.target = target;
    s.final_answer = target == static_cast<int>(targets.size()) - 1;
    segments.push_back(std::move(s));
  };

  if (item.has_text) {
    size_t cursor = 0;
    for (size_t t = 0; t < targets.size(); ++t) {
      add_context(segments, std::string_view(item.text).substr(cursor, targets[t].begin - cursor));
      add_target(std::string_view(item.text).substr(targets[t].begin, targets[t].end - targets[t].begin), static_cast<int>(t));
      cursor = targets[t].end;
    }
    add_context(segments, std::string_view(item.text).substr(cursor));
  } else {
    const runtime::ChatTemplate tmpl = model.files().chat_template();
    std::vector<runtime::ChatMessage> chat;
    std::string rendered;  // the template's rendering of messages [0, k)
    size_t next_target = 0;
    for (size_t k = 0; k < item.messages.size(); ++k) {
      const evalsets::Message& m = item.messages[k];
      const std::string content = message_text(m);
      chat.push_back({m.role, content});
      const std::string now = tmpl.apply(chat, false);
      if (now.compare(0, rendered.size(), rendered) != 0)
        throw_input_error("item " + item.id + ": the chat template does not render message " + std::to_string(k) +
                          " as an extension of the previous ones");
      const std::string increment = now.substr(rendered.size());
      rendered = now;
      // The content sits after the role line of ChatML-family templates.
      const size_t header_end = increment.find('\n');
      const size_t at = content.empty() ? std::string::npos
                                        : increment.find(content, header_end == std::string::npos ? 0 : header_end + 1);
      size_t cursor = 0;
      while (next_target < targets.size() && targets[next_target].message_index == k) {
        if (at == std::string::npos)
          throw_input_error("item " + item.id + ": scored message " + std::to_string(k) +
                            " does not appear verbatim in the chat template's rendering");
        const evalsets::ScoredTarget& t = targets[next_target];
        add_context(segments, std::string_view(increment).substr(cursor, at + t.begin - cursor));
        add_target(std::string_view(increment).substr(at + t.begin, t.end - t.begin), static_cast<int>(next_target));
        cursor = at + t.end;
        ++next_target;
      }
      add_context(segments, std::string_view(increment).substr(cursor));
    }
  }
  for (Segment& s : segments) s.tokens = tokenizer.encode(s.text, s.target < 0);
  // A template that writes the BOS text (Hugging Face's Gemma, Llama) already put it there.
  const bool has_bos = !segments.empty() && !segments.front().tokens.empty() && tokenizer.bos_id() &&
                       segments.front().tokens.front() == *tokenizer.bos_id();
  if (tokenizer.add_bos() && tokenizer.bos_id() && !has_bos) {
    if (segments.empty() || segments.front().target >= 0) segments.insert(segments.begin(), Segment{});
    segments.front().tokens.insert(segments.front().tokens.begin(), *tokenizer.bos_id());
  }
  segments.erase(std::remove_if(segments.begin(), segments.end(), [](const Segment& s) { return s.tokens.empty(); }),
                 segments.end());
  if (segments.empty() || segments.front().target >= 0)
    throw_input_error("item " + item.id + ": a scored span must have some context before it");
  return segments;
}

std::vector<PreparedItem> prepare_items(const EvalPlan& plan, const LoadedModel& lm,
                                        const std::vector<const runtime::Model*>& models, int max_new_tokens) {
  // The smallest trained context of the plan's models (0: a GGUF does not say).
  const runtime::Model* limiting = lm.model.get();
  for (const runtime::Model* m : models) {
    const int64_t c = m->arch().n_ctx_train;
    if (c > 0 && (limiting->arch().n_ctx_train == 0 || c < static_cast<int64_t>(limiting->arch().n_ctx_train)))
      limiting = m;
  }
  const runtime::Model& model = *lm.model;
  const int64_t context = limiting->arch().n_ctx_train;
  const Workload& w = plan.workload;
  const std::string where = w.source.rfind("suite:", 0) == 0 ? "suite " + w.name : w.name;
  std::vector<PreparedItem> out;
  out.reserve(plan.selected.size());
  for (const size_t index : plan.selected) {
    const evalsets::EvalItem& item = w.items[index];
    PreparedItem p{&item, segment_item(item, model, lm.tokenizer), 0};
    // The longest sequence the item needs: all of it, or a scored span's context plus the greedy
    // answer probed there (its last token is never fed back).
    int64_t longest_probe = 0, probe_at = 0, probe_tokens = 0;
    for (const Segment& seg : p.segments) {
      const int64_t n = static_cast<int64_t>(seg.tokens.size());
      if (seg.target >= 0) {
        const int64_t greedy = std::min<int64_t>(max_new_tokens, n + 4);
        if (p.tokens + greedy - 1 > longest_probe) longest_probe = p.tokens + greedy - 1, probe_at = p.tokens, probe_tokens = greedy;
      }
      p.tokens += n;
    }
    if (context > 0 && p.tokens > context)
      throw_input_error(fmt::format("{}: item {} is {} tokens long (rendered and tokenized for this model), more than the "
                                    "model's context of {} tokens (context_length of {})",
                                    where, echo_user_text(item.id), p.tokens, context, limiting->path()));
    if (context > 0 && longest_probe > context)
      throw_input_error(fmt::format("{}: item {} is {} tokens long, and the greedy answer probed after its scored span at "
                                    "token {} needs up to {} more: more than the model's context of {} tokens (context_length "
                                    "of {}); lower --max-new-tokens or shorten the item",
                                    where, echo_user_text(item.id), p.tokens, probe_at, probe_tokens, context, limiting->path()));
    out.push_back(std::move(p));
  }
  return out;
}

results::ItemInfo item_info(const EvalPlan& plan, const evalsets::EvalItem& item) {
  results::ItemInfo info;
  info.item_key = item.id;
  info.domain = item.domain;
  info.evalset_hash = plan.workload.hash;
  info.item_hash = hex_u64(xxhash64(evalsets::canonical_line(item)));
  if (item.has_answer) info.gold_answer = item.answer;
  return info;
}

}  // namespace kvgate::harness
