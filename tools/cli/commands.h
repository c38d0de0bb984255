#pragma once
// The subcommands of gemma4-conform. Each takes the arguments after its name and returns the
// process exit code; gemma4::Error and cli::UsageError propagate to main, which prints one line.
#include <functional>
#include <string>
#include <vector>

#include <torch/types.h>

namespace gemma4::impl {
struct Backend;
}

namespace gemma4::cli {

int forward_command(const std::vector<std::string>& args);
int generation_command(const std::vector<std::string>& args);  // `generate`
int golden_command(const std::vector<std::string>& args);
int backends_command(const std::vector<std::string>& args);
// `given`: a backend the caller made (the Python package's --backend MODULE:FACTORY); it takes the
// place of --backend NAME / --backend-lib, and --backend then only names it.
int conform_command(const std::vector<std::string>& args, const impl::Backend* given = nullptr);
int calibrate_command(const std::vector<std::string>& args);
int bench_compare_command(const std::vector<std::string>& args);
int memory_command(const std::vector<std::string>& args);
int scoreboard_command(const std::vector<std::string>& args);  // runs python -m gemma4_conform scoreboard

// "<program> <command> [options]": runs the command named by args[0] (dispatch.cpp).
int run_command(const std::string& program, const std::vector<std::string>& args);
// Runs `run`, turning UsageError into exit 2 and any other error into exit 1, each as one line on
// stderr prefixed with "<program> <command>".
int guarded(const std::string& program, const std::string& command, const std::function<int()>& run);

// Shared option values.
torch::ScalarType parse_dtype(const std::string& name);  // f32 | bf16 | f16
torch::Device parse_device(const std::string& name);     // cpu | cuda (checked to be available)

}  // namespace gemma4::cli
