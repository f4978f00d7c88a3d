// test_host_memory.cpp — host tensor blocks: from 2 MiB on, aligned to a huge page and offered
// transparent huge pages (the kernel's smaps says the mapping is eligible, where the machine
// lets the process have them; not eligible where it does not), small ones not;
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

// The bracketed word of a sysfs setting such as "always [madvise] never"; "" where unreadable.
std::string bracketed(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close < open ? "" : line.substr(open + 1, close - open - 1);
}

// Whether the kernel honours this process's MADV_HUGEPAGE for 2 MiB pages, and why not. Three
// settings decide: the process may be barred (prctl PR_SET_THP_DISABLE, inherited from whatever
// started it: "THP_enabled: 0" in /proc/self/status); since Linux 6.8 the PMD size has its own
// mode (hugepages-2048kB/enabled), "inherit" deferring to the top-level one; that one is
// "always", "madvise" or "never". A machine that bars any of them is no fault of the allocator.
std::string thp_refusal() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("THP_enabled:", 0) == 0 && std::stoi(line.substr(12)) == 0)
      return "barred for this process (THP_enabled: 0 in /proc/self/status)";
  }
  const std::string root = "/sys/kernel/mm/transparent_hugepage/";
  const std::string top = bracketed(root + "enabled");
  if (top.empty()) return "not in this kernel (" + root + "enabled unreadable)";
  std::string pmd =
      bracketed(root + "hugepages-" + std::to_string(kHugePageBytes >> 10) + "kB/enabled");
  if (pmd.empty() || pmd == "inherit") pmd = top;
  if (pmd == "never") return "off for 2 MiB pages (mode never)";
  return "";
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
  const std::string refusal = thp_refusal();
  std::printf("transparent huge pages: %s\n", refusal.empty() ? "honoured" : refusal.c_str());
  // Refused: 0, or no THPeligible line at all (-1) in a kernel built without them.
  const int eligible = huge_page_eligible(large.raw());
  BOOST_TEST((refusal.empty() ? eligible == 1 : eligible != 1), "THPeligible " << eligible);
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
