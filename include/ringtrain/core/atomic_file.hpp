// atomic_file.hpp — every file we write, written whole or not at all: to a temp file beside it
// (PATH.tmp-PID), synced, renamed into place, and the folder synced. A kill at any instant
// leaves the previous file or the whole new one; a full disk is an error naming the file, with
// the previous file kept. The fault points of core/fault.hpp (atomic-write:partial, written,
// synced, renamed) are on this path, so one crash test covers every writer.
//
// defines: temp_path_for(), remove_stale_temp_files(), AtomicWrite, write_file_atomically(),
//          sync_folder()
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ringtrain {

// The temp file this process writes for final_path: final_path.tmp-PID.
std::string temp_path_for(const std::string& final_path);
// Removes final_path.tmp-PID files left by processes of this host that no longer run (a run
// killed while writing); returns the paths removed.
std::vector<std::string> remove_stale_temp_files(const std::string& final_path);

// A file made by any writer (stdio, libpng, libzip, an ofstream): it writes temp_path() and
// closes it, then commit() puts it in place. Destroyed without commit (an exception on the
// way), the temp file is removed and final_path is untouched.
class AtomicWrite {
 public:
  explicit AtomicWrite(std::string final_path);
  AtomicWrite(const AtomicWrite&) = delete;
  AtomicWrite& operator=(const AtomicWrite&) = delete;
  ~AtomicWrite();

  const std::string& temp_path() const { return temp_; }
  const std::string& final_path() const { return final_; }
  // Syncs the temp file to disk, renames it to final_path, syncs the folder. Throws Error
  // ("file PATH: ...") and removes the temp file when a step fails.
  void commit();

 private:
  std::string final_, temp_;
  bool committed_ = false;
};

// The bytes as final_path's whole content, through AtomicWrite; a failed write (a full disk)
// throws "file PATH.tmp-PID: cannot write N bytes (No space left on device)".
void write_file_atomically(const std::string& final_path, const void* data, size_t size);
void write_file_atomically(const std::string& final_path, const std::string& bytes);

// Makes renames into dir durable; throws Error naming dir when it cannot be synced.
void sync_folder(const std::string& dir);

}  // namespace ringtrain
