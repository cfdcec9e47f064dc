#include "store/run_store.h"

#include <cstdlib>
#include <sstream>

#include "common/errors.h"
#include "common/json_text.h"
#include "common/posix_files.h"
#include "common/process_identity.h"
#include "run/run_fields.h"
#include "store/schema.h"
#include "store/sqlite_db.h"
#include "store/step_fields.h"

namespace rematlab {
namespace {

constexpr const char* kRunColumns =
    "r.id, r.experiment_id, coalesce(e.name, ''), r.name, r.status, r.message, r.config, "
    "r.request, r.summary, r.started, coalesce(r.ended, ''), r.host, r.libtorch, "
    "(SELECT count(*) FROM steps s WHERE s.run_id = r.id), r.pid, r.pid_start, "
    "r.recorder_host, r.recorder_pid, r.recorder_start";

constexpr const char* kGoneMessage = "the process running it ended without finishing it";

// The processes a running run depends on: the one that trains it and, when another process
// records it (a sweep's coordinator), that one.
constexpr const char* kRunningRuns =
    "SELECT id, host, pid, pid_start, recorder_host, recorder_pid, recorder_start FROM runs "
    "WHERE status = 'running'";

struct RunProcesses {
  ProcessIdentity trainer;
  ProcessIdentity recorder;  // host empty: the trainer records it

  // The process whose life says whether the run may still be going: its recorder, which always
  // ends the runs it began (a dead trainer's run is failed by it moments later), where this host
  // can check it; else its trainer.
  const ProcessIdentity& judge() const {
    if (!recorder.host.empty() && recorder.host == current_process().host) return recorder;
    return trainer;
  }
  bool may_be_going() const { return process_may_be_alive(judge()); }
};

// A row of kRunningRuns.
RunProcesses running_run_processes(const Statement& row) {
  return {{row.column_text(1), row.column_int(2), row.column_int(3)},
          {row.column_text(4), row.column_int(5), row.column_int(6)}};
}

nlohmann::json parse_or_empty(const std::string& text) {
  nlohmann::json json = parse_json_or_null(text);
  return json.is_object() ? json : nlohmann::json::object();
}

RunRecord read_run(const Statement& row) {
  RunRecord run;
  run.id = row.column_int(0);
  if (!row.column_is_null(1)) run.experiment_id = row.column_int(1);
  run.experiment = row.column_text(2);
  run.name = row.column_text(3);
  run.status = parse_run_status(row.column_text(4)).value_or(RunStatus::kFailed);
  run.message = row.column_text(5);
  // Not parse_or_empty: a config that is no object (corrupt, or edited by hand) is reported as
  // unread, not read as an empty one whose defaults pass for what the run trained with.
  run.config =
      run_config_from_record(parse_json_or_null(row.column_text(6)), &run.unread_config_fields);
  run.request = run_request_from_json(parse_or_empty(row.column_text(7)));
  const nlohmann::json summary = parse_or_empty(row.column_text(8));
  run.has_result = !summary.empty();
  run.result = run_result_from_json(summary);
  // A pipeline recorded before its waits were split (schema 8) did not measure them: unknown,
  // not none. Without a pipeline they are none.
  if (run.config.pp > 1 && run.has_result && !summary.contains("bubble_ms")) {
    run.result.bubble_ms = run.result.transfer_ms = std::nan("");
    for (RankResult& rank : run.result.ranks) rank.bubble_ms = rank.transfer_ms = std::nan("");
  }
  run.started = row.column_text(9);
  run.ended = row.column_text(10);
  run.host = row.column_text(11);
  run.libtorch = row.column_text(12);
  run.steps_recorded = row.column_int(13);
  // A read-only store cannot mark a dead writer's run; it reports it as it would be marked.
  const RunProcesses processes{{run.host, row.column_int(14), row.column_int(15)},
                               {row.column_text(16), row.column_int(17), row.column_int(18)}};
  if (run.status == RunStatus::kRunning && !processes.may_be_going()) {
    run.status = RunStatus::kInterrupted;
    run.message = kGoneMessage;
  }
  return run;
}

// The peaks table's precision column: "fp32", "bf16", "fp16", or "fp32+tf32".
std::string precision_key(const PeakFlopsRecord& peak) {
  return to_string(peak.precision) +
         (peak.tf32 && peak.precision == Precision::kFp32 ? "+tf32" : "");
}

std::string id_list(const std::vector<int64_t>& ids) {
  std::ostringstream list;
  for (std::size_t i = 0; i < ids.size(); ++i) list << (i ? "," : "") << ids[i];
  return list.str();
}

}  // namespace

std::string RunRecord::label() const { return "#" + std::to_string(id) + " " + name; }

std::string default_database_path() {
  const char* chosen = std::getenv("REMATLAB_DB");
  if (chosen && *chosen) return chosen;
  const char* data_home = std::getenv("XDG_DATA_HOME");
  const char* home = std::getenv("HOME");
  const std::string base = data_home && *data_home ? data_home
                           : home && *home         ? files::join(home, ".local/share")
                                                   : ".";
  return files::join(files::join(base, "rematlab"), "rematlab.sqlite");
}

std::string sqlite_version() { return sqlite3_libversion(); }

namespace {

// The default database's folder is made when the database is first created, not when its path
// is only named (every command names it, `version` too). A path the user chose ($REMATLAB_DB)
// gets no folders made for it, as --db gets none.
const std::string& with_default_folder(const std::string& path, StoreAccess access, bool create) {
  const char* chosen = std::getenv("REMATLAB_DB");
  if (access == StoreAccess::kReadWrite && create && !(chosen && *chosen) && !files::exists(path) &&
      path == default_database_path()) {
    files::make_directories(files::parent_directory(path));
  }
  return path;
}

}  // namespace

RunStore::RunStore(const std::string& path, StoreAccess access, bool create)
    : path_(path),
      access_(access),
      db_(open_store_database(with_default_folder(path, access, create), access, create)) {
  if (access_ == StoreAccess::kReadWrite) recovered_runs_ = mark_interrupted_runs();
}

RunStore::~RunStore() = default;

void RunStore::require_writable(const std::string& what) const {
  if (access_ == StoreAccess::kReadOnly) {
    throw InvalidInput("--db", "'" + path_ + "' is open read-only: cannot " + what);
  }
}

int RunStore::mark_interrupted_runs() {
  std::vector<int64_t> gone;
  {
    Statement running(*db_, kRunningRuns);
    while (running.step()) {
      if (!running_run_processes(running).may_be_going()) gone.push_back(running.column_int(0));
    }
  }
  if (gone.empty()) return 0;
  Transaction transaction(*db_);
  Statement mark(*db_, std::string("UPDATE runs SET status = 'interrupted', message = '") +
                           kGoneMessage + "' WHERE id = ? AND status = 'running'");
  int marked = 0;
  for (int64_t id : gone) {
    mark.bind(1, id).run();
    marked += db_->changes();
  }
  transaction.commit();
  return marked;
}

std::vector<ExperimentRecord> RunStore::experiments() {
  std::vector<ExperimentRecord> result;
  Statement query(*db_,
                  "SELECT e.id, e.name, e.created, e.spec, "
                  "(SELECT count(*) FROM runs r WHERE r.experiment_id = e.id) "
                  "FROM experiments e ORDER BY e.id");
  while (query.step()) {
    ExperimentRecord experiment;
    experiment.id = query.column_int(0);
    experiment.name = query.column_text(1);
    experiment.created = query.column_text(2);
    experiment.spec = parse_or_empty(query.column_text(3));
    experiment.runs = query.column_int(4);
    result.push_back(std::move(experiment));
  }
  return result;
}

std::vector<RunRecord> RunStore::runs(const RunFilter& filter) {
  std::string sql = std::string("SELECT ") + kRunColumns +
                    " FROM runs r LEFT JOIN experiments e ON e.id = r.experiment_id WHERE 1";
  if (filter.experiment_id) sql += " AND r.experiment_id = ?1";
  if (!filter.ids.empty()) sql += " AND r.id IN (" + id_list(filter.ids) + ")";
  sql += " ORDER BY r.id";
  Statement query(*db_, sql);
  if (filter.experiment_id) query.bind(1, *filter.experiment_id);
  std::vector<RunRecord> result;
  while (query.step()) {
    RunRecord run = read_run(query);
    // Filtered here, not in SQL: a dead writer's `running` run reads as interrupted.
    if (!filter.status || run.status == *filter.status) result.push_back(std::move(run));
  }
  if (!filter.ids.empty()) {  // in the order asked for: compare's first run is its reference
    std::vector<RunRecord> ordered;
    for (int64_t id : filter.ids) {
      for (const RunRecord& run : result) {
        if (run.id == id) ordered.push_back(run);
      }
    }
    result = std::move(ordered);
  }
  return result;
}

RunRecord RunStore::run(int64_t id) {
  Statement query(*db_, std::string("SELECT ") + kRunColumns +
                            " FROM runs r LEFT JOIN experiments e ON e.id = r.experiment_id "
                            "WHERE r.id = ?");
  query.bind(1, id);
  if (!query.step()) {
    throw InvalidInput("ID", "no run " + std::to_string(id) + " in '" + path_ + "'");
  }
  return read_run(query);
}

std::vector<StepMetrics> RunStore::steps(int64_t run_id) {
  std::string columns;
  for (const StepField& field : step_fields()) {
    columns += (columns.empty() ? "" : ", ") + std::string(field.name);
  }
  Statement query(*db_, "SELECT " + columns + " FROM steps WHERE run_id = ? ORDER BY step");
  query.bind(1, run_id);
  std::vector<StepMetrics> result;
  while (query.step()) {
    StepMetrics step;
    int column = 0;
    for (const StepField& field : step_fields()) {
      std::visit(
          [&](auto member) {
            using Value = std::decay_t<decltype(step.*member)>;
            if constexpr (std::is_same_v<Value, double>) {
              step.*member = query.column_number(column);
            } else {
              step.*member = static_cast<Value>(query.column_int(column));
            }
          },
          field.member);
      ++column;
    }
    result.push_back(step);
  }
  return result;
}

std::vector<TimelinePoint> RunStore::timeline(int64_t run_id) {
  Statement query(*db_,
                  "SELECT time_ms, bytes, phase FROM timelines WHERE run_id = ? ORDER BY point");
  query.bind(1, run_id);
  std::vector<TimelinePoint> result;
  while (query.step()) {
    TimelinePoint point;
    point.time_ms = query.column_double(0);
    point.bytes = query.column_int(1);
    point.phase = parse_memory_phase(query.column_text(2));
    result.push_back(point);
  }
  return result;
}

std::vector<BatchProbe> RunStore::probes(int64_t run_id) {
  Statement query(*db_,
                  "SELECT batch, status, peak_bytes FROM probes WHERE run_id = ? ORDER BY probe");
  query.bind(1, run_id);
  std::vector<BatchProbe> result;
  while (query.step()) {
    result.push_back({query.column_int(0),
                      parse_run_status(query.column_text(1)).value_or(RunStatus::kFailed),
                      query.column_int(2),
                      {}});
  }
  return result;
}

void RunStore::delete_runs(const std::vector<int64_t>& ids) {
  if (ids.empty()) return;
  require_writable("delete runs");
  Transaction transaction(*db_);
  {
    // Checked inside the transaction, so a run cannot start being trained in between.
    Statement running(*db_, std::string(kRunningRuns) + " AND id IN (" + id_list(ids) + ")");
    while (running.step()) {
      const RunProcesses processes = running_run_processes(running);
      const ProcessIdentity& judge = processes.judge();
      // Another host's run cannot be checked from here (and may be long dead): the user decides.
      if (judge.host == current_process().host && process_may_be_alive(judge)) {
        throw InvalidInput("ID", "run " + std::to_string(running.column_int(0)) +
                                     " is being trained (process " + std::to_string(judge.pid) +
                                     " on " + judge.host + "); stop it before deleting it");
      }
    }
  }
  db_->exec("DELETE FROM runs WHERE id IN (" + id_list(ids) + ")");
  transaction.commit();
}

std::string RunStore::integrity_check() {
  Statement query(*db_, "PRAGMA integrity_check");
  std::string result;
  while (query.step()) result += (result.empty() ? "" : "; ") + query.column_text(0);
  return result;
}

std::optional<PeakFlopsRecord> RunStore::peak_flops(const PeakFlopsRecord& key) {
  Statement query(*db_,
                  "SELECT flops, measured, method FROM peaks WHERE host = ? AND device = ? "
                  "AND precision = ? AND threads = ?");
  query.bind(1, key.host)
      .bind(2, key.device)
      .bind(3, precision_key(key))
      .bind(4, int64_t{key.threads});
  if (!query.step()) return std::nullopt;
  PeakFlopsRecord kept = key;
  kept.flops = query.column_double(0);
  kept.measured = query.column_text(1);
  kept.method = query.column_text(2);
  return kept;
}

std::optional<RunStore::KeptProfile> RunStore::chain_profile(const std::string& key) {
  Statement query(*db_, "SELECT costs, profile_ms, measured FROM profiles WHERE key = ?");
  query.bind(1, key);
  if (!query.step()) return std::nullopt;
  return KeptProfile{query.column_text(0), query.column_double(1), query.column_text(2)};
}

std::vector<std::pair<std::string, RunStore::KeptProfile>> RunStore::chain_profiles() {
  Statement query(*db_,
                  "SELECT key, costs, profile_ms, measured FROM profiles ORDER BY measured DESC");
  std::vector<std::pair<std::string, KeptProfile>> profiles;
  while (query.step()) {
    profiles.emplace_back(
        query.column_text(0),
        KeptProfile{query.column_text(1), query.column_double(2), query.column_text(3)});
  }
  return profiles;
}

void RunStore::save_chain_profile(const std::string& key, const KeptProfile& profile) {
  require_writable("keep a chain profile");
  Statement insert(*db_,
                   "INSERT OR REPLACE INTO profiles (key, costs, profile_ms, measured) "
                   "VALUES (?, ?, ?, ?)");
  insert.bind(1, key).bind(2, profile.costs).bind(3, profile.profile_ms).bind(4, profile.measured);
  insert.run();
}

void RunStore::save_peak_flops(const PeakFlopsRecord& peak) {
  require_writable("save a peak");
  Statement insert(*db_,
                   "INSERT OR REPLACE INTO peaks (host, device, precision, threads, flops, "
                   "measured, method) VALUES (?, ?, ?, ?, ?, ?, ?)");
  insert.bind(1, peak.host)
      .bind(2, peak.device)
      .bind(3, precision_key(peak))
      .bind(4, int64_t{peak.threads})
      .bind(5, peak.flops)
      .bind(6, peak.measured)
      .bind(7, peak.method)
      .run();
}

}  // namespace rematlab
