// The `gemma4-conform bench-history` contract and `bench-compare --json`, through the real binary, on
// synthetic gemma4-bench reports written here: the lines append writes (fields, key order, medians),
// its refusals, one-line errors naming FILE:LINE and the field, the HTML page's charts, series and
// ceilings, show's table and JSON, and bench-compare's JSON against its own table.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "reference/files.h"
#include "tools/tests/cli_runner.h"

namespace gemma4 {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using test::CliResult;
using test::expect_one_line_error;
using test::run_cli;

// Name, typical ms, counter ("" for none); the last is skipped in every run.
struct Bench {
  std::string name;
  double ms;
  std::string counter;
};
const std::vector<Bench> kBenches = {
    {"attn/cuda/cuda/31b/4096/bf16/fwd", 1.0, "TFLOP/s"},
    {"ceiling/gemm_bf16/cuda/8192", 1.5, "TFLOP/s"},
    {"layer/cuda/cuda/31b/4096/bf16/fwdbwd", 4.0, ""},
    {"ceiling/d2d_copy/cuda/1GiB", 0.5, "GB/s"},
    {"attn/sdpa-cudnn/cuda/31b/4096/bf16/fwd", 2.0, "TFLOP/s"},
};
const std::string kSkipReason = "not supported: cuDNN has no kernel for this";

struct SyntheticRun {
  std::string commit, date, gpu, uuid;
  double factor = 1;  // every time multiplied by this
};
const SyntheticRun kH100a{"aaaaaaaaaaaa", "2026-01-01T10:00:00+00:00", "NVIDIA H100 80GB HBM3",
                          "GPU-11111111-2222-3333"};
// As instants H100b (02:00 UTC on the 3rd) comes before H200 (04:00 UTC); as text, after it.
const SyntheticRun kH200{"bbbbbbbbbbbb-dirty", "2026-01-02T23:00:00-05:00", "NVIDIA H200", ""};
const SyntheticRun kH100b{"cccccccccccc", "2026-01-03T06:00:00+04:00", "NVIDIA H100 80GB HBM3",
                          "GPU-11111111-2222-3333"};

// Repetition i of 9: within +-4% of the typical time; the fastest is i = 0, the slowest i = 5, the
// median i = 7, exactly the typical time.
double time_ms(const Bench& b, const SyntheticRun& run, int i) {
  return b.ms * (1 + 0.01 * ((i * 7) % 9 - 4)) * run.factor;
}

json make_report(const SyntheticRun& run) {
  json report;
  report["context"] = {{"date", run.date}, {"host_name", "vm"},        {"git_sha", run.commit},
                       {"gpu", run.gpu},   {"nvidia_driver", "580.1"}, {"torch", "2.11.0"},
                       {"cudnn", "91900"}, {"cuda_runtime", "13.0"},   {"repetitions", "9"}};
  if (!run.uuid.empty()) report["context"]["gpu_uuid"] = run.uuid;
  report["benchmarks"] = json::array();
  for (const Bench& b : kBenches) {
    const std::string name = b.name + "/manual_time";
    for (int i = 0; i < 9; ++i) {
      json row = {{"name", name},         {"run_name", name}, {"run_type", "iteration"}, {"repetitions", 9},
                  {"repetition_index", i}, {"iterations", 10}, {"real_time", time_ms(b, run, i)}, {"time_unit", "ms"}};
      if (!b.counter.empty()) row[b.counter] = 1000 / time_ms(b, run, i);
      if (&b == &kBenches.back()) row.update({{"error_occurred", true}, {"error_message", kSkipReason}});
      report["benchmarks"].push_back(row);
    }
  }
  return report;
}

std::vector<ordered_json> lines_of(const std::string& path) {
  std::vector<ordered_json> lines;
  std::istringstream in(test::read_text(path));
  for (std::string line; std::getline(in, line);) lines.push_back(ordered_json::parse(line));
  return lines;
}

// The part of the page that draws benchmark `name`.
std::string chart_of(const std::string& html, const std::string& name) {
  const size_t start = html.find("<div class=\"chart\" data-benchmark=\"" + name + "\"");
  if (start == std::string::npos) return "";
  return html.substr(start, html.find("</div>", start) - start);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class BenchHistoryCli : public ::testing::Test {
 protected:
  std::string dir_ = files::make_temp_directory("gemma4_bench_history_");
  std::string history_ = files::join(dir_, "history.jsonl");

  std::string write(const std::string& file, const SyntheticRun& run) {
    const std::string path = files::join(dir_, file);
    std::ofstream(path) << make_report(run).dump(1);
    return path;
  }
  CliResult append(const std::string& reports, const std::string& options = "") {
    return run_cli("bench-history append " + reports + " --history " + history_ + " " + options);
  }
  // Three runs: two commits on one H100, one on an H200 without a uuid; appended out of date order.
  void append_three() {
    ASSERT_EQ(append(write("a.json", kH100a) + " " + write("c.json", kH100b)).exit_code, 0);
    ASSERT_EQ(append(write("b.json", kH200)).exit_code, 0);
  }
};

TEST_F(BenchHistoryCli, AppendWritesOneLinePerReport) {
  const std::string a = write("a.json", kH100a), b = write("b.json", kH200);
  const CliResult r = append(a + " " + b, "--label nightly");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("appended aaaaaaaaaaaa NVIDIA H100 80GB HBM3 (5 benchmarks, 1 skipped) to " + history_),
            std::string::npos) << r.out;
  const std::vector<ordered_json> lines = lines_of(history_);
  ASSERT_EQ(lines.size(), 2u);
  std::vector<std::string> keys;
  for (const auto& item : lines[0].items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"commit", "date", "gpu", "gpu_uuid", "host", "nvidia_driver", "torch",
                                            "cudnn", "cuda_runtime", "repetitions", "label", "source", "benchmarks"}));
  EXPECT_EQ(lines[0]["gpu_uuid"], kH100a.uuid);
  EXPECT_EQ(lines[0]["source"], a);
  EXPECT_EQ(lines[0]["label"], "nightly");
  EXPECT_EQ(lines[0]["repetitions"], 9);
  EXPECT_EQ(lines[1]["commit"], kH200.commit);  // "-dirty" kept
  EXPECT_FALSE(lines[1].contains("gpu_uuid") && lines[1]["gpu_uuid"] != "");
  for (size_t l = 0; l < 2; ++l) {
    const SyntheticRun& run = l == 0 ? kH100a : kH200;
    const ordered_json& benchmarks = lines[l]["benchmarks"];
    ASSERT_EQ(benchmarks.size(), kBenches.size());
    size_t i = 0;
    for (const auto& [name, entry] : benchmarks.items()) {  // the report's order, no "/manual_time"
      const Bench& bench = kBenches[i++];
      ASSERT_EQ(name, bench.name);
      if (&bench == &kBenches.back()) {
        EXPECT_EQ(entry, ordered_json({{"skipped", kSkipReason}}));
        continue;
      }
      EXPECT_DOUBLE_EQ(entry["median_s"].get<double>(), time_ms(bench, run, 7) * 1e-3) << name;
      EXPECT_DOUBLE_EQ(entry["min_s"].get<double>(), time_ms(bench, run, 0) * 1e-3) << name;
      EXPECT_DOUBLE_EQ(entry["max_s"].get<double>(), time_ms(bench, run, 5) * 1e-3) << name;
      EXPECT_EQ(entry.contains("TFLOP/s"), bench.counter == "TFLOP/s") << name;
      if (!bench.counter.empty()) EXPECT_DOUBLE_EQ(entry[bench.counter].get<double>(), 1000 / time_ms(bench, run, 7));
    }
  }
}

TEST_F(BenchHistoryCli, TheSameRunTwiceIsRefusedNamingTheLine) {
  append_three();
  const std::string before = test::read_text(history_);
  // b.json is line 3; a copy of it under another name is the same run.
  expect_one_line_error(append(write("b_copy.json", kH200)), 1,
                        "b_copy.json: already in " + history_ + " at line 3 (" + kH200.commit);
  const std::string d = write("d.json", {"dddddddddddd", "2026-01-04T10:00:00+00:00", "NVIDIA H200", ""});
  expect_one_line_error(append(d + " " + d), 1, "d.json: the same run as " + d + ", given before it");
  EXPECT_EQ(test::read_text(history_), before);  // nothing appended
  // Another GPU of the kind (another uuid) at the same commit and date is another run.
  SyntheticRun other = kH100a;
  other.uuid = "GPU-99999999";
  EXPECT_EQ(append(write("other.json", other)).exit_code, 0);
}

TEST_F(BenchHistoryCli, ErrorsNameTheFileLineAndField) {
  append_three();
  std::string text = test::read_text(history_);
  const size_t second = text.find('\n') + 1;
  std::string broken = text;
  broken.replace(broken.find("\"median_s\":", second), 11, "\"median_s\":\"fast\",\"x\":");
  std::ofstream(history_) << broken;
  expect_one_line_error(run_cli("bench-history show --history " + history_), 1,
                        history_ + ":2: benchmarks 'attn/cuda/cuda/31b/4096/bf16/fwd': 'median_s' is not a number");
  std::ofstream(history_) << text.substr(0, second) << "\n{\"date\": \"x\"}\n";
  expect_one_line_error(run_cli("bench-history html --out " + dir_ + "/h.html --history " + history_), 1,
                        history_ + ":3: 'commit' is missing");
  std::ofstream(history_) << "{\"commit\":\n";
  expect_one_line_error(append(write("a.json", kH100a)), 1, history_ + ":1: not valid JSON");

  std::remove(history_.c_str());  // the reports' own errors, on an empty history
  const std::string empty = files::join(dir_, "empty.json");
  std::ofstream(empty) << R"({"context": {"git_sha": "x"}, "benchmarks": []})";
  expect_one_line_error(append(empty), 1, "error: " + empty + ": holds no benchmarks");
  json no_sha = make_report(kH100a);
  no_sha["context"].erase("git_sha");
  std::ofstream(files::join(dir_, "no_sha.json")) << no_sha.dump();
  expect_one_line_error(append(files::join(dir_, "no_sha.json")), 1, "no_sha.json: context 'git_sha' is missing");
}

TEST_F(BenchHistoryCli, HtmlDrawsAChartPerBenchmarkAndASeriesPerGpu) {
  append_three();
  const std::string html_path = files::join(dir_, "history.html");
  const CliResult r = run_cli("bench-history html --history " + history_ + " --out " + html_path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + html_path + " (5 charts, 3 runs)"), std::string::npos) << r.out;
  const std::string html = test::read_text(html_path);
  EXPECT_EQ(count(html, "<div class=\"chart\""), kBenches.size());
  EXPECT_LT(html.find("data-benchmark=\"ceiling/d2d_copy"), html.find("data-benchmark=\"attn/cuda"));  // ceilings first
  EXPECT_NE(html.find("3 runs of 3 commits on 2 GPUs"), std::string::npos);

  const std::string attn = chart_of(html, kBenches[0].name), layer = chart_of(html, kBenches[2].name);
  EXPECT_EQ(count(attn, "class=\"series\""), 2u);
  EXPECT_NE(attn.find("TFLOP/s (higher is better)"), std::string::npos);
  EXPECT_EQ(count(attn, "<polyline class=\"ceiling\""), 2u);  // per GPU, the same run's gemm ceiling dashed
  EXPECT_NE(attn.find("dashed: the same run's ceiling"), std::string::npos);
  EXPECT_NE(attn.find("GPU-11111111"), std::string::npos);
  EXPECT_NE(attn.find("uuid unknown"), std::string::npos);
  // Date order as instants: aaaaaaa, ccccccc, bbbbbbb-dirty (each labelled with its own local day).
  EXPECT_LT(attn.find("aaaaaaa 2026-01-01"), attn.find("ccccccc 2026-01-03"));
  EXPECT_LT(attn.find("ccccccc 2026-01-03"), attn.find("bbbbbbb-dirty 2026-01-02"));
  EXPECT_EQ(count(layer, "class=\"series\""), 2u);
  EXPECT_NE(layer.find("median time, ms (lower is better)"), std::string::npos);
  EXPECT_EQ(layer.find("stroke-dasharray"), std::string::npos);  // no counter, no ceiling
  EXPECT_EQ(chart_of(html, kBenches[1].name).find("stroke-dasharray"), std::string::npos);  // not its own ceiling
  const std::string skipped = chart_of(html, kBenches[4].name);
  EXPECT_EQ(count(skipped, "skipped: " + kSkipReason), 3u);
  EXPECT_NE(skipped.find("skipped in 3 runs"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no external resource

  ASSERT_EQ(run_cli("bench-history html --history " + history_ + " --out " + html_path + " --filter ^layer/").exit_code,
            0);
  EXPECT_EQ(count(test::read_text(html_path), "<div class=\"chart\""), 1u);
}

TEST_F(BenchHistoryCli, ShowPrintsATableAndJson) {
  append_three();
  CliResult r = run_cli("bench-history show --history " + history_ + " --filter ^attn/");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream table(r.out);
  std::string header, row, skipped;
  std::getline(table, header);
  std::getline(table, row);
  std::getline(table, skipped);
  std::istringstream columns(header);
  std::vector<std::string> words((std::istream_iterator<std::string>(columns)), std::istream_iterator<std::string>());
  EXPECT_EQ(words, (std::vector<std::string>{"benchmark", "aaaaaaa@H100", "ccccccc@H100", "bbbbbbb-dirty@H200"}));
  EXPECT_EQ(row.rfind(kBenches[0].name + " ", 0), 0u) << row;
  EXPECT_NE(row.find("1.000 ms"), std::string::npos) << row;
  EXPECT_EQ(count(skipped, "skipped"), 3u) << skipped;
  EXPECT_NE(r.out.find("bench-history: 2 benchmarks, 3 runs"), std::string::npos) << r.out;

  r = run_cli("bench-history show --json --history " + history_ + " --filter ^layer/");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["runs"].size(), 3u);
  EXPECT_EQ(doc["runs"][2]["commit"], kH200.commit);
  EXPECT_EQ(doc["runs"][2]["line"], 3);
  EXPECT_EQ(doc["runs"][2]["benchmarks"].size(), 1u);
  EXPECT_DOUBLE_EQ(doc["runs"][2]["benchmarks"][kBenches[2].name]["median_s"].get<double>(), 4e-3);
}

TEST_F(BenchHistoryCli, BenchCompareJsonMatchesItsTable) {
  SyntheticRun slower = kH100a;
  const std::string out = files::join(dir_, "compare.json");
  for (const double factor : {1.5, 1.0}) {
    slower.factor = factor;
    const CliResult r = run_cli("bench-compare " + write("a.json", kH100a) + " " + write("slow.json", slower) +
                                " --json " + out);
    EXPECT_EQ(r.exit_code, factor > 1 ? 1 : 0) << r.out << r.err;
    const json doc = json::parse(test::read_text(out));
    EXPECT_EQ(doc["threshold_percent"], 5);
    ASSERT_EQ(doc["rows"].size(), kBenches.size());
    for (const json& row : doc["rows"]) {
      const std::string name = row["name"], verdict = row["verdict"];
      EXPECT_EQ(name.substr(name.size() - 12), "/manual_time");  // the table's names
      const size_t at = r.out.find(name + " ");
      ASSERT_NE(at, std::string::npos) << name;
      const std::string table_row = r.out.substr(at, r.out.find('\n', at) - at);
      const bool skipped = name.find("sdpa-cudnn") != std::string::npos;
      EXPECT_EQ(verdict, skipped ? "skipped" : factor > 1 ? "regression" : "same") << name;
      EXPECT_NE(table_row.find("  " + verdict), std::string::npos) << table_row;
      EXPECT_EQ(row["change_percent"].is_null(), skipped) << name;
      if (!skipped) EXPECT_NEAR(row["change_percent"].get<double>(), (factor - 1) * 100, 1e-9) << name;
    }
    EXPECT_EQ(doc["counts"]["regression"], factor > 1 ? 4 : 0);
    EXPECT_EQ(doc["counts"]["skipped"], 1);
  }
}

TEST_F(BenchHistoryCli, HelpAndUsageErrors) {
  CliResult r = run_cli("bench-history --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("usage: gemma4-conform bench-history <append|html|show>"), std::string::npos) << r.out;
  for (const char* sub : {"append", "html", "show"}) {
    r = run_cli(std::string("bench-history ") + sub + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find(std::string("usage: gemma4-conform bench-history ") + sub), std::string::npos) << r.out;
  }
  expect_one_line_error(run_cli("bench-history draw"), 2,
                        "unknown bench-history subcommand 'draw' (append, html, show)");
  expect_one_line_error(run_cli("bench-history append x.json"), 2, "missing required option '--history'");
  expect_one_line_error(run_cli("bench-history show --history h --filter '('"), 2, "--filter '(' is not a regular");
  expect_one_line_error(run_cli("bench-history show --history " + dir_ + "/none.jsonl"), 1,
                        "none.jsonl: cannot be read");
}

}  // namespace
}  // namespace gemma4
