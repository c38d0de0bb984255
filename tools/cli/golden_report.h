#pragma once
// The verdict table of `golden verify` and `golden check`, and their rows in the one report
// (conformance/report.h): JSON and JUnit go through it.
#include <iostream>
#include <string>

#include "conformance/report.h"
#include "golden/verify.h"

namespace gemma4::cli {

// Both errors of every tensor before its verdict: the candidate's, and (bf16/f16) the baseline
// family's largest, with the bounds they give. Rows that were not checked say so and why.
void print_verify_table(const golden::VerifyReport& report, std::ostream& out = std::cout);

// One file's tensors as a run of the report: a test per tensor (category golden) whose row has the
// deciding metric, both errors and the bound; a tensor with nothing to compare fails with the
// problem; one the candidate may leave out and did is "not supported" ("not checked: ...").
conformance::Run golden_run(const std::string& subject, const std::string& dtype, const golden::VerifyReport& report);

// `golden check`'s run: golden_run's rows, then for a golden made on a dequantized checkpoint
// (golden/quantized_subject.h) one row per tensor of the file its subject loads, and given
// `float_golden` (the float model's golden on the same inputs) the envelope's figures as the run's
// measurements. `table`, when given, gets the failing weight rows and the envelope's table.
conformance::Run check_run(const std::string& subject, const golden::GoldenCase& g, const golden::VerifyReport& report,
                           const golden::TensorMap& candidate, const std::string& float_golden, std::ostream* table);

}  // namespace gemma4::cli
