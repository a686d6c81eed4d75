// core/interrupt.h: a signal only raises the flag (the process goes on), and the exit code a
// stopped run reports is the shell's 128 + signal.
#include "core/interrupt.h"

#include <gtest/gtest.h>

#include <csignal>

namespace kvgate {
namespace {

TEST(Interrupt, SignalRaisesTheFlagInsteadOfEndingTheProcess) {
  install_interrupt_handlers();
  clear_interrupt();
  EXPECT_EQ(interrupt_signal(), 0);
  std::raise(SIGTERM);
  EXPECT_EQ(interrupt_signal(), SIGTERM);
  clear_interrupt();
  std::raise(SIGINT);
  EXPECT_EQ(interrupt_signal(), SIGINT);
  clear_interrupt();
  // The handlers reset after one signal each (a second Ctrl-C kills): put the default back.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

TEST(Interrupt, ExitCodesAreTheShells) {
  EXPECT_EQ(Interrupted(SIGINT, "x").exit_code(), 130);
  EXPECT_EQ(Interrupted(SIGTERM, "x").exit_code(), 143);
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
}

}  // namespace
}  // namespace kvgate
