#pragma once
// --backend cpu|cuda|hip for the commands that run the model (eval, replay, perplexity,
// generate, bench model): where runtime::Backend runs the forward passes.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "runtime/backend.h"

namespace kvgate::harness {

void add_backend_option(CLI::App* command, std::string& backend);

// Checks a --backend value: an unknown name is a usage error; a GPU backend this build lacks,
// or one without a visible device, is an environment error (exit 3) that says how to get it.
void check_backend(const std::string& backend);

// The engine for `backend` over `model` (threads: CPU workers); errors as check_backend.
std::unique_ptr<runtime::Backend> make_backend(const std::string& backend, const runtime::Model& model, int threads);

}  // namespace kvgate::harness
