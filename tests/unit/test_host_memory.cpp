// test_host_memory.cpp — host tensor blocks: from 2 MiB on, aligned to a huge page and offered
// transparent huge pages (the kernel's smaps says the mapping is eligible), small ones not;
// RINGTRAIN_HUGE_PAGES=off offers none; any other value is refused by name. What is not offered
// is told by the allocator's count of its offers, not by smaps: glibc may carve a block out of
// memory an earlier, offered block held, and that memory stays eligible.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "../../src/backend/factories.hpp"  // kHugePageBytes
#include "nn_test_util.hpp"
#include "ringtrain/core/error.hpp"

using namespace ringtrain;
using namespace ringtrain::backend;
using namespace rt_test;

namespace {

// The kernel's transparent huge page mode: "always", "madvise" or "never" (the bracketed one).
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos ? "never" : line.substr(open + 1, close - open - 1);
}

// THPeligible of the mapping that holds p in /proc/self/smaps: 1 or 0, -1 where not found.
int huge_page_eligible(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> start >> dash >> end && dash == '-') {
      inside = start <= at && at < end;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::stoi(line.substr(12));
    }
  }
  return -1;
}

bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Restores RINGTRAIN_HUGE_PAGES when a case ends.
struct HugePagesSetting {
  explicit HugePagesSetting(const char* value) { setenv("RINGTRAIN_HUGE_PAGES", value, 1); }
  ~HugePagesSetting() { unsetenv("RINGTRAIN_HUGE_PAGES"); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(host_memory)

BOOST_AUTO_TEST_CASE(large_blocks_start_on_a_huge_page_and_are_offered_huge_pages) {
  auto be = make_backend("ref", 1);
  const uint64_t offers = huge_page_offers();
  const Tensor large = be->alloc({int64_t(kHugePageBytes)});  // 8 MiB of fp32
  BOOST_TEST(huge_page_offers() == offers + 1);
  const Tensor small = be->alloc({1000});
  BOOST_TEST(huge_page_offers() == offers + 1);
  BOOST_TEST(aligned_to(large.raw(), kHugePageBytes));
  BOOST_TEST(aligned_to(small.raw(), 64));
  const std::string mode = thp_mode();
  std::printf("transparent huge pages: %s\n", mode.c_str());
  if (mode == "never") return;  // nothing to offer them to
  BOOST_TEST(huge_page_eligible(large.raw()) == 1);
}

BOOST_AUTO_TEST_CASE(off_offers_none_and_other_values_are_refused) {
  auto be = make_backend("ref", 1);
  {
    const HugePagesSetting off("off");
    const uint64_t offers = huge_page_offers();
    const Tensor large = be->alloc({int64_t(kHugePageBytes)});
    BOOST_TEST(huge_page_offers() == offers);
  }
  const HugePagesSetting bad("yes");
  BOOST_TEST(error_of([&] { be->alloc({int64_t(kHugePageBytes)}); }) ==
             "RINGTRAIN_HUGE_PAGES=yes: use on (the default) or off");
  BOOST_TEST(error_of([&] { be->alloc({1000}); }) == "(no error)");  // below a huge page: not read
}

BOOST_AUTO_TEST_SUITE_END()
