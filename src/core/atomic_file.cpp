// atomic_file.cpp — temp file, sync, rename, folder sync (core/atomic_file.hpp), with the
// atomic-write fault points a crash test kills at.
#include "ringtrain/core/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/fault.hpp"

namespace ringtrain {
namespace {

// Writes size bytes to path (created or truncated) and closes it; errors name the file, and the
// half-written file is removed.
void write_all(const std::string& path, const char* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(str("file ", path, ": cannot create (", std::strerror(errno), ")"));
  auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    std::remove(path.c_str());
    throw Error(str("file ", path, ": ", what, " (", why, ")"));
  };
  size_t done = 0;
  bool half_noted = false;
  while (done < size) {
    const size_t chunk = std::min<size_t>(size - done, size_t(1) << 24);
    const ssize_t n = ::write(fd, data + done, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(str("cannot write ", size, " bytes"));
    done += size_t(n);
    if (!half_noted && done >= size / 2) {
      half_noted = true;
      fault_point("atomic-write:partial");
    }
  }
  if (::close(fd) != 0) fail("cannot close");
}

// fsync of a file already written and closed.
void sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw Error(str("file ", path, ": cannot open to sync (", std::strerror(errno), ")"));
  const bool ok = ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ::close(fd);
  if (!ok) throw Error(str("file ", path, ": cannot sync to disk (", why, ")"));
}

std::string folder_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

std::string temp_path_for(const std::string& final_path) {
  return str(final_path, ".tmp-", getpid());
}

std::vector<std::string> remove_stale_temp_files(const std::string& final_path) {
  namespace fs = std::filesystem;
  const fs::path target(final_path);
  const std::string prefix = target.filename().string() + ".tmp-";
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder_of(final_path), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
    if (pid == long(getpid()) || !(::kill(pid_t(pid), 0) != 0 && errno == ESRCH)) continue;
    if (fs::remove(entry.path(), ec)) removed.push_back(entry.path().string());
  }
  return removed;
}

AtomicWrite::AtomicWrite(std::string final_path)
    : final_(std::move(final_path)), temp_(temp_path_for(final_)) {}

AtomicWrite::~AtomicWrite() {
  if (!committed_) std::remove(temp_.c_str());
}

void AtomicWrite::commit() {
  RT_CHECK(!committed_, "file ", final_, ": committed twice");
  fault_point("atomic-write:written");
  sync_file(temp_);
  fault_point("atomic-write:synced");
  if (std::rename(temp_.c_str(), final_.c_str()) != 0)
    throw Error(str("file ", final_, ": cannot rename ", temp_, " into place (",
                    std::strerror(errno), ")"));
  committed_ = true;
  fault_point("atomic-write:renamed");
  // The file is in place; a folder that cannot be synced leaves only its durability across a
  // power loss open, which is not worth failing a finished write for.
  try {
    sync_folder(folder_of(final_));
  } catch (const Error&) {
  }
}

void write_file_atomically(const std::string& final_path, const void* data, size_t size) {
  AtomicWrite out(final_path);
  write_all(out.temp_path(), static_cast<const char*>(data), size);
  out.commit();
}

void write_file_atomically(const std::string& final_path, const std::string& bytes) {
  write_file_atomically(final_path, bytes.data(), bytes.size());
}

void sync_folder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool ok = fd >= 0 && ::fsync(fd) == 0;
  const int why = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) throw Error(str(dir, ": cannot sync the folder (", std::strerror(why), ")"));
}

}  // namespace ringtrain
