#include "harness/eval/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "core/interrupt.h"
#include "harness/eval/calibration.h"
#include "harness/eval/item_scoring.h"
#include "harness/eval/items.h"
#include "harness/eval/sources.h"
#include "harness/stored_scores.h"
#include "scoring/token_class.h"
#include "scoring/token_metrics.h"
#include "scoring/topk_kld.h"

namespace kvgate::harness {
namespace {

using Clock = std::chrono::steady_clock;

// Scored tokens per teacher-forced pass in-process (ItemRun::score_segment).
constexpr size_t kScorePiece = 32;

// An item failed on config `config`'s endpoint.
struct ItemFailure {
  size_t config = 0;
  serving::Failure failure = serving::Failure::none;
  std::string message;
};

// A logit row that is not a distribution, at one position of one item: run_eval names the
// config and its model from the plan (scoring::NonFiniteLogits knows only the side).
struct NonFiniteAt {
  size_t config = 0;
  std::string where;    // "item ID, turn T, scored token J"
  std::string message;  // the scoring layer's
};

// Per config, the items run now, for the summary.
struct ConfigTotals {
  std::map<std::string, scoring::ItemScores> items;  // by item key: the store's order
  std::vector<scoring::TurnLatency> turns;
  void add(const std::string& item_key, const ConfigItemRecord& r) {
    items[item_key] = item_scores(r.metrics);
    for (const results::TurnMetrics& t : r.turns) turns.push_back(turn_latency(t));
  }
};

ConfigSummaryRow summary_row(const PlannedConfig& config, const ConfigTotals& totals, const kernels::KvShape& shape) {
  std::vector<scoring::ItemScores> items;
  for (const auto& [key, scores] : totals.items) items.push_back(scores);
  ConfigSummaryRow row;
  row.spec = config.spec;
  row.reference = config.role == ConfigRole::reference;
  row.bits_per_element = config.kv.bits_per_element(shape);
  row.kv_bytes_per_token = config.kv.bytes_per_token(shape);
  row.quality = scoring::aggregate_items(items);
  row.latency = scoring::aggregate_latency(totals.turns);
  row.top_k = config.top_k;
  if (config.endpoint) row.endpoint = config.endpoint->name;
  return row;
}

// The yardstick of one item: the geometric mean of the samples just before and just after it,
// so load that came or went while the item ran counts half.
results::ItemCalibration around(const results::ItemCalibration& before, const results::ItemCalibration& after) {
  return {std::sqrt(before.prefill_ms * after.prefill_ms), std::sqrt(before.decode_ms * after.decode_ms)};
}

std::string where(const serving::EndpointConfig& e) {
  return "endpoint '" + e.name + "' (" + serving::redact_url(e.url) + ")";
}

// One item through every config.
class ItemRun {
 public:
  ItemRun(const PreparedItem& prepared, const LoadedModel& lm, std::vector<std::unique_ptr<ConfigSource>>& sources,
          CrossCheckObserver& cross, const EvalOptions& options)
      : prepared_(prepared), lm_(lm), sources_(sources), cross_(cross), options_(options), accs_(sources.size()),
        scored_(sources.size(), false), spans_(sources.size()), answers_(sources.size()) {}

  // Throws ItemFailure when an endpoint fails; in-process errors propagate as they are.
  void run() {
    for (size_t c = 0; c < sources_.size(); ++c)
      on_config(c, [&] { sources_[c]->begin_item(prepared_.tokens, options_.max_new_tokens); });
    cross_.begin_item();
    int turn_index = 0;
    int64_t context_tokens = 0;
    for (const Segment& seg : prepared_.segments) {
      if (seg.target < 0) {
        for (size_t c = 0; c < sources_.size(); ++c) on_config(c, [&] { sources_[c]->add_context(seg.tokens); });
      } else {
        score_segment(seg, turn_index, context_tokens);
        ++turn_index;
      }
      context_tokens += static_cast<int64_t>(seg.tokens.size());
    }
  }

  // The item's record per config, in the plan's order. A config that scored no position of the
  // item (an endpoint without prompt logprobs) has its quality metrics not measured (NaN).
  std::vector<ConfigItemRecord> records() {
    std::vector<ConfigItemRecord> out;
    for (size_t c = 0; c < sources_.size(); ++c) {
      ConfigItemRecord r = accs_[c].record();
      if (!scored_[c]) {
        results::ItemMetrics& m = r.metrics;
        m.kld_mean = m.kld_max = m.kld_p99 = m.delta_p_mean = m.delta_p_rms = m.same_top1 = std::nan("");
        m.nll_mean = m.nll_ref_mean = std::nan("");
      }
      out.push_back(std::move(r));
    }
    return out;
  }

 private:
  template <typename Body>
  void on_config(size_t c, Body&& body) {
    serving::EngineClient* client = sources_[c]->client();
    try {
      body();
    } catch (const serving::EndpointError& e) {
      throw ItemFailure{c, e.failure(), e.what()};
    } catch (const Error& e) {
      // A list the estimator rejects (a probability above 1, a repeated token): the engine's
      // answer is wrong, not kvgate.
      if (client == nullptr) throw;
      throw ItemFailure{c, serving::Failure::consumer, where(client->endpoint()) + ": " + e.what()};
    }
  }

  void score_segment(const Segment& seg, int turn_index, int64_t context_tokens) {
    const evalsets::EvalItem& item = *prepared_.item;
    const int64_t n = static_cast<int64_t>(seg.tokens.size());
    const size_t n_configs = sources_.size();
    // Every config's greedy answer first (TTFT: the new turn's prefill with the prefix cached,
    // plus the first token; TPOT), compared with the reference's.
    const int max_new = static_cast<int>(std::min<int64_t>(options_.max_new_tokens, n + 4));
    std::vector<std::optional<int64_t>> prompt_tokens(n_configs), cached_tokens(n_configs);
    for (size_t c = 0; c < n_configs; ++c)
      on_config(c, [&] {
        Answer a = sources_[c]->answer(max_new);
        ItemAccumulator& acc = accs_[c];
        acc.latency.push_back({0, turn_index, std::move(a.token_ms)});
        acc.turn_token_cpu_ms = std::move(a.token_cpu_ms);
        answers_[c] = std::move(a.tokens);
        if (seg.final_answer && item.has_answer) acc.gold_match = matches_gold(a.text, item.answer);
        acc.add_greedy(answers_[0], answers_[c], std::move(a.text));
        if (seg.final_answer) acc.final_greedy = answers_[c];
        prompt_tokens[c] = a.prompt_tokens;
        cached_tokens[c] = a.cached_tokens;
      });

    // Then the span teacher-forced under every config, each compared position by position with
    // the reference's distributions. Token classes depend only on the span's tokens.
    std::vector<scoring::TokenClass> token_classes;
    for (const int32_t tok : seg.tokens) token_classes.push_back(scoring::classify_token(lm_.tokenizer.piece(tok, false)));
    results::TurnMetrics base_turn;
    base_turn.turn_index = turn_index;
    base_turn.context_tokens = context_tokens;
    base_turn.scored_tokens = n;
    const size_t vocab = lm_.model->arch().n_vocab;
    // In-process, the span is teacher-forced in pieces, every config one piece after the other,
    // so only a piece's logit rows are held (for the reference and for the candidate being
    // compared), however long the span: with Gemma's 262k vocabulary a 128-token span is 135 MB
    // a buffer. Bit-identical to one pass (as the chunked prefill, docs/perf.md). An endpoint
    // scores the whole span in one request (and the cross-check reads whole spans).
    bool whole = false;
    for (const auto& source : sources_) whole = whole || source->client() != nullptr;
    const size_t piece = whole ? seg.tokens.size() : kScorePiece;
    std::vector<double> turn_kld(n_configs, 0.0);
    std::vector<int64_t> turn_same(n_configs, 0);
    std::vector<char> turn_scored(n_configs, 1);
    std::vector<int32_t> part;
    for (size_t begin = 0; begin < seg.tokens.size();) {
      size_t len = std::min(piece, seg.tokens.size() - begin);
      if (seg.tokens.size() - begin - len == 1) ++len;  // a one-token pass would round as a decode step does
      part.assign(seg.tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                  seg.tokens.begin() + static_cast<std::ptrdiff_t>(begin + len));
      for (size_t c = 0; c < n_configs; ++c)
        on_config(c, [&] {
          SpanDistributions& mine = spans_[c];
          // A candidate's full logits are compared as soon as they are made, so the candidates
          // share one buffer beside the reference's.
          if (c > 0) mine.rows.swap(scratch_rows_);
          sources_[c]->score_span(part, mine);
          const SpanDistributions& ref = spans_[0];
          const bool scored = mine.scored() && ref.scored();
          turn_scored[c] = turn_scored[c] && scored;
          if (scored)
            for (size_t jj = 0; jj < len; ++jj) {
              const int64_t j = static_cast<int64_t>(begin + jj);  // the token's index in the span
              const uint32_t target = static_cast<uint32_t>(part[jj]);
              scoring::PositionComparison cmp;
              try {
                cmp = mine.top_k
                          ? scoring::compare_topk(ref.lists[jj].view(), mine.lists[jj].view(), part[jj]).position
                          : scoring::compare_position(std::span<const float>(ref.rows.data() + jj * vocab, vocab),
                                                      std::span<const float>(mine.rows.data() + jj * vocab, vocab), target);
              } catch (const scoring::NonFiniteLogits& e) {
                throw NonFiniteAt{e.side() == scoring::LogitSide::reference ? 0 : c,
                                  "item " + echo_user_text(item.id) + ", turn " + std::to_string(turn_index) +
                                      ", scored token " + std::to_string(j),
                                  e.what()};
              }
              accs_[c].add_position(cmp, token_classes[begin + jj], context_tokens + j, turn_kld[c], turn_same[c]);
            }
          if (c > 0) mine.rows.swap(scratch_rows_);
        });
      begin += len;
    }
    for (size_t c = 0; c < n_configs; ++c)
      on_config(c, [&] {
        const bool scored = turn_scored[c] != 0;
        scored_[c] = scored_[c] || scored;
        results::TurnMetrics turn = base_turn;
        turn.prompt_tokens = prompt_tokens[c];
        turn.cached_tokens = cached_tokens[c];
        accs_[c].add_turn(turn, turn_kld[c], turn_same[c], scored);
      });
    for (size_t p = 0; p < cross_.pairs(); ++p)
      on_config(cross_.engine_config(p), [&] { cross_.observe(p, spans_, seg.tokens, answers_); });
  }

  const PreparedItem& prepared_;
  const LoadedModel& lm_;
  std::vector<std::unique_ptr<ConfigSource>>& sources_;
  CrossCheckObserver& cross_;
  const EvalOptions& options_;
  std::vector<ItemAccumulator> accs_;
  std::vector<bool> scored_;  // per config: scored at least one position of the item
  std::vector<SpanDistributions> spans_;
  std::vector<float> scratch_rows_;
  std::vector<std::vector<int32_t>> answers_;  // the current span's greedy answers
};

}  // namespace

EvalResult run_eval(const EvalPlan& plan, const std::vector<RunModel>& models, Endpoints& endpoints,
                    RunRecorder& recorder, const EvalOptions& options,
                    const std::function<void(const std::string&)>& progress) {
  KVGATE_CHECK(models.size() == plan.models.size(), "one loaded model per model of the plan");
  if (plan.has_endpoints() && plan.models.size() != 1) throw_internal_error("engine mode: a plan with endpoints runs one model");
  const auto t_start = Clock::now();
  const LoadedModel& lm = *models.front().lm;
  std::vector<const runtime::Model*> all_models;
  for (const RunModel& m : models) all_models.push_back(m.lm->model.get());
  const std::vector<PreparedItem> prepared = prepare_items(plan, lm, all_models, options.max_new_tokens);
  if (plan.has_endpoints()) check_engine_context(plan, prepared, endpoints, options.max_new_tokens);

  // Per config: its storage sizes on its model's shape, and the model that runs it; none for an
  // endpoint (the engine serves its own weights, recorded with the endpoint).
  std::vector<ConfigSetup> setups;
  std::vector<std::unique_ptr<ConfigSource>> sources;
  for (size_t c = 0; c < plan.configs.size(); ++c) {
    const PlannedConfig& config = plan.configs[c];
    const RunModel& m = models[config.model];
    const runtime::ModelArch& arch = m.lm->model->arch();
    std::optional<results::ConfigModel> identity;
    serving::EngineClient* client = c < endpoints.clients.size() ? endpoints.clients[c].get() : nullptr;
    if (config.endpoint) {
      if (client == nullptr) throw_internal_error("engine mode: config " + config.spec + " has no connected endpoint");
      sources.push_back(make_endpoint_source(*client, config, lm));
    } else {
      if (m.backend == nullptr) throw_internal_error("in-process config " + config.spec + " has no backend");
      // A KV config the model cannot hold (a format whose blocks do not divide its head size) is
      // refused here, as the cache it would build is, before the run is written.
      try {
        m.backend->start(config.kv, 1);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::usage && e.kind() != ErrorKind::input) throw;
        throw Error(e.kind(), "config " + (config.label.empty() ? config.spec : config.label) + " on model " +
                                  m.lm->model->path() + ": " + e.what());
      }
      sources.push_back(make_in_process_source(*m.backend, config, *m.lm));
      identity = m.identity;
      identity->kv_spec = config.kv.canonical();
    }
    setups.push_back({kernels::KvShape{static_cast<int>(arch.n_layers), static_cast<int>(arch.n_kv_heads),
                                       static_cast<int>(arch.head_dim)},
                      std::move(identity)});
  }
  // The latency yardstick (calibration.h) times this machine's CPU: it says nothing of a server's
  // or a GPU's latency, so only a run whose every config runs in-process on the CPU has one.
  std::optional<Calibration> calibration;
  if (!plan.has_endpoints() && options.backend == "cpu") {
    const runtime::ModelArch& arch = lm.model->arch();
    const int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
    calibration.emplace(CalibrationShape{arch.n_embd, arch.n_layers, models.front().identity.weight_bytes, threads});
  }
  CrossCheckObserver cross(plan);
  EvalResult result;
  std::vector<std::pair<std::string, ItemFailure>> failures;
  bool stopped = false;
  try {
    // Everything above is checked before the run is written; from here an error marks it failed.
    recorder.open(setups, calibration ? calibration->workload() : std::string());
    result.run_id = recorder.run_id();
    for (size_t c = 0; c < plan.configs.size(); ++c)
      if (plan.configs[c].endpoint) recorder.record_endpoint(c, endpoint_record(plan.configs[c], *sources[c]->client()));
    std::vector<ConfigTotals> totals(plan.configs.size());
    std::optional<results::ItemCalibration> before;  // the last sample, just before the next item
    const size_t n_items = prepared.size();
    result.items_total = static_cast<int64_t>(n_items);
    for (size_t it = 0; it < n_items && !stopped; ++it) {
      if (const int signal = interrupt_signal()) throw Interrupted(signal, "stopped between items");
      const evalsets::EvalItem& item = *prepared[it].item;
      if (recorder.holds(item.id)) {
        ++result.items_skipped;
        continue;
      }
      if (progress) progress("item " + std::to_string(it + 1) + "/" + std::to_string(n_items) + " " + item.id);
      if (calibration && !before) before = calibration->sample();
      ItemRun run(prepared[it], lm, sources, cross, options);
      try {
        run.run();
      } catch (const NonFiniteAt& e) {
        // The scoring layer knows only the side; the plan knows the config and its model.
        const PlannedConfig& bad = plan.configs[e.config];
        throw_input_error(e.where + ": config " + bad.spec + " (" + config_role_name(bad.role) + ") on model " +
                          models[bad.model].lm->model->path() + ": " + e.message);
      } catch (const ItemFailure& f) {
        recorder.record_failure(item.id, f.config, plan.configs[f.config].endpoint->name,
                                serving::failure_name(f.failure), f.message);
        failures.emplace_back(item.id, f);
        // Refused or reset before any answer: the server is gone, and every further item would
        // only wait out the same retries.
        stopped = f.failure == serving::Failure::connect;
        continue;
      }
      ItemRecord record;
      record.info = item_info(plan, item);
      if (calibration) {
        const results::ItemCalibration after = calibration->sample();
        record.info.calibration = around(*before, after);
        before = after;
      }
      record.configs = run.records();
      for (size_t c = 0; c < record.configs.size(); ++c) totals[c].add(item.id, record.configs[c]);
      recorder.record(std::move(record));
      cross.commit_item();
      ++result.items_run;
    }
    for (size_t c = 0; c < plan.configs.size(); ++c) result.configs.push_back(summary_row(plan.configs[c], totals[c], setups[c].shape));
    // A --limit run leaves items out, so it stays resumable rather than complete.
    if (stopped) recorder.fail();
    else
      recorder.finish(failures.empty() && result.items_run + result.items_skipped == static_cast<int64_t>(n_items) &&
                      !plan.leaves_items_out());
  } catch (const Interrupted&) {
    // Ctrl-C or SIGTERM, seen between items: every stored item is whole, so the run is resumable.
    recorder.finish(false);
    throw;
  } catch (...) {
    recorder.fail();
    throw;
  }
  if (!failures.empty()) {
    const auto& [key, f] = failures.front();
    throw serving::EndpointError(
        f.failure,
        fmt::format("{} item{} failed{} (first: item {}: {}); they are recorded as failed and run {} is resumable: "
                    "kvgate {} --resume {} (with --endpoint/--endpoints again if the servers moved)",
                    failures.size(), failures.size() == 1 ? "" : "s", stopped ? " and the run stopped" : "",
                    echo_user_text(key), f.message, result.run_id,
                    plan.workload.source.rfind("trace:", 0) == 0 ? "replay" : "eval", result.run_id));
  }
  result.cross_checks = cross.results();
  result.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return result;
}

}  // namespace kvgate::harness
