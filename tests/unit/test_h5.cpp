// test_h5.cpp — the HDF5 wrapper: round trips, hyperslab reads, atomic files, error text.
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>

#include "ringtrain/io/h5.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace ringtrain;

namespace {
using rt_test::temp_dir;
}  // namespace

BOOST_AUTO_TEST_SUITE(h5_wrapper)

BOOST_AUTO_TEST_CASE(datasets_and_attributes_round_trip) {
  std::string path = temp_dir("h5rt") + "/a.h5";
  std::vector<uint8_t> pixels(5 * 2 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 7 + 1);
  {
    auto file = h5::File::create(path);
    auto& root = file.root();
    root.write<uint8_t>("images", {5, 2, 3}, pixels.data(), 2);
    root.write<int32_t>("labels", std::vector<int32_t>{3, -1, 4, 1, 5});
    root.set_attr("name", "fiber");
    root.set_attr("version", int32_t(7));
    root.set_attr("mean", std::vector<float>{0.25f, 0.5f});
    root.set_attr("classes", std::vector<std::string>{"clean", "scratch"});
    root.create_group("epochs").write_string("deck", "[train]\nepochs = 3\n");
    file.close();
  }
  auto file = h5::File::open_read(path);
  const auto& root = file.root();
  auto images = root.open_dataset("images");
  BOOST_TEST((images.dims() == h5::Dims{5, 2, 3}));
  BOOST_TEST(images.holds<uint8_t>());
  BOOST_TEST(!images.holds<int32_t>());
  BOOST_TEST(images.read_all<uint8_t>() == pixels);
  std::vector<uint8_t> rows(2 * 6);
  images.read_rows(3, 2, rows.data());
  BOOST_TEST(std::equal(rows.begin(), rows.end(), pixels.begin() + 18));
  BOOST_TEST(
      (root.open_dataset("labels").read_all<int32_t>() == std::vector<int32_t>{3, -1, 4, 1, 5}));
  BOOST_TEST(root.attr_string("name") == "fiber");
  BOOST_TEST(root.attr<int32_t>("version") == 7);
  BOOST_TEST((root.attr_vector<float>("mean") == std::vector<float>{0.25f, 0.5f}));
  BOOST_TEST((root.attr_strings("classes") == std::vector<std::string>{"clean", "scratch"}));
  BOOST_TEST(root.open_group("epochs").open_dataset("deck").read_string() ==
             "[train]\nepochs = 3\n");
}

BOOST_AUTO_TEST_CASE(errors_name_file_and_object) {
  std::string path = temp_dir("h5err") + "/b.h5";
  {
    auto file = h5::File::create(path);
    file.root().write<float>("x", std::vector<float>{1, 2});
  }
  auto file = h5::File::open_read(path);
  try {
    file.root().open_dataset("missing");
    BOOST_FAIL("no throw");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()) == "file " + path + ": dataset /missing is missing");
  }
  try {
    file.root().attr<int32_t>("nope");
    BOOST_FAIL("no throw");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()) == "file " + path + ": group /: attribute nope is missing");
  }
  std::vector<float> out(4);
  BOOST_CHECK_THROW(file.root().open_dataset("x").read_rows(1, 2, out.data()), Error);
  try {
    h5::File::open_read(path + ".none");
    BOOST_FAIL("no throw");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()) ==
               "file " + path + ".none: cannot open (No such file or directory)");
  }
}

BOOST_AUTO_TEST_CASE(atomic_file_appears_only_on_commit) {
  std::string dir = temp_dir("h5atomic");
  std::string path = dir + "/r.h5";
  {
    h5::AtomicFile out(path);
    out.root().set_attr("world_size", int32_t(2));
    BOOST_TEST(!fs::exists(path));
  }  // abandoned: no file, no temp file
  BOOST_TEST(fs::is_empty(dir));
  {
    h5::AtomicFile out(path);
    out.root().set_attr("world_size", int32_t(4));
    out.commit();
  }
  BOOST_TEST(h5::File::open_read(path).root().attr<int32_t>("world_size") == 4);
  BOOST_TEST(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
}

BOOST_AUTO_TEST_CASE(unwritable_dir_fails_early) {
  std::string dir = temp_dir("h5ro");
  std::string file_in_the_way = dir + "/plain";
  { std::ofstream(file_in_the_way) << "x"; }
  try {
    h5::require_writable_dir(file_in_the_way + "/sub", "output.dir");
    BOOST_FAIL("no throw");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).rfind(
                   "output.dir " + file_in_the_way + "/sub: cannot create directory", 0) == 0);
  }
}

BOOST_AUTO_TEST_SUITE_END()
