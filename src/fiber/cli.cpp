// cli.cpp — rt-fibergen's command line (Boost.Program_options): parse, check, generate, report.
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdlib>
#include <ostream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/stop_signals.hpp"
#include "ringtrain/fiber/generator.hpp"

namespace po = boost::program_options;

namespace ringtrain::fiber {
namespace {

// The seed is taken as text so that "-1" is an error rather than 2^64 - 1.
uint64_t parse_seed(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 0);
  RT_REQUIRE_INPUT(!text.empty() && text[0] != '-' && *end == '\0' && errno == 0, "--seed ", text,
                   ": must be an integer in [0, 2^64)");
  return v;
}

po::options_description describe(DatasetOptions& o, std::string& seed, std::string& fiber) {
  po::options_description desc(
      "rt-fibergen: synthetic fiber end-face images (IEC 61300-3-35 zones and acceptance) into "
      "HDF5 shards\n  rt-fibergen --output DIR --count N --seed S [options]\noptions",
      100, 60);
  const std::string count_help =
      str("images over all splits (required): 1 to ", kMaxCount,
          ", at least --shards in each split, and no more than the output's free space holds");
  // clang-format off
  desc.add_options()
      ("help,h", "print this help and exit")
      ("output", po::value(&o.output_dir)->value_name("DIR"),
       "directory for the shards <split>-<i>-of-<k>.h5 (created if missing; required unless "
       "--png-dir is given, which then writes PNGs only)")
      ("count", po::value(&o.count)->value_name("N"), count_help.c_str())
      ("seed", po::value(&seed)->value_name("S"),
       "generator seed; image i of a split depends only on (seed, split, i) (required)")
      ("size", po::value(&o.size)->default_value(64)->value_name("PX"),
       "image side in pixels: 64, 128 or 256 (area average of the 256 px, 1.1 um/px render)")
      ("shards", po::value(&o.shards)->default_value(1)->value_name("K"), "shard files per split")
      ("fiber-type", po::value(&fiber)->default_value("sm-upc")->value_name("T"),
       "sm-upc, sm-apc, mm-upc, or mixed (uniform per image); selects the acceptance table")
      ("val-fraction", po::value(&o.val_fraction)->default_value(0.1, "0.1")->value_name("F"),
       "fraction of --count in the val split")
      ("test-fraction", po::value(&o.test_fraction)->default_value(0.1, "0.1")->value_name("F"),
       "fraction of --count in the test split")
      ("png-grid", po::value(&o.png_grid)->value_name("FILE"),
       "also write a PNG contact sheet: 6 train images per class with class and PASS/FAIL")
      ("png-dir", po::value(&o.png_dir)->value_name("DIR"),
       "also (or, without --output, only) write every image as an 8-bit grey PNG, DIR/<split>/<class>/<index>.png (torchvision's "
       "ImageFolder layout), and DIR/<split>/labels.csv (path,label,multi_hot,pass,zone_pass) for "
       "rt-shard images")
      ("threads", po::value(&o.threads)->value_name("T"),
       "rendering threads (default: the cores this process may use); output does not change");
  // clang-format on
  return desc;
}

DatasetOptions parse(int argc, const char* const argv[], std::ostream& out, bool* help) {
  DatasetOptions o;
  std::string seed, fiber;
  po::options_description desc = describe(o, seed, fiber);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(e.what());
  }
  *help = vm.count("help") > 0;
  if (*help) {
    out << desc << "\n";
    return o;
  }
  RT_REQUIRE_INPUT(vm.count("output") || vm.count("png-dir"),
                   "--output is required (the directory for the shards)");
  RT_REQUIRE_INPUT(vm.count("count"), "--count is required (images over all splits)");
  RT_REQUIRE_INPUT(vm.count("seed"), "--seed is required (the generator seed)");
  o.seed = parse_seed(seed);
  RT_REQUIRE_INPUT(parse_fiber_choice(fiber, &o.fiber), "--fiber-type ", fiber,
                   ": must be sm-upc, sm-apc, mm-upc or mixed");
  RT_REQUIRE_INPUT(!vm.count("threads") || o.threads >= 1, "--threads ", o.threads,
                   ": must be at least 1");
  return o;
}

}  // namespace

int run_fibergen(int argc, const char* const argv[], std::ostream& out, std::ostream& err) {
  try {
    bool help = false;
    DatasetOptions options = parse(argc, argv, out, &help);
    if (help) return kExitOk;
    options.stop_signal = StopSignals::stop_signal;  // 0 unless main has a StopSignals
    DatasetSummary s = generate_dataset(options, &out);
    out << str("rt-fibergen: ", s.files.size(), " shard files in ",
               options.output_dir.empty() ? "(none: --png-dir only)" : options.output_dir, " (",
               options.size, "x", options.size, ", ", fiber_choice_name(options.fiber), ", seed ",
               options.seed, "), train mean ", s.mean, " std ", s.std, ", ", s.seconds, " s\n");
    if (!options.png_grid.empty()) out << "rt-fibergen: contact sheet " << options.png_grid << "\n";
    if (!options.png_dir.empty()) out << "rt-fibergen: PNG folders in " << options.png_dir << "\n";
    return kExitOk;
  } catch (const Stopped& e) {
    err << "rt-fibergen: " << e.what() << "\n";
    return 128 + e.signal();  // as the shell reports a process the signal ended
  } catch (const InputError& e) {
    err << "rt-fibergen: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    err << "rt-fibergen: error: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace ringtrain::fiber
