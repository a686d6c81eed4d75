#include "harness/eval_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <span>

#include "core/error.h"
#include "core/hash.h"
#include "runtime/chat_template.h"
#include "scoring/latency.h"
#include "scoring/sequence.h"
#include "scoring/stats.h"
#include "scoring/token_class.h"
#include "scoring/token_metrics.h"

namespace kvgate::harness {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

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
    const runtime::ChatTemplate tmpl = runtime::ChatTemplate::from_gguf(model.gguf());
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
  if (tokenizer.add_bos() && tokenizer.bos_id()) {
    if (segments.empty() || segments.front().target >= 0) segments.insert(segments.begin(), Segment{});
    segments.front().tokens.insert(segments.front().tokens.begin(), *tokenizer.bos_id());
  }
  segments.erase(std::remove_if(segments.begin(), segments.end(), [](const Segment& s) { return s.tokens.empty(); }),
                 segments.end());
  if (segments.empty() || segments.front().target >= 0)
    throw_input_error("item " + item.id + ": a scored span must have some context before it");
  return segments;
}

namespace {

// Per config, everything one item accumulates.
struct ConfigState {
  const kernels::KvConfig* config = nullptr;
  int64_t config_id = 0;
  bool reference = false;
  std::unique_ptr<runtime::EngineSequence> seq;
  std::vector<float> last_row;  // logits that predict the next token to be appended
  double pending_prefill_ms = 0;
  // item-level per-token values
  std::vector<double> kld, delta_p, nll, nll_ref;
  int64_t same_top1 = 0;
  std::map<scoring::TokenClass, results::TokenClassMetrics> classes;
  std::vector<results::TurnMetrics> turns;
  std::vector<results::LatencySamples> latency;
  std::vector<int32_t> final_greedy;
  std::optional<int64_t> first_divergence;
  bool diverged_anywhere = false;
  std::optional<bool> gold_match;
};

int32_t argmax(const std::vector<float>& v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

// Gold answers are short facts: a greedy answer matches when, after trimming, it equals the
// gold text or starts with it followed by something that is not a letter or digit.
bool matches_gold(std::string generated, std::string gold) {
  auto trim = [](std::string& s) {
    const char* ws = " \t\r\n";
    s.erase(0, s.find_first_not_of(ws));
    const size_t last = s.find_last_not_of(ws);
    s.erase(last == std::string::npos ? 0 : last + 1);
  };
  trim(generated);
  trim(gold);
  if (gold.empty() || generated.compare(0, gold.size(), gold) != 0) return false;
  if (generated.size() == gold.size()) return true;
  const unsigned char next = static_cast<unsigned char>(generated[gold.size()]);
  return !(std::isalnum(next) != 0);
}

}  // namespace

EvalResult run_eval(results::Store& store, int64_t run_id, const LoadedModel& lm, runtime::Engine& engine,
                    const std::vector<evalsets::EvalItem>& items,
                    const std::string& evalset_hash, const kernels::KvConfig& ref,
                    const std::vector<kernels::KvConfig>& candidates, const std::vector<int64_t>& config_ids,
                    const EvalOptions& options, const std::function<void(const std::string&)>& progress) {
  const auto t_start = Clock::now();
  const runtime::Model& model = *lm.model;
  const size_t vocab = model.arch().n_vocab;
  const auto finished = store.finished_pairs(run_id);
  const size_t n_configs = candidates.size() + 1;
  KVGATE_CHECK(config_ids.size() == n_configs, "one config id per config");

  EvalResult result;
  result.run_id = run_id;
  struct Totals {
    double kld_sum = 0;
    int64_t tokens = 0, same = 0, answered = 0, correct = 0;
    std::vector<double> item_p99, ttft, tpot;
  };
  std::vector<Totals> totals(n_configs);
  const size_t n_items = options.limit > 0 ? std::min<size_t>(items.size(), static_cast<size_t>(options.limit)) : items.size();
  result.items_total = static_cast<int64_t>(n_items);

  for (size_t it = 0; it < n_items; ++it) {
    const evalsets::EvalItem& item = items[it];
    bool done = true;
    for (int64_t id : config_ids) done = done && finished.count({item.id, id}) > 0;
    if (done) {
      ++result.items_skipped;
      continue;
    }
    if (progress) progress("item " + std::to_string(it + 1) + "/" + std::to_string(n_items) + " " + item.id);
    const std::vector<Segment> segments = segment_item(item, model, lm.tokenizer);
    int64_t total_tokens = 0;
    for (const Segment& s : segments) total_tokens += static_cast<int64_t>(s.tokens.size());

    std::vector<ConfigState> states(n_configs);
    for (size_t c = 0; c < n_configs; ++c) {
      ConfigState& st = states[c];
      st.config = c == 0 ? &ref : &candidates[c - 1];
      st.config_id = config_ids[c];
      st.reference = c == 0;
      // Room for the item plus one greedy probe per scored span.
      st.seq = engine.start(*st.config, total_tokens + options.max_new_tokens + 64);
      st.last_row.assign(vocab, 0.0f);
    }

    std::vector<float> ref_rows, rows;
    std::vector<int32_t> ref_greedy;
    int turn_index = 0;
    for (const Segment& seg : segments) {
      const int64_t n = static_cast<int64_t>(seg.tokens.size());
      if (seg.target < 0) {
        for (ConfigState& st : states) {
          const auto t0 = Clock::now();
          engine.forward(*st.seq, seg.tokens, false, st.last_row.data());
          st.pending_prefill_ms += ms_since(t0);
        }
        continue;
      }
      const int64_t context_tokens = states[0].seq->length();
      // Greedy probe on a fork of each config's sequence: TTFT (the new turn's prefill with the
      // prefix cached, plus the first token) and TPOT, and the answer each config would give.
      const int max_new = static_cast<int>(std::min<int64_t>(options.max_new_tokens, n + 4));
      for (size_t c = 0; c < n_configs; ++c) {
        ConfigState& st = states[c];
        const std::unique_ptr<runtime::EngineSequence> fork = st.seq->fork(context_tokens);
        std::vector<float> logits = st.last_row;
        std::vector<int32_t> greedy;
        results::LatencySamples lat;
        lat.config_id = st.config_id;
        lat.turn_index = turn_index;
        const auto t0 = Clock::now();
        for (int g = 0; g < max_new; ++g) {
          const int32_t tok = argmax(logits);
          lat.token_times_ms.push_back(st.pending_prefill_ms + ms_since(t0));
          if (lm.tokenizer.eos_id() && tok == *lm.tokenizer.eos_id()) break;
          greedy.push_back(tok);
          if (g + 1 < max_new) engine.forward(*fork, std::span<const int32_t>(&tok, 1), false, logits.data());
        }
        st.pending_prefill_ms = 0;
        st.latency.push_back(std::move(lat));
        if (c == 0) ref_greedy = greedy;
        const auto div = scoring::first_divergence(ref_greedy, greedy);
        if (div && !st.diverged_anywhere) {
          st.diverged_anywhere = true;
          st.first_divergence = static_cast<int64_t>(*div);
        }
        if (seg.final_answer) {
          st.final_greedy = greedy;
          if (item.has_answer) st.gold_match = matches_gold(lm.tokenizer.decode(greedy, false), item.answer);
        }
      }

      // Teacher-forced pass over the scored span: row j predicts token j of the span.
      // Token classes depend only on the span's tokens, not on the config.
      std::vector<scoring::TokenClass> token_classes;
      for (const int32_t tok : seg.tokens) token_classes.push_back(scoring::classify_token(lm.tokenizer.piece(tok, false)));
      results::TurnMetrics base_turn;
      base_turn.turn_index = turn_index;
      base_turn.context_tokens = context_tokens;
      base_turn.scored_tokens = n;
      for (size_t c = 0; c < n_configs; ++c) {
        ConfigState& st = states[c];
        std::vector<float>& out = c == 0 ? ref_rows : rows;
        // predictions[j] = (j == 0 ? last_row : forward row j - 1)
        out.resize(static_cast<size_t>(n + 1) * vocab);
        std::copy(st.last_row.begin(), st.last_row.end(), out.begin());
        engine.forward(*st.seq, seg.tokens, true, out.data() + vocab);
        std::copy(out.end() - static_cast<int64_t>(vocab), out.end(), st.last_row.begin());
        double turn_kld = 0;
        int64_t turn_same = 0;
        for (int64_t j = 0; j < n; ++j) {
          const uint32_t target = static_cast<uint32_t>(seg.tokens[static_cast<size_t>(j)]);
          std::span<const float> r(ref_rows.data() + static_cast<size_t>(j) * vocab, vocab);
          std::span<const float> q(out.data() + static_cast<size_t>(j) * vocab, vocab);
          const scoring::PositionComparison cmp = scoring::compare_position(r, q, target);
          st.kld.push_back(cmp.kld);
          st.delta_p.push_back(cmp.delta_p);
          st.nll.push_back(cmp.nll_q);
          st.nll_ref.push_back(cmp.nll_ref);
          st.same_top1 += cmp.same_top1;
          turn_kld += cmp.kld;
          turn_same += cmp.same_top1;
          const scoring::TokenClass cls = token_classes[static_cast<size_t>(j)];
          results::TokenClassMetrics& tc = st.classes[cls];
          tc.config_id = st.config_id;
          tc.token_class = std::string(scoring::token_class_name(cls));
          tc.scored_tokens += 1;
          tc.kld_sum += cmp.kld;
          tc.delta_p_sum += cmp.delta_p;
          tc.same_top1 += cmp.same_top1;
        }
        results::TurnMetrics turn = base_turn;
        turn.config_id = st.config_id;
        turn.kld_mean = turn_kld / static_cast<double>(n);
        turn.top1_agreement = static_cast<double>(turn_same) / static_cast<double>(n);
        const scoring::LatencyBreakdown lat = scoring::derive_latency(st.latency.back().token_times_ms);
        turn.ttft_ms = lat.ttft;
        turn.tpot_ms = std::isnan(lat.tpot) ? 0.0 : lat.tpot;
        st.turns.push_back(turn);
      }
      ++turn_index;
    }

    results::ItemInfo info;
    info.item_key = item.id;
    info.domain = item.domain;
    info.evalset_hash = evalset_hash;
    info.item_hash = hex_u64(xxhash64(evalsets::canonical_line(item)));
    results::ItemWriter writer = store.begin_item(run_id, info);
    for (ConfigState& st : states) {
      results::ItemMetrics m;
      m.config_id = st.config_id;
      m.scored_tokens = static_cast<int64_t>(st.kld.size());
      if (!st.kld.empty()) {
        m.kld_mean = scoring::mean_stderr(st.kld).mean;
        m.kld_max = *std::max_element(st.kld.begin(), st.kld.end());
        m.kld_p99 = scoring::percentile(st.kld, 0.99);
        m.delta_p_mean = scoring::mean_stderr(st.delta_p).mean;
        double sq = 0;
        for (double d : st.delta_p) sq += d * d;
        m.delta_p_rms = std::sqrt(sq / static_cast<double>(st.delta_p.size()));
        m.top1_agreement = static_cast<double>(st.same_top1) / static_cast<double>(st.kld.size());
        m.nll_mean = scoring::mean_stderr(st.nll).mean;
        m.nll_ref_mean = scoring::mean_stderr(st.nll_ref).mean;
      }
      m.generated_tokens = static_cast<int64_t>(st.final_greedy.size());
      m.first_divergence = st.first_divergence;
      m.exact_match_ref = !st.diverged_anywhere;
      m.exact_match_gold = st.gold_match;
      writer.add_metrics(m);
      Totals& tot = totals[static_cast<size_t>(&st - states.data())];
      for (double k : st.kld) tot.kld_sum += k;
      tot.tokens += m.scored_tokens;
      tot.same += st.same_top1;
      if (m.scored_tokens > 0) tot.item_p99.push_back(m.kld_p99);
      if (st.gold_match) {
        ++tot.answered;
        tot.correct += *st.gold_match;
      }
      for (const results::TurnMetrics& t : st.turns) {
        tot.ttft.push_back(t.ttft_ms);
        if (t.tpot_ms > 0) tot.tpot.push_back(t.tpot_ms);
      }
      for (const results::TurnMetrics& t : st.turns) writer.add_turn(t);
      for (const auto& [cls, tc] : st.classes) writer.add_token_class(tc);
      for (const results::LatencySamples& l : st.latency) writer.add_latency(l);
    }
    writer.commit();
    ++result.items_run;
  }
  const kernels::KvShape shape{static_cast<int>(model.arch().n_layers), static_cast<int>(model.arch().n_kv_heads),
                               static_cast<int>(model.arch().head_dim)};
  for (size_t c = 0; c < n_configs; ++c) {
    const kernels::KvConfig& cfg = c == 0 ? ref : candidates[c - 1];
    const Totals& t = totals[c];
    ConfigSummaryRow row;
    row.spec = cfg.canonical();
    row.reference = c == 0;
    row.bits_per_element = cfg.bits_per_element(shape);
    row.kv_bytes_per_token = cfg.bytes_per_token(shape);
    row.scored_tokens = t.tokens;
    const double nan = std::nan("");
    row.kld_mean = t.tokens ? t.kld_sum / static_cast<double>(t.tokens) : nan;
    row.kld_p99 = t.item_p99.empty() ? nan : scoring::percentile(t.item_p99, 0.99);
    row.top1 = t.tokens ? static_cast<double>(t.same) / static_cast<double>(t.tokens) : nan;
    row.answered_items = t.answered;
    row.answer_accuracy = t.answered ? static_cast<double>(t.correct) / static_cast<double>(t.answered) : nan;
    row.ttft_p50_ms = t.ttft.empty() ? nan : scoring::percentile(t.ttft, 0.5);
    row.tpot_p50_ms = t.tpot.empty() ? nan : scoring::percentile(t.tpot, 0.5);
    result.configs.push_back(row);
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return result;
}

}  // namespace kvgate::harness
