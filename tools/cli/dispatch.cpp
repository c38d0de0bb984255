// The command table and dispatch of gemma4-conform, shared by the executable (main.cpp) and the
// Python package (tools/python), so both run the same commands with the same errors.
#include <c10/util/Exception.h>

#include <iostream>

#include "reference/error.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {
namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>&);
  // The commands that run the engine also need the invocation (its worker for child processes).
  int (*run_engine)(const std::vector<std::string>&, const Invocation&) = nullptr;
};

int conform_in_tree(const std::vector<std::string>& args, const Invocation& invocation) {
  return conform_command(args, invocation);
}

const Command kCommands[] = {
    {"forward", "run the reference on a checkpoint and inputs; write logits, hidden states, loss, grads to HDF5",
     forward_command},
    {"generate", "greedy generation with the reference, KV cache or not; write sequences and scores to HDF5",
     generation_command},
    {"golden", "golden tensors: list, generate, verify, check, diff, show (golden/FORMAT.md)", golden_command},
    {"backends", "list the backends (name, description)", backends_command},
    {"conform", "run the conformance suite against a backend", nullptr, conform_in_tree},
    {"calibrate", "run the suite over every variant and faulty backend; print the separation table", nullptr,
     calibrate_command},
    {"bench-compare", "compare two gemma4-bench JSON reports; exit 1 on a performance regression", bench_compare_command},
    {"bench-history", "the history of benchmark medians across commits and GPUs: append, html, show",
     bench_history_command},
    {"memory", "activation memory: measure peaks on a device, or report a points file against the estimate",
     memory_command},
};

void print_usage(const std::string& program, std::ostream& out) {
  out << "usage: " << program << " <command> [options]   (" << program << " <command> --help for details)\n\ncommands:\n";
  for (const Command& c : kCommands) {
    std::string name = std::string("  ") + c.name;
    name.resize(17, ' ');
    out << name << c.summary << "\n";
  }
}

// c10 errors carry a backtrace after the first line; a person needs the first line.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

int guarded(const std::string& program, const std::string& command, const std::function<int()>& run) {
  try {
    return run();
  } catch (const UsageError& e) {
    std::cerr << program << " " << command << ": " << e.message << " (see --help)\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << program << " " << command << ": error: " << e.what() << "\n";
  } catch (const c10::Error& e) {
    std::cerr << program << " " << command << ": error: " << first_line(e.what_without_backtrace()) << "\n";
  } catch (const std::exception& e) {
    std::cerr << program << " " << command << ": error: " << first_line(e.what()) << "\n";
  }
  return 1;
}

int run_command(const Invocation& invocation, const std::vector<std::string>& argv) {
  const std::string& program = invocation.program;
  if (argv.empty()) {
    print_usage(program, std::cerr);
    return 2;
  }
  const std::string& name = argv[0];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(program, std::cout);
    return 0;
  }
  const std::vector<std::string> args(argv.begin() + 1, argv.end());
  for (const Command& c : kCommands) {
    if (name == c.name) {
      return guarded(program, name, [&] { return c.run_engine ? c.run_engine(args, invocation) : c.run(args); });
    }
  }
  std::cerr << program << ": unknown command '" << name << "'\n";
  print_usage(program, std::cerr);
  return 2;
}

}  // namespace gemma4::cli
