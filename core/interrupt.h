#pragma once
// Ctrl-C and SIGTERM during a long run: the signal only raises a flag, and the run loops check
// it between items, so the item being written finishes its transaction, the run is marked
// interrupted (resumable) and the command says how to resume it. A second signal of the same
// kind ends the process at once (the handler is reset after the first), which SQLite's
// transactions make safe too: a killed run keeps whole items only.
#include <stdexcept>
#include <string>

namespace kvgate {

// Routes SIGINT and SIGTERM to the flag for the rest of the process. Idempotent.
void install_interrupt_handlers();

// The signal that asked the process to stop (SIGINT or SIGTERM), or 0.
int interrupt_signal();

// For tests: forget a received signal.
void clear_interrupt();

// Thrown by a run loop that stopped on a signal, after it marked its run interrupted. The
// process exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports
// a process the signal ended.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signal, std::string message) : std::runtime_error(std::move(message)), signal_(signal) {}
  int signal() const { return signal_; }
  int exit_code() const { return 128 + signal_; }

 private:
  int signal_;
};

// "SIGINT", "SIGTERM" (or "signal N").
std::string signal_name(int signal);

}  // namespace kvgate
