// The reports of `gemma4-conform memory report` (bench/memory/memory_report.h) on a small file built
// here: the planner rows against figures worked out by hand from the released configs, and what
// the text report, the SVG and the JUnit XML must contain.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "bench/memory/memory_report.h"
#include "reference/error.h"

namespace gemma4::memory {
namespace {

MemoryPoint point(const std::string& geometry, Part part, Phase phase, const std::string& backend, int64_t tokens,
                  int64_t batch, int64_t context, double measured_gib, double estimate_gib) {
  MemoryPoint p;
  p.geometry = geometry;
  p.part = part;
  p.phase = phase;
  p.backend = backend;
  p.tokens = tokens;
  p.batch = batch;
  p.context = context;
  p.measured_bytes = measured_gib * kGiB;
  p.estimate_bytes = estimate_gib * kGiB;
  return p;
}

// Two geometries on both backends. With the safety factor 1.1 exactly one point lies above
// estimate x factor: 31B's reference training step (40 > 35 x 1.1 = 38.5).
MemoryFile small_file() {
  MemoryFile f;
  f.device = "NVIDIA H200";
  f.generator = "gemma4-conform memory test";
  f.torch_version = "2.test";
  f.safety_factor = 1.1;
  const auto add = [&](const std::string& g, Part part, Phase phase, int64_t t, int64_t b, int64_t c, double ref_gib,
                       double ref_estimate, double cuda_gib, double cuda_estimate) {
    f.points.push_back(point(g, part, phase, "reference", t, b, c, ref_gib, ref_estimate));
    f.points.push_back(point(g, part, phase, "cuda", t, b, c, cuda_gib, cuda_estimate));
  };
  add("31b", Part::kStack, Phase::kTrain, 4096, 1, 0, 40, 35, 30, 29);
  add("31b", Part::kStack, Phase::kPrefill, 8192, 1, 0, 20, 19, 3, 2.8);  // reference above FLAT's 15 GiB
  add("31b", Part::kStack, Phase::kDecode, 8, 8, 4096, 0.5, 0.5, 0.25, 0.25);
  add("31b", Part::kSliding, Phase::kPrefill, 8192, 1, 0, 1, 1, 0.5, 0.5);  // not a stack point: no planner row
  add("e2b", Part::kStack, Phase::kPrefill, 16384, 1, 0, 2, 2, 1, 1);
  add("e2b", Part::kStack, Phase::kDecode, 1, 1, 1024, 0.01, 0.01, 0.005, 0.005);
  add("e2b", Part::kStack, Phase::kTrainCheckpointed, 2048, 1, 0, 3, 3, 2, 2);
  SkippedPoint skipped;
  skipped.point = point("31b", Part::kStack, Phase::kTrain, "reference", 131072, 1, 0, 0, 400);
  skipped.reason = "needs 400 GiB, 139 GiB free";
  f.skipped.push_back(skipped);
  return f;
}

const PlannerRow& row_of(const std::vector<PlannerRow>& rows, const std::string& geometry, Phase phase,
                         const std::string& backend) {
  for (const PlannerRow& r : rows) {
    if (r.point.geometry == geometry && r.point.phase == phase && r.point.backend == backend) return r;
  }
  throw std::runtime_error("no planner row " + geometry);
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The first line of `text` that contains `needle` ("" when none does).
std::string line_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) return line;
  }
  return "";
}

TEST(MemoryReport, PlannerRowsMatchTheRulesWorkedByHand) {
  const MemoryFile file = small_file();
  const std::vector<PlannerRow> rows = planner_rows(file, released_geometries());
  ASSERT_EQ(rows.size(), 8u);  // stack prefill and decode, two geometries, two backends
  for (const PlannerRow& r : rows) {
    EXPECT_EQ(r.point.part, Part::kStack);
    EXPECT_TRUE(r.point.phase == Phase::kPrefill || r.point.phase == Phase::kDecode);
  }

  // 31B: max(5376, 21504) = 21504; T = 8192 is the floor: unit = 21504 x 8192 x 2 = 352321536 bytes,
  // x 8 = 2818572288 = 2.625 GiB, the PR's "15 GiB -> ~2.6 GiB".
  const PlannerRow& prefill = row_of(rows, "31b", Phase::kPrefill, "reference");
  EXPECT_DOUBLE_EQ(prefill.unit_bytes, 352321536.0);
  EXPECT_DOUBLE_EQ(prefill.scaled_bytes, 2818572288.0);
  EXPECT_DOUBLE_EQ(prefill.scaled_bytes, 2.625 * kGiB);
  EXPECT_DOUBLE_EQ(prefill.flat_bytes, 15 * kGiB);
  EXPECT_DOUBLE_EQ(prefill.flat_fp8_bytes, 30 * kGiB);
  EXPECT_DOUBLE_EQ(prefill.needed_multiple, 20 * kGiB / 352321536.0);  // 60.95...
  EXPECT_GT(prefill.point.measured_bytes, prefill.flat_bytes);         // above even the cap

  // Decode of 8 sequences: 8 tokens in the step, raised to the floor of 8192.
  EXPECT_DOUBLE_EQ(row_of(rows, "31b", Phase::kDecode, "cuda").unit_bytes, 352321536.0);
  // E2B prefill of T = 16384 tokens in one sequence: the rule counts sequences, not tokens, so the
  // step still counts 8192: max(1536, 6144) x 8192 x 2 = 100663296 bytes (0.09375 GiB).
  const PlannerRow& e2b = row_of(rows, "e2b", Phase::kPrefill, "cuda");
  EXPECT_DOUBLE_EQ(e2b.unit_bytes, 100663296.0);
  EXPECT_DOUBLE_EQ(e2b.scaled_bytes, 0.75 * kGiB);
  EXPECT_DOUBLE_EQ(e2b.needed_multiple, 1 * kGiB / 100663296.0);  // 10.67

  // The multiple scales the unit until FLAT caps it: 4 x 0.328 GiB; 100 x 0.328 GiB > 15 GiB.
  const auto with = [&](double multiple) {
    return row_of(planner_rows(file, released_geometries(), multiple), "31b", Phase::kPrefill, "cuda");
  };
  EXPECT_DOUBLE_EQ(with(4).scaled_bytes, 4 * 352321536.0);
  EXPECT_DOUBLE_EQ(with(100).scaled_bytes, 15 * kGiB);
}

TEST(MemoryReport, PlannerRowsNameAnUnknownGeometry) {
  try {
    planner_rows(small_file(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown geometry '31b'"), std::string::npos) << e.what();
  }
}

TEST(MemoryReport, TextReportHasFactorFusedSavingsAndPlannerVerdicts) {
  std::ostringstream s;
  print_memory_report(s, small_file());
  const std::string text = s.str();
  EXPECT_NE(text.find("1 GiB = 2^30 bytes"), std::string::npos) << text;
  // The file's factor, the point with the largest ratio (40 / 35), and the factor it calls for.
  const std::string factor = line_with(text, "safety factor 1.10");
  EXPECT_NE(factor.find("set by 31b/stack/train/reference/T=4096/B=1"), std::string::npos) << text;
  EXPECT_NE(factor.find("the points call for 1.15"), std::string::npos) << text;
  EXPECT_NE(text.find("needs 400 GiB, 139 GiB free"), std::string::npos) << text;

  // Fused vs reference: 20 GiB against 3 GiB is x6.67, 17 GiB saved; prefill's median over the
  // pairs 31b stack (6.67), 31b sliding (2) and e2b stack (2) is 2.
  const std::string fused = line_with(text, "31b/stack/prefill T=8192 B=1");
  EXPECT_NE(fused.find("x6.67"), std::string::npos) << text;
  EXPECT_NE(fused.find(" 17"), std::string::npos) << text;
  const std::string median = line_with(text, "prefill:");
  EXPECT_NE(median.find("median x2.00, range x2.00 to x6.67 over 3 pairs"), std::string::npos) << text;

  // Planner: 31B's reference prefill (20 GiB) is above FLAT (15) and SCALED (2.625); its cuda
  // prefill (3 GiB) is under FLAT (x5.00) and above SCALED by 0.375 GiB.
  const std::string under = line_with(text, "31b prefill reference T=8192 B=1");
  EXPECT_NE(under.find("under-reserves 5 "), std::string::npos) << text;
  EXPECT_NE(under.find("under-reserves 17.4"), std::string::npos) << text;
  const std::string mixed = line_with(text, "31b prefill cuda T=8192 B=1");
  EXPECT_NE(mixed.find("over-reserves x5.00"), std::string::npos) << text;
  EXPECT_NE(mixed.find("under-reserves 0.375"), std::string::npos) << text;
  // E2B cuda prefill: 1 GiB against SCALED 0.75 GiB (the 16384 tokens count as 8192).
  EXPECT_NE(line_with(text, "e2b prefill cuda T=16384 B=1").find("under-reserves 0.25"), std::string::npos) << text;
  // The multiple the measurements call for is 31B reference prefill's 60.95; no multiple helps it.
  EXPECT_NE(line_with(text, "the measurements call for").find("x60.95 (31b prefill reference"), std::string::npos)
      << text;
  EXPECT_NE(text.find("above even the cap"), std::string::npos) << text;
  EXPECT_NE(text.find("    31b prefill reference T=8192 B=1: 20 GiB\n"), std::string::npos) << text;
}

TEST(MemoryReport, SvgHasOnePanelPerGeometryAndPhase) {
  const std::string path = testing::TempDir() + "memory_report_test.svg";
  write_memory_svg(path, small_file());
  const std::string svg = read(path);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  for (const std::string geometry : {"31b", "e2b"}) {
    for (Phase phase : all_phases()) {
      EXPECT_EQ(count(svg, ">" + geometry + " · " + phase_name(phase) + "<"), 1u) << geometry;
    }
  }
  // FLAT's line, labelled, on each of the four serving panels (the legend names it otherwise).
  EXPECT_EQ(count(svg, ">flat 15 GiB<"), 4u);
  EXPECT_NE(svg.find("stroke-dasharray=\"6 4\""), std::string::npos);  // the estimate
  EXPECT_NE(svg.find("not measured"), std::string::npos);              // 31b train_checkpointed
  std::remove(path.c_str());

  try {
    write_memory_svg("/nonexistent-dir/memory.svg", small_file());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/memory.svg"), std::string::npos) << e.what();
  }
}

// Written by the project's one JUnit writer (conformance::write_junit): a <testsuite> per run (here
// one, named by the subject), a <testcase> per point, <failure message=...> with the row's bytes
// against its bound and the GiB figures, <skipped message=...> with the reason.
TEST(MemoryReport, JunitFailsExactlyThePointAboveEstimateTimesFactor) {
  const MemoryFile file = small_file();
  const std::string path = testing::TempDir() + "memory_report_test.xml";
  write_memory_junit(path, file);
  const std::string xml = read(path);
  std::remove(path.c_str());
  EXPECT_EQ(count(xml, "<testsuite "), 1u) << xml;
  EXPECT_NE(xml.find("<testsuite name=\"memory\""), std::string::npos) << xml;
  EXPECT_EQ(count(xml, "<testcase "), file.points.size() + file.skipped.size());
  EXPECT_EQ(count(xml, "<testcase classname=\"memory report\" "), file.points.size() + file.skipped.size()) << xml;
  EXPECT_EQ(count(xml, "<failure "), 1u) << xml;
  EXPECT_EQ(count(xml, "<skipped "), 1u) << xml;
  const size_t at = xml.find("name=\"31b/stack/train/reference/T=4096/B=1\">");
  ASSERT_NE(at, std::string::npos) << xml;
  const size_t failure = xml.find("<failure message=\"");
  EXPECT_GT(failure, at);
  EXPECT_LT(failure, xml.find("<testcase ", at + 1));
  // 40 GiB = 42949672960 bytes against 35 GiB x 1.10 = 38.5 GiB = 41339060224 bytes.
  EXPECT_NE(xml.find("bytes 4.29e+10 &gt; bound 4.13e+10", failure), std::string::npos) << xml;
  EXPECT_NE(xml.find("measured 40 GiB (42949672960 bytes)", failure), std::string::npos) << xml;
  EXPECT_NE(xml.find("= 38.5 GiB (41339060224 bytes)", failure), std::string::npos) << xml;
  const size_t skipped = xml.find("name=\"31b/stack/train/reference/T=131072/B=1\">");
  ASSERT_NE(skipped, std::string::npos) << xml;
  EXPECT_EQ(xml.find("<skipped message=\"not supported: needs 400 GiB, 139 GiB free\"/>"),
            xml.find("<skipped ", skipped))
      << xml;
}

TEST(MemoryReport, JunitNamesItsRunAfterTheSubject) {
  const std::string path = testing::TempDir() + "memory_report_subject.xml";
  write_memory_junit(path, small_file(), "nvidia-h200.json");
  const std::string xml = read(path);
  std::remove(path.c_str());
  EXPECT_NE(xml.find("<testsuite name=\"nvidia-h200.json\""), std::string::npos) << xml;
}

TEST(MemoryReport, JunitThrowsNamingAnUnwritablePath) {
  try {
    write_memory_junit("/nonexistent-dir/memory.xml", small_file());
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/memory.xml"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gemma4::memory
