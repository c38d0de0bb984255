#pragma once
// The few file-system calls the project needs, on POSIX. Not std::filesystem: the PyPI LibTorch
// exports its own statically linked copy of it, and the dynamic linker binds our calls to that
// copy (std::filesystem::remove_all crashed through it).
#include <string>
#include <vector>

namespace gemma4::files {

bool is_directory(const std::string& path);
bool is_file(const std::string& path);
std::string join(const std::string& dir, const std::string& name);
std::vector<std::string> list_directory(const std::string& dir);  // entry names, sorted, without . and ..
int64_t file_size(const std::string& path);                       // -1 when it cannot be read
void truncate_file(const std::string& path, int64_t size);        // throws gemma4::Error
void make_directories(const std::string& path);                  // like mkdir -p; throws gemma4::Error
std::string make_temp_directory(const std::string& prefix);       // a new, empty directory under $TMPDIR or /tmp
void write_text(const std::string& path, const std::string& contents);  // replaces it; throws gemma4::Error "PATH: cannot be written"

}  // namespace gemma4::files
