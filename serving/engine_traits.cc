#include "serving/engine_traits.h"

#include "serving/engine_dialect.h"

namespace kvgate::serving {

namespace {

const EngineTraits* const kEngines[] = {&kVllmEngine, &kSglangEngine, &kLlamaServerEngine, &kOpenaiEngine};

// `auto` before discovery resolves it: no dialect, nothing to say.
const EngineTraits kUnresolved{.kind = EngineKind::automatic, .name = "auto", .display = "engine", .neutral_sampling = "{}"};

}  // namespace

std::span<const EngineTraits* const> engine_table() { return kEngines; }

const EngineTraits& engine_traits(EngineKind kind) {
  for (const EngineTraits* e : kEngines)
    if (e->kind == kind) return *e;
  return kUnresolved;
}

const EngineTraits* find_engine(std::string_view name) {
  for (const EngineTraits* e : kEngines) {
    if (e->name == name) return e;
    for (std::string_view alias : e->aliases)
      if (alias == name) return e;
  }
  return nullptr;
}

std::string engine_names_text(bool scoring_only) {
  std::string out;
  for (const EngineTraits* e : kEngines)
    if (!scoring_only || e->scores_spans()) out.append(out.empty() ? "" : ", ").append(e->name);
  return out;
}

std::string engine_kind_name(EngineKind kind) { return std::string(engine_traits(kind).name); }

std::optional<EngineKind> parse_engine_kind(std::string_view name) {
  if (name == kUnresolved.name) return EngineKind::automatic;
  if (const EngineTraits* e = find_engine(name)) return e->kind;
  return std::nullopt;
}

}  // namespace kvgate::serving
