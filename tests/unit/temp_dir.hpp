// temp_dir.hpp — a fresh, empty directory per test name and process, for tests that write files.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace rt_test {

inline std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("rt-test-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

}  // namespace rt_test
