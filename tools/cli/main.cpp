// gemma4-conform: the command-line entry point. Dispatches to a subcommand and turns every error
// into one line on stderr and a non-zero exit (2 for usage, 1 otherwise).
#include <c10/util/Exception.h>

#include <iostream>
#include <string>
#include <vector>

#include "reference/error.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>&);
};

const Command kCommands[] = {
    {"forward", "run the reference on a checkpoint and inputs; write logits, hidden states, loss, grads to HDF5",
     gemma4::cli::forward_command},
    {"golden", "golden tensors: list, generate, verify, diff, show (golden/FORMAT.md)", gemma4::cli::golden_command},
    {"backends", "list the backends (name, description)", gemma4::cli::backends_command},
    {"conform", "run the conformance suite against a backend", gemma4::cli::conform_command},
    {"calibrate", "run the suite over every variant and faulty backend; print the separation table",
     gemma4::cli::calibrate_command},
    {"bench-compare", "compare two gemma4-bench JSON reports; exit 1 on a performance regression",
     gemma4::cli::bench_compare_command},
};

void print_usage(std::ostream& out) {
  out << "usage: gemma4-conform <command> [options]   (gemma4-conform <command> --help for details)\n\ncommands:\n";
  for (const Command& c : kCommands) {
    std::string name = std::string("  ") + c.name;
    name.resize(17, ' ');
    out << name << c.summary << "\n";
  }
}

// c10 errors carry a backtrace after the first line; a person needs the first line.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(std::cerr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(std::cout);
    return 0;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const gemma4::cli::UsageError& e) {
      std::cerr << "gemma4-conform " << name << ": " << e.message << " (see --help)\n";
      return 2;
    } catch (const gemma4::Error& e) {
      std::cerr << "gemma4-conform " << name << ": error: " << e.what() << "\n";
    } catch (const c10::Error& e) {
      std::cerr << "gemma4-conform " << name << ": error: " << first_line(e.what_without_backtrace()) << "\n";
    } catch (const std::exception& e) {
      std::cerr << "gemma4-conform " << name << ": error: " << first_line(e.what()) << "\n";
    }
    return 1;
  }
  std::cerr << "gemma4-conform: unknown command '" << name << "'\n";
  print_usage(std::cerr);
  return 2;
}
