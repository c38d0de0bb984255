// gemma4-conform backends: the backends the conformance suite can run, one per line.
#include <iostream>

#include "impl/backend.h"
#include "impl/plugin_loader.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {

int backends_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      {"backend-lib", "PATH", "also load and list an out-of-tree backend plugin"},
  };
  Args args;
  if (!args.parse("backends", "List the backends: name, then a description (faulty-* name the bug they reproduce).",
                  options, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  auto print = [](const impl::Backend& b) {
    std::string name = b.name;
    if (name.size() < 30) name.resize(30, ' ');
    std::cout << name << " " << b.description << "\n";
  };
  for (const impl::Backend& b : impl::builtin_backends()) print(b);
  if (args.has("backend-lib")) print(impl::load_plugin(args.get("backend-lib")));
  return 0;
}

}  // namespace gemma4::cli
