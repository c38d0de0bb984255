#include "reference/files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "reference/error.h"

namespace gemma4::files {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::vector<std::string> list_directory(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

void truncate_file(const std::string& path, int64_t size) {
  if (::truncate(path.c_str(), size) != 0) throw Error(path + ": cannot truncate: " + std::strerror(errno));
}

void make_directories(const std::string& path) {
  for (size_t slash = path.find('/', 1); ; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && !is_directory(prefix) && ::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) {
      throw Error(prefix + ": cannot create directory: " + std::strerror(errno));
    }
    if (slash == std::string::npos) return;
  }
}

std::string make_temp_directory(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = join(tmp && *tmp ? tmp : "/tmp", prefix + "XXXXXX");
  if (!::mkdtemp(pattern.data())) throw Error(pattern + ": cannot create a temporary directory: " + std::strerror(errno));
  return pattern;
}

void write_text(const std::string& path, const std::string& contents) {
  std::ofstream out(path);
  out << contents;
  if (!out.flush()) throw Error(path + ": cannot be written");
}

}  // namespace gemma4::files
