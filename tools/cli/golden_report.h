#pragma once
// The verdict table of `golden verify` and `golden check`, and check's JSON and JUnit reports.
#include <nlohmann/json.hpp>

#include <iostream>
#include <string>

#include "golden/verify.h"

namespace gemma4::cli {

// Both errors of every tensor before its verdict: the candidate's, and (bf16/f16) the baseline
// family's largest, with the bounds they give. Rows that were not checked say so and why.
void print_verify_table(const golden::VerifyReport& report, std::ostream& out = std::cout);

// One file's rows as JSON (check_json; write_check_json writes it to `path`): {"golden", "candidate", "pass", "counts", "rows": [{"tensor",
// "status" (pass|fail|not_checked), "problem", "rule", "max_abs", "rms", "cosine",
// "baseline_max_abs", "baseline_rms", "max_bound", "rms_bound", "non_finite"}]}.
nlohmann::json check_json(const std::string& golden_path, const std::string& candidate_path,
                          const golden::VerifyReport& report);
void write_check_json(const std::string& path, const std::string& golden_path, const std::string& candidate_path,
                      const golden::VerifyReport& report);

// JUnit XML: one test case per row; "not checked" rows are skipped, not passed.
void write_check_junit(const std::string& path, const std::string& golden_path, const golden::VerifyReport& report);

}  // namespace gemma4::cli
