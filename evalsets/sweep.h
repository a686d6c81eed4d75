#pragma once
// Depth sweeps (issue 42, docs/evalsets.md "Depth sweeps"): an item that scores one document at
// every depth, so that each position bucket holds the same documents and quality by position
// compares like with like. A sweep item is raw text scored from a short warm-up to its end as
// one span: each token is scored with everything before it as its context (what perplexity
// versus context length measures), in one pass per config. The answer-scoring items instead
// score one span where each document ends, so each bucket holds other documents.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "evalsets/item.h"

namespace kvgate::evalsets {

// Estimated tokens read before the first scored token: the first few tokens of a text have
// almost no context to be conditioned on, so what a KV format does to them says nothing.
inline constexpr size_t kSweepWarmupTokens = 64;

// The byte a sweep's scored span starts at: the first ASCII space or newline once the text
// before it holds `warmup_tokens` estimated tokens (the span starts with that character, so the
// word after it is tokenized as it is mid-text); a code-point boundary in text without spaces.
// npos when the text ends first.
size_t sweep_begin(std::string_view text, size_t warmup_tokens = kSweepWarmupTokens);

// A document cut from a longer text for a sweep is kept only if it holds at least this share
// (percent) of its target length, so that every document reaches about the same depth; and a
// cut is placed no earlier than that, so that a cut never makes a document it then drops.
inline constexpr size_t kSweepMinFillPercent = 90;

// The end of the longest prefix of `text` from byte `from` that holds at most `max_tokens`
// estimated tokens and ends at a paragraph break (a blank line), else at a line or sentence end,
// else before a space, each taken only where it keeps kSweepMinFillPercent of `max_tokens`;
// `from` when not even one word fits.
size_t sweep_cut(std::string_view text, size_t from, size_t max_tokens);

// A sweep item over `text`: scored from sweep_begin(text) to its end. `meta` gains
// "sweep": {"warmup_tokens": N}. Input error (exit 2) naming the id when the text is too short to
// hold anything after the warm-up.
EvalItem make_sweep_item(std::string id, std::string domain, std::string text, nlohmann::json meta);

// An item's document as one text, for sweeping a generated item: its raw text, or its messages'
// contents (tool calls rendered as tool_calls_text) in order, separated by blank lines.
std::string item_document(const EvalItem& item);

// Whether an item is a depth sweep (meta.sweep is set).
bool is_sweep_item(const EvalItem& item);

}  // namespace kvgate::evalsets
