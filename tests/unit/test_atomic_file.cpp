// test_atomic_file.cpp — core/atomic_file, the one way every file of ours is written: a writer
// SIGKILLed at each stage (the checkpoints' crash test, applied once to the helper) leaves the
// previous file or the whole new one and a temp file the next run removes; a writer that gives
// up leaves nothing; errors name the file.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>

#include "image_files.hpp"  // write_bytes, read_bytes
#include "ringtrain/core/atomic_file.hpp"
#include "ringtrain/core/error.hpp"
#include "temp_dir.hpp"

using namespace ringtrain;
namespace fs = std::filesystem;

namespace {

// This binary as the writer (main.cpp): `bytes` 'n's into path, with RINGTRAIN_FAULT=fault.
// Returns the signal that ended it, or 0 when it exited 0.
int run_killed_writer(const std::string& path, size_t bytes, const std::string& fault) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("RINGTRAIN_FAULT", fault.c_str(), 1);
    const std::string count = std::to_string(bytes);
    execl("/proc/self/exe", "unit", "--write-atomically", path.c_str(), count.c_str(), nullptr);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status) == 0 ? 0 : -1;
}

std::vector<std::string> temp_files_of(const std::string& path) {
  std::vector<std::string> found;
  const std::string prefix = fs::path(path).filename().string() + ".tmp-";
  for (const auto& entry : fs::directory_iterator(fs::path(path).parent_path()))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) found.push_back(entry.path());
  return found;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(atomic_file)

BOOST_AUTO_TEST_CASE(a_writer_killed_at_each_stage_leaves_the_old_file_or_the_whole_new_one) {
  const std::string dir = rt_test::temp_dir("atomic-kill"), path = dir + "/f.bin";
  const std::string old_bytes = "the previous file", new_bytes(size_t(1) << 20, 'n');
  for (const char* stage : {"partial", "written", "synced", "renamed"}) {
    BOOST_TEST_CONTEXT("killed at atomic-write:" << stage) {
      rt_test::write_bytes(path, old_bytes);
      BOOST_TEST(run_killed_writer(path, new_bytes.size(), str("atomic-write:", stage)) == SIGKILL);
      const bool in_place = std::string(stage) == "renamed";
      BOOST_TEST((rt_test::read_bytes(path) == (in_place ? new_bytes : old_bytes)));
      const std::vector<std::string> temps = temp_files_of(path);
      BOOST_TEST(temps.size() == (in_place ? 0u : 1u));
      BOOST_TEST(remove_stale_temp_files(path) == temps, boost::test_tools::per_element());
      BOOST_TEST(temp_files_of(path).empty());
    }
  }
  BOOST_TEST(run_killed_writer(path, new_bytes.size(), "") == 0);  // not killed: the new file
  BOOST_TEST((rt_test::read_bytes(path) == new_bytes));
  BOOST_TEST(temp_files_of(path).empty());
}

BOOST_AUTO_TEST_CASE(a_writer_that_gives_up_leaves_the_old_file_and_no_temp) {
  const std::string dir = rt_test::temp_dir("atomic-give-up"), path = dir + "/f.txt";
  rt_test::write_bytes(path, "old");
  {
    AtomicWrite out(path);
    rt_test::write_bytes(out.temp_path(), "half of the new");
  }  // no commit: an exception on the way, say
  BOOST_TEST(rt_test::read_bytes(path) == "old");
  BOOST_TEST(temp_files_of(path).empty());
  write_file_atomically(path, std::string("new"));
  BOOST_TEST(rt_test::read_bytes(path) == "new");
  const std::string nowhere = dir + "/no/such/f.txt";
  try {
    write_file_atomically(nowhere, std::string("x"));
    BOOST_ERROR("a write into a missing folder succeeded");
  } catch (const Error& e) {
    BOOST_TEST(e.what() ==
               "file " + temp_path_for(nowhere) + ": cannot create (No such file or directory)");
  }
}

BOOST_AUTO_TEST_SUITE_END()
