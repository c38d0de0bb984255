// gemma4-conform backends: the backends the conformance suite can run, one per line.
#include <algorithm>
#include <iostream>

#include "conformance/check.h"
#include "impl/backend.h"
#include "impl/plugin_loader.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"
#include "reference/text.h"

namespace gemma4::cli {

using text::pad;

namespace {

std::string joined(const std::vector<std::string>& items, const std::string& none) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out.empty() ? none : out;
}

// ggml's support mode: what each backend declares, one row each.
void print_matrix(const std::vector<impl::Backend>& backends) {
  std::cout << pad("backend", 44) << pad("kind", 10) << pad("devices", 10) << pad("dtypes", 14) << pad("head dims", 28)
            << pad("window", 8) << pad("determ.", 8) << "replaces\n";
  for (const impl::Backend& b : backends) {
    const impl::Capabilities& c = b.capabilities;
    std::vector<std::string> devices, dtypes, head_dims;
    for (torch::DeviceType d : c.devices) devices.push_back(c10::DeviceTypeName(d, /*lower_case=*/true));
    for (torch::ScalarType t : c.dtypes) dtypes.push_back(t == torch::kFloat32 ? "f32" : t == torch::kBFloat16 ? "bf16" : "f16");
    for (int64_t h : c.head_dims) head_dims.push_back(std::to_string(h));
    std::cout << pad(b.name, 44) << pad(impl::backend_kind_name(b.kind), 10) << pad(joined(devices, "-"), 10)
              << pad(joined(dtypes, "-"), 14) << pad(joined(head_dims, "any"), 28)
              << pad(c.max_sliding_window > 0 ? std::to_string(c.max_sliding_window) : "any", 8)
              << pad(c.deterministic ? "yes" : "no", 8) << joined(impl::replaced_parts(b), "none") << "\n";
  }
}

}  // namespace

int backends_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      {"backend-lib", "PATH", "also load and list an out-of-tree backend plugin"},
      {"matrix", "", "a support matrix instead: devices, dtypes, head dims, largest window, determinism, parts replaced"},
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
  std::vector<impl::Backend> backends = impl::builtin_backends();
  if (args.has("backend-lib")) backends.push_back(impl::load_plugin(args.get("backend-lib")));
  if (args.has("matrix")) {
    print_matrix(backends);
    return 0;
  }
  for (const impl::Backend& b : backends) print(b);
  return 0;
}

}  // namespace gemma4::cli
