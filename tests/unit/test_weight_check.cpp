// test_weight_check.cpp — the weight digest (known values from an independent implementation,
// every bit and every position counts, threads and the device give the host loop's bits), what
// the check covers (BN statistics only with sync_bn), and the vote that names the ranks.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <set>

#include "backend_list.hpp"
#include "nn_test_util.hpp"
#include "ringtrain/comm/agreement.hpp"
#include "ringtrain/comm/digest_vote.hpp"
#include "ringtrain/core/digest.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/optimizer.hpp"
#include "ringtrain/train/weight_check.hpp"

using namespace ringtrain;
using namespace rt_test;

namespace {

uint64_t digest_of(const std::vector<float>& v) {
  return digest_f32(v.data(), v.size());
}

// The sum of core/digest.hpp computed one word at a time on one thread, as the specification
// says it: the reference the threaded host loop and the device are held to.
uint64_t serial_digest(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size() + 1, 0);
  for (size_t i = 0; i < v.size(); ++i) std::memcpy(&bits[i], &v[i], sizeof(float));
  uint64_t sum = 0;
  for (size_t k = 0; 2 * k < v.size(); ++k)
    sum += word_term(uint64_t(bits[2 * k]) | (uint64_t(bits[2 * k + 1]) << 32), k);
  return finish_digest(sum, v.size());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(weight_check)

// tests/unit/digest_reference.py (Python, integers) printed these from the specification.
BOOST_AUTO_TEST_CASE(digest_known_values) {
  std::vector<float> ramp;
  for (int i = 0; i <= 1000; ++i) ramp.push_back(float(i) * 0.5f - 3);
  BOOST_TEST(train::digest_hex(digest_of({})) == "cab120fef3a2d79b");
  BOOST_TEST(train::digest_hex(digest_of({1.0f})) == "471afc5434b2f6c0");
  BOOST_TEST(train::digest_hex(digest_of({1.0f, -2.5f, 3.25f})) == "64aa4799eda9bb62");
  BOOST_TEST(train::digest_hex(digest_of(ramp)) == "2c6da4749be4f364");
  const uint64_t state =
      train::state_digest({digest_of({1.0f}), digest_of({1.0f, -2.5f, 3.25f})}, 7);
  BOOST_TEST(train::digest_hex(state) == "c96d3bd6c2b784aa");
}

BOOST_AUTO_TEST_CASE(digest_sees_every_bit_and_every_position) {
  const std::vector<float> base = random_values(9, 3);
  std::set<uint64_t> seen{digest_of(base)};
  for (size_t i = 0; i < base.size(); ++i)
    for (int bit = 0; bit < 32; ++bit) {
      std::vector<float> v = base;
      uint32_t word;
      std::memcpy(&word, &v[i], 4);
      word ^= 1u << bit;
      std::memcpy(&v[i], &word, 4);
      seen.insert(digest_of(v));
    }
  BOOST_TEST(seen.size() == 1 + base.size() * 32);  // every flip its own digest
  // Order: two values swapped, within a word and across words.
  for (auto [a, b] : {std::pair<size_t, size_t>{0, 1}, {1, 2}, {0, 8}}) {
    std::vector<float> v = base;
    std::swap(v[a], v[b]);
    BOOST_TEST(digest_of(v) != digest_of(base), a << "<->" << b);
  }
  // Whole 8-byte words swapped (values 0,1 with 2,3): only the position mixing sees it.
  std::vector<float> words_swapped = base;
  std::swap(words_swapped[0], words_swapped[2]);
  std::swap(words_swapped[1], words_swapped[3]);
  BOOST_TEST(digest_of(words_swapped) != digest_of(base));
  // A trailing zero is not the padding of an odd count; 0.0 and -0.0 differ.
  std::vector<float> longer = base;
  longer.push_back(0.0f);
  BOOST_TEST(digest_of(longer) != digest_of(base));
  BOOST_TEST(digest_of({0.0f}) != digest_of({-0.0f}));
}

BOOST_AUTO_TEST_CASE(state_digest_depends_on_tensor_order_and_steps) {
  const uint64_t a = digest_of({1, 2}), b = digest_of({3, 4});
  BOOST_TEST(train::state_digest({a, b}, 1) != train::state_digest({b, a}, 1));
  BOOST_TEST(train::state_digest({a, b}, 1) != train::state_digest({a, b}, 2));
  BOOST_TEST(train::state_digest({a, b}, 1) == train::state_digest({a, b}, 1));
}

// Threads split the sum above 2^17 words: the same bits as one word at a time.
BOOST_AUTO_TEST_CASE(threaded_host_loop_equals_serial) {
  for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(1001), (size_t(1) << 19) + 3}) {
    const std::vector<float> v = random_values(n, 11);
    BOOST_TEST(digest_of(v) == serial_digest(v), n << " values");
  }
}

// Each backend's digests (cuda: on the device, where a GPU is present) equal the host loop's.
BOOST_AUTO_TEST_CASE(backend_digests_equal_host) {
  for (const std::string& name : testable_backends()) {
    auto be = backend::make_backend(name, 2);
    std::vector<std::vector<float>> values{random_values(1, 5), random_values(777, 6),
                                           random_values((size_t(1) << 20) + 1, 7)};
    std::vector<backend::Tensor> tensors;
    for (const auto& v : values) tensors.push_back(to_device(*be, {int64_t(v.size())}, v));
    std::vector<const backend::Tensor*> pointers;
    for (const auto& t : tensors) pointers.push_back(&t);
    const std::vector<uint64_t> got = be->digests(pointers);
    BOOST_TEST_REQUIRE(got.size() == values.size());
    for (size_t i = 0; i < values.size(); ++i)
      BOOST_TEST(got[i] == serial_digest(values[i]), name << " tensor " << i);
  }
}

// Parameters and momentum always; each rank's own BN running statistics only with sync_bn.
BOOST_AUTO_TEST_CASE(covers_parameters_and_momentum_and_bn_only_when_synced) {
  auto be = backend::make_backend("cpu", 2);
  auto model = nn::make_model("fibernet", {1, 16, 16}, 5, *be, 1);
  nn::Optimizer sgd(model->parameters(), {}, *be);
  BOOST_TEST_REQUIRE(!model->buffers().empty());
  auto digest = [&](bool bn) {
    std::vector<const backend::Tensor*> pointers;
    const auto tensors = train::checked_tensors(*model, sgd, bn);
    for (const auto& t : tensors) pointers.push_back(&t.tensor);
    return train::state_digest(be->digests(pointers), sgd.steps());
  };
  const size_t params = model->parameters().size();
  BOOST_TEST(train::checked_tensors(*model, sgd, false).size() == 2 * params);
  BOOST_TEST(train::checked_tensors(*model, sgd, true).size() ==
             2 * params + model->buffers().size());
  BOOST_TEST(train::checked_tensors(*model, sgd, false)[params].name ==
             model->parameters()[0]->name + " (momentum)");
  // AdamW and LAMB keep two moments: both are covered.
  nn::OptimizerOptions adamw;
  adamw.kind = nn::OptimizerKind::kAdamW;
  nn::Optimizer adam(model->parameters(), adamw, *be);
  const auto adam_tensors = train::checked_tensors(*model, adam, false);
  BOOST_TEST(adam_tensors.size() == 3 * params);
  BOOST_TEST(adam_tensors[params].name == model->parameters()[0]->name + " (first moment)");
  BOOST_TEST(adam_tensors[2 * params].name == model->parameters()[0]->name + " (second moment)");
  auto bump = [&](backend::Tensor t) {
    std::vector<float> host = to_host(*be, t);
    host[0] += 1.0f;
    be->upload(host.data(), t);
  };
  uint64_t without = digest(false), with = digest(true);
  bump(*model->buffers()[0].tensor);  // a running mean
  BOOST_TEST(digest(false) == without);
  BOOST_TEST(digest(true) != with);
  without = digest(false);
  bump(sgd.first_moments().back());
  BOOST_TEST(digest(false) != without);
  without = digest(false);
  train::flip_weight_bit(*model, *be);
  BOOST_TEST(digest(false) != without);
}

BOOST_AUTO_TEST_CASE(vote_names_the_ranks_unlike_the_majority) {
  const uint64_t a = 1, b = 2;
  comm::DigestVote v = comm::tally_digests({a, a, a});
  BOOST_TEST((v.agreed && v.majority && v.differing.empty()));
  v = comm::tally_digests({a, b, a});
  BOOST_TEST((!v.agreed && v.majority && v.reference == 0));
  BOOST_TEST(v.differing == std::vector<int>{1});
  v = comm::tally_digests({b, a, a, a});
  BOOST_TEST((v.majority && v.reference == 1 && v.differing == std::vector<int>{0}));
  // No majority: named against rank 0's group.
  v = comm::tally_digests({a, b});
  BOOST_TEST((!v.majority && v.reference == 0 && v.differing == std::vector<int>{1}));
  v = comm::tally_digests({a, a, b, b});
  BOOST_TEST((!v.majority && v.reference == 0 && v.differing == std::vector<int>{2, 3}));
  v = comm::tally_digests({b, a, a, b, a});
  BOOST_TEST((v.majority && v.reference == 1 && v.differing == std::vector<int>{0, 3}));
}

BOOST_AUTO_TEST_CASE(first_differing_tensor_and_rank_lists) {
  // 3 ranks x 4 tensors; rank 2 differs in tensors 2 and 3.
  const std::vector<uint64_t> all{10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 99, 98};
  const comm::DigestVote v = comm::tally_digests({5, 5, 6});
  BOOST_TEST(comm::first_differing_tensor(all, 4, v) == 2u);
  const std::vector<uint64_t> same{10, 11, 10, 11, 10, 11};
  BOOST_TEST(comm::first_differing_tensor(same, 2, v) == 2u);  // only the step count differs
  BOOST_TEST(comm::rank_list({1}) == "rank 1");  // the stop line's rank lists
  BOOST_TEST(comm::rank_list({0, 2}) == "ranks 0, 2");
  BOOST_TEST(comm::rank_list({0, 1, 2, 3, 5}) == "ranks 0-3, 5");
}

BOOST_AUTO_TEST_SUITE_END()
