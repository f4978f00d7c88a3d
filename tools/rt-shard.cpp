// rt-shard.cpp — converts CIFAR-10 binary batches, IDX files and folders of PNG/JPEG/TIFF images
// into ringtrain's shards.
//
// Bad input: one line on stderr, exit code 2, no output file, and no output directory left
// behind that this run created.
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/shard/convert.hpp"
#include "ringtrain/data/shard/convert_images.hpp"

namespace po = boost::program_options;
using namespace ringtrain;

namespace {

const char* kUsage =
    "usage: rt-shard cifar10 --input DIR --output DIR [--shards N] [--val-count K]\n"
    "       rt-shard idx --images F --labels F --output DIR [--split train|val|test]\n"
    "                [--shards N] [--val-count K] [--dataset NAME] [--class-names a,b,...]\n"
    "                [--mean M --std S]\n"
    "       rt-shard fashion-mnist --output DIR [--input DIR] [--shards N] [--val-count K]\n"
    "       rt-shard images (--input DIR | --labels FILE.csv) --output DIR [--size PX] [...]\n"
    "                (rt-shard images --help: every option)\n";

const char* kImagesHelp =
    "rt-shard images: your own PNG (8/16 bit), JPEG or TIFF images, grey or RGB, into shards\n"
    "  rt-shard images --input DIR --output DIR [options]        DIR/<class>/<image> "
    "(ImageFolder)\n"
    "  rt-shard images --labels FILE.csv --output DIR [options]  a CSV of path,label\n"
    "\n"
    "The classes are the sorted folder names (or sorted distinct CSV labels), or --classes in its\n"
    "order. The CSV's header is 'path,label' or 'path,label,multi_hot,pass,zone_pass' (paths\n"
    "relative to the CSV's folder; multi_hot one 0/1 per class and zone_pass four (A to D),\n"
    "'|'-separated, pass 0/1): with those columns the shards also get /multi_hot, /pass and\n"
    "/zone_pass as rt-fibergen writes them. Plain CSV: no quoted fields, so no ',' in a path.\n"
    "Names starting with '.' are ignored.\n"
    "Each image becomes --channels (1: ITU-R BT.601 luma; 3: RGB, grey replicated), 8 bit\n"
    "(16-bit scaled by 255/65535, rounded); with --size, resized so the shorter side is PX (area\n"
    "average, a box filter, when shrinking; bilinear when enlarging) and centre-cropped to PX x "
    "PX.\n"
    "Without --size every image must have the first one's size.\n"
    "Split: per class, the files sorted by path, shuffled by --seed; the first\n"
    "round(n * test-fraction) go to test, the next round(n * val-fraction) to val, the rest to\n"
    "train. mean/std (per channel, pixel/255) are over the train split, from a first pass that\n"
    "decodes every image on all cores and checks it; a second pass decodes again, a window at a\n"
    "time, and writes. Each shard is built in memory (--shards bounds its size) and all are "
    "renamed\n"
    "into place at the end. Bad input (unreadable, corrupt or 0-byte file, unknown extension, a\n"
    "header declaring more than --max-pixels pixels, refused before decoding, a label not in\n"
    "the class list, mixed sizes without --size): one line naming the file, exit 2,\n"
    "nothing written; with --skip-bad such files are left out, listed and counted on stderr.\n"
    "Progress goes to stderr on runs past 1000 images or 2 s.\n";

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

po::variables_map parse(const po::options_description& desc, const std::vector<std::string>& args) {
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  po::notify(vm);
  return vm;
}

std::vector<std::string> run_cifar10(const std::vector<std::string>& args) {
  data::shard::CifarOptions o;
  po::options_description desc("rt-shard cifar10");
  desc.add_options()("input", po::value(&o.input_dir)->required(), "directory of data_batch_*.bin")(
      "output", po::value(&o.output_dir)->required(), "shard directory")(
      "shards", po::value(&o.shards)->default_value(1), "shards per split")(
      "val-count", po::value(&o.val_count)->default_value(0), "last train records held out as val");
  parse(desc, args);
  return data::shard::convert_cifar10(o);
}

std::vector<std::string> run_idx(const std::vector<std::string>& args) {
  data::shard::IdxOptions o;
  std::string names;
  float mean = -1, std = -1;
  po::options_description desc("rt-shard idx");
  desc.add_options()("images", po::value(&o.images)->required(), "IDX images (plain or .gz)")(
      "labels", po::value(&o.labels)->required(), "IDX labels (plain or .gz)")(
      "output", po::value(&o.output_dir)->required(), "shard directory")(
      "split", po::value(&o.split)->default_value("train"), "train, val or test")(
      "shards", po::value(&o.shards)->default_value(1), "shards per split")(
      "val-count", po::value(&o.val_count)->default_value(0), "last records held out as val")(
      "dataset", po::value(&o.dataset)->default_value("mnist"), "dataset name")(
      "class-names", po::value(&names), "comma-separated class names")(
      "mean", po::value(&mean), "mean, pixel/255 (from the train split)")(
      "std", po::value(&std), "std, pixel/255 (from the train split)");
  auto vm = parse(desc, args);
  RT_REQUIRE_INPUT(vm.count("mean") == vm.count("std"), "--mean and --std go together");
  if (vm.count("mean")) {
    RT_REQUIRE_INPUT(std > 0, "--std ", std, ": must be positive");
    o.mean = {mean};
    o.std = {std};
  }
  if (!names.empty()) o.class_names = split_commas(names);
  return data::shard::convert_idx(o);
}

std::vector<std::string> run_fashion_mnist(const std::vector<std::string>& args) {
  data::shard::FashionMnistOptions o;
  po::options_description desc("rt-shard fashion-mnist");
  desc.add_options()("input", po::value(&o.input_dir)->default_value(o.input_dir),
                     "directory of Debian's dataset-fashion-mnist files")(
      "output", po::value(&o.output_dir)->required(), "shard directory")(
      "shards", po::value(&o.shards)->default_value(1), "shards per split")(
      "val-count", po::value(&o.val_count)->default_value(5000),
      "last train records held out as val");
  parse(desc, args);
  return data::shard::convert_fashion_mnist(o);
}

uint64_t parse_seed(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 0);
  RT_REQUIRE_INPUT(!text.empty() && text[0] != '-' && *end == '\0' && errno == 0, "--seed ", text,
                   ": must be an integer in [0, 2^64)");
  return v;
}

std::vector<std::string> run_images(const std::vector<std::string>& args) {
  data::shard::ImagesOptions o;
  std::string classes, seed = "0";
  po::options_description desc("options", 100, 50);
  // clang-format off
  desc.add_options()
      ("help,h", "print this help and exit")
      ("input", po::value(&o.input_dir)->value_name("DIR"), "one folder per class")
      ("labels", po::value(&o.labels_csv)->value_name("FILE.csv"), "path,label[,multi_hot,pass,zone_pass]")
      ("output", po::value(&o.output_dir)->value_name("DIR"), "shard directory (required)")
      ("name", po::value(&o.dataset)->default_value(o.dataset)->value_name("NAME"), "the shards' dataset name")
      ("classes", po::value(&classes)->value_name("a,b,c"), "the class list, in label order")
      ("size", po::value(&o.size)->default_value(0)->value_name("PX"), "resize + centre crop to PX x PX (0: keep)")
      ("channels", po::value(&o.channels)->value_name("C"), "1 (grey) or 3 (RGB); default: the first image's")
      ("val-fraction", po::value(&o.val_fraction)->default_value(0.1, "0.1")->value_name("F"), "of each class to val")
      ("test-fraction", po::value(&o.test_fraction)->default_value(0.1, "0.1")->value_name("F"), "of each class to test")
      ("seed", po::value(&seed)->default_value("0")->value_name("S"), "the split's shuffle")
      ("shards", po::value(&o.shards)->default_value(1)->value_name("N"), "shard files per split")
      ("threads", po::value(&o.threads)->value_name("T"), "decoding threads (default: all cores)")
      ("max-pixels", po::value(&o.max_pixels)->default_value(o.max_pixels)->value_name("N"), "refuse an image whose header declares more pixels")
      ("skip-bad", po::bool_switch(&o.skip_bad), "leave bad images out (listed and counted)");
  // clang-format on
  auto vm = parse(desc, args);
  if (vm.count("help")) {
    std::cout << kImagesHelp << "\n" << desc << "\n";
    return {};
  }
  RT_REQUIRE_INPUT(vm.count("output"), "--output is required (the shard directory)");
  if (vm.count("threads"))
    RT_REQUIRE_INPUT(o.threads >= 1, "--threads ", o.threads, ": must be at least 1");
  RT_REQUIRE_INPUT(o.max_pixels >= 1, "--max-pixels ", o.max_pixels, ": must be at least 1");
  o.seed = parse_seed(seed);
  if (!classes.empty()) o.classes = split_commas(classes);
  return data::shard::convert_images(o, std::cout, std::cerr);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? kExitBadInput : kExitOk;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    std::vector<std::string> written;
    if (command == "cifar10")
      written = run_cifar10(args);
    else if (command == "idx")
      written = run_idx(args);
    else if (command == "fashion-mnist")
      written = run_fashion_mnist(args);
    else if (command == "images")
      written = run_images(args);
    else
      throw InputError(
          str("unknown command '", command, "' (use cifar10, idx, fashion-mnist or images)"));
    for (const auto& path : written) std::printf("wrote %s\n", path.c_str());
    return kExitOk;
  } catch (const po::error& e) {
    std::fprintf(stderr, "rt-shard: %s: %s\n", command.c_str(), e.what());
    return kExitBadInput;
  } catch (const InputError& e) {
    std::fprintf(stderr, "rt-shard: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rt-shard: error: %s\n", e.what());
    return kExitFailure;
  }
}
