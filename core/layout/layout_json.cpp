#include "layout/layout_json.h"

#include "common/json_numbers.h"
#include "estimate/estimate.h"
#include "layout/layout_export.h"

namespace rematlab::layout {
namespace {

nlohmann::json time_json(const TimeParts& time) {
  return {{"compute", json_number(time.compute)},
          {"recompute", json_number(time.recompute)},
          {"elementwise", json_number(time.elementwise)},
          {"tensor", json_number(time.tensor)},
          {"experts", json_number(time.experts)},
          {"context", json_number(time.context)},
          {"pipeline", json_number(time.pipeline)},
          {"bubble", json_number(time.bubble)},
          {"data", json_number(time.data)},
          {"offload", json_number(time.offload)},
          {"optimizer", json_number(time.optimizer)}};
}

nlohmann::json list_json(const std::vector<LayoutEvaluation>& evaluations) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& evaluation : evaluations) list.push_back(to_json(evaluation));
  return list;
}

}  // namespace

nlohmann::json to_json(const MemoryParts& memory) {
  return {{"weights", memory.weights},         {"gradients", memory.gradients},
          {"master", memory.master},           {"optimizer", memory.optimizer},
          {"activations", memory.activations}, {"buffers", memory.buffers},
          {"allowance", memory.allowance},     {"total", memory.total()}};
}

nlohmann::json to_json(const LayoutEvaluation& evaluation) {
  const Layout& layout = evaluation.layout;
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& stage : evaluation.stages) {
    stages.push_back({{"checkpoint", stage.checkpoint},
                      {"layers", stage.layers},
                      {"in_flight", stage.in_flight},
                      {"memory_bytes", to_json(stage.memory)},
                      {"microbatch_s", json_number(stage.microbatch_s)},
                      {"idle_s", json_number(stage.idle_s)}});
  }
  nlohmann::json json = {{"tp", layout.tp},
                         {"pp", layout.pp},
                         {"vp", layout.vp},
                         {"split", layout.split},
                         {"cp", layout.cp},
                         {"dp", layout.dp},
                         {"ep", layout.ep},
                         {"sp", layout.sp},
                         {"zero", layout.zero},
                         {"micro_batch", layout.micro_batch},
                         {"accum", layout.accum},
                         {"checkpoint", layout.checkpoint_text()},
                         {"offload", to_string(layout.offload)},
                         {"memory_bytes", to_json(evaluation.memory)},
                         {"host_bytes", evaluation.host_bytes},
                         {"step_s", json_number(evaluation.step_s)},
                         {"time_s", time_json(evaluation.time)},
                         {"tokens_per_s", json_number(evaluation.tokens_per_s)},
                         {"mfu", json_number(evaluation.mfu)},
                         {"fits", evaluation.fits},
                         {"stages", stages},
                         {"engine_lacks", evaluation.engine_lacks}};
  if (!evaluation.fits) json["reason"] = evaluation.reason;
  return json;
}

nlohmann::json to_json(const LayoutRequest& request, const LayoutAnswer& answer) {
  const Cluster& cluster = request.cluster;
  nlohmann::json json;
  json["model"] = request.arch.name;
  json["gpu"] = cluster.gpu.name;
  json["gpu_description"] = cluster.gpu.description;
  json["gpu_memory_bytes"] = cluster.gpu.memory_bytes;
  json["peak_flops"] = json_number(cluster.gpu.peak_flops(request.precision));
  json["memory_bandwidth"] = json_number(cluster.gpu.memory_bandwidth);
  json["overlaps_communication"] = cluster.gpu.overlaps_communication;
  json["gpus"] = cluster.gpus;
  json["gpus_per_node"] = cluster.node_gpus();
  json["host_memory_bytes"] = cluster.host_memory_bytes;
  json["seq_len"] = request.arch.seq_len;
  json["global_batch"] = request.global_batch;
  json["precision"] = to_string(request.precision);
  estimate::put_fine_tuning(json, request.arch.lora);
  if (request.arch.moe.enabled()) {
    json["experts"] = request.arch.moe.experts;
    json["experts_per_token"] = request.arch.moe.experts_per_token;
    json["expert_rank_load"] = json_number(request.arch.expert_rank_load);
    json["expert_block_load"] = json_number(request.arch.busiest_block_load());
    json["expert_load"] = json_number(request.arch.expert_load);
  }
  json["matmul_efficiency"] = json_number(request.efficiency());
  json["fragmentation"] = json_number(request.fragmentation);
  json["bucket_values"] = request.bucket_values;
  json["evaluated"] = answer.points.size();
  int64_t fitting = 0;
  for (const auto& point : answer.points) fitting += point.fits ? 1 : 0;
  json["fitting"] = fitting;
  json["impossible"] = answer.impossible;
  json["search_s"] = json_number(answer.search_s);
  json["layouts"] = list_json(answer.best.empty() ? answer.nearest : answer.best);
  json["frontier"] = list_json(answer.frontier);
  json["nearest"] = list_json(answer.nearest);
  json["nearest_without_offload"] = list_json(answer.nearest_without_offload);
  json["with_more_host"] = list_json(answer.with_more_host);
  if (!answer.best.empty()) json["exports"] = export_json(request, answer.best.front());
  return json;
}

}  // namespace rematlab::layout
