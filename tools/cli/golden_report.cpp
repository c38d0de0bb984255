#include "tools/cli/golden_report.h"

#include <iostream>

#include "conformance/check.h"
#include "golden/candidate.h"
#include "golden/quantized_subject.h"
#include "reference/error.h"
#include "reference/text.h"

namespace gemma4::cli {

using text::pad;
using text::sci;

namespace {

// --envelope: a quantized subject's figures against the float model, and the same figures of the
// golden's truth (the reference on the dequantized weights): what quantization alone costs.
void add_envelope(const golden::GoldenCase& g, const golden::TensorMap& candidate, const std::string& float_path,
                  conformance::Run& run, std::ostream* table) {
  const golden::GoldenCase float_model = golden::read_untrusted_golden(float_path);
  const auto float_logits = float_model.expected.find("outputs/logits");
  if (float_logits == float_model.expected.end()) throw Error(float_path + ": no expected/outputs/logits");
  const auto logits = candidate.find("outputs/logits");
  if (logits == candidate.end()) return;  // the verdict already fails it
  struct Subject {
    const char* prefix;
    torch::Tensor logits;
  };
  std::vector<Subject> subjects{{"envelope", logits->second}};
  if (auto t = g.truth.find("outputs/logits"); t != g.truth.end()) subjects.push_back({"quantization", t->second});
  const auto ids = g.inputs.find("input_ids"), float_ids = float_model.inputs.find("input_ids");
  if (ids == g.inputs.end() || float_ids == float_model.inputs.end() || !ids->second.equal(float_ids->second)) {
    throw Error(float_path + ": not the float model of " + g.name + " (its inputs/input_ids differ)");
  }
  if (float_model.config != g.config) {
    throw Error(float_path + ": not the float model of " + g.name + " (its config differs: another geometry)");
  }
  if (table) *table << "  envelope against the float model (" << float_path << "), reported, not judged:\n  "
            << text::pad("subject", 14) << text::pad("positions", 16) << text::pad("tokens", 8) << text::pad("KLD mean", 10)
            << text::pad("KLD p99", 10) << text::pad("KLD max", 10) << text::pad("top-1", 8) << text::pad("dp mean", 10)
            << "dp rms\n";
  for (const Subject& s : subjects) {
    for (const golden::EnvelopeFigures& f : golden::envelope(g, float_logits->second, s.logits)) {
      const std::string split = golden::envelope_split_name(f.split);
      if (table) *table << "  " << text::pad(s.prefix, 14) << text::pad(split, 16) << text::pad(std::to_string(f.tokens), 8)
                << text::pad(text::sci(f.kld_mean), 10) << text::pad(text::sci(f.kld_p99), 10)
                << text::pad(text::sci(f.kld_max), 10) << text::pad(text::fixed(f.top1_agreement, 4), 8)
                << text::pad(text::sci(f.delta_p_mean), 10) << text::sci(f.delta_p_rms) << "\n";
      const std::string detail = "against " + float_path + ", " + std::to_string(f.tokens) + " positions";
      const std::string name = std::string(s.prefix) + "/" + split + "/";
      for (const auto& [metric, value] : golden::envelope_metrics(f)) run.measurements.push_back({name + metric, value, detail});
    }
  }
}

// A golden made on a dequantized checkpoint (gguf_dequantized.py): one row per tensor of the file
// the subject loads, its change over what a correct quantizer to its type can do (FORMAT.md,
// "Quantized subjects"). The file's bugs are in the golden too; only these rows see them.
void add_weight_rows(const golden::GoldenCase& g, conformance::Run& run, std::ostream* table) {
  if (g.quantization.empty()) return;  // not a quantized golden
  if (g.weights_mode != golden::WeightsMode::kCheckpoint) {
    throw Error(g.name + ": a quantized golden (quantization " + g.quantization + ") must name its dequantized checkpoint");
  }
  const std::vector<golden::QuantizedTensor> record = golden::read_quantization_record(g.checkpoint);
  if (record.empty()) {
    throw Error(g.name + ": quantization " + g.quantization + ", but " + g.checkpoint +
                "/quantization.json is missing or empty (the dequantizer writes it)");
  }
  for (const golden::QuantizedTensor& t : record) {
    conformance::Result row;
    row.test = "weights/" + t.checkpoint_name;
    row.category = conformance::Category::kGolden;
    row.case_name = t.stored_name;
    row.metric = "change_over_type_bound";
    row.bound = 1;
    if (t.left_unquantized) {
      row.metric = "left_unquantized", row.value = 1, row.bound = 0;
      row.status = conformance::Status::kFail;
      row.detail = "stored " + t.stored_type + " in a file that declares a quantized type, which its quantizer gives a "
                   "tensor like this (rows of whole blocks): left unquantized";
    } else if (t.bound_ratio) {
      row.value = *t.bound_ratio;
      row.status = *t.bound_ratio <= 1 ? conformance::Status::kPass : conformance::Status::kFail;
      row.detail = t.stored_type + ", NMSE " + text::sci(t.nmse);
    } else {
      row.status = conformance::Status::kNotSupported;
      row.detail = "not checked: no bound for " + t.stored_type + " (NMSE " + text::sci(t.nmse) + ")";
    }
    if (table && row.status == conformance::Status::kFail) {
      *table << "  " << text::pad(row.test, 52) << "FAIL (" << t.stored_name << ", " << t.stored_type << ": "
             << (t.left_unquantized ? std::string("left unquantized in a quantized file")
                                    : text::sci(row.value) + " x what quantization to its type can move it")
             << ")\n";
    }
    run.results.push_back(row);
  }
}

}  // namespace

void print_verify_table(const golden::VerifyReport& report, std::ostream& out) {
  out << "  " << pad("tensor", 52) << pad("cosine", 13) << pad("max_abs", 10) << pad("base_max", 10)
            << pad("bound", 10) << pad("rms", 10) << pad("base_rms", 10) << pad("bound", 10) << "verdict\n";
  for (const golden::TensorCheck& c : report.checks) {
    out << "  " << pad(c.name, 52);
    if (!c.problem.empty()) {
      out << (c.checked ? "FAIL (" : "not checked (") << c.problem << ")\n";
      continue;
    }
    const golden::Verdict& v = c.verdict;
    const bool family = v.rule == golden::Rule::kReducedPrecision;
    std::ostringstream cosine;
    cosine << std::fixed << std::setprecision(9) << v.metrics.cosine;
    out << pad(cosine.str(), 13) << pad(sci(v.metrics.max_abs), 10) << pad(family ? sci(v.baseline.max_abs) : "-", 10)
              << pad(sci(v.max_bound), 10) << pad(sci(v.metrics.rms), 10) << pad(family ? sci(v.baseline.rms) : "-", 10)
              << pad(family ? sci(v.rms_bound) : "-", 10) << (v.pass ? "pass" : "FAIL");
    if (!v.pass && !family && v.metrics.cosine < v.cosine_min) out << " (cosine below " << v.cosine_min << ")";
    if (v.non_finite > 0) out << " (" << v.non_finite << " values not finite)";
    out << "\n";
  }
}

conformance::Run golden_run(const std::string& subject, const std::string& dtype, const golden::VerifyReport& report) {
  conformance::Run run;
  run.subject = subject;
  run.dtype = dtype;
  for (const golden::TensorCheck& c : report.checks) {
    conformance::Result row;
    if (c.problem.empty()) {
      row = conformance::verdict_result("", c.verdict);
    } else {
      row.status = c.checked ? conformance::Status::kFail : conformance::Status::kNotSupported;
      row.detail = c.checked ? c.problem : "not checked: " + c.problem;
    }
    row.test = c.name;
    row.category = conformance::Category::kGolden;
    run.results.push_back(row);
  }
  return run;
}

conformance::Run check_run(const std::string& subject, const golden::GoldenCase& g, const golden::VerifyReport& report,
                           const golden::TensorMap& candidate, const std::string& float_golden, std::ostream* table) {
  conformance::Run run = golden_run(subject, g.dtype, report);
  add_weight_rows(g, run, table);
  if (!float_golden.empty()) add_envelope(g, candidate, float_golden, run, table);
  return run;
}

}  // namespace gemma4::cli
