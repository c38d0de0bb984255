#pragma once
// The subcommands of gemma4-conform. Each takes the arguments after its name and returns the
// process exit code; gemma4::Error and cli::UsageError propagate to main, which prints one line.
#include <functional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "conformance/engine.h"

namespace gemma4::cli {

class Args;

// Who runs a command: the program's name for messages, and the worker that runs one suite run in a
// child process (the engine's --isolate and ISA levels): the CLI's own path, or, from Python,
// {python, "-m", "gemma4_conform"}, which can load a backend's MODULE:FACTORY too.
struct Invocation {
  std::string program;
  std::vector<std::string> worker;
};

int forward_command(const std::vector<std::string>& args);
int generation_command(const std::vector<std::string>& args);  // `generate`
int golden_command(const std::vector<std::string>& args);
int backends_command(const std::vector<std::string>& args);
// `given`: a backend the caller made (the Python package's --backend MODULE:FACTORY, with that
// spec as its selection); it takes the place of --backend NAME / --backend-lib.
int conform_command(const std::vector<std::string>& args, const Invocation& invocation,
                    const conformance::Subject* given = nullptr);
int calibrate_command(const std::vector<std::string>& args, const Invocation& invocation);
int bench_compare_command(const std::vector<std::string>& args);
int bench_history_command(const std::vector<std::string>& args);
int memory_command(const std::vector<std::string>& args);

// "<program> <command> [options]": runs the command named by args[0] (dispatch.cpp).
int run_command(const Invocation& invocation, const std::vector<std::string>& args);
// Runs `run`, turning UsageError into exit 2 and any other error into exit 1, each as one line on
// stderr prefixed with "<program> <command>".
int guarded(const std::string& program, const std::string& command, const std::function<int()>& run);

// Shared option values.
torch::ScalarType parse_dtype(const std::string& name);  // f32 | bf16 | f16
torch::Device parse_device(const std::string& name);     // cpu | cuda (checked to be available)
// The engine's options shared by conform and calibrate: --device, --dtype (default `dtypes`; "all":
// f32,bf16,f16), --isa, --steps, --isolate, --jobs (default `jobs`), --timeout; the worker.
conformance::EngineOptions engine_options(const Args& args, const Invocation& invocation,
                                          const std::string& dtypes = "f32", int jobs = 1);
// A comma-separated list of the suite's categories (UsageError naming an unknown one).
std::vector<conformance::Category> category_list(const Args& args, const std::string& option);

}  // namespace gemma4::cli
