// wait_style.cpp — the node's wait style from its ranks, its CPUs and RINGTRAIN_SHM_WAIT.
#include "ringtrain/comm/shm/wait_style.hpp"

#include <cstdlib>

#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::shm {

std::string to_string(WaitStyle style) {
  return style == WaitStyle::yield ? "yield" : style == WaitStyle::sleep ? "sleep" : "spin";
}

WaitStyle wait_style_for(int ranks, int cpus, const char* setting) {
  const std::string text = setting ? setting : "";
  if (text == "spin") return WaitStyle::spin;
  if (text == "yield") return WaitStyle::yield;
  if (text == "sleep") return WaitStyle::sleep;
  RT_REQUIRE_INPUT(text.empty() || text == "auto", "RINGTRAIN_SHM_WAIT=", text,
                   ": expected spin, yield, sleep or auto");
  return ranks > cpus ? WaitStyle::yield : WaitStyle::spin;
}

WaitStyle wait_style_for(const CpuFacts& node, const char* setting) {
  return wait_style_for(node.local_ranks, usable_node_cpus(node), setting);
}

WaitStyle choose_wait_style(MPI_Comm node_comm, std::string& why) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(node_comm, &rank));
  const CpuFacts facts = gather_cpu_facts(node_comm);
  // Rank 0's setting for all, so that a bad one fails on every rank alike.
  const char* own = std::getenv("RINGTRAIN_SHM_WAIT");
  std::string setting = rank == 0 && own ? own : "";
  broadcast_bytes(node_comm, setting, 0);
  const WaitStyle style = wait_style_for(facts, setting.c_str());
  why =
      str(facts.local_ranks, " ranks on ", usable_node_cpus(facts), " CPU(s) of this node: waits ",
          style == WaitStyle::yield ? "yield the CPU" : "spin", " before they sleep",
          setting.empty() ? std::string() : str(" (RINGTRAIN_SHM_WAIT=", setting, ")"));
  return style;
}

}  // namespace ringtrain::comm::shm
