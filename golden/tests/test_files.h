#pragma once
// Helpers shared by the golden tests: per-test temporary paths, and catching the gemma4::Error an
// action must throw.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "reference/error.h"

namespace gemma4::test {

// A file path under GoogleTest's temp dir, unique to the running test.
inline std::string temp_path(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + info->test_suite_name() + "_" + info->name() + "_" + name;
}

// Runs `action` expecting a gemma4::Error; returns its message ("" after a test failure).
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no gemma4::Error was thrown";
  return "";
}

}  // namespace gemma4::test
