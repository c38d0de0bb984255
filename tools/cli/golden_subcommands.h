#pragma once
// The subcommands of `gemma4-conform golden` that live outside golden_command.cpp.
#include <string>
#include <vector>

namespace gemma4::cli {

int golden_diff_command(const std::vector<std::string>& args);  // golden_inspect_command.cpp
int golden_show_command(const std::vector<std::string>& args);
int golden_check_command(const std::vector<std::string>& args);  // golden_check_command.cpp
int golden_inspect_command(const std::vector<std::string>& args);  // golden_statistics_command.cpp

}  // namespace gemma4::cli
