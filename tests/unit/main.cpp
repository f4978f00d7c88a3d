// main.cpp — the Boost.Test module that every tests/unit/*.cpp joins; and, run as
// `unit --write-atomically PATH BYTES`, the writer test_atomic_file.cpp kills at each stage of
// a write (a fresh process, so RINGTRAIN_FAULT is read by that process alone).
#define BOOST_TEST_MODULE ringtrain_unit
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <string>

#include "ringtrain/core/atomic_file.hpp"

int main(int argc, char* argv[]) {
  if (argc == 4 && std::strcmp(argv[1], "--write-atomically") == 0) {
    ringtrain::write_file_atomically(argv[2], std::string(std::stoul(argv[3]), 'n'));
    return 0;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
