// test_weight_check.cpp — the ranks' weight check over MPI: identical ranks agree; one rank with
// a flipped weight bit (or two of four) makes every rank stop with the same line naming the
// step, the differing ranks and the tensor; repair gives every rank the majority's bits, and
// without a majority (2 ranks, a 2-2 split) repair stops too, saying so.
// np: 2 3 4
// quick: 3
#define BOOST_TEST_MODULE weight_check
#include <cstring>

#include "mpi_test.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/train/weight_check.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;

namespace {

// One rank's model, optimizer and check, identical on every rank until a test flips a bit.
struct Replica {
  comm::Communicator& world;
  std::unique_ptr<backend::Backend> be = backend::make_backend("cpu", 1);
  std::unique_ptr<nn::Model> model = nn::make_model("cnn_small", {1, 16, 16}, 5, *be, 42);
  nn::Optimizer sgd{model->parameters(), {}, *be};
  CommConfig config;
  std::unique_ptr<train::WeightCheck> check;

  Replica(comm::Communicator& w, const std::string& on_divergence) : world(w) {
    config.on_divergence = on_divergence;
    check = std::make_unique<train::WeightCheck>(config, world, *model, sgd, *be);
  }
  // Every parameter's values, one after another (to compare across ranks).
  std::vector<float> weights() {
    std::vector<float> all;
    for (const nn::Parameter* p : model->parameters()) {
      std::vector<float> host(size_t(p->numel()));
      be->download(p->value, host.data());
      all.insert(all.end(), host.begin(), host.end());
    }
    return all;
  }
  // The name of the tensor flip_weight_bit flips (the same on every rank).
  std::string flipped_name() const {
    return model->parameters()[model->parameters().size() / 2]->name;
  }
  // The check's Error line on this rank ("" when it passed).
  std::string run_check(int64_t step) {
    try {
      check->run(step);
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  }
};

// Collective: whether every rank holds the same string as rank 0.
bool same_text_everywhere(const std::string& mine) {
  std::vector<float> bytes(mine.size() + 1, 0.0f);
  for (size_t i = 0; i < mine.size(); ++i) bytes[i] = float(mine[i]);
  int n = int(bytes.size()), max = 0;
  MPI_Allreduce(&n, &max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  bytes.resize(size_t(max), 0.0f);
  return rt_test::identical_on_every_rank(bytes);
}

}  // namespace

BOOST_AUTO_TEST_CASE(identical_ranks_agree_and_record_every_digest) {
  comm::Communicator world;
  Replica r(world, "stop");
  const std::string error = r.run_check(5);
  BOOST_TEST(rt_test::all_ok(error.empty()), error);
  BOOST_TEST_REQUIRE(r.check->records().size() == 1u);
  const train::CheckRecord& record = r.check->records()[0];
  BOOST_TEST(record.step == 5);
  BOOST_TEST(record.digests.size() == size_t(world.size()));
  for (uint64_t d : record.digests) BOOST_TEST(d == record.digests[0]);
  BOOST_TEST(record.digests[0] == r.check->local_digest(false));
}

BOOST_AUTO_TEST_CASE(a_flipped_bit_on_rank_1_stops_every_rank_naming_it) {
  comm::Communicator world;
  Replica r(world, "stop");
  r.check->set_checkpoint_step(4);
  if (world.rank() == 1) train::flip_weight_bit(*r.model, *r.be);
  const std::string line = r.run_check(7);
  const std::string against = world.size() == 2
                                  ? "rank 0, with no majority of the 2 ranks to say which is right,"
                              : world.size() == 3 ? "the majority (ranks 0, 2)"
                                                  : "the majority (ranks 0, 2, 3)";
  const std::string expected = "step 7: ranks hold different weights: rank 1 differs from " +
                               against + " first in " + r.flipped_name() +
                               "; stopped on every rank, the checkpoint of step 4 is kept "
                               "(comm.on_divergence = stop)";
  BOOST_TEST(line == expected);
  BOOST_TEST(rt_test::all_ok(line == expected));
  BOOST_TEST(same_text_everywhere(line));
}

BOOST_AUTO_TEST_CASE(repair_copies_the_majority_or_stops_without_one) {
  comm::Communicator world;
  Replica r(world, "repair");
  const std::vector<float> before = r.weights();
  if (world.rank() == 1) train::flip_weight_bit(*r.model, *r.be);
  const std::string line = r.run_check(3);
  if (world.size() == 2) {
    BOOST_TEST(line.find("rank 1 differs from rank 0, with no majority") != std::string::npos,
               line);
    BOOST_TEST(line.find("(comm.on_divergence = repair: 2 ranks hold no majority copy to repair "
                         "from)") != std::string::npos,
               line);
    BOOST_TEST(same_text_everywhere(line));
    return;
  }
  BOOST_TEST(rt_test::all_ok(line.empty()), line);
  BOOST_TEST(r.check->repairs() == 1);
  BOOST_TEST(r.check->records().back().repaired);
  // Every rank holds the weights it started with, bitwise: the majority's.
  const std::vector<float> after = r.weights();
  BOOST_TEST(rt_test::all_ok(std::memcmp(after.data(), before.data(), 4 * before.size()) == 0));
  // And the next check agrees.
  BOOST_TEST(rt_test::all_ok(r.run_check(4).empty()));
  BOOST_TEST(!r.check->records().back().repaired);
}

// Four ranks split two against two: no majority; the ranks unlike rank 0's are named.
BOOST_AUTO_TEST_CASE(an_even_split_has_no_majority) {
  comm::Communicator world;
  if (world.size() != 4) return;
  Replica r(world, "repair");
  if (world.rank() >= 2) train::flip_weight_bit(*r.model, *r.be);
  const std::string line = r.run_check(9);
  BOOST_TEST(line.find("step 9: ranks hold different weights: ranks 2, 3 differ from ranks 0, 1, "
                       "with no majority of the 4 ranks") == 0,
             line);
  BOOST_TEST(same_text_everywhere(line));
}
