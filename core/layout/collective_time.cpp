#include "layout/collective_time.h"

#include <algorithm>

namespace rematlab::layout {

// A group of ranks `span` apart at most (tensor ranks innermost) talks over NVLink (or PCIe)
// inside a node, over each GPU's share of the network beyond it.
double link_bandwidth(const Cluster& cluster, int64_t span) {
  return span <= cluster.node_gpus() ? cluster.gpu.intra_node_bandwidth
                                     : cluster.gpu.inter_node_bandwidth;
}

// One ring collective over `ranks` ranks `span` apart at most, in `phases` passes round the ring
// (an all-reduce 2, an all-gather or a reduce-scatter 1) of a `bytes` tensor: NCCL's latency
// model (a fixed cost, then one per ring step, over the network for the steps between nodes)
// plus each rank's share of the bytes over the slowest link it uses.
double ring_seconds(const Cluster& cluster, int64_t ranks, int64_t span, int phases, double bytes) {
  if (ranks <= 1) return 0.0;
  const GpuKind& gpu = cluster.gpu;
  const int64_t node = cluster.node_gpus();
  const int64_t nodes = std::min(ranks, std::max<int64_t>(1, (span + node - 1) / node));
  const double inter_steps = static_cast<double>(phases * (nodes - 1));
  const double intra_steps = static_cast<double>(phases * (ranks - 1)) - inter_steps;
  const double share = static_cast<double>(phases * (ranks - 1)) / static_cast<double>(ranks);
  return gpu.collective_latency + intra_steps * gpu.intra_node_step_latency +
         inter_steps * gpu.inter_node_step_latency + share * bytes / link_bandwidth(cluster, span);
}
double all_reduce_seconds(const Cluster& cluster, int64_t ranks, int64_t span, double bytes) {
  return ring_seconds(cluster, ranks, span, 2, bytes);
}
// An all-gather's, and a reduce-scatter's.
double all_gather_seconds(const Cluster& cluster, int64_t ranks, int64_t span, double bytes) {
  return ring_seconds(cluster, ranks, span, 1, bytes);
}
// A send of `bytes` between two ranks `span` apart at most: one step of a ring.
double send_seconds(const Cluster& cluster, int64_t span, double bytes) {
  const GpuKind& gpu = cluster.gpu;
  const double step =
      span <= cluster.node_gpus() ? gpu.intra_node_step_latency : gpu.inter_node_step_latency;
  return gpu.collective_latency + step + bytes / link_bandwidth(cluster, span);
}

double all_to_all_seconds(const Cluster& cluster, int64_t ranks, int64_t span, double bytes) {
  if (ranks <= 1) return 0.0;
  const GpuKind& gpu = cluster.gpu;
  const int64_t node = cluster.node_gpus();
  // The groups lie back to back, `stride` GPUs between a group's ranks, so a group may start
  // anywhere in a node that a multiple of `span` reaches. In each placement only its first and
  // last nodes can hold fewer of its ranks than a whole node does; the rank in the emptiest node
  // of the worst placement has the most peers beyond it, and bounds the exchange.
  const int64_t stride = std::max<int64_t>(1, span / ranks);
  int64_t fewest = ranks;
  int64_t start = 0;
  do {
    const int64_t last = start + stride * (ranks - 1);
    if (last / node != start / node) {
      const int64_t in_first = (node - start % node + stride - 1) / stride;
      const int64_t in_last = (last % node) / stride + 1;
      fewest = std::min({fewest, in_first, in_last});
    }
    start = (start + span) % node;
  } while (start != 0);
  const double part = bytes / static_cast<double>(ranks);
  const double local_peers = static_cast<double>(fewest - 1);
  const double remote_peers = static_cast<double>(ranks - fewest);
  // One message to each peer, the network's latency for those beyond the node.
  const double latency = gpu.collective_latency + local_peers * gpu.intra_node_step_latency +
                         remote_peers * gpu.inter_node_step_latency;
  return latency + std::max(local_peers * part / gpu.intra_node_bandwidth,
                            remote_peers * part / gpu.inter_node_bandwidth);
}

}  // namespace rematlab::layout
