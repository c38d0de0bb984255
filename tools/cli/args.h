#pragma once
// A small command-line parser for the subcommands: "--name value" and "--flag", with --help
// generated from the option table. Unknown options and missing values are usage errors.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gemma4::cli {

struct Option {
  std::string name;       // without the leading "--"
  std::string value_name; // empty for a flag
  std::string help;
  bool required = false;
};

struct UsageError {
  std::string message;
};

class Args {
 public:
  // Throws UsageError. Returns false when --help was asked for (the help is printed).
  bool parse(const std::string& command, const std::string& summary, const std::vector<Option>& options,
             const std::vector<std::string>& argv);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

std::string help_text(const std::string& command, const std::string& summary, const std::vector<Option>& options);

// An option's comma-separated list ("a,b,,c" -> a, b, c): the empty items dropped.
std::vector<std::string> split_commas(const std::string& list);

// The whole number `text` spells, nothing else around it ("12"; not "12x", "", "1e3"); nullopt otherwise.
std::optional<int64_t> whole_number(const std::string& text);

// The option's whole-number value, or `fallback` when it is absent. Throws UsageError naming the
// option when the value is not a whole number of at least `minimum`.
int int_option(const Args& args, const std::string& name, int fallback, int minimum);

}  // namespace gemma4::cli
