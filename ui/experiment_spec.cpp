// The experiment form as a sweep spec and back: what the form sends to the worker, what the
// default study and the remembered form load into it.
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QScopedValueRollback>
#include <QSpinBox>
#include <algorithm>

#include "common/byte_size.h"
#include "common/errors.h"
#include "experiment_panel.h"
#include "launch/rank_launch.h"
#include "run/run_config.h"
#include "sweep/sweep_spec.h"

namespace rematlab::ui {

QStringList ExperimentPanel::split_list(const QLineEdit* field, QChar separator) {
  QStringList items;
  for (const QString& item : field->text().split(separator)) {
    if (!item.trimmed().isEmpty()) items << item.trimmed();
  }
  return items;
}

namespace {

QString text_of(const nlohmann::ordered_json& value) {
  return QString::fromStdString(value.is_string() ? value.get<std::string>() : value.dump());
}

// An integer of a saved spec into its box, held to the box's range as 64-bit (read as an int, a
// hand-edited 4294967298 would wrap to 2); anything else leaves the box as it was.
void set_integer(QSpinBox* box, const nlohmann::ordered_json& value) {
  if (value.is_number_unsigned()) {
    box->setValue(value.get<uint64_t>() > static_cast<uint64_t>(box->maximum())
                      ? box->maximum()
                      : static_cast<int>(value.get<uint64_t>()));
  } else if (value.is_number_integer()) {
    box->setValue(static_cast<int>(
        std::clamp<int64_t>(value.get<int64_t>(), box->minimum(), box->maximum())));
  }
}

}  // namespace

nlohmann::ordered_json ExperimentPanel::build_spec() const {
  nlohmann::ordered_json base = {
      {"preset", preset_->currentText().toStdString()},
      {"arch", arch_->currentText().toStdString()},
      {"layers", layers_->value()},
      {"d_model", d_model_->value()},
      {"heads", heads_->value()},
      {"kv_heads", kv_heads_->value()},
      {"mlp_hidden", mlp_hidden_->value()},
      {"tie_head", tie_head_->isChecked()},
      {"loss_chunks", loss_chunks_->text().trimmed().toStdString()},
      {"seq_len", seq_len_->value()},
      {"vocab", vocab_->value()},
      {"attention", attention_->currentText().toStdString()},
      {"dropout", dropout_->value()},
      {"accum", accum_->value()},
      {"steps", steps_->value()},
      {"lr", lr_->value()},
      {"seed", seed_->value()},
      {"threads", threads_->value()},
      {"device", device_->currentText().toStdString()},
      {"timeline", true},  // the live view shows the last step's memory by phase
  };
  add_attention_to(base);
  add_finetune_to(base);
  const QString source = data_->currentData().toString();
  base["data"] = source == "text" ? "text:" + data_file_->text().trimmed().toStdString()
                                  : source.toStdString();
  if (!budget_->text().trimmed().isEmpty())
    base["budget"] = budget_->text().trimmed().toStdString();

  nlohmann::ordered_json axes = nlohmann::ordered_json::object();
  // One value goes to the base, several make an axis.
  auto add = [&](const char* key, const nlohmann::ordered_json& values, const char* field) {
    if (values.empty()) throw InvalidInput(field, "give at least one value");
    if (values.size() == 1) {
      base[key] = values[0];
    } else {
      axes[key] = values;
    }
  };
  nlohmann::ordered_json policies = nlohmann::ordered_json::array();
  for (const QString& p : split_list(policies_, ';')) policies.push_back(p.toStdString());
  add("checkpoint", policies, "spec: axes.checkpoint");
  nlohmann::ordered_json offloads = nlohmann::ordered_json::array();
  for (const QString& o : split_list(offload_, ',')) offloads.push_back(o.toStdString());
  add("offload", offloads, "spec: axes.offload");
  nlohmann::ordered_json precisions = nlohmann::ordered_json::array();
  for (const QString& p : split_list(precision_, ',')) precisions.push_back(p.toStdString());
  add("precision", precisions, "spec: axes.precision");
  nlohmann::ordered_json batches = nlohmann::ordered_json::array();
  for (const QString& b : split_list(batch_, ',')) {
    bool ok = false;
    const qlonglong value = b.toLongLong(&ok);
    if (!ok)
      throw InvalidInput("spec: axes.batch", "'" + b.toStdString() + "' is not a whole number");
    batches.push_back(value);
  }
  if (!max_batch_->isChecked()) add("batch", batches, "spec: axes.batch");

  nlohmann::ordered_json spec = {{"name", name_->text().trimmed().toStdString()}, {"base", base}};
  if (!axes.empty()) spec["axes"] = axes;
  if (max_batch_->isChecked()) {
    if (budget_->text().trimmed().isEmpty()) {
      throw InvalidInput("spec: max_batch.budget", "the max-batch search needs a budget");
    }
    spec["max_batch"] = {{"budget", budget_->text().trimmed().toStdString()},
                         {"limit", max_batch_limit_->value()}};
  }
  return spec;
}

nlohmann::ordered_json ExperimentPanel::form_values() const {
  try {
    nlohmann::ordered_json values = build_spec();
    values["data_parallel"] = {{"ranks", ranks()},
                               {"shard", shard().toStdString()},
                               {"tp", tensor_ranks()},
                               {"sequence_parallel", sequence_parallel()},
                               {"pp", pipeline_stages()},
                               {"virtual_stages", virtual_stages()},
                               {"pp_split", pipeline_split().toStdString()},
                               {"bucket_size", bucket_size().toStdString()}};
    return values;
  } catch (const InvalidInput&) {
    return {};
  }
}

void ExperimentPanel::check_data_parallel(const std::vector<SweepPoint>& points) const {
  if (points.empty()) return;
  RunConfig config = points.front().config;
  if (!data_parallel()) {
    // Buckets are checked with one process too, as run checks --bucket-size (and ignores it);
    // the other rank fields, left as they are, do not apply.
    if (bucket_size().isEmpty()) return;
    config.bucket_bytes = parse_byte_size(bucket_size().toStdString(), "--bucket-size");
    validate(config);
    return;
  }
  // The layout first: a field left set where it does not apply (a split with one stage, a shard
  // with one rank) is named at its own field, not as too many runs for ranks there are none of.
  launch::check_local_ranks(config.device, ranks(), "ranks", "device");
  apply_rank_layout(rank_layout(), config);
  validate(config);  // a shard the run refuses names --shard, which the form calls Shard
  if (points.size() != 1 || points.front().request.max_batch) {
    throw InvalidInput(
        "ranks", std::string("ranks train one run together: ") +
                     (points.size() == 1 ? "turn off the max-batch search"
                                         : "leave one value in Policies, Offload, Micro-batch "
                                           "and Precision (the form names " +
                                               std::to_string(points.size()) + " runs)"));
  }
}

std::optional<nlohmann::ordered_json> ExperimentPanel::spec() const {
  try {
    nlohmann::ordered_json json = build_spec();
    parse_sweep_spec(json);
    return json;
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
}

std::optional<RunConfig> ExperimentPanel::first_config() const {
  try {
    return expand_sweep(parse_sweep_spec(build_spec())).front().config;
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
}

std::optional<RunConfig> ExperimentPanel::check_config() const {
  try {
    for (const SweepPoint& point : expand_sweep(parse_sweep_spec(build_spec()))) {
      if (point.config.checkpoint != "none") return point.config;
    }
  } catch (const InvalidInput&) {
  }
  return std::nullopt;
}

void ExperimentPanel::load_spec(const nlohmann::ordered_json& spec) {
  if (!spec.is_object()) return;
  // The spec's preset and model values are what it asks for: no question about replacing them.
  const QScopedValueRollback<bool> loading(loading_, true);
  const auto base = spec.value("base", nlohmann::ordered_json::object());
  load_base_fields(base);
  load_sweep_fields(spec, base);
  if (spec.contains("name") && spec["name"].is_string()) name_->setText(text_of(spec["name"]));
  load_parallel_fields(spec);
  revalidate();
}

void ExperimentPanel::load_base_fields(const nlohmann::ordered_json& base) {
  // A field of the wrong type (a hand-edited or older spec) is skipped, never half-applied: the
  // form keeps that field as it was and takes every other.
  model_source_->clear();  // the spec's model is its own, not an opened configuration's
  model_source_->hide();
  if (base.contains("preset") && base["preset"].is_string()) {
    preset_->setCurrentText(text_of(base["preset"]));
  }
  const std::pair<const char*, QSpinBox*> numbers[] = {
      {"layers", layers_},     {"d_model", d_model_},       {"heads", heads_},
      {"kv_heads", kv_heads_}, {"mlp_hidden", mlp_hidden_}, {"seq_len", seq_len_},
      {"vocab", vocab_},       {"accum", accum_},           {"steps", steps_},
      {"seed", seed_},         {"threads", threads_}};
  for (const auto& [key, box] : numbers) {
    if (base.contains(key)) set_integer(box, base[key]);
  }
  if (base.contains("dropout") && base["dropout"].is_number()) {
    dropout_->setValue(base["dropout"].get<double>());
  }
  if (base.contains("arch") && base["arch"].is_string()) {
    arch_->setCurrentText(QString::fromStdString(base["arch"].get<std::string>()));
  }
  if (base.contains("tie_head") && base["tie_head"].is_boolean()) {
    tie_head_->setChecked(base["tie_head"].get<bool>());
  }
  if (base.contains("loss_chunks")) {
    const auto& chunks = base["loss_chunks"];
    loss_chunks_->setText(
        QString::fromStdString(chunks.is_string() ? chunks.get<std::string>() : chunks.dump()));
  }
  if (base.contains("lr") && base["lr"].is_number()) lr_->setValue(base["lr"].get<double>());
  if (base.contains("attention") && base["attention"].is_string())
    attention_->setCurrentText(text_of(base["attention"]));
  if (base.contains("device") && base["device"].is_string()) {
    // A CUDA device this machine lacks leaves the choice as it is.
    const int device = device_->findText(text_of(base["device"]));
    if (device >= 0) device_->setCurrentIndex(device);
  }
  load_attention_fields(base);
  load_finetune_fields(base);
  if (base.contains("data") && base["data"].is_string()) {
    const QString chosen = text_of(base["data"]);
    const bool file = chosen.startsWith("text:");
    const int source = data_->findData(file ? "text" : chosen);
    if (source >= 0) data_->setCurrentIndex(source);
    if (file) data_file_->setText(chosen.mid(5));
  }
}

void ExperimentPanel::load_sweep_fields(const nlohmann::ordered_json& spec,
                                        const nlohmann::ordered_json& base) {
  const auto axes = spec.value("axes", nlohmann::ordered_json::object());
  // Each axis field shows the axis, or the base's single value, or its default.
  auto list = [&](const char* key, const char* separator, const std::string& fallback) {
    const auto& values = axes.contains(key)   ? axes[key]
                         : base.contains(key) ? nlohmann::ordered_json::array({base[key]})
                                              : nlohmann::ordered_json::array({fallback});
    QStringList items;
    for (const auto& value : values) items << text_of(value);
    return items.join(separator);
  };
  policies_->setText(list("checkpoint", "; ", "none"));
  offload_->setText(list("offload", ", ", "none"));
  precision_->setText(list("precision", ", ", "fp32"));
  batch_->setText(list("batch", ", ", "8"));
  const bool search = spec.contains("max_batch") && spec["max_batch"].is_object();
  max_batch_->setChecked(search);
  if (search) {
    const auto& max_batch = spec["max_batch"];
    budget_->setText(max_batch.contains("budget") ? text_of(max_batch["budget"]) : QString());
    if (max_batch.contains("limit")) set_integer(max_batch_limit_, max_batch["limit"]);
  } else {
    const auto budget = base.value("budget", nlohmann::ordered_json());
    budget_->setText(budget.is_string()   ? QString::fromStdString(budget.get<std::string>())
                     : budget.is_number() ? QString::fromStdString(budget.dump())
                                          : QString());
  }
}

void ExperimentPanel::load_parallel_fields(const nlohmann::ordered_json& spec) {
  // A sweep spec trains each point in one process; only the form's own values have ranks.
  const auto parallel = spec.value("data_parallel", nlohmann::ordered_json::object());
  const bool has_ranks =
      parallel.is_object() && parallel.contains("ranks") && parallel["ranks"].is_number_integer();
  ranks_->setValue(1);
  if (has_ranks) set_integer(ranks_, parallel["ranks"]);
  const bool has_shard =
      parallel.is_object() && parallel.contains("shard") && parallel["shard"].is_string();
  const int shard = shard_->findText(has_shard ? text_of(parallel["shard"]) : "none");
  shard_->setCurrentIndex(std::max(0, shard));
  const bool has_tp =
      parallel.is_object() && parallel.contains("tp") && parallel["tp"].is_number_integer();
  tensor_ranks_->setValue(1);
  if (has_tp) set_integer(tensor_ranks_, parallel["tp"]);
  sequence_parallel_->setChecked(parallel.is_object() && parallel.contains("sequence_parallel") &&
                                 parallel["sequence_parallel"].is_boolean() &&
                                 parallel["sequence_parallel"].get<bool>());
  pipeline_stages_->setValue(1);
  if (parallel.is_object() && parallel.contains("pp") && parallel["pp"].is_number_integer()) {
    set_integer(pipeline_stages_, parallel["pp"]);
  }
  virtual_stages_->setValue(1);
  if (parallel.is_object() && parallel.contains("virtual_stages") &&
      parallel["virtual_stages"].is_number_integer()) {
    set_integer(virtual_stages_, parallel["virtual_stages"]);
  }
  const bool has_split =
      parallel.is_object() && parallel.contains("pp_split") && parallel["pp_split"].is_string();
  pipeline_split_->setText(has_split ? text_of(parallel["pp_split"]) : QString());
  const bool has_buckets = parallel.is_object() && parallel.contains("bucket_size") &&
                           parallel["bucket_size"].is_string();
  bucket_size_->setText(has_buckets ? text_of(parallel["bucket_size"]) : QString());
}

void ExperimentPanel::add_policy(const QString& policy) {
  QStringList policies = split_list(policies_, ';');
  if (!policies.contains(policy)) policies << policy;
  policies_->setText(policies.join("; "));
}

void ExperimentPanel::load_configuration(const RunConfig& config, const QString& policy) {
  nlohmann::ordered_json base = to_json(config);
  // The training settings the form has stay the user's (a profile's are only defaults); the
  // budget goes because a spec without one has none.
  for (const char* training : {"steps", "lr", "seed", "data"}) base.erase(training);
  base["checkpoint"] = policy.toStdString();
  const std::string name = name_->text().toStdString();
  load_spec({{"name", name}, {"base", base}});
}

}  // namespace rematlab::ui
