// bad_input: malformed configs, wrong shapes and NaN inputs give a clear error (gemma4::Error,
// one line, naming the field, tensor or layer at fault) rather than a crash, a c10 backtrace or a
// silently wrong answer, also when the backend's ops and hand-off are in the path.
#include <ATen/ATen.h>

#include "conformance/check.h"
#include "conformance/tiny_models.h"
#include "golden/model_cases.h"
#include "golden/op_cases.h"
#include "reference/error.h"

namespace gemma4::conformance {
namespace {

struct BadInputCase {
  const char* name;
  const char* phrase;  // the error message must contain it
  std::function<void(const SuiteOptions&)> action;
};

void run_tiny(const SuiteOptions& o, const std::function<void(ForwardInputs&, const Config&)>& mutate) {
  TinyModel m = tiny_model("e2b", o);
  ForwardInputs in = golden::forward_inputs(m.inputs, o.device);
  mutate(in, m.config);
  Model(m.config, m.weights).forward(in, backend_forward(o, m.config));
}

void run_op_case(const SuiteOptions& o, const std::string& name, const std::function<void(golden::OpTensors&)>& mutate) {
  const golden::OpCase& oc = *golden::find_op_case(name);
  golden::OpTensors t = golden::make_op_tensors(oc, 0, o.dtype, o.device);
  mutate(t);
  golden::run_op(oc.op, oc.params, t.inputs, t.upstream, o.backend.ops);
}

const std::vector<BadInputCase>& bad_input_cases() {
  static const std::vector<BadInputCase> cases = {
      {"config/no-kv-source", "layer",
       [](const SuiteOptions&) {
         // A KV-shared full layer with no full layer before the sharing point (GEMMA4.md, KV sharing).
         nlohmann::json j = golden::tiny_config(golden::model_cases()[0], golden::released_configs_dir());
         j["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                             "sliding_attention", "full_attention", "full_attention"};
         parse_config(j);
       }},
      {"config/heads-not-divisible", "num_attention_heads",
       [](const SuiteOptions&) {
         nlohmann::json j = golden::tiny_config(golden::model_cases()[2], golden::released_configs_dir());
         j["num_attention_heads"] = 3;
         parse_config(j);
       }},
      {"inputs/ids-one-dimensional", "input_ids",
       [](const SuiteOptions& o) { run_tiny(o, [](ForwardInputs& in, const Config&) { in.input_ids = in.input_ids[0]; }); }},
      {"inputs/token-out-of-vocabulary", "outside the vocabulary",
       [](const SuiteOptions& o) {
         run_tiny(o, [](ForwardInputs& in, const Config& c) { in.input_ids[0][3] = c.vocab_size; });
       }},
      {"inputs/empty-sequence", "empty sequence",
       [](const SuiteOptions& o) {
         run_tiny(o, [](ForwardInputs& in, const Config&) {
           for (torch::Tensor* t : {&in.input_ids, &in.attention_mask, &in.labels}) {
             if (t->defined()) *t = t->slice(1, 0, 0);
           }
         });
       }},
      {"inputs/labels-wrong-shape", "labels",
       [](const SuiteOptions& o) {
         run_tiny(o, [](ForwardInputs& in, const Config&) { in.labels = in.labels.slice(1, 0, 5).contiguous(); });
       }},
      {"op/nan-query", "holds NaN",
       [](const SuiteOptions& o) {
         run_op_case(o, "attention-sliding-window-lt-s", [](golden::OpTensors& t) { t.inputs.at("q").view(-1)[7] = NAN; });
       }},
      {"op/keys-wrong-layout", "'k' has shape",
       [](const SuiteOptions& o) {
         run_op_case(o, "attention-sliding-window-lt-s",
                     [](golden::OpTensors& t) { t.inputs.at("k") = t.inputs.at("k").transpose(1, 2).contiguous(); });
       }},
  };
  return cases;
}

}  // namespace

std::vector<Check> bad_input_checks(const SuiteOptions&) {
  std::vector<Check> checks;
  for (const BadInputCase& c : bad_input_cases()) {
    checks.push_back({Category::kBadInput, c.name, [&c](const SuiteOptions& o, Reporter& reporter) {
                        std::string message;
                        bool clear = false;
                        try {
                          c.action(o);
                          message = "no error: the bad input was accepted";
                        } catch (const Error& e) {
                          message = e.what();
                          clear = message.find(c.phrase) != std::string::npos && message.find('\n') == std::string::npos;
                        } catch (const std::exception& e) {
                          message = std::string("not a clear error: ") + e.what();
                          message = message.substr(0, message.find('\n'));
                        }
                        reporter.record(std::string("expects '") + c.phrase + "'", "unclear_errors", clear ? 0 : 1, 0,
                                        clear, message);
                      }});
  }
  return checks;
}

}  // namespace gemma4::conformance
