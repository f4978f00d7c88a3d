// test_config.cpp — decks and command line: precedence, and the exact one-line errors.
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>

#include "ringtrain/comm/agreement.hpp"
#include "ringtrain/config/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/train/trainer.hpp"
#include "temp_dir.hpp"

using namespace ringtrain;
namespace fs = std::filesystem;

namespace {
std::string write_deck(const std::string& name, const std::string& text) {
  const fs::path dir = rt_test::temp_root() / "decks";
  fs::create_directories(dir);
  std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

const char* kGoodDeck =
    "# a good deck\n"
    "[data]\n"
    "dir = data/fiber\n"
    "[model]\n"
    "name = fibernet\n"
    "[train]\n"
    "epochs = 4\n"
    "batch_per_rank = 32\n"
    "lr = 0.05\n"
    "[comm]\n"
    "fusion_mib = 16\n";

CommandLine parse(std::vector<std::string> args) {
  std::vector<const char*> argv{"ringtrain"};
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_command_line(int(argv.size()), argv.data());
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(good_deck_sets_values_and_defaults) {
  std::string deck = write_deck("good.deck", kGoodDeck);
  Config c = parse({"--deck", deck}).config;
  BOOST_TEST(c.data.dir == "data/fiber");
  BOOST_TEST(c.model.name == "fibernet");
  BOOST_TEST(c.train.epochs == 4);
  BOOST_TEST(c.train.batch_per_rank == 32);
  BOOST_TEST(c.train.lr == 0.05);
  BOOST_TEST(c.comm.fusion_mib == "16");
  BOOST_TEST(fixed_fusion_mib(c.comm).value_or(0) == 16.0);
  BOOST_TEST(c.comm.algorithm == "auto");  // default
  BOOST_TEST(c.output.name == "good");     // the deck's stem
  BOOST_TEST(c.effective_deck.find("[train]\nbackend = cpu\n") != std::string::npos);
  BOOST_TEST(c.effective_deck.find("epochs = 4\n") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(command_line_overrides_deck) {
  std::string deck = write_deck("prec.deck", kGoodDeck);
  Config c = parse({"--deck", deck, "--train.epochs=9", "--comm.algorithm", "mpi"}).config;
  BOOST_TEST(c.train.epochs == 9);
  BOOST_TEST(c.comm.algorithm == "mpi");
  BOOST_TEST(c.train.lr == 0.05);  // untouched deck value
  BOOST_TEST(c.effective_deck.find("epochs = 9\n") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(effective_deck_parses_back_to_the_same_config) {
  std::string deck = write_deck("round.deck", kGoodDeck);
  Config first = parse({"--deck", deck, "--train.step_epochs=3,5", "--train.schedule=step"}).config;
  std::string again = write_deck("round2.deck", first.effective_deck);
  Config second = parse({"--deck", again}).config;
  BOOST_TEST(second.effective_deck == first.effective_deck);
  BOOST_TEST((second.train.step_epochs == std::vector<int>{3, 5}));
}

BOOST_AUTO_TEST_CASE(unknown_key_names_file_line_key_and_value) {
  std::string deck = write_deck("unknown.deck", std::string(kGoodDeck) + "epochz = 3\n");
  BOOST_TEST(error_of({"--deck", deck}) ==
             deck +
                 ":12: unknown key 'comm.epochz' (value '3'); did you mean train.epochs? "
                 "ringtrain --help lists every key");
}

BOOST_AUTO_TEST_CASE(bad_value_names_file_line_key_and_value) {
  std::string deck =
      write_deck("badvalue.deck", std::string(kGoodDeck) + "[train]\nepochs = many\n");
  // The deck's second epochs line is line 13.
  std::string deck2 = write_deck("badvalue2.deck",
                                 "[data]\ndir = d\n[model]\nname = cnn_small\n[train]\n"
                                 "batch_per_rank = 8\nepochs = many\n");
  BOOST_TEST(error_of({"--deck", deck2}) ==
             deck2 + ":7: bad value 'many' for train.epochs (expected an integer)");
  std::string deck3 = write_deck("badchoice.deck",
                                 "[data]\ndir = d\n[model]\nname = cnn_small\n[train]\n"
                                 "batch_per_rank = 8\nschedule = adam\n");
  BOOST_TEST(error_of({"--deck", deck3}) ==
             deck3 + ":7: bad value 'adam' for train.schedule (one of: cosine, step, constant)");
  std::string deck4 = write_deck("badrange.deck",
                                 "[data]\ndir = d\n[model]\nname = cnn_small\n[train]\n"
                                 "batch_per_rank = 8\n[comm]\nfusion_mib = -2\n");
  BOOST_TEST(error_of({"--deck", deck4}) ==
             deck4 + ":8: bad value '-2' for comm.fusion_mib (auto or a positive number of MiB)");
  // The four precisions are built (fp16 and tf32 on cuda); anything else is refused, naming them.
  std::string good = write_deck("precision.deck", kGoodDeck);
  BOOST_TEST(error_of({"--deck", good, "--train.precision=fp8"}) ==
             "command line: bad value 'fp8' for train.precision (one of: fp32, bf16, fp16, tf32)");
  for (const char* p : {"fp32", "bf16", "fp16", "tf32"})
    BOOST_TEST(error_of({"--deck", good, std::string("--train.precision=") + p}) == "(no error)");
  BOOST_TEST(error_of({"--deck", good, "--train.accumulate_steps=0"}) ==
             "command line: bad value '0' for train.accumulate_steps (at least 1)");
  BOOST_TEST(error_of({"--deck", deck, "--train.lr=fast"}) ==
             "command line: bad value 'fast' for train.lr (expected a number)");
}

BOOST_AUTO_TEST_CASE(missing_key_and_missing_value) {
  std::string deck = write_deck("missing.deck", "[data]\ndir = d\n[train]\nbatch_per_rank = 8\n");
  BOOST_TEST(error_of({"--deck", deck}) ==
             deck +
                 ": missing required key model.name (model from the zoo; one of cnn_small, "
                 "resnet18_cifar, fibernet)");
  std::string empty =
      write_deck("empty.deck", "[data]\ndir =\n[model]\nname = x\n[train]\nbatch_per_rank = 8\n");
  BOOST_TEST(error_of({"--deck", empty}) ==
             empty +
                 ": missing required key data.dir (directory of HDF5 shards (rt-shard / "
                 "rt-fibergen output))");
  std::string novalue =
      write_deck("novalue.deck", "[data]\ndir = d\n[model]\nname = x\n[train]\nepochs =\n");
  BOOST_TEST(error_of({"--deck", novalue}) ==
             novalue + ":6: bad value '' for train.epochs (expected an integer)");
  BOOST_TEST(error_of({"--deck", "/nonexistent/x.deck"}) ==
             "/nonexistent/x.deck: cannot open the deck (no such file or unreadable)");
}

BOOST_AUTO_TEST_CASE(batch_settings_and_world_size) {
  std::string both =
      write_deck("both.deck", std::string(kGoodDeck) + "[train]\nglobal_batch = 64\n");
  BOOST_TEST(
      error_of({"--deck", both}) ==
      both +
          ": set exactly one of train.batch_per_rank (weak scaling) and "
          "train.global_batch (strong scaling); found batch_per_rank = 32, global_batch = 64");
  Config c = parse({"--deck", both, "--train.batch_per_rank=0"}).config;
  BOOST_CHECK_NO_THROW(validate_for_world(c, 4));
  try {
    validate_for_world(c, 3);
    BOOST_FAIL("no throw");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) ==
               both +
                   ": train.global_batch = 64 does not divide over 3 ranks; use a multiple of "
                   "the world size or train.batch_per_rank");
  }
}

BOOST_AUTO_TEST_CASE(numbers_are_finite_and_bounded) {
  std::string deck = write_deck("bounds.deck", kGoodDeck);
  // 100000 threads crashed libgomp; a cpu_set_t holds 1024 CPUs.
  BOOST_TEST(error_of({"--deck", deck, "--train.threads=100000"}) ==
             "command line: bad value '100000' for train.threads (0 (this rank's share of its "
             "cores) to 1024)");
  BOOST_TEST(error_of({"--deck", deck, "--train.threads=1024"}) == "(no error)");
  // Above 9.2e9 s the stall clock overflowed and reported a stall at once.
  BOOST_TEST(error_of({"--deck", deck, "--comm.stall_timeout_s=1e10"}) ==
             "command line: bad value '10000000000' for comm.stall_timeout_s (positive seconds, "
             "at most 1e6)");
  BOOST_TEST(error_of({"--deck", deck, "--comm.stall_timeout_s=1e6"}) == "(no error)");
  BOOST_TEST(error_of({"--deck", deck, "--comm.stall_timeout_s=inf"}) ==
             "command line: bad value 'inf' for comm.stall_timeout_s (a finite number)");
  BOOST_TEST(error_of({"--deck", deck, "--train.weight_decay=inf"}) ==
             "command line: bad value 'inf' for train.weight_decay (a finite number)");
  BOOST_TEST(error_of({"--deck", deck, "--train.lr=nan"}) ==
             "command line: bad value 'nan' for train.lr (a finite number)");
  std::string in_deck = write_deck("nan.deck", std::string(kGoodDeck) + "first_bucket_mib = nan\n");
  BOOST_TEST(error_of({"--deck", in_deck}) ==
             in_deck + ":12: bad value 'nan' for comm.first_bucket_mib (a finite number)");
  for (const char* key :
       {"train.momentum", "train.warmup_epochs", "train.step_gamma", "train.straggler_ms"})
    BOOST_TEST(error_of({"--deck", deck, std::string("--") + key + "=-inf"}) ==
               std::string("command line: bad value '-inf' for ") + key + " (a finite number)");
  for (const char* value : {"-inf", "nan", "inf", "16MiB", "0"})
    BOOST_TEST(error_of({"--deck", deck, std::string("--comm.fusion_mib=") + value}) ==
               std::string("command line: bad value '") + value +
                   "' for comm.fusion_mib (auto or a positive number of MiB)");
}

// auto (the default) leaves a knob to the autotune; a value in the deck or on the command
// line fixes it.
BOOST_AUTO_TEST_CASE(overlap_and_fusion_mib_are_auto_unless_given) {
  std::string deck = write_deck("auto.deck",
                                "[data]\ndir = d\n[model]\nname = fibernet\n[train]\n"
                                "batch_per_rank = 8\n");
  const Config c = parse({"--deck", deck}).config;
  BOOST_TEST(c.comm.overlap == "auto");
  BOOST_TEST(c.comm.fusion_mib == "auto");
  BOOST_TEST(!fixed_overlap(c.comm).has_value());
  BOOST_TEST(!fixed_fusion_mib(c.comm).has_value());
  const Config fixed =
      parse({"--deck", deck, "--comm.overlap=false", "--comm.fusion_mib=0.5"}).config;
  BOOST_TEST(fixed_overlap(fixed.comm).value_or(true) == false);
  BOOST_TEST(fixed_fusion_mib(fixed.comm).value_or(0) == 0.5);
  BOOST_TEST(error_of({"--deck", deck, "--comm.overlap=sometimes"}) ==
             "command line: bad value 'sometimes' for comm.overlap (one of: auto, true, false)");
  BOOST_TEST(help_text().find("--comm.overlap arg (=auto)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(on_nonfinite_is_stop_or_skip) {
  std::string deck = write_deck("nonfinite.deck", kGoodDeck);
  BOOST_TEST(parse({"--deck", deck}).config.train.on_nonfinite == "stop");
  BOOST_TEST(parse({"--deck", deck, "--train.on_nonfinite=skip"}).config.train.on_nonfinite ==
             "skip");
  BOOST_TEST(error_of({"--deck", deck, "--train.on_nonfinite=ignore"}) ==
             "command line: bad value 'ignore' for train.on_nonfinite (one of: stop, skip)");
  BOOST_TEST(help_text().find("--train.on_nonfinite arg (=stop)") != std::string::npos);
}

// train.loss_scale: dynamic, none, a static number (printed back as a number), or auto, which
// follows the precision; every bad value is one line naming the key, value and its source.
BOOST_AUTO_TEST_CASE(loss_scale_keys_parse_and_resolve) {
  std::string deck = write_deck("loss_scale.deck", kGoodDeck);
  auto loss_scale = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--deck", deck});
    return parse(extra).config.train;
  };
  TrainConfig defaults = loss_scale({});
  BOOST_TEST(defaults.loss_scale == "none");  // fp32
  BOOST_TEST(defaults.loss_scale_init == 65536.0);
  BOOST_TEST(defaults.loss_scale_growth_interval == 2000);
  BOOST_TEST(loss_scale({"--train.precision=bf16"}).loss_scale == "none");
  BOOST_TEST(default_loss_scale("fp16") == "dynamic");
  BOOST_TEST(default_loss_scale("bf16") == "none");
  BOOST_TEST(loss_scale({"--train.loss_scale=dynamic"}).loss_scale == "dynamic");
  BOOST_TEST(loss_scale({"--train.loss_scale=none"}).loss_scale == "none");
  BOOST_TEST(loss_scale({"--train.loss_scale=1024.0"}).loss_scale == "1024");
  BOOST_TEST(loss_scale({"--train.loss_scale=1"}).loss_scale == "1");
  BOOST_TEST(loss_scale({"--train.loss_scale=16777216"}).loss_scale == "16777216");
  TrainConfig set =
      loss_scale({"--train.loss_scale_init=8", "--train.loss_scale_growth_interval=3"});
  BOOST_TEST(set.loss_scale_init == 8.0);
  BOOST_TEST(set.loss_scale_growth_interval == 3);
  const std::string rule =
      " for train.loss_scale (dynamic, none, auto, or a static scale from 1 to 16777216)";
  for (const char* bad : {"0.5", "16777217", "fast", "12x", "", "nan", "inf", "1e400"})
    BOOST_TEST(error_of({"--deck", deck, std::string("--train.loss_scale=") + bad}) ==
               "command line: bad value '" + std::string(bad) + "'" + rule);
  std::string in_deck =
      write_deck("loss_scale_bad.deck", std::string(kGoodDeck) + "[train]\nloss_scale = Dynamic\n");
  BOOST_TEST(error_of({"--deck", in_deck}) == in_deck + ":13: bad value 'Dynamic'" + rule);
  BOOST_TEST(error_of({"--deck", deck, "--train.loss_scale_init=0.5"}) ==
             "command line: bad value '0.5' for train.loss_scale_init (from 1 to 16777216)");
  BOOST_TEST(error_of({"--deck", deck, "--train.loss_scale_init=3e7"}) ==
             "command line: bad value '30000000' for train.loss_scale_init (from 1 to 16777216)");
  BOOST_TEST(error_of({"--deck", deck, "--train.loss_scale_growth_interval=0"}) ==
             "command line: bad value '0' for train.loss_scale_growth_interval (at least 1)");
  BOOST_TEST(error_of({"--deck", deck, "--train.loss_scale_growth_interval=often"}) ==
             "command line: bad value 'often' for train.loss_scale_growth_interval (expected an "
             "integer)");
  BOOST_TEST(help_text().find("--train.loss_scale arg (=auto)") != std::string::npos);
  BOOST_TEST(parse({"--deck", deck, "--train.loss_scale=dynamic"})
                 .config.effective_deck.find("loss_scale = dynamic\n") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(output_name_stays_inside_output_dir) {
  std::string deck = write_deck("name.deck", kGoodDeck);
  const std::string rule = " for output.name (a file name: not empty, '.' or '..', no '/')";
  BOOST_TEST(error_of({"--deck", deck, "--output.name=../escaped"}) ==
             "command line: bad value '../escaped'" + rule);
  BOOST_TEST(error_of({"--deck", deck, "--output.name=a/b"}) ==
             "command line: bad value 'a/b'" + rule);
  BOOST_TEST(error_of({"--deck", deck, "--output.name=.."}) ==
             "command line: bad value '..'" + rule);
  BOOST_TEST(error_of({"--deck", deck, "--output.name=."}) == "command line: bad value '.'" + rule);
  BOOST_TEST(error_of({"--deck", deck, "--output.name="}) == "command line: bad value ''" + rule);
  std::string empty = write_deck("emptyname.deck", std::string(kGoodDeck) + "[output]\nname =\n");
  BOOST_TEST(error_of({"--deck", empty}) == empty + ":13: bad value ''" + rule);
  BOOST_TEST(parse({"--deck", deck, "--output.name=run.1"}).config.output.name == "run.1");
}

BOOST_AUTO_TEST_CASE(duplicate_key_names_both_lines) {
  std::string deck = write_deck("dup.deck", std::string(kGoodDeck) + "[data]\ndir = other\n");
  BOOST_TEST(error_of({"--deck", deck}) == deck + ":13: duplicate key data.dir (first at line 3)");
  // A section may open twice; only a key may not.
  std::string sections =
      write_deck("sections.deck", std::string(kGoodDeck) + "[train]\nseed = 3\n");
  BOOST_TEST(error_of({"--deck", sections}) == "(no error)");
  BOOST_TEST(error_of({"--deck", deck, "--train.epochs=2", "--train.epochs=3"}) ==
             "command line: duplicate key train.epochs");
}

BOOST_AUTO_TEST_CASE(binary_bytes_are_escaped_and_long_values_cut) {
  std::string deck = write_deck("binary.deck", std::string(kGoodDeck) + "[train]\nbase_batch = 3" +
                                                   std::string(1, '\0') + "\x01\xff\x1b[31m\n");
  BOOST_TEST(error_of({"--deck", deck}) ==
             deck +
                 ":13: bad value '3\\x00\\x01\\xff\\x1b[31m' for train.base_batch (expected an "
                 "integer)");
  std::string junk(100, 'x');
  std::string good = write_deck("long.deck", kGoodDeck);
  BOOST_TEST(error_of({"--deck", good, "--train.schedule=" + junk}) ==
             "command line: bad value '" + std::string(64, 'x') +
                 "... (100 bytes)' for train.schedule (one of: cosine, step, constant)");
}

BOOST_AUTO_TEST_CASE(deck_directory_empty_values_and_bare_words) {
  std::string deck = write_deck("words.deck", kGoodDeck);
  std::string dir = fs::path(deck).parent_path().string();
  BOOST_TEST(error_of({"--deck", dir}) ==
             dir + ": is a directory; --deck takes a deck file (inputs/*.deck)");
  // --help says "" means no evaluation: the command line can say it too.
  Config c = parse({"--deck", deck, "--data.eval_split=", "--data.test_split="}).config;
  BOOST_TEST(c.data.eval_split == "");
  BOOST_TEST(c.data.test_split == "");
  BOOST_TEST(error_of({"--deck", deck, "--train.epochs="}) ==
             "command line: bad value '' for train.epochs (expected an integer)");
  BOOST_TEST(error_of({"--deck", deck, "stray"}) ==
             "command line: unexpected argument 'stray'; keys are given as --section.key=value, "
             "the deck as --deck FILE");
}

BOOST_AUTO_TEST_CASE(help_names_the_checkpoint_file_really_written) {
  std::string deck = write_deck("ckpt.deck", kGoodDeck);
  Config c = parse({"--deck", deck, "--output.checkpoint_dir=/x/ck"}).config;
  BOOST_TEST(c.checkpoint_path() == "/x/ck/ckpt.ckpt.h5");
  BOOST_TEST(parse({"--deck", deck}).config.checkpoint_path() == "output/ckpt.ckpt.h5");
  std::string help = help_text();
  BOOST_TEST(help.find("<name>.ckpt.h5") != std::string::npos);
  BOOST_TEST(help.find("<name>.ckpt)") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(output_paths_are_prepared_before_training) {
  std::string root = rt_test::temp_dir("config-output-paths");
  std::string deck = write_deck("paths.deck", kGoodDeck);
  // A missing checkpoint directory is created, parents and all.
  Config c = parse({"--deck", deck, "--output.checkpoint_dir=" + root + "/a/b/ck"}).config;
  BOOST_CHECK_NO_THROW(prepare_output_paths(c));
  BOOST_TEST(fs::is_directory(root + "/a/b/ck"));
  // One under a regular file cannot be.
  std::ofstream(root + "/file") << "x";
  c.output.checkpoint_dir = root + "/file/ck";
  try {
    prepare_output_paths(c);
    BOOST_FAIL("no throw");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) == "output.checkpoint_dir " + root +
                                            "/file/ck: cannot create directory (Not a directory)");
  }
  c.output.checkpoint_dir.clear();
  c.output.baseline = root + "/none.h5";
  try {
    prepare_output_paths(c);
    BOOST_FAIL("no throw");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) == "output.baseline " + root +
                                            "/none.h5: cannot read the results file (No such "
                                            "file or directory)");
  }
  c.output.baseline = root + "/file";
  BOOST_CHECK_NO_THROW(prepare_output_paths(c));
}

BOOST_AUTO_TEST_CASE(threads_beyond_the_cores_warn) {
  std::string deck = write_deck("threads.deck", kGoodDeck);
  Config c = parse({"--deck", deck, "--train.threads=8"}).config;
  BOOST_TEST(threads_warning(c, 2, "2 usable cores / 1 rank") ==
             "train.threads = 8 is more than this rank's 2 core(s) (2 usable cores / 1 rank); "
             "threads will share cores and each step may run many times slower. HINT: "
             "train.threads = 0 takes this rank's share");
  BOOST_TEST(threads_warning(c, 8, "8 cores") == "");
  c.train.threads = 0;  // automatic: the share itself
  BOOST_TEST(threads_warning(c, 1, "1 core") == "");
}

// The GPU keys are real: they parse, are range-checked, show in --help and reach the CUDA
// backend's options (before, the workspace limit and TF32 had no key at all, and an error
// message sent users to the deck for one).
BOOST_AUTO_TEST_CASE(gpu_keys_reach_the_cuda_options) {
  std::string deck = write_deck("gpu.deck", kGoodDeck);
  const TrainConfig defaults = parse({"--deck", deck}).config.train;
  BOOST_TEST(!defaults.deterministic);
  BOOST_TEST(defaults.cudnn_workspace_mib == 256);
  const TrainConfig set = parse({"--deck", deck, "--train.precision=fp16",
                                 "--train.deterministic=true", "--train.cudnn_workspace_mib=64"})
                              .config.train;
  const backend::CudaOptions options = train::cuda_options(set, 3);
  BOOST_TEST(options.device == 3);
  BOOST_TEST((options.precision == backend::Precision::kF16));
  BOOST_TEST(options.deterministic);
  BOOST_TEST(options.workspace_limit_mib == 64u);
  const backend::CudaOptions plain = train::cuda_options(defaults, 0);
  BOOST_TEST((plain.precision == backend::Precision::kF32));
  BOOST_TEST(!plain.deterministic);
  BOOST_TEST(plain.workspace_limit_mib == 256u);
  BOOST_TEST((train::cuda_options(parse({"--deck", deck, "--train.precision=tf32"}).config.train, 0)
                  .precision == backend::Precision::kTF32));
  BOOST_TEST(error_of({"--deck", deck, "--train.cudnn_workspace_mib=0"}) ==
             "command line: bad value '0' for train.cudnn_workspace_mib (1 to 1048576 MiB)");
  BOOST_TEST(error_of({"--deck", deck, "--train.cudnn_workspace_mib=1048577"}) ==
             "command line: bad value '1048577' for train.cudnn_workspace_mib (1 to 1048576 MiB)");
  BOOST_TEST(error_of({"--deck", deck, "--train.deterministic=maybe"}) ==
             "command line: bad value 'maybe' for train.deterministic (expected true or false)");
  const std::string help = help_text();
  BOOST_TEST(help.find("--train.cudnn_workspace_mib arg (=256)") != std::string::npos);
  BOOST_TEST(help.find("--train.deterministic arg (=false)") != std::string::npos);
}

// train.conv_algorithm: auto by default (a fixed rule: allowed beside train.deterministic, as
// are direct and winograd) or measure (a choice by timing: refused beside it); anything else
// refused by name.
BOOST_AUTO_TEST_CASE(conv_algorithm_key) {
  std::string deck = write_deck("conv_algorithm.deck", kGoodDeck);
  BOOST_TEST(parse({"--deck", deck}).config.train.conv_algorithm == "auto");
  BOOST_TEST(parse({"--deck", deck, "--train.deterministic=true"}).config.train.conv_algorithm ==
             "auto");
  BOOST_TEST(
      parse({"--deck", deck, "--train.conv_algorithm=winograd", "--train.deterministic=true"})
          .config.train.conv_algorithm == "winograd");
  BOOST_TEST(error_of({"--deck", deck, "--train.conv_algorithm=fft"}) ==
             "command line: bad value 'fft' for train.conv_algorithm (one of: auto, direct, "
             "winograd, measure)");
  BOOST_TEST(
      error_of({"--deck", deck, "--train.conv_algorithm=measure", "--train.deterministic=true"}) ==
      "train.conv_algorithm = measure chooses by timing, so two runs may differ; with "
      "train.deterministic = true choose auto, direct or winograd");
}

// train.conv_weight_grad: a choice of three, onednn by default; measure (a choice by timing)
// is refused beside train.deterministic, which promises bitwise repeatable runs.
BOOST_AUTO_TEST_CASE(conv_weight_grad_key) {
  std::string deck = write_deck("weight_grad.deck", kGoodDeck);
  BOOST_TEST(parse({"--deck", deck}).config.train.conv_weight_grad == "onednn");
  BOOST_TEST(
      parse({"--deck", deck, "--train.conv_weight_grad=measure"}).config.train.conv_weight_grad ==
      "measure");
  BOOST_TEST(error_of({"--deck", deck, "--train.conv_weight_grad=im2col"}) ==
             "command line: bad value 'im2col' for train.conv_weight_grad (one of: onednn, gemm, "
             "measure)");
  BOOST_TEST(error_of({"--deck", deck, "--train.conv_weight_grad=measure",
                       "--train.deterministic=true"}) ==
             "train.conv_weight_grad = measure chooses by timing, so two runs may differ; with "
             "train.deterministic = true choose onednn or gemm");
  BOOST_TEST(parse({"--deck", deck, "--train.conv_weight_grad=gemm", "--train.deterministic=true"})
                 .config.train.deterministic);
}

// train.conv_weight_grad_choices: measure's choices given beforehand,
// name=gemm|onednn[+forward][+winograd|direct] items, only beside a measure (either key's);
// each bad item named.
BOOST_AUTO_TEST_CASE(conv_weight_grad_choices_key) {
  std::string deck = write_deck("weight_grad_choices.deck", kGoodDeck);
  const std::string measure = "--train.conv_weight_grad=measure";
  const std::string algorithm = "--train.conv_algorithm=measure";
  const char* rule =
      "name=gemm or name=onednn, either with +forward, then +winograd or +direct (or "
      "name=winograd or name=direct alone), comma-separated";
  BOOST_TEST(parse({"--deck", deck}).config.train.conv_weight_grad_choices == "");
  BOOST_TEST(parse({"--deck", deck, measure,
                    "--train.conv_weight_grad_choices=conv1=gemm,fc.x=onednn,c2=onednn+forward"})
                 .config.train.conv_weight_grad_choices ==
             "conv1=gemm,fc.x=onednn,c2=onednn+forward");
  BOOST_TEST(parse({"--deck", deck, algorithm,
                    "--train.conv_weight_grad_choices=a=winograd,b=gemm+forward+direct,c=onednn+"
                    "winograd"})
                 .config.train.conv_weight_grad_choices ==
             "a=winograd,b=gemm+forward+direct,c=onednn+winograd");
  BOOST_TEST(error_of({"--deck", deck, "--train.conv_weight_grad_choices=conv1=gemm"}) ==
             "command line: train.conv_weight_grad_choices gives measure's choices beforehand, "
             "but train.conv_weight_grad is onednn and train.conv_algorithm auto, neither "
             "measure");
  BOOST_TEST(
      error_of({"--deck", deck, measure, "--train.conv_weight_grad_choices=conv1=gemm,conv2"}) ==
      str("command line: bad value 'conv2' for train.conv_weight_grad_choices (", rule, ")"));
  for (const char* bad : {"conv1=im2col", "conv1=+forward", "conv1=gemm+backward", "conv1=forward",
                          "conv1=winograd+gemm", "conv1=gemm+direct+winograd", "conv1=gemm+",
                          "conv1=", "=gemm", "conv1=gemm++forward"})
    BOOST_TEST(
        error_of({"--deck", deck, algorithm, str("--train.conv_weight_grad_choices=", bad)}) ==
        str("command line: bad value '", bad, "' for train.conv_weight_grad_choices (", rule, ")"));
}

BOOST_AUTO_TEST_CASE(help_lists_every_key_with_default) {
  std::string help = help_text();
  BOOST_TEST(help.find("--comm.fusion_mib arg (=auto)") != std::string::npos);
  BOOST_TEST(help.find("--comm.stall_timeout_s arg (=60)") != std::string::npos);
  BOOST_TEST(help.find("--print-deck") != std::string::npos);
  BOOST_TEST(parse({"--help"}).help);
}

// What ranks compare at start: every key but the per-rank ones, in --print-deck's order, and
// --resume; the first difference is named by key with both values.
BOOST_AUTO_TEST_CASE(agreed_text_leaves_out_only_the_per_rank_keys) {
  std::string deck = write_deck("agree.deck", kGoodDeck);
  Config a = parse({"--deck", deck, "--train.threads=2", "--output.dir=/a"}).config;
  Config b = parse({"--deck", deck, "--train.threads=3", "--data.prefetch_batches=9",
                    "--output.dir=/b", "--output.baseline=/x.h5"})
                 .config;
  const std::string text = agreed_config_text(a);
  BOOST_TEST(text == agreed_config_text(b));
  BOOST_TEST(comm::first_difference(text, agreed_config_text(b)).key.empty());
  for (const std::string& key : per_rank_keys())
    BOOST_TEST(text.find("\n" + key + " = ") == std::string::npos, key);
  BOOST_TEST(text.find("\ntrain.lr = 0.05\n") != std::string::npos);
  BOOST_TEST(text.find("\noutput.name = agree\n") != std::string::npos);
  BOOST_TEST(text.rfind("--resume = false\n") == text.size() - 17);
  // Every other key counts, in --print-deck's order: data.* comes before train.*.
  Config c = parse({"--deck", deck, "--train.lr=0.1", "--data.shuffle=false"}).config;
  comm::KeyDifference d = comm::first_difference(agreed_config_text(c), text);
  BOOST_TEST(d.key == "data.shuffle");
  BOOST_TEST(d.a == "false");
  BOOST_TEST(d.b == "true");
  Config r = parse({"--deck", deck, "--resume"}).config;
  d = comm::first_difference(agreed_config_text(r), text);
  BOOST_TEST(d.key == "--resume");
  BOOST_TEST(d.a == r.checkpoint_path());
  BOOST_TEST(d.b == "false");
}

// A newcomer's model name is refused at parse time, naming the key: the table's choices are the
// zoo's names, in its order.
BOOST_AUTO_TEST_CASE(model_name_choices_are_the_zoo) {
  std::string names;
  for (const auto& name : nn::model_names()) names += (names.empty() ? "`" : ", `") + name + "`";
  BOOST_TEST(help_markdown().find("| model from the zoo; one of " + names + " |") !=
             std::string::npos);
  std::string deck = write_deck("zoo.deck",
                                "[data]\ndir = d\n[model]\nname = resnet50\n[train]\n"
                                "batch_per_rank = 8\n");
  BOOST_TEST(error_of({"--deck", deck}) ==
             deck +
                 ":4: bad value 'resnet50' for model.name (one of: cnn_small, resnet18_cifar, "
                 "fibernet)");
}

// ringtrain with no arguments names --deck, not the first required key.
BOOST_AUTO_TEST_CASE(no_arguments_names_the_deck_flag) {
  BOOST_TEST(error_of({}) ==
             "command line: no deck; give --deck FILE (e.g. --deck inputs/quickstart.deck), or "
             "--help for every key");
}

// Boost's guessing took --train.batch=10 for train.batch_per_rank: a key must be named in full,
// and an unknown one is answered with the nearest real key.
BOOST_AUTO_TEST_CASE(abbreviated_keys_are_refused) {
  BOOST_TEST(error_of({"--data.dir=d", "--model.name=fibernet", "--train.batch=10"}) ==
             "command line: unknown key 'train.batch' (value '10'); did you mean "
             "train.batch_per_rank? ringtrain --help lists every key");
  BOOST_TEST(error_of({"--data.dir=d", "--model.name=fibernet", "--train.batch_per_rank=10",
                       "--print-dec"}) ==
             "command line: unknown key 'print-dec' (value ''); did you mean --print-deck? "
             "ringtrain --help lists every key");
  // One typo, a key in the wrong section, a longer name: the nearest key; nothing near: none.
  BOOST_TEST(error_of({"--data.dir=d", "--model.name=fibernet", "--comm.epochs=3"}) ==
             "command line: unknown key 'comm.epochs' (value '3'); did you mean train.epochs? "
             "ringtrain --help lists every key");
  BOOST_TEST(error_of({"--data.directory=d", "--model.name=fibernet"}) ==
             "command line: unknown key 'data.directory' (value 'd'); did you mean data.dir? "
             "ringtrain --help lists every key");
  BOOST_TEST(error_of({"--data.dir=d", "--model.name=fibernet", "--foo=1"}) ==
             "command line: unknown key 'foo' (value '1'); ringtrain --help lists every key");
}

// docs/DECK.md's text: every key of --help, in a table per section, with its default.
BOOST_AUTO_TEST_CASE(help_markdown_lists_every_key) {
  const std::string md = help_markdown();
  BOOST_TEST(md.find("| `train.batch_per_rank` | `0` | images per rank per step") !=
             std::string::npos);
  BOOST_TEST(md.find("| `data.dir` | (required) |") != std::string::npos);
  BOOST_TEST(md.find("| `data.eval_split` | `val` |") != std::string::npos);
  BOOST_TEST(md.find("| `output.checkpoint_dir` | (empty) |") != std::string::npos);
  for (const char* section : {"data", "model", "train", "comm", "output"})
    BOOST_TEST(md.find(std::string("\n## [") + section + "]\n") != std::string::npos);
  const std::string help = help_text();
  size_t keys = 0;
  for (size_t at = help.find("\n  --"); at != std::string::npos; at = help.find("\n  --", at + 1))
    ++keys;
  size_t rows = 0;
  for (size_t at = md.find("\n| `"); at != std::string::npos; at = md.find("\n| `", at + 1)) ++rows;
  BOOST_TEST(rows == keys + 1);  // --help's -h line starts "  -h", not "  --"
}

BOOST_AUTO_TEST_SUITE_END()
