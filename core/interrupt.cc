#include "core/interrupt.h"

#include <csignal>

#include <atomic>

namespace kvgate {
namespace {

// A lock-free atomic is async-signal-safe to store to.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_interrupt(int signal) { g_signal.store(signal, std::memory_order_relaxed); }

}  // namespace

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read or write in progress (SQLite, an engine's HTTP stream) carries on rather
  // than failing with EINTR; SA_RESETHAND: a second Ctrl-C kills, for a user who will not wait.
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int interrupt_signal() { return g_signal.load(std::memory_order_relaxed); }

void clear_interrupt() { g_signal.store(0, std::memory_order_relaxed); }

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

}  // namespace kvgate
