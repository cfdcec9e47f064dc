#include "offload/offload_store.h"

namespace rematlab {
namespace {
thread_local OffloadStore* t_active_store = nullptr;
}

OffloadStore* OffloadStore::active() { return t_active_store; }

ScopedOffload::ScopedOffload(OffloadStore* store) : previous_(t_active_store) {
  t_active_store = store;
}

ScopedOffload::~ScopedOffload() { t_active_store = previous_; }

}  // namespace rematlab
