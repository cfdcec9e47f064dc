// How long NCCL-style collectives and sends take over a cluster's links, as the layout planner
// times a step: a fixed cost, one per ring step (over the network for the steps between nodes),
// and each rank's share of the bytes over the slowest link it uses.
#pragma once

#include <cstdint>

#include "layout/layout.h"

namespace rematlab::layout {

// A group of ranks `span` apart at most (tensor ranks innermost): NVLink (or PCIe) inside a node,
// each GPU's share of the network beyond it.
double link_bandwidth(const Cluster& cluster, int64_t span);
// One ring collective over `ranks` ranks `span` apart at most, in `phases` passes round the ring
// (an all-reduce 2, an all-gather or a reduce-scatter 1) of a `bytes` tensor.
double ring_seconds(const Cluster& cluster, int64_t ranks, int64_t span, int phases, double bytes);
double all_reduce_seconds(const Cluster& cluster, int64_t ranks, int64_t span, double bytes);
// An all-gather's, and a reduce-scatter's.
double all_gather_seconds(const Cluster& cluster, int64_t ranks, int64_t span, double bytes);
// A send of `bytes` between two ranks `span` apart at most: one step of a ring.
double send_seconds(const Cluster& cluster, int64_t span, double bytes);
// An all-to-all over `ranks` ranks spread evenly over `span` GPUs, each rank sending `bytes` in
// all (an equal part to every rank, its own kept): the parts to its node's ranks go over NVLink
// (or PCIe) while those to other nodes go over the network, the slower of the two bounding it.
// Groups lie back to back: one that straddles nodes is timed at its rank with the fewest peers
// in its own node.
double all_to_all_seconds(const Cluster& cluster, int64_t ranks, int64_t span, double bytes);

}  // namespace rematlab::layout
