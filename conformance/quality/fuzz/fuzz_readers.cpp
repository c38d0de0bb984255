// gemma4-fuzz-readers: a mutation loop over the readers that see untrusted files (golden/FORMAT.md,
// "Candidate files"): HDF5 candidates and goldens, safetensors, config.json.
//
// Each case takes a seed file from the corpus, applies one to four mutations (bit flips,
// interesting bytes and 64-bit values, truncation, a chunk deleted or repeated; for JSON also
// values swapped for hostile ones and keys deleted), writes it, and reads it in a forked child:
// a crash or a hang in the child cannot take the loop down, and is counted and kept. A reader may
// accept a file or refuse it with one gemma4::Error line; anything else is a finding:
//   crash      the child died of a signal (the input is saved under --artifacts)
//   hang       the child ran past --timeout-ms (killed; the input is saved)
//   unclear    refused with another exception type, or a message of more than one line
// Exit 0 only when there were no findings.
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <ATen/Parallel.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>

#include "golden/candidate.h"
#include "golden/golden_file.h"
#include "golden/untrusted.h"
#include "reference/config.h"
#include "reference/error.h"
#include "reference/files.h"
#include "reference/safetensors.h"

namespace {

using namespace gemma4;

enum class Reader { kCandidate, kGolden, kSafetensors, kConfig, kSelfTest };

struct ReaderInfo {
  Reader reader;
  const char* name;
  bool json;  // the input is JSON text: also mutate it structurally
};

const ReaderInfo kReaders[] = {
    {Reader::kCandidate, "candidate", false},
    {Reader::kGolden, "golden", false},
    {Reader::kSafetensors, "safetensors", false},
    {Reader::kConfig, "config", true},
};

// How long the HDF5 readers' own probe waits before it refuses a file as hanging: below this
// loop's --timeout-ms default, so that the loop sees the refusal.
constexpr int kProbeSeconds = 3;

// Reads `path` as the reader would in the CLI; throws what the reader throws.
void read_with(Reader reader, const std::string& path) {
  switch (reader) {
    // As golden check reads them (apart first); a hang is refused after kProbeSeconds.
    case Reader::kCandidate: golden::read_candidate(path, kProbeSeconds); return;
    case Reader::kGolden: golden::read_untrusted_golden(path, kProbeSeconds); return;
    case Reader::kSafetensors: {
      const SafetensorsFile file(path);
      for (const std::string& name : file.names()) file.read(name);
      return;
    }
    case Reader::kConfig: load_config(path); return;
    case Reader::kSelfTest: {
      // The loop's negative control (--self-test): a "reader" with every kind of finding.
      std::ifstream in(path);
      const char first = char(in.get());
      if (first == 'c') ::raise(SIGSEGV);
      if (first == 'h') ::pause();
      if (first == 'u') throw std::runtime_error("a bare runtime_error");
      if (first == 'm') throw Error("two\nlines");
      throw Error(path + ": refused");
    }
  }
}

// A case's outcome: how the child ended, with a refusal that is not one line counted as unclear.
using Outcome = golden::ChildOutcome;

golden::ChildResult run_case(Reader reader, const std::string& path, int timeout_ms) {
  golden::ChildResult r = golden::run_in_child([&] { read_with(reader, path); }, timeout_ms);
  if (r.outcome == Outcome::kUnclear) {
    r.message = "not a gemma4::Error: " + r.message;
  } else if (r.outcome == Outcome::kRefused && (r.message.empty() || r.message.find('\n') != std::string::npos)) {
    r.outcome = Outcome::kUnclear;
  } else if (r.outcome == Outcome::kCrashed) {
    r.message = "signal " + r.message;
  }
  return r;
}

// ---- mutations -------------------------------------------------------------------------------

const uint64_t kInteresting64[] = {0, 1, 0x7f, 0xff, 0x7fffffffull, 0x80000000ull, 0xffffffffull,
                                   0x7fffffffffffffffull, 0xffffffffffffffffull, 1ull << 40};

void mutate_bytes(std::string& s, std::mt19937_64& rng) {
  if (s.empty()) {
    s.push_back(char(rng()));
    return;
  }
  auto pos = [&](size_t n) { return size_t(rng() % n); };
  switch (rng() % 6) {
    case 0: s[pos(s.size())] ^= char(1u << (rng() % 8)); break;  // flip one bit
    case 1: s[pos(s.size())] = char(kInteresting64[rng() % 4]); break;
    case 2: {  // an interesting 64-bit little-endian value (lengths, offsets, sizes)
      const uint64_t v = kInteresting64[rng() % (sizeof kInteresting64 / 8)];
      const size_t at = pos(s.size());
      for (size_t i = 0; i < 8 && at + i < s.size(); ++i) s[at + i] = char(v >> (8 * i));
      break;
    }
    case 3: s.resize(pos(s.size())); break;  // truncate
    case 4: {                                 // delete a chunk
      const size_t at = pos(s.size());
      s.erase(at, 1 + pos(std::min<size_t>(64, s.size() - at)));
      break;
    }
    default: {  // repeat a chunk
      const size_t at = pos(s.size());
      s.insert(at, s.substr(at, 1 + pos(std::min<size_t>(64, s.size() - at))));
    }
  }
}

// Hostile values for a JSON field: wrong types, zero, negative, huge, fractional.
nlohmann::json hostile_value(std::mt19937_64& rng) {
  switch (rng() % 9) {
    case 0: return nullptr;
    case 1: return -1;
    case 2: return 0;
    case 3: return 1ll << 62;
    case 4: return 0.5;
    case 5: return "x";
    case 6: return nlohmann::json::array();
    case 7: return nlohmann::json::object();
    default: return true;
  }
}

// Replaces or deletes one value somewhere in the document (objects and arrays, any depth).
void mutate_json_value(nlohmann::json& j, std::mt19937_64& rng) {
  nlohmann::json* node = &j;
  for (int depth = 0; depth < 4 && (node->is_object() || node->is_array()) && !node->empty(); ++depth) {
    auto it = node->begin();
    std::advance(it, long(rng() % node->size()));
    if (node->is_object() && rng() % 4 == 0) {
      node->erase(it.key());
      return;
    }
    if (!(it->is_object() || it->is_array()) || rng() % 3 == 0) {
      *it = hostile_value(rng);
      return;
    }
    node = &*it;
  }
}

std::string mutate(const std::string& seed, bool json, std::mt19937_64& rng) {
  std::string s = seed;
  if (json && rng() % 2 == 0) {
    nlohmann::json j = nlohmann::json::parse(seed, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) {
      for (int n = 1 + int(rng() % 3); n > 0; --n) mutate_json_value(j, rng);
      return j.dump();
    }
  }
  for (int n = 1 + int(rng() % 4); n > 0; --n) mutate_bytes(s, rng);
  return s;
}

// ---- the loop --------------------------------------------------------------------------------

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw Error(path + ": cannot write");
}

// The negative control: the loop must see each planted finding for what it is.
int self_test(const std::string& work, int timeout_ms) {
  const std::pair<char, Outcome> planted[] = {{'c', Outcome::kCrashed}, {'h', Outcome::kHung}, {'u', Outcome::kUnclear},
                                              {'m', Outcome::kUnclear}, {'r', Outcome::kRefused}};
  int wrong = 0;
  for (const auto& [byte, expected] : planted) {
    const std::string input = files::join(work, "self-test");
    write_file(input, std::string(1, byte));
    const golden::ChildResult r = run_case(Reader::kSelfTest, input, timeout_ms);
    const bool ok = r.outcome == expected;
    wrong += ok ? 0 : 1;
    std::cout << "self-test '" << byte << "': " << (ok ? "seen as expected" : "MISSED") << " (" << r.message << ")\n";
  }
  std::cout << (wrong == 0 ? "PASS" : "FAIL") << ": the loop told every planted finding apart\n";
  return wrong == 0 ? 0 : 1;
}

const char* kHelp =
    "usage: gemma4-fuzz-readers --corpus DIR [--readers candidate,golden,safetensors,config] [--cases N]\n"
    "                           [--seed S] [--timeout-ms T] [--artifacts DIR] [--show-refusals N]\n\n"
    "Mutation loop over the readers of untrusted files. DIR/<reader>/ holds that reader's seed files.\n"
    "Each case mutates a seed (bytes; JSON values for config) and reads it in a forked child. Counts\n"
    "accepted, refused (one gemma4::Error line), and findings: crash, hang, unclear (another exception\n"
    "or a multi-line message), whose inputs go to --artifacts. Exit 0 only without findings.\n\n"
    "  --cases N        cases per reader (default 10000)\n"
    "  --seed S         the mutation generator's seed (default 1)\n"
    "  --timeout-ms T   a case running longer is a hang (default 10000; the HDF5 readers refuse a file\n"
    "                   that hangs the library after 3 s)\n"
    "  --artifacts DIR  where findings' inputs go (default: a new temporary directory)\n"
    "  --show-refusals N  print N sample refusal messages per reader (default 3)\n"
    "  --self-test 1    instead: plant a crash, a hang and unclear errors, and check the loop sees each\n";

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> opt = {{"readers", "candidate,golden,safetensors,config"}, {"cases", "10000"},
                                            {"seed", "1"}, {"timeout-ms", "10000"}, {"show-refusals", "3"}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kHelp;
      return 0;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) {
      std::cerr << "gemma4-fuzz-readers: unexpected argument '" << a << "' (see --help)\n";
      return 2;
    }
    opt[a.substr(2)] = argv[++i];
  }
  if (opt.count("self-test")) return self_test(files::make_temp_directory("gemma4_fuzz_self_"), 500);
  if (!opt.count("corpus")) {
    std::cerr << "gemma4-fuzz-readers: --corpus DIR is required (see --help)\n";
    return 2;
  }
  at::set_num_threads(1);  // the children fork from this process: keep it single-threaded
  const long cases = std::stol(opt["cases"]);
  const int timeout_ms = std::stoi(opt["timeout-ms"]);
  const int show = std::stoi(opt["show-refusals"]);
  const std::string artifacts = opt.count("artifacts") ? opt["artifacts"] : files::make_temp_directory("gemma4_fuzz_");
  files::make_directories(artifacts);
  const std::string work = files::make_temp_directory("gemma4_fuzz_work_");
  std::mt19937_64 rng(std::stoull(opt["seed"]));
  int findings = 0;

  std::cout << "reader        cases   accepted  refused  unclear  crash  hang   seconds\n";
  for (const ReaderInfo& r : kReaders) {
    if (("," + opt["readers"] + ",").find("," + std::string(r.name) + ",") == std::string::npos) continue;
    const std::string dir = files::join(opt["corpus"], r.name);
    std::vector<std::string> seeds;
    for (const std::string& f : files::is_directory(dir) ? files::list_directory(dir) : std::vector<std::string>{}) {
      seeds.push_back(read_file(files::join(dir, f)));
    }
    if (seeds.empty()) {
      std::cerr << "gemma4-fuzz-readers: no seed files in " << dir << "\n";
      return 2;
    }
    std::map<Outcome, long> count;
    std::vector<std::string> samples;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string input = files::join(work, std::string("input.") + (r.json ? "json" : "bin"));
    for (long c = 0; c < cases; ++c) {
      const std::string bytes = mutate(seeds[size_t(rng() % seeds.size())], r.json, rng);
      write_file(input, bytes);
      const golden::ChildResult res = run_case(r.reader, input, timeout_ms);
      ++count[res.outcome];
      if (res.outcome == Outcome::kRefused && int(samples.size()) < show) samples.push_back(res.message);
      if (res.outcome == Outcome::kCrashed || res.outcome == Outcome::kHung || res.outcome == Outcome::kUnclear) {
        ++findings;
        const std::string kept = files::join(artifacts, std::string(r.name) + "-case" + std::to_string(c));
        write_file(kept, bytes);
        std::cout << "  " << r.name << " case " << c << ": " << res.message.substr(0, 300) << " (input: " << kept << ")\n";
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-12s %6ld %9ld %8ld %8ld %6ld %5ld %9.1f\n", r.name, cases, count[Outcome::kAccepted],
                count[Outcome::kRefused], count[Outcome::kUnclear], count[Outcome::kCrashed], count[Outcome::kHung], secs);
    for (const std::string& m : samples) std::cout << "    refused: " << m.substr(0, 200) << "\n";
    std::cout.flush();
  }
  std::cout << (findings == 0 ? "PASS" : "FAIL") << ": " << findings << " findings (crash, hang, unclear); artifacts in "
            << artifacts << "\n";
  return findings == 0 ? 0 : 1;
}
