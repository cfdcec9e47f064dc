// The advisor: turns one run's own records (its configuration, result, steps and timeline, and
// the `none` run of the same configuration when the database has one) into findings.
#pragma once

#include <atomic>
#include <cstdint>

#include "advise/finding.h"
#include "store/run_store.h"

namespace rematlab::advise {

struct AdviseOptions {
  // Replays train the run's configuration again (same seed and data) on this machine: the
  // divergence walk, the exactness check at the diverged step and the missing-gradient step.
  bool replay = true;
  const std::atomic<bool>* cancel = nullptr;  // read between replayed steps
};

// The findings for run `run_id`. Throws InvalidInput("ID", …) when there is no such run;
// anything it could not check (no replay, another device, a data-parallel run) is a note.
Diagnosis diagnose_run(RunStore& store, int64_t run_id, const AdviseOptions& options = {});

}  // namespace rematlab::advise
