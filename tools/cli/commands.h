#pragma once
// The subcommands of gemma4-conform. Each takes the arguments after its name and returns the
// process exit code; gemma4::Error and cli::UsageError propagate to main, which prints one line.
#include <string>
#include <vector>

#include <torch/types.h>

namespace gemma4::cli {

int forward_command(const std::vector<std::string>& args);
int golden_command(const std::vector<std::string>& args);
int backends_command(const std::vector<std::string>& args);
int conform_command(const std::vector<std::string>& args);
int calibrate_command(const std::vector<std::string>& args);
int bench_compare_command(const std::vector<std::string>& args);

// Shared option values.
torch::ScalarType parse_dtype(const std::string& name);  // f32 | bf16 | f16
torch::Device parse_device(const std::string& name);     // cpu | cuda (checked to be available)

}  // namespace gemma4::cli
