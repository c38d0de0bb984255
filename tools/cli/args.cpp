#include "tools/cli/args.h"

#include <limits>
#include <sstream>

#include <iostream>

namespace gemma4::cli {

std::string help_text(const std::string& command, const std::string& summary, const std::vector<Option>& options) {
  std::string text = "usage: gemma4-conform " + command;
  for (const Option& o : options) {
    std::string item = "--" + o.name + (o.value_name.empty() ? "" : " " + o.value_name);
    text += o.required ? " " + item : " [" + item + "]";
  }
  text += "\n\n" + summary + "\n\noptions:\n";
  for (const Option& o : options) {
    std::string left = "  --" + o.name + (o.value_name.empty() ? "" : " " + o.value_name);
    if (left.size() < 28) left.resize(28, ' ');
    text += left + " " + o.help + "\n";
  }
  text += "  --help                     show this help\n";
  return text;
}

bool Args::parse(const std::string& command, const std::string& summary, const std::vector<Option>& options,
                 const std::vector<std::string>& argv) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << help_text(command, summary, options);
      return false;
    }
    if (arg.rfind("--", 0) != 0) {
      positional_.push_back(arg);
      continue;
    }
    const std::string name = arg.substr(2);
    const Option* option = nullptr;
    for (const Option& o : options) {
      if (o.name == name) option = &o;
    }
    if (!option) throw UsageError{"unknown option '" + arg + "'"};
    if (option->value_name.empty()) {
      values_[name] = "1";
    } else {
      if (i + 1 >= argv.size()) throw UsageError{"option '" + arg + "' needs a value (" + option->value_name + ")"};
      values_[name] = argv[++i];
    }
  }
  for (const Option& o : options) {
    if (o.required && !has(o.name)) throw UsageError{"missing required option '--" + o.name + "'"};
  }
  return true;
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::optional<int64_t> whole_number(const std::string& text) {
  size_t used = 0;
  try {
    const long long value = std::stoll(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

int int_option(const Args& args, const std::string& name, int fallback, int minimum) {
  if (!args.has(name)) return fallback;
  const std::string text = args.get(name);
  const std::optional<int64_t> value = whole_number(text);
  if (!value || *value < minimum || *value > std::numeric_limits<int>::max()) {
    throw UsageError{"--" + name + " must be a whole number of at least " + std::to_string(minimum) + ", got '" + text +
                     "'"};
  }
  return static_cast<int>(*value);
}

}  // namespace gemma4::cli
