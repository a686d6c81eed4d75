#include "harness/commands.h"
namespace kvgate::harness {
void add_model_commands(CLI::App&, CommandContext&) {}
}
