#include "harness/engine_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "harness/eval/item_scoring.h"
#include "scoring/sequence.h"
#include "scoring/token_class.h"
#include "scoring/topk_kld.h"

namespace kvgate::harness {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// One position's top-k list, owning its entries.
struct TopList {
  std::vector<scoring::TopLogprob> top;
  std::optional<double> target_logprob;
  scoring::TopKDistribution view() const { return {top, target_logprob}; }
};

// Per config, one item's state.
struct ConfigRun {
  const PlannedConfig* config = nullptr;
  serving::EngineClient* client = nullptr;  // null: in-process
  std::unique_ptr<runtime::BackendSequence> seq;
  std::vector<float> last_row;
  double pending_prefill_ms = 0;
  ItemAccumulator acc;
  bool scored = false;  // scored at least one position of the item
};

// An item failed on config `config`'s endpoint.
struct ItemFailure {
  size_t config = 0;
  serving::Failure failure = serving::Failure::none;
  std::string message;
};

struct PairTotals {
  size_t emulation = 0, engine = 0;  // config indices
  int64_t positions = 0, same_top1 = 0, answers = 0, same_answers = 0;
  double kld_sum = 0, kld_max = 0;
};

std::string where(const serving::EndpointConfig& e) {
  return "endpoint '" + e.name + "' (" + serving::redact_url(e.url) + ")";
}

// The in-process rows of a teacher-forced span, cut to their top k with the target's exact logprob.
std::vector<TopList> in_process_lists(const std::vector<float>& rows, size_t vocab, const std::vector<int32_t>& span, int k) {
  std::vector<TopList> out(span.size());
  std::vector<double> lp(vocab);
  for (size_t j = 0; j < span.size(); ++j) {
    scoring::log_softmax(std::span<const float>(rows.data() + j * vocab, vocab), lp);
    out[j].top = scoring::top_k_of(lp, static_cast<size_t>(k));
    out[j].target_logprob = lp[static_cast<size_t>(span[j])];
  }
  return out;
}

std::vector<TopList> engine_lists(const serving::ScoreResult& r) {
  std::vector<TopList> out(r.tokens.size());
  for (size_t j = 0; j < r.tokens.size(); ++j) {
    for (const serving::TokenLogprob& t : r.tokens[j].top)
      if (t.id) out[j].top.push_back({*t.id, t.logprob});
    out[j].target_logprob = r.tokens[j].target_logprob;
  }
  return out;
}

struct EngineAnswer {
  std::vector<int32_t> tokens;
  std::vector<double> token_ms;
  std::string text;
  std::optional<int64_t> prompt_tokens, cached_tokens;
};

std::vector<int32_t> ids_without_eos(const serving::Completion& c, const LoadedModel& lm, bool& complete) {
  std::vector<int32_t> ids;
  complete = true;
  for (const serving::StreamedToken& t : c.tokens) {
    if (!t.id) complete = false;
    else ids.push_back(*t.id);
  }
  // The in-process probe stops before EOS; an engine that streams the EOS token itself gets it
  // dropped here so both answer the same way.
  if (complete && !ids.empty() && lm.tokenizer.eos_id() && ids.back() == *lm.tokenizer.eos_id()) ids.pop_back();
  return ids;
}

EngineAnswer engine_greedy(serving::EngineClient& client, const LoadedModel& lm, const std::vector<int32_t>& prompt,
                           int max_new, int k) {
  serving::GenerateRequest g;
  g.prompt_tokens = prompt;
  g.max_tokens = max_new;
  g.top_logprobs = k;
  g.stream = true;
  serving::GenerationResult res = client.generate(g);
  EngineAnswer a;
  bool ids = true;
  a.tokens = ids_without_eos(res.completion, lm, ids);
  const int64_t streamed = static_cast<int64_t>(res.completion.tokens.size());
  if (client.kind() == serving::EngineKind::llama_server && res.completion.usage.completion_tokens.value_or(0) > streamed) {
    // llama-server streams a token that ends inside a UTF-8 character only with the token that
    // completes it, under that token's id alone, and never one left incomplete at the end; its
    // whole (non-streamed) answer lists every generated id. The same greedy request again, with
    // the prompt cached, gives them; the times stay the stream's.
    serving::GenerateRequest whole = g;
    whole.stream = false;
    whole.top_logprobs = 0;
    a.tokens = ids_without_eos(client.generate(whole).completion, lm, ids);
  }
  if (ids) {
    a.text = lm.tokenizer.decode(a.tokens, false);
  } else {
    // Engines that stream text only (the plain OpenAI API): kvgate's tokenizer gives the ids.
    a.text = res.completion.text;
    a.tokens = lm.tokenizer.encode(a.text, false);
  }
  a.token_ms = std::move(res.token_ms);
  // Nothing streamed (every token withheld, or none generated): the answer arrived at the end.
  if (a.token_ms.empty())
    a.token_ms.push_back(std::chrono::duration<double, std::milli>(res.http.finished - res.http.submitted).count());
  a.prompt_tokens = res.completion.usage.prompt_tokens;
  if (!a.prompt_tokens) a.prompt_tokens = static_cast<int64_t>(prompt.size());
  a.cached_tokens = res.completion.cached_prompt_tokens();
  return a;
}

bool can_score(const ConfigRun& run) { return run.client == nullptr || run.client->kind() != serving::EngineKind::openai; }

// Runs one item through every config; an endpoint failure propagates as ItemFailure.
void run_item(const PreparedItem& prepared, const LoadedModel& lm, runtime::Backend* engine, std::vector<ConfigRun>& runs,
              std::vector<PairTotals>& pairs, const EvalOptions& options) {
  const evalsets::EvalItem& item = *prepared.item;
  const size_t vocab = lm.model->arch().n_vocab;
  size_t current = 0;
  auto on_config = [&](size_t c, auto&& body) {
    current = c;
    try {
      body();
    } catch (const serving::EndpointError& e) {
      throw ItemFailure{current, e.failure(), e.what()};
    } catch (const Error& e) {
      // A list the estimator rejects (a probability above 1, a repeated token): the engine's
      // answer is wrong, not kvgate.
      if (runs[c].client == nullptr) throw;
      throw ItemFailure{c, serving::Failure::consumer, where(runs[c].client->endpoint()) + ": " + e.what()};
    }
  };
  for (ConfigRun& r : runs)
    if (r.client == nullptr) {
      r.seq = engine->start(r.config->kv, prepared.tokens + options.max_new_tokens + 64);
      r.last_row.assign(vocab, 0.0f);
    }

  const int k = runs.front().config->top_k;
  std::vector<int32_t> sent;  // the item's tokens so far: every endpoint request's prompt
  std::vector<int32_t> ref_greedy;
  std::vector<std::vector<int32_t>> greedy(runs.size());
  std::vector<std::vector<TopList>> lists(runs.size());
  std::vector<float> rows;
  int turn_index = 0;
  for (const Segment& seg : prepared.segments) {
    const int64_t n = static_cast<int64_t>(seg.tokens.size());
    if (seg.target < 0) {
      for (ConfigRun& r : runs)
        if (r.client == nullptr) {
          const auto t0 = Clock::now();
          engine->forward(*r.seq, seg.tokens, false, r.last_row.data());
          r.pending_prefill_ms += ms_since(t0);
        }
      sent.insert(sent.end(), seg.tokens.begin(), seg.tokens.end());
      continue;
    }
    const int64_t context_tokens = static_cast<int64_t>(sent.size());
    const int max_new = static_cast<int>(std::min<int64_t>(options.max_new_tokens, n + 4));
    std::vector<std::optional<int64_t>> prompt_tokens(runs.size()), cached_tokens(runs.size());
    for (size_t c = 0; c < runs.size(); ++c)
      on_config(c, [&] {
        ConfigRun& r = runs[c];
        std::string text;
        if (r.client == nullptr) {
          GreedyProbe probe = greedy_probe(*engine, *r.seq, context_tokens, r.last_row, max_new, lm.tokenizer.eos_id(),
                                           r.pending_prefill_ms);
          r.pending_prefill_ms = 0;
          r.acc.latency.push_back({0, turn_index, std::move(probe.token_times_ms)});
          greedy[c] = std::move(probe.tokens);
          text = lm.tokenizer.decode(greedy[c], false);
        } else {
          EngineAnswer a = engine_greedy(*r.client, lm, sent, max_new, k);
          r.acc.latency.push_back({0, turn_index, std::move(a.token_ms)});
          greedy[c] = std::move(a.tokens);
          text = std::move(a.text);
          prompt_tokens[c] = a.prompt_tokens;
          cached_tokens[c] = a.cached_tokens;
        }
        if (c == 0) ref_greedy = greedy[c];
        if (seg.final_answer && item.has_answer) r.acc.gold_match = matches_gold(text, item.answer);
        r.acc.add_greedy(ref_greedy, greedy[c], std::move(text));
        if (seg.final_answer) {
          r.acc.final_greedy = greedy[c];
        }
      });

    // Teacher-forced top-k lists of the span under every config.
    for (size_t c = 0; c < runs.size(); ++c)
      on_config(c, [&] {
        ConfigRun& r = runs[c];
        lists[c].clear();
        if (r.client == nullptr) {
          rows.resize(static_cast<size_t>(n + 1) * vocab);
          std::copy(r.last_row.begin(), r.last_row.end(), rows.begin());
          engine->forward(*r.seq, seg.tokens, true, rows.data() + vocab);
          std::copy(rows.end() - static_cast<int64_t>(vocab), rows.end(), r.last_row.begin());
          lists[c] = in_process_lists(rows, vocab, seg.tokens, k);
        } else if (can_score(r)) {
          lists[c] = engine_lists(r.client->score({sent, seg.tokens, k, std::nullopt}));
        }
      });

    std::vector<scoring::TokenClass> token_classes;
    for (const int32_t tok : seg.tokens) token_classes.push_back(scoring::classify_token(lm.tokenizer.piece(tok, false)));
    results::TurnMetrics base_turn;
    base_turn.turn_index = turn_index;
    base_turn.context_tokens = context_tokens;
    base_turn.scored_tokens = n;
    for (size_t c = 0; c < runs.size(); ++c)
      on_config(c, [&] {
        ConfigRun& r = runs[c];
        double turn_kld = 0;
        int64_t turn_same = 0;
        const bool scored = !lists[c].empty();
        if (scored)
          for (int64_t j = 0; j < n; ++j) {
            const size_t jj = static_cast<size_t>(j);
            const scoring::TopKComparison cmp =
                scoring::compare_topk(lists[0][jj].view(), lists[c][jj].view(), seg.tokens[jj]);
            r.acc.add_position(cmp.position, token_classes[jj], turn_kld, turn_same);
          }
        r.scored = r.scored || scored;
        results::TurnMetrics turn = base_turn;
        turn.prompt_tokens = prompt_tokens[c];
        turn.cached_tokens = cached_tokens[c];
        r.acc.add_turn(turn, turn_kld, turn_same, scored);
      });

    for (PairTotals& p : pairs)
      on_config(p.engine, [&] {
        if (!lists[p.engine].empty())
          for (size_t j = 0; j < seg.tokens.size(); ++j) {
            const scoring::TopKComparison cmp =
                scoring::compare_topk(lists[p.emulation][j].view(), lists[p.engine][j].view(), seg.tokens[j]);
            ++p.positions;
            p.kld_sum += cmp.position.kld;
            p.kld_max = std::max(p.kld_max, cmp.position.kld);
            p.same_top1 += cmp.position.same_top1;
          }
        ++p.answers;
        p.same_answers += greedy[p.emulation] == greedy[p.engine];
      });
    sent.insert(sent.end(), seg.tokens.begin(), seg.tokens.end());
    ++turn_index;
  }
}

// Items must fit each engine's context as they fit the model's (prepare_items checked that).
void check_engine_context(const EvalPlan& plan, const std::vector<PreparedItem>& prepared, const Endpoints& endpoints,
                          const EvalOptions& options) {
  for (size_t c = 0; c < plan.configs.size(); ++c) {
    const serving::EngineClient* client = endpoints.clients[c].get();
    if (client == nullptr || !client->info() || !client->info()->context_length) continue;
    const int64_t ctx = *client->info()->context_length;
    for (const PreparedItem& p : prepared)
      if (p.tokens + options.max_new_tokens > ctx)
        throw_input_error(fmt::format("item {} is {} tokens long and its greedy answers need up to {} more, more than the "
                                      "{} tokens of context {} serves; start the server with a larger context or "
                                      "lower --max-new-tokens",
                                      echo_user_text(p.item->id), p.tokens, options.max_new_tokens, ctx,
                                      where(client->endpoint())));
  }
}

}  // namespace

Endpoints connect_endpoints(EvalPlan& plan, uint64_t seed, bool scores_spans) {
  Endpoints out;
  out.http = std::make_unique<serving::HttpClient>(serving::HttpClientOptions{{}, seed});
  out.clients.resize(plan.configs.size());
  for (size_t c = 0; c < plan.configs.size(); ++c) {
    PlannedConfig& config = plan.configs[c];
    if (!config.endpoint) continue;
    auto client = std::make_unique<serving::EngineClient>(*config.endpoint, *out.http);
    const serving::EngineInfo& info = client->discover();
    settle_endpoint_kv(config, info.kv_cache_dtype);
    if (scores_spans && config.role == ConfigRole::reference && client->kind() == serving::EngineKind::openai)
      throw_usage_error(where(config.endpoint.value()) +
                        " speaks the plain OpenAI API, which returns no prompt logprobs: it cannot be the reference "
                        "(give its engine kind in an endpoints file if it is vLLM, SGLang or llama-server)");
    out.clients[c] = std::move(client);
  }
  for (size_t a = 0; a < plan.configs.size(); ++a)
    for (size_t b = a + 1; b < plan.configs.size(); ++b)
      if (plan.configs[a].spec == plan.configs[b].spec)
        throw_usage_error("KV config " + plan.configs[a].spec + " is given twice");
  return out;
}

results::ConfigEndpoint endpoint_record(const PlannedConfig& config, const serving::EngineClient& client) {
  results::ConfigEndpoint e;
  e.name = client.endpoint().name;
  e.url = serving::redact_url(client.endpoint().url);
  e.engine = serving::engine_kind_name(client.kind());
  if (client.info()) {
    e.engine_version = client.info()->version;
    e.kv_reported = client.info()->kv_cache_dtype;
    e.discovery = client.info()->raw;
  }
  e.model = client.model();
  e.kv = config.kv.canonical();
  e.kv_source = config.kv_source;
  return e;
}

EngineEvalResult run_engine_eval(const EvalPlan& plan, const RunModel& model, Endpoints& endpoints,
                                 RunRecorder& recorder, const EvalOptions& options,
                                 const std::function<void(const std::string&)>& progress) {
  const auto t_start = Clock::now();
  if (plan.models.size() != 1) throw_internal_error("engine mode: a plan with endpoints runs one model");
  const LoadedModel& lm = *model.lm;
  runtime::Backend* engine = model.engine;
  if (plan.has_in_process_configs() && engine == nullptr) throw_internal_error("engine mode: in-process configs need an engine");
  const std::vector<PreparedItem> prepared = prepare_items(plan, {model}, options);
  check_engine_context(plan, prepared, endpoints, options);
  const runtime::ModelArch& arch = lm.model->arch();
  const kernels::KvShape shape{static_cast<int>(arch.n_layers), static_cast<int>(arch.n_kv_heads),
                               static_cast<int>(arch.head_dim)};
  // In-process configs run on `model`; an endpoint's weights are the engine's (its record says
  // which model it serves).
  std::vector<ConfigSetup> setups;
  for (const PlannedConfig& c : plan.configs) {
    std::optional<results::ConfigModel> identity;
    if (!c.endpoint) {
      identity = model.identity;
      identity->kv_spec = c.kv.canonical();
    }
    setups.push_back({shape, std::move(identity)});
  }
  recorder.open(setups);
  for (size_t c = 0; c < plan.configs.size(); ++c)
    if (endpoints.clients[c]) recorder.record_endpoint(c, endpoint_record(plan.configs[c], *endpoints.clients[c]));

  std::vector<PairTotals> pairs;
  for (size_t a = 0; a < plan.configs.size(); ++a)
    for (size_t b = 0; b < plan.configs.size(); ++b)
      if (!plan.configs[a].endpoint && plan.configs[b].endpoint && emulates(plan.configs[a].kv, plan.configs[b].kv))
        pairs.push_back({a, b});

  EngineEvalResult out;
  EvalResult& result = out.eval;
  result.run_id = recorder.run_id();
  std::vector<std::pair<std::string, ItemFailure>> failures;
  bool stopped = false;
  try {
    std::vector<ConfigTotals> totals(plan.configs.size());
    const size_t n_items = prepared.size();
    result.items_total = static_cast<int64_t>(n_items);
    for (size_t it = 0; it < n_items && !stopped; ++it) {
      const evalsets::EvalItem& item = *prepared[it].item;
      if (recorder.holds(item.id)) {
        ++result.items_skipped;
        continue;
      }
      if (progress) progress("item " + std::to_string(it + 1) + "/" + std::to_string(n_items) + " " + item.id);
      std::vector<ConfigRun> runs(plan.configs.size());
      for (size_t c = 0; c < runs.size(); ++c) {
        runs[c].config = &plan.configs[c];
        runs[c].client = endpoints.clients[c].get();
      }
      std::vector<PairTotals> item_pairs = pairs;
      for (PairTotals& p : item_pairs) p.positions = p.same_top1 = p.answers = p.same_answers = 0, p.kld_sum = 0;
      try {
        run_item(prepared[it], lm, engine, runs, item_pairs, options);
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
      for (size_t c = 0; c < runs.size(); ++c) {
        ConfigItemRecord r = runs[c].acc.record();
        if (!runs[c].scored) {
          results::ItemMetrics& m = r.metrics;
          m.kld_mean = m.kld_max = m.kld_p99 = m.delta_p_mean = m.delta_p_rms = m.same_top1 = std::nan("");
          m.nll_mean = m.nll_ref_mean = std::nan("");
        }
        totals[c].add(item.id, r);
        record.configs.push_back(std::move(r));
      }
      recorder.record(std::move(record));
      for (size_t p = 0; p < pairs.size(); ++p) {
        pairs[p].positions += item_pairs[p].positions;
        pairs[p].same_top1 += item_pairs[p].same_top1;
        pairs[p].kld_sum += item_pairs[p].kld_sum;
        pairs[p].kld_max = std::max(pairs[p].kld_max, item_pairs[p].kld_max);
        pairs[p].answers += item_pairs[p].answers;
        pairs[p].same_answers += item_pairs[p].same_answers;
      }
      ++result.items_run;
    }
    for (size_t c = 0; c < plan.configs.size(); ++c) result.configs.push_back(summary_row(plan.configs[c], totals[c], shape));
    if (stopped) recorder.fail();
    else
      recorder.finish(failures.empty() && result.items_run + result.items_skipped == static_cast<int64_t>(prepared.size()) &&
                      !plan.leaves_items_out());
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
  for (const PairTotals& p : pairs) {
    CrossCheck x;
    x.emulation = plan.configs[p.emulation].spec;
    x.engine = plan.configs[p.engine].spec;
    x.positions = p.positions;
    x.kld_mean = p.positions ? p.kld_sum / static_cast<double>(p.positions) : std::nan("");
    x.kld_max = p.kld_max;
    x.same_top1 = p.positions ? static_cast<double>(p.same_top1) / static_cast<double>(p.positions) : std::nan("");
    x.answers = p.answers;
    x.same_answer = p.answers ? static_cast<double>(p.same_answers) / static_cast<double>(p.answers) : std::nan("");
    out.cross_checks.push_back(x);
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return out;
}

}  // namespace kvgate::harness
