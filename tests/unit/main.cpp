// main.cpp — the Boost.Test module that every tests/unit/*.cpp joins.
#define BOOST_TEST_MODULE ringtrain_unit
#define BOOST_TEST_DYN_LINK
#include <boost/test/unit_test.hpp>
