// A chosen layout in the terms of the tools people train with: Megatron-LM's pretrain_gpt.py
// arguments, a torchtitan TOML, a DeepSpeed JSON, and RematLab's own `run` where its engine can
// run the layout. Each comes with the settings that tool has no word for.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layout/layout.h"

namespace rematlab::layout {

struct LayoutExport {
  std::string text;                 // the command line or the file's contents
  std::vector<std::string> unsaid;  // settings of the layout the tool cannot express
};

LayoutExport megatron_arguments(const LayoutRequest& request, const LayoutEvaluation& layout);
LayoutExport torchtitan_toml(const LayoutRequest& request, const LayoutEvaluation& layout);
LayoutExport deepspeed_json(const LayoutRequest& request, const LayoutEvaluation& layout);
// Empty text (and the reasons in `unsaid`) where the engine cannot run the layout.
LayoutExport rematlab_run(const LayoutRequest& request, const LayoutEvaluation& layout);
// The --checkpoint RematLab's run is given for `layout`: its stages' one policy, or
// stages:P0/P1/… where they differ and each is none or every:K; else the most recomputing one
// for all, said in `unsaid`.
std::string rematlab_policy(const Layout& layout, std::vector<std::string>& unsaid);

// All four as {"megatron": {"text", "unsaid"}, "torchtitan": …, "deepspeed": …, "rematlab": …}.
nlohmann::json export_json(const LayoutRequest& request, const LayoutEvaluation& layout);

}  // namespace rematlab::layout
