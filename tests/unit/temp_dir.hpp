// temp_dir.hpp — a fresh, empty directory per test name, under one folder per test process that
// is removed when the process ends, for tests that write files.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace rt_test {

// $TMPDIR/rt-test-<pid>: made on first use, removed with all it holds at the process's normal
// exit (by the process that made it: a forked child that exits leaves it to its parent).
inline const std::filesystem::path& temp_root() {
  struct Root {
    pid_t owner = getpid();
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("rt-test-" + std::to_string(getpid()));
    Root() {
      std::filesystem::remove_all(path);
      std::filesystem::create_directories(path);
    }
    ~Root() {
      std::error_code ignored;  // a destructor at exit: nothing to report to
      if (getpid() == owner) std::filesystem::remove_all(path, ignored);
    }
  };
  static const Root root;
  return root.path;
}

inline std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = temp_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

}  // namespace rt_test
