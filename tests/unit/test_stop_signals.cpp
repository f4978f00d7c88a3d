// test_stop_signals.cpp — stop signals become a flag, never a handler on a working thread.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <thread>

#include "ringtrain/core/stop_signals.hpp"

using ringtrain::StopSignals;

namespace {

// Each case runs in a forked child: the flag is process-wide and a second signal ends the
// process. alarm() turns a watcher that never sees the signal into a SIGALRM death, which
// the parent reports, instead of a hang.
int run_in_child(int (*body)()) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

void wait_for_flag() {
  while (StopSignals::stop_signal() == 0) std::this_thread::yield();
}

bool blocks_stop_signals(const sigset_t& mask) {
  return sigismember(&mask, SIGTERM) && sigismember(&mask, SIGUSR1) && sigismember(&mask, SIGINT);
}

int first_signal_sets_flag() {
  StopSignals signals;
  if (StopSignals::stop_signal() != 0) return 10;
  sigset_t worker_mask;
  std::thread worker([&] { pthread_sigmask(SIG_BLOCK, nullptr, &worker_mask); });
  worker.join();
  if (!blocks_stop_signals(worker_mask)) return 11;  // a later thread could take a handler
  kill(getpid(), SIGUSR1);
  wait_for_flag();
  return StopSignals::stop_signal() == SIGUSR1 ? 0 : 12;
}

int second_signal_terminates() {
  StopSignals signals;
  kill(getpid(), SIGTERM);
  wait_for_flag();
  kill(getpid(), SIGTERM);
  for (;;) pause();
}

int alone_after_watcher_is_gone() {
  { StopSignals signals; }
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return blocks_stop_signals(mask) ? 20 : 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(stop_signal_is_a_flag_and_later_threads_block_it) {
  int status = run_in_child(first_signal_sets_flag);
  BOOST_TEST_INFO("child status " << status);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
}

BOOST_AUTO_TEST_CASE(second_stop_signal_kills_the_process_the_default_way) {
  int status = run_in_child(second_signal_terminates);
  BOOST_TEST_INFO("child status " << status);
  BOOST_TEST(WIFSIGNALED(status));
  BOOST_TEST(WTERMSIG(status) == SIGTERM);
}

BOOST_AUTO_TEST_CASE(signals_are_unblocked_when_the_watcher_goes) {
  int status = run_in_child(alone_after_watcher_is_gone);
  BOOST_TEST_INFO("child status " << status);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
}
