#include "harness/eval_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"
#include "harness/eval/item_scoring.h"
#include "harness/stored_scores.h"
#include "runtime/chat_template.h"
#include "scoring/aggregate.h"
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

int32_t argmax(const std::vector<float>& v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

}  // namespace

GreedyProbe greedy_probe(runtime::Backend& engine, runtime::BackendSequence& seq, int64_t context_tokens,
                        const std::vector<float>& last_row, int max_new, std::optional<int32_t> eos,
                        double pending_prefill_ms) {
  const std::unique_ptr<runtime::BackendSequence> fork = seq.fork(context_tokens);
  std::vector<float> logits = last_row;
  GreedyProbe probe;
  const auto t0 = Clock::now();
  for (int g = 0; g < max_new; ++g) {
    const int32_t tok = argmax(logits);
    probe.token_times_ms.push_back(pending_prefill_ms + ms_since(t0));
    if (eos && tok == *eos) break;
    probe.tokens.push_back(tok);
    if (g + 1 < max_new) engine.forward(*fork, std::span<const int32_t>(&tok, 1), false, logits.data());
  }
  return probe;
}

std::vector<PreparedItem> prepare_items(const EvalPlan& plan, const std::vector<RunModel>& models,
                                        const EvalOptions& options) {
  const LoadedModel& lm = *models.front().lm;
  // The smallest trained context of the plan's models (0: a GGUF does not say).
  const runtime::Model* limiting = lm.model.get();
  for (const RunModel& m : models) {
    const int64_t c = m.lm->model->arch().n_ctx_train;
    if (c > 0 && (limiting->arch().n_ctx_train == 0 || c < static_cast<int64_t>(limiting->arch().n_ctx_train)))
      limiting = m.lm->model.get();
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
        const int64_t greedy = std::min<int64_t>(options.max_new_tokens, n + 4);
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

namespace {

// Per config, everything one item accumulates.
struct ConfigState {
  const PlannedConfig* config = nullptr;
  runtime::Backend* engine = nullptr;  // where this config's forward passes run
  std::unique_ptr<runtime::BackendSequence> seq;
  std::vector<float> last_row;  // logits that predict the next token to be appended
  double pending_prefill_ms = 0;
  ItemAccumulator acc;
};

// Runs one item through every config: the configs advance through the item's segments together.
void run_item(const PreparedItem& prepared, const LoadedModel& lm, std::vector<ConfigState>& states,
              const EvalOptions& options) {
  const evalsets::EvalItem& item = *prepared.item;
  const size_t vocab = lm.model->arch().n_vocab;
  const size_t n_configs = states.size();
  for (ConfigState& st : states) {
    // Room for the item plus one greedy probe per scored span.
    st.seq = st.engine->start(st.config->kv, prepared.tokens + options.max_new_tokens + 64);
    st.last_row.assign(vocab, 0.0f);
  }

  std::vector<float> ref_rows, rows;
  std::vector<int32_t> ref_greedy;
  int turn_index = 0;
  for (const Segment& seg : prepared.segments) {
    const int64_t n = static_cast<int64_t>(seg.tokens.size());
    if (seg.target < 0) {
      for (ConfigState& st : states) {
        const auto t0 = Clock::now();
        st.engine->forward(*st.seq, seg.tokens, false, st.last_row.data());
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
      GreedyProbe probe = greedy_probe(*st.engine, *st.seq, context_tokens, st.last_row, max_new, lm.tokenizer.eos_id(),
                                       st.pending_prefill_ms);
      st.pending_prefill_ms = 0;
      st.acc.latency.push_back({0, turn_index, std::move(probe.token_times_ms)});
      if (c == 0) ref_greedy = probe.tokens;
      std::string text = lm.tokenizer.decode(probe.tokens, false);
      if (seg.final_answer && item.has_answer) st.acc.gold_match = matches_gold(text, item.answer);
      st.acc.add_greedy(ref_greedy, probe.tokens, std::move(text));
      if (seg.final_answer) {
        st.acc.final_greedy = std::move(probe.tokens);
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
      st.engine->forward(*st.seq, seg.tokens, true, out.data() + vocab);
      std::copy(out.end() - static_cast<int64_t>(vocab), out.end(), st.last_row.begin());
      double turn_kld = 0;
      int64_t turn_same = 0;
      for (int64_t j = 0; j < n; ++j) {
        const uint32_t target = static_cast<uint32_t>(seg.tokens[static_cast<size_t>(j)]);
        std::span<const float> r(ref_rows.data() + static_cast<size_t>(j) * vocab, vocab);
        std::span<const float> q(out.data() + static_cast<size_t>(j) * vocab, vocab);
        const scoring::PositionComparison cmp = scoring::compare_position(r, q, target);
        st.acc.add_position(cmp, token_classes[static_cast<size_t>(j)], turn_kld, turn_same);
      }
      st.acc.add_turn(base_turn, turn_kld, turn_same);
    }
    ++turn_index;
  }
}

}  // namespace

void ConfigTotals::add(const std::string& item_key, const ConfigItemRecord& r) {
  items[item_key] = item_scores(r.metrics);
  for (const results::TurnMetrics& t : r.turns) turns.push_back(turn_latency(t));
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

ConfigSummaryRow summary_row(const PlannedConfig& config, const ConfigTotals& totals, const kernels::KvShape& shape) {
  std::vector<scoring::ItemScores> items;
  for (const auto& [key, scores] : totals.items) items.push_back(scores);
  const scoring::ItemAggregate a = scoring::aggregate_items(items);
  const scoring::LatencyAggregate l = scoring::aggregate_latency(totals.turns);
  ConfigSummaryRow row;
  row.spec = config.spec;
  row.reference = config.role == ConfigRole::reference;
  row.bits_per_element = config.kv.bits_per_element(shape);
  row.kv_bytes_per_token = config.kv.bytes_per_token(shape);
  row.scored_tokens = a.scored_tokens;
  row.kld_mean = a.kld_mean;
  row.kld_p99 = a.kld_p99;
  row.same_top1 = a.same_top1;
  row.answered_items = a.gold_items;
  row.answer_accuracy = a.gold_accuracy;
  row.ttft_p50_ms = l.ttft_p50;
  row.tpot_p50_ms = l.tpot_p50;
  row.top_k = config.top_k;
  if (config.endpoint) row.endpoint = config.endpoint->name;
  return row;
}

EvalResult run_eval(const EvalPlan& plan, const std::vector<RunModel>& models, RunRecorder& recorder,
                    const EvalOptions& options, const std::function<void(const std::string&)>& progress) {
  KVGATE_CHECK(models.size() == plan.models.size(), "one loaded model per model of the plan");
  const auto t_start = Clock::now();
  const LoadedModel& lm = *models.front().lm;
  const std::vector<PreparedItem> prepared = prepare_items(plan, models, options);
  std::vector<ConfigSetup> setups;
  for (const PlannedConfig& c : plan.configs) {
    const runtime::ModelArch& arch = models[c.model].lm->model->arch();
    results::ConfigModel identity = models[c.model].identity;
    identity.kv_spec = c.kv.canonical();
    setups.push_back({kernels::KvShape{static_cast<int>(arch.n_layers), static_cast<int>(arch.n_kv_heads),
                                       static_cast<int>(arch.head_dim)},
                      std::move(identity)});
  }
  recorder.open(setups);
  EvalResult result;
  result.run_id = recorder.run_id();
  try {
    std::vector<ConfigTotals> totals(plan.configs.size());
    const size_t n_items = prepared.size();
    result.items_total = static_cast<int64_t>(n_items);
    for (size_t it = 0; it < n_items; ++it) {
      const evalsets::EvalItem& item = *prepared[it].item;
      if (recorder.holds(item.id)) {
        ++result.items_skipped;
        continue;
      }
      if (progress) progress("item " + std::to_string(it + 1) + "/" + std::to_string(n_items) + " " + item.id);
      std::vector<ConfigState> states(plan.configs.size());
      for (size_t c = 0; c < states.size(); ++c) {
        states[c].config = &plan.configs[c];
        states[c].engine = models[plan.configs[c].model].engine;
      }
      run_item(prepared[it], lm, states, options);

      ItemRecord record;
      record.info = item_info(plan, item);
      for (size_t c = 0; c < states.size(); ++c) {
        ConfigItemRecord r = states[c].acc.record();
        totals[c].add(item.id, r);
        record.configs.push_back(std::move(r));
      }
      recorder.record(std::move(record));
      ++result.items_run;
    }
    for (size_t c = 0; c < plan.configs.size(); ++c)
      result.configs.push_back(summary_row(plan.configs[c], totals[c], setups[c].shape));
    // A --limit run leaves items out, so it stays resumable rather than complete.
    recorder.finish(result.items_run + result.items_skipped == static_cast<int64_t>(prepared.size()) &&
                    !plan.leaves_items_out());
  } catch (...) {
    recorder.fail();
    throw;
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return result;
}

}  // namespace kvgate::harness
