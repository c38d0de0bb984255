// gemma4-conform backends: the backends the conformance suite can run, one per line.
#include <algorithm>
#include <iostream>

#include "conformance/check.h"
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
  if (!args.parse("backends",
                  "List the backends: name, kind (reference, fused, variant, faulty, plugin), for a faulty one the\n"
                  "categories where its bug must show (and 'f32 only' when it hides below bf16/f16 rounding), then\n"
                  "a description (faulty-* name the bug they reproduce and its public source).",
                  options, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  auto print = [](const impl::Backend& b) {
    std::string name = b.name, kind = impl::backend_kind_name(b.kind), fails;
    for (impl::Category c : b.fails_in) fails += (fails.empty() ? "fails in " : ",") + std::string(conformance::category_name(c));
    if (b.below_reduced_precision) fails += " (f32 only)";
    name.resize(std::max<size_t>(name.size(), 44), ' ');
    kind.resize(10, ' ');
    fails.resize(std::max<size_t>(fails.size(), 36), ' ');
    std::cout << name << " " << kind << fails << " " << b.description << "\n";
  };
  for (const impl::Backend& b : impl::builtin_backends()) print(b);
  if (args.has("backend-lib")) print(impl::load_plugin(args.get("backend-lib")));
  return 0;
}

}  // namespace gemma4::cli
