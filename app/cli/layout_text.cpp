#include "cli/layout_text.h"

#include <sstream>

#include "cli/cli_output.h"
#include "common/byte_size.h"
#include "layout/layout_export.h"

namespace rematlab::cli {
namespace {

std::string gib(int64_t bytes) {
  return format_number(static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0), 1);
}

std::vector<std::string> row(const layout::LayoutEvaluation& evaluation) {
  const layout::MemoryParts& m = evaluation.memory;
  return {layout::layout_name(evaluation.layout),
          evaluation.layout.checkpoint_text(),
          gib(m.weights + m.gradients + m.master + m.optimizer),
          gib(m.activations),
          gib(m.buffers),
          gib(m.allowance),
          gib(m.total()),
          evaluation.host_bytes > 0 ? gib(evaluation.host_bytes) : "-",
          format_number(evaluation.step_s, 2),
          format_number(evaluation.tokens_per_s, 0),
          format_number(100.0 * evaluation.mfu, 1)};
}

std::string table(const std::vector<layout::LayoutEvaluation>& evaluations) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& evaluation : evaluations) rows.push_back(row(evaluation));
  return format_table({"layout", "checkpoint", "states GiB", "activations GiB", "buffers GiB",
                       "allowance GiB", "total GiB", "host GiB", "step s", "tokens/s", "MFU %"},
                      rows);
}

// A mixture's experts and the loads they are planned at.
std::string experts_line(const estimate::Architecture& arch) {
  std::ostringstream out;
  out << "Mixture of experts: " << arch.moe.experts << " experts of " << arch.expert_hidden
      << " a block, " << arch.moe.experts_per_token << " per token; the fullest expert rank takes "
      << format_number(arch.expert_rank_load, 2) << " × its tokens' rows"
      << (arch.expert_rank_load == 1.0 ? " (balanced)" : "");
  if (arch.busiest_block_load() != arch.expert_rank_load) {
    out << ", its busiest block " << format_number(arch.busiest_block_load(), 2) << " ×";
  }
  if (arch.expert_load != 1.0) {
    out << "; the busiest expert " << format_number(arch.expert_load, 2) << " × its share";
  }
  out << "\n";
  return out.str();
}

}  // namespace

std::string layout_to_text(const layout::LayoutRequest& request,
                           const layout::LayoutAnswer& answer) {
  std::ostringstream out;
  const layout::Cluster& cluster = request.cluster;
  int64_t fitting = 0;
  for (const auto& point : answer.points) fitting += point.fits ? 1 : 0;
  out << request.arch.name << " at sequence " << request.arch.seq_len << ", global batch "
      << request.global_batch << " sequences, " << to_string(request.precision) << ", on "
      << cluster.gpus << " × " << cluster.gpu.name << " (" << format_bytes(cluster.gpu.memory_bytes)
      << ", " << cluster.node_gpus() << " per node)\n";
  const LoraOptions& lora = request.arch.lora;
  if (lora.enabled()) {
    out << "LoRA fine-tuning: rank " << lora.rank << " on " << lora_targets_text(lora.targets)
        << ", the base in " << to_string(lora.base) << "\n";
  }
  if (request.arch.moe.enabled()) out << experts_line(request.arch);
  if (cluster.gpu.name == "local") out << "local: " << cluster.gpu.description << "\n";
  out << answer.points.size() << " layouts evaluated, " << fitting << " fit, in "
      << format_number(answer.search_s, 2) << " s (matmul efficiency "
      << format_number(request.efficiency(), 2) << ", fragmentation allowance "
      << format_number(100.0 * request.fragmentation, 0) << " %, buckets of "
      << (request.bucket_values >= 1'000'000
              ? format_number(static_cast<double>(request.bucket_values) / 1e6, 1) + "M"
              : std::to_string(request.bucket_values))
      << " gradients"
      << (cluster.gpu.overlaps_communication ? "" : ", no collective hidden behind the compute")
      << ")\n\n";
  if (!answer.best.empty()) {
    out << "Fastest that fit:\n" << table(answer.best) << "\n";
    if (answer.frontier.size() > 1) {
      out << "Memory/time frontier (each faster than every smaller one):\n"
          << table(answer.frontier) << "\n";
    }
  } else {
    out << "Nothing fits.\n\n";
  }
  if (!answer.nearest.empty()) {
    out << "Nearest that do not fit:\n";
    for (const auto& evaluation : answer.nearest) out << "  " << evaluation.reason << "\n";
    out << "\n";
  }
  if (!answer.nearest_without_offload.empty() && answer.best.empty()) {
    out << "Nearest without offload:\n";
    for (const auto& evaluation : answer.nearest_without_offload) {
      out << "  " << evaluation.reason << "\n";
    }
    out << "\n";
  }
  if (!answer.with_more_host.empty()) {
    const layout::LayoutEvaluation& more = answer.with_more_host.front();
    out << "With " << format_bytes(more.host_bytes * cluster.node_gpus())
        << " of host memory per node, " << layout::layout_name(more.layout) << " ("
        << more.layout.checkpoint_text() << ") would fit: " << format_number(more.tokens_per_s, 0)
        << " tokens/s, step " << format_number(more.step_s, 2) << " s.\n\n";
  }
  if (!answer.best.empty()) {
    const layout::LayoutEvaluation& best = answer.best.front();
    if (!best.engine_lacks.empty()) {
      out << "Predicted only: RematLab's engine cannot run ";
      for (size_t i = 0; i < best.engine_lacks.size(); ++i) {
        out << (i ? ", " : "") << best.engine_lacks[i];
      }
      out << " yet.\n";
    }
    if (best.layout.ep > 1) {
      out << "Expert all-to-all: " << format_number(best.time.experts, 3) << " s of its "
          << format_number(best.step_s, 3) << " s step.\n";
    }
    const layout::LayoutExport megatron = layout::megatron_arguments(request, best);
    out << "Megatron-LM: " << megatron.text << "\n";
    for (const auto& unsaid : megatron.unsaid) out << "  (no equivalent: " << unsaid << ")\n";
    const layout::LayoutExport run = layout::rematlab_run(request, best);
    if (!run.text.empty()) out << "RematLab: " << run.text << "\n";
    out << "(--json adds torchtitan's TOML and DeepSpeed's JSON)\n";
  }
  return out.str();
}

}  // namespace rematlab::cli
