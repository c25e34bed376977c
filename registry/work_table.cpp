#include "registry/work_table.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

namespace hier::registry {
namespace {

using SystemClock = std::chrono::system_clock;

std::string timestamp(SystemClock::time_point when) {
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(when.time_since_epoch()).count();
  std::time_t seconds = std::time_t(micros / 1000000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[64];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<long long>(micros % 1000000));
  return text;
}

// Both clocks, read at once. The table keeps steady clock readings; each is shown as the wall-clock time
// as long before `system` as it is before `steady`.
struct Now {
  Clock::time_point steady = Clock::now();
  SystemClock::time_point system = SystemClock::now();
};

std::string timestamp(Clock::time_point steady, const Now& now) {
  if (steady == Clock::time_point{}) return "-";
  return timestamp(now.system - std::chrono::duration_cast<SystemClock::duration>(now.steady - steady));
}

double millisBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// How long the work ran (or has been running, or queued) as of `now`, in ms; negative when not started.
double ageOf(const WorkRecord& r, Clock::time_point now) {
  if (r.state == WorkState::Queued) return millisBetween(r.issued, now);
  if (r.started == Clock::time_point{}) return -1;
  return millisBetween(r.started, r.finished == Clock::time_point{} ? now : r.finished);
}

std::string fixed(double value, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// "[4, 1024]"; several tensors as "[8], [8]", many as "[8], [8], [8] and 13 more".
std::string shapes(const std::vector<WorkInfo::Shape>& list, bool json = false) {
  constexpr size_t kListed = 3;
  std::string text = json ? "[" : "";
  for (size_t i = 0; i < list.size() && (json || i < kListed); ++i) {
    if (i) text += ", ";
    text += "[";
    for (size_t d = 0; d < list[i].size(); ++d) text += (d ? ", " : "") + std::to_string(list[i][d]);
    text += "]";
  }
  if (!json && list.size() > kListed) text += " and " + std::to_string(list.size() - kListed) + " more";
  return json ? text + "]" : text;
}

std::string describe(const WorkRecord& r) {
  std::string text =
      std::string(r.info.pointToPoint ? "p2p seq " : "seq ") + std::to_string(r.info.sequence) + " " + r.info.op;
  if (!r.info.dtype.empty()) text += " " + r.info.dtype;
  if (!r.info.inputs.empty()) text += " " + shapes(r.info.inputs);
  if (!r.info.peers.empty()) text += " (" + r.info.peers + ")";
  return text;
}

void appendRow(std::string& out, const WorkRecord& r, const Now& now) {
  char line[512];
  std::snprintf(line, sizeof line, "  %-4s %-6llu %-18s %-9s %-6s %-9s %-10s %-22s %-22s %-9s %-27s %s\n",
                r.info.pointToPoint ? "p2p" : "coll", static_cast<unsigned long long>(r.info.sequence),
                r.info.op.c_str(), toString(r.state), r.waited ? "yes" : "no", r.info.dtype.c_str(),
                r.info.peers.empty() ? "all" : r.info.peers.c_str(), shapes(r.info.inputs).c_str(),
                shapes(r.info.outputs).c_str(), ageOf(r, now.steady) < 0 ? "-" : fixed(ageOf(r, now.steady), 3).c_str(),
                timestamp(r.issued, now).c_str(), r.error.c_str());
  out += line;
}

void appendJson(std::string& out, const WorkRecord& r, const Now& now) {
  out += "{\"seq\": " + std::to_string(r.info.sequence) +
         ", \"kind\": " + jsonString(r.info.pointToPoint ? "p2p" : "collective") +
         ", \"op\": " + jsonString(r.info.op) + ", \"state\": " + jsonString(toString(r.state)) +
         ", \"waited\": " + (r.waited ? "true" : "false") + ", \"dtype\": " + jsonString(r.info.dtype) +
         ", \"inputs\": " + shapes(r.info.inputs, true) + ", \"outputs\": " + shapes(r.info.outputs, true) +
         ", \"peers\": " + jsonString(r.info.peers.empty() ? "all" : r.info.peers) +
         ", \"issued\": " + jsonString(timestamp(r.issued, now)) +
         ", \"started\": " + jsonString(timestamp(r.started, now)) +
         ", \"finished\": " + jsonString(timestamp(r.finished, now));
  double age = ageOf(r, now.steady);
  out += ", \"duration_ms\": " + (age < 0 ? std::string("null") : fixed(age, 3));
  out += ", \"error\": " + (r.error.empty() ? std::string("null") : jsonString(r.error)) + "}";
}

bool makeDirectories(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    std::string prefix = path.substr(0, at);
    if (mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) return false;
  }
  return true;
}

}  // namespace

const char* toString(WorkState state) {
  switch (state) {
    case WorkState::Queued: return "queued";
    case WorkState::Running: return "running";
    case WorkState::Succeeded: return "succeeded";
    case WorkState::Failed: return "failed";
  }
  return "?";
}

std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
          out += escaped;
        } else {
          out += char(c);
        }
    }
  }
  return out + "\"";
}

std::string dumpDirectory() {
  const char* value = std::getenv("HIER_DUMP_DIR");
  return value != nullptr && *value != '\0' ? value : "/tmp/hier-dumps";
}

namespace {
std::atomic<uint64_t> tablesMade{0};
}  // namespace

WorkTable::WorkTable(std::string group, int rank, int size)
    : instance_(tablesMade++), group_(std::move(group)), rank_(rank), size_(size) {
  history_.reserve(kHistory);
  spare_.reserve(kSpareRows);
}

void WorkTable::setGroupName(std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);
  group_ = std::move(name);
}

WorkRecord& WorkTable::newRecord(bool pointToPoint, Clock::time_point issued, bool running) {
  (pointToPoint ? pointToPoint_ : collectives_)++;
  const uint64_t id = nextId_++;
  Rows::iterator it;
  if (spare_.empty()) {
    it = live_.emplace_hint(live_.end(), id, WorkRecord{});
  } else {
    Rows::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = id;
    it = live_.insert(live_.end(), std::move(node));
  }
  WorkRecord& record = it->second;
  record.info.pointToPoint = pointToPoint;
  record.state = running ? WorkState::Running : WorkState::Queued;
  record.waited = false;
  record.issued = issued;
  record.started = running ? issued : Clock::time_point{};
  record.finished = Clock::time_point{};
  record.error.clear();
  return record;
}

template <class Change>
void WorkTable::update(uint64_t id, Change&& change) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(id);
  if (it == live_.end()) return;  // retired already
  if (change(it->second)) retireIfDone(it);
}

void WorkTable::keepSpare(Rows::node_type node) {
  if (spare_.size() < kSpareRows) spare_.push_back(std::move(node));
}

void WorkTable::retireIfDone(Rows::iterator it) {
  WorkRecord& record = it->second;
  const bool finished = record.state == WorkState::Succeeded || record.state == WorkState::Failed;
  if (!finished) return;
  if (record.waited) {
    Rows::node_type node = live_.extract(it);
    if (history_.size() < kHistory) {
      history_.push_back(std::move(node));
      return;
    }
    // The oldest row leaves the history for the spares.
    std::swap(history_[historyNext_], node);
    historyNext_ = (historyNext_ + 1) % kHistory;
    keepSpare(std::move(node));
    return;
  }
  // Finished and not waited for (yet): keep it, within bounds; a program that never waits must not
  // grow the table without end.
  if (++unwaitedKept_ <= kMaxUnwaited) return;
  for (auto oldest = live_.begin(); oldest != live_.end(); ++oldest) {
    const WorkRecord& r = oldest->second;
    if (!r.waited && (r.state == WorkState::Succeeded || r.state == WorkState::Failed)) {
      keepSpare(live_.extract(oldest));
      --unwaitedKept_;
      ++unwaitedDropped_;
      break;
    }
  }
}

void WorkTable::Row::started(Clock::time_point when) const {
  if (!table_) return;
  table_->update(id_, [when](WorkRecord& r) {
    if (r.state != WorkState::Queued) return false;
    r.state = WorkState::Running;
    r.started = when;
    return true;
  });
}

void WorkTable::Row::finished(Clock::time_point when, const std::string& error) const {
  if (!table_) return;
  std::function<void(const Finished&)> observer;
  Finished copy;
  table_->update(id_, [&](WorkRecord& r) {
    if (r.state == WorkState::Succeeded || r.state == WorkState::Failed) return false;
    r.finished = when;
    if (r.started == Clock::time_point{}) r.started = r.finished;
    r.state = error.empty() ? WorkState::Succeeded : WorkState::Failed;
    r.error = error;
    if (table_->onFinished_) {
      observer = table_->onFinished_;
      copy =
          Finished{key(), r.info.opType, r.info.sequence, r.info.pointToPoint, !error.empty(), r.started, r.finished};
    }
    return true;
  });
  if (observer) observer(copy);
}

void WorkTable::onFinished(std::function<void(const Finished&)> observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  onFinished_ = std::move(observer);
}

void WorkTable::Row::waited() const {
  if (!table_) return;
  WorkTable& table = *table_;
  std::lock_guard<std::mutex> lock(table.mutex_);
  auto it = table.live_.find(id_);
  if (it == table.live_.end() || it->second.waited) return;
  it->second.waited = true;
  const WorkState state = it->second.state;
  if (state == WorkState::Succeeded || state == WorkState::Failed) {
    // It was counted as unwaited when it finished.
    --table.unwaitedKept_;
    table.retireIfDone(it);
  }
}

void WorkTable::forEachInHistory(const std::function<void(const WorkRecord&)>& visit) const {
  // Oldest first: from historyNext_ on once the ring is full, from the start until then.
  for (size_t i = 0; i < history_.size(); ++i) visit(history_[(historyNext_ + i) % history_.size()].mapped());
}

std::vector<WorkRecord> WorkTable::live() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<WorkRecord> rows;
  for (auto& [id, record] : live_) rows.push_back(record);
  return rows;
}

std::vector<WorkRecord> WorkTable::history() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<WorkRecord> rows;
  forEachInHistory([&](const WorkRecord& r) { rows.push_back(r); });
  return rows;
}

std::vector<WorkRecord> WorkTable::unwaited(size_t* notKept) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<WorkRecord> rows;
  for (auto& [id, record] : live_) {
    if (!record.waited) rows.push_back(record);
  }
  if (notKept != nullptr) *notKept = unwaitedDropped_;
  return rows;
}

std::string WorkTable::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  // The newest collective, and the newest one finished, wherever their rows are.
  const WorkRecord* newest = nullptr;
  const WorkRecord* newestFinished = nullptr;
  auto consider = [&](const WorkRecord& r) {
    if (r.info.pointToPoint) return;
    if (newest == nullptr || r.info.sequence > newest->info.sequence) newest = &r;
    bool done = r.state == WorkState::Succeeded || r.state == WorkState::Failed;
    if (done && (newestFinished == nullptr || r.info.sequence > newestFinished->info.sequence)) newestFinished = &r;
  };
  forEachInHistory(consider);
  for (auto& [id, r] : live_) consider(r);
  std::string text = "rank " + std::to_string(rank_) + ": ";
  if (newest == nullptr) return text + "no collective issued";
  text += "last issued " + describe(*newest) + ", " + toString(newest->state);
  if (newest->state == WorkState::Running || newest->state == WorkState::Queued) {
    text += " for " + fixed(ageOf(*newest, now) / 1000.0, 1) + " s";
  }
  if (newest != newestFinished) {
    text += newestFinished == nullptr ? "; none finished"
                                      : "; last finished seq " + std::to_string(newestFinished->info.sequence);
  }
  size_t inFlight = 0;
  for (auto& [id, r] : live_) inFlight += r.state == WorkState::Queued || r.state == WorkState::Running;
  if (inFlight > 1) text += "; " + std::to_string(inFlight) + " operations in flight";
  return text;
}

std::string WorkTable::text(const std::string& extraText) const {
  const Now now;
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out = "hier work table of group '" + group_ + "', rank " + std::to_string(rank_) + "/" + std::to_string(size_) +
          ", at " + timestamp(now.system) + "\n";
    out += "issued " + std::to_string(collectives_) + " collectives and " + std::to_string(pointToPoint_) +
           " point-to-point operations; " + std::to_string(live_.size() - unwaitedKept_) + " in flight, " +
           std::to_string(unwaitedKept_ + unwaitedDropped_) + " finished but never waited for" +
           (unwaitedDropped_ ? " (" + std::to_string(unwaitedDropped_) + " of them not listed)" : std::string()) + "\n";
  }
  char header[512];
  std::snprintf(header, sizeof header, "  %-4s %-6s %-18s %-9s %-6s %-9s %-10s %-22s %-22s %-9s %-27s %s\n", "kind",
                "seq", "op", "state", "waited", "dtype", "peers", "inputs", "outputs", "ms", "issued", "error");
  out += "in flight or never waited for:\n";
  out += header;
  for (auto& r : live()) appendRow(out, r, now);
  out += "history (the last " + std::to_string(kHistory) + " finished and waited for):\n";
  out += header;
  for (auto& r : history()) appendRow(out, r, now);
  if (!extraText.empty()) out += extraText + (extraText.back() == '\n' ? "" : "\n");
  return out;
}

std::string WorkTable::json(const std::string& extraJson) const {
  const Now now;
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out = "{\"group\": " + jsonString(group_) + ", \"rank\": " + std::to_string(rank_) +
          ", \"size\": " + std::to_string(size_) + ", \"time\": " + jsonString(timestamp(now.system)) +
          ", \"collectives_issued\": " + std::to_string(collectives_) +
          ", \"p2p_issued\": " + std::to_string(pointToPoint_) +
          ", \"unwaited_not_listed\": " + std::to_string(unwaitedDropped_);
  }
  auto list = [&](const char* key, const std::vector<WorkRecord>& rows) {
    out += std::string(", \"") + key + "\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i) out += ", ";
      appendJson(out, rows[i], now);
    }
    out += "]";
  };
  list("live", live());
  list("history", history());
  if (!extraJson.empty()) out += ", " + extraJson;
  return out + "}\n";
}

std::string WorkTable::writeDump(const std::string& directory, const std::string& stem, const std::string& extraText,
                                 const std::string& extraJson) const {
  if (!makeDirectories(directory)) return {};
  const std::string base = directory + "/" + stem;
  std::ofstream textFile(base + ".txt");
  textFile << text(extraText);
  std::ofstream jsonFile(base + ".json");
  jsonFile << json(extraJson);
  textFile.close();
  jsonFile.close();
  return textFile && jsonFile ? base : std::string();
}

}  // namespace hier::registry
