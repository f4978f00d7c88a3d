// stop_signals.cpp — the sigwait() thread behind StopSignals.
#include "ringtrain/core/stop_signals.hpp"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "ringtrain/core/error.hpp"

namespace ringtrain {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_watcher_leaving{false};

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGINT);
  return set;
}

// A second stop signal: the user means it. The default action of a signal that this
// thread alone unblocks ends the process as if no one had caught it.
[[noreturn]] void die_by(int signal) {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, nullptr);
  sigset_t just_this;
  sigemptyset(&just_this);
  sigaddset(&just_this, signal);
  pthread_sigmask(SIG_UNBLOCK, &just_this, nullptr);
  raise(signal);
  std::_Exit(128 + signal);
}

extern "C" void* watch_stop_signals(void*) {
  const sigset_t set = stop_set();
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0) continue;
    if (g_watcher_leaving.load()) return nullptr;
    int none = 0;
    if (!g_stop_signal.compare_exchange_strong(none, signal)) die_by(signal);
  }
}

}  // namespace

StopSignals::StopSignals() {
  const sigset_t set = stop_set();
  int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr);
  RT_CHECK(rc == 0, "pthread_sigmask: ", std::strerror(rc));
  rc = pthread_create(&watcher_, nullptr, watch_stop_signals, nullptr);
  RT_CHECK(rc == 0, "cannot start the signal watcher thread: ", std::strerror(rc));
  pthread_setname_np(watcher_, "rt-signals");
}

StopSignals::~StopSignals() {
  g_watcher_leaving.store(true);
  pthread_kill(watcher_, SIGUSR1);  // wakes sigwait(); the flag makes it return
  pthread_join(watcher_, nullptr);
  g_watcher_leaving.store(false);
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

int StopSignals::stop_signal() {
  return g_stop_signal.load();
}

}  // namespace ringtrain
