// wait_style.hpp — how a wait in a node's shared memory passes the time before it sleeps: spin, or
// yield the CPU where the node's ranks outnumber its CPUs.
#pragma once

#include <cstdint>
#include <string>

#include "ringtrain/comm/cpu_share.hpp"
#include "ringtrain/comm/mpi_check.hpp"  // MPI_Comm

namespace ringtrain::comm::shm {

// spin:  loads of the word, then yields (futex.hpp). Each rank has a CPU of its own, so the
//        peer it waits for runs elsewhere, and a sleep would cost a wake-up.
// yield: sched_yield() between loads. The node's ranks outnumber its CPUs, so the peer it waits
//        for may be queued behind the waiter on this very CPU: a spin keeps it off for the whole
//        spin, and a sleep makes each of the reduction's waits a futex wake-up (of a halted
//        vCPU, on a VM). 4 ranks on 2 vCPUs, 64 KiB: 85-120 us a call spinning then sleeping,
//        32-65 us yielding (docs/TUNING.md, "Waits when ranks outnumber CPUs").
// sleep: loads of the word, then the futex at once: the node gate's (local_gate.hpp), whose
//        waiter is a rank ahead of the others by up to a whole backward; yields there would
//        be polling. The rule below never picks it; RINGTRAIN_SHM_WAIT=sleep gives the shared
//        buckets the waits they had before the yields (for comparisons).
enum class WaitStyle : uint8_t { spin, yield, sleep };

std::string to_string(WaitStyle style);

// The rule, for `ranks` on a node whose ranks may run on `cpus` CPUs: yield when ranks > cpus.
// `setting` (RINGTRAIN_SHM_WAIT: "spin", "yield", "sleep", "auto" or null) overrides it;
// anything else is an input error.
WaitStyle wait_style_for(int ranks, int cpus, const char* setting);
// The rule for a node's facts: its ranks on its usable_node_cpus (cpu_share.hpp), the count the
// thread share divides.
WaitStyle wait_style_for(const CpuFacts& node, const char* setting);

// Collective over node_comm (the ranks of one node): the rule above for the node's facts
// (gather_cpu_facts) and rank 0's RINGTRAIN_SHM_WAIT, so every rank gets the same answer.
// `why`: one line saying what was decided from what.
WaitStyle choose_wait_style(MPI_Comm node_comm, std::string& why);

}  // namespace ringtrain::comm::shm
