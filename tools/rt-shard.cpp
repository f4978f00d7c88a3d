// rt-shard.cpp — converts CIFAR-10 binary batches and IDX files into ringtrain's shards.
//
// Bad input: one line on stderr, exit code 2, no output file, and no output directory left
// behind that this run created.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/convert.hpp"

namespace po = boost::program_options;
using namespace ringtrain;

namespace {

const char* kUsage =
    "usage: rt-shard cifar10 --input DIR --output DIR [--shards N] [--val-count K]\n"
    "       rt-shard idx --images F --labels F --output DIR [--split train|val|test]\n"
    "                [--shards N] [--val-count K] [--dataset NAME] [--class-names a,b,...]\n"
    "                [--mean M --std S]\n"
    "       rt-shard fashion-mnist --output DIR [--input DIR] [--shards N] [--val-count K]\n";

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
  shard::CifarOptions o;
  po::options_description desc("rt-shard cifar10");
  desc.add_options()("input", po::value(&o.input_dir)->required(), "directory of data_batch_*.bin")(
      "output", po::value(&o.output_dir)->required(), "shard directory")(
      "shards", po::value(&o.shards)->default_value(1), "shards per split")(
      "val-count", po::value(&o.val_count)->default_value(0), "last train records held out as val");
  parse(desc, args);
  return shard::convert_cifar10(o);
}

std::vector<std::string> run_idx(const std::vector<std::string>& args) {
  shard::IdxOptions o;
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
  return shard::convert_idx(o);
}

std::vector<std::string> run_fashion_mnist(const std::vector<std::string>& args) {
  shard::FashionMnistOptions o;
  po::options_description desc("rt-shard fashion-mnist");
  desc.add_options()("input", po::value(&o.input_dir)->default_value(o.input_dir),
                     "directory of Debian's dataset-fashion-mnist files")(
      "output", po::value(&o.output_dir)->required(), "shard directory")(
      "shards", po::value(&o.shards)->default_value(1), "shards per split")(
      "val-count", po::value(&o.val_count)->default_value(5000),
      "last train records held out as val");
  parse(desc, args);
  return shard::convert_fashion_mnist(o);
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
    else
      throw InputError(str("unknown command '", command, "' (use cifar10, idx or fashion-mnist)"));
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
