// A group's table of its operations: what was issued, what runs, what finished, and whether anybody
// waited for it.
//
// Every Work a group hands out has a row here from the moment it is issued. A row stays while its work is
// in flight or finished-but-never-waited (those are what a hang or a leak is made of); once a finished
// work has been waited for, its row moves to a short history, so the table stays small however long the
// job runs. When an operation times out, the table is written out as text and JSON (writeDump); at
// shutdown, the rows never waited for are what the group warns about.
//
// Plain C++: the plugin describes each operation (dtype, shapes, peers) in words before it gets here.
//
// Every operation passes through here several times (issued, started, finished, waited for), so the
// table takes nothing from the heap in a steady state: a row that leaves the history is kept, with the
// capacity of its strings and shape lists, for the next operation to fill in place, and its times are
// the steady clock readings the work made anyway (turned into wall-clock times only when the table is
// shown).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hier::registry {

// What an operation is, as the table shows it. Shapes stay numbers until somebody reads the table.
struct WorkInfo {
  using Shape = std::vector<int64_t>;
  uint64_t sequence = 0;  // the group's collective sequence number, or its point-to-point one
  bool pointToPoint = false;
  std::string op;     // "allreduce", "send", ...
  std::string dtype;  // "float32"; empty for a barrier
  std::vector<Shape> inputs;
  std::vector<Shape> outputs;
  std::string peers;  // "root 2", "peer 3", "any"; empty for all the group's ranks
  int opType = -1;    // torch's c10d::OpType, as a number (for its completion hooks)
};

enum class WorkState { Queued, Running, Succeeded, Failed };
const char* toString(WorkState state);

using Clock = std::chrono::steady_clock;

struct WorkRecord {
  WorkInfo info;
  WorkState state = WorkState::Queued;
  bool waited = false;
  Clock::time_point issued{};
  Clock::time_point started{};
  Clock::time_point finished{};
  std::string error;
};

class WorkTable : public std::enable_shared_from_this<WorkTable> {
 public:
  // How many finished-and-waited rows the history keeps, and how many finished-but-unwaited rows the
  // table keeps before it only counts them.
  static constexpr size_t kHistory = 32;
  static constexpr size_t kMaxUnwaited = 1024;

  WorkTable(std::string group, int rank, int size);

  // A work's row, held by the work itself. Every call is thread-safe and idempotent; a row that left
  // the table (shut down) ignores them.
  class Row {
   public:
    Row() = default;
    // `when`: the work's own clock reading, so that the table reads no clock of its own.
    void started(Clock::time_point when) const;
    void finished(Clock::time_point when, const std::string& error = {}) const;
    // Somebody waited for the work, took its future, or saw it completed.
    void waited() const;
    // The work's completion key (torch 2.15's keyed completion hooks): no other row of any table in this
    // process has it. 0 for a row of no table.
    uint64_t key() const { return table_ ? completionKey(table_->instance_, id_) : 0; }

   private:
    friend class WorkTable;
    Row(std::shared_ptr<WorkTable> table, uint64_t id) : table_(std::move(table)), id_(id) {}
    std::shared_ptr<WorkTable> table_;
    uint64_t id_ = 0;
  };
  // A row for a new operation, issued at `issued` (and started then, when `running`): `fill(info)`
  // describes it, in a WorkInfo that may hold an earlier operation's description (assign every field;
  // vectors keep their capacity).
  template <class Fill>
  Row add(bool pointToPoint, Clock::time_point issued, bool running, Fill&& fill) {
    std::lock_guard<std::mutex> lock(mutex_);
    WorkRecord& record = newRecord(pointToPoint, issued, running);
    fill(record.info);
    return Row(shared_from_this(), nextId_ - 1);
  }

  void setGroupName(std::string name);
  // What onFinished tells of a work that finished (copied from its row, without its strings).
  struct Finished {
    uint64_t key = 0;  // Row::key()
    int opType = -1;
    uint64_t sequence = 0;
    bool pointToPoint = false;
    bool failed = false;
    Clock::time_point started{};
    Clock::time_point finished{};
  };
  // Called once for each work as it finishes (succeeded or failed), on the thread that finished it,
  // outside the table's lock.
  void onFinished(std::function<void(const Finished&)> observer);
  // Rows of works in flight and of works never waited for, oldest first, then the history.
  std::vector<WorkRecord> live() const;
  std::vector<WorkRecord> history() const;
  // Works nobody waited for, finished or not (what shutdown warns about), and how many more finished
  // ones the table did not keep.
  std::vector<WorkRecord> unwaited(size_t* notKept = nullptr) const;

  // One line for the other ranks: the last operation issued, its state, the last one finished.
  std::string summary() const;
  // The whole table, readable, and as JSON. `extra` is put in the JSON object as is (a JSON member list
  // such as `"reports": {...}`), and in the text as lines after the table.
  std::string text(const std::string& extraText = {}) const;
  std::string json(const std::string& extraJson = {}) const;
  // Writes `<directory>/<stem>.txt` and `.json`; returns the path without extension, or an empty string
  // when the directory cannot be written (the caller logs the text instead).
  std::string writeDump(const std::string& directory, const std::string& stem, const std::string& extraText,
                        const std::string& extraJson) const;

 private:
  using Rows = std::map<uint64_t, WorkRecord>;
  // How many rows that left the table are kept for new operations to reuse.
  static constexpr size_t kSpareRows = 16;

  // Under mutex_: the record of a new row (a spare one when there is), numbered nextId_++, its
  // description still to be filled in.
  WorkRecord& newRecord(bool pointToPoint, Clock::time_point issued, bool running);
  // Applies `change` to row `id` if it is still here; a change that returns true may retire the row.
  template <class Change>
  void update(uint64_t id, Change&& change);
  void retireIfDone(Rows::iterator it);
  // Keeps a row that left the table for a new operation, while there is room among the spares.
  void keepSpare(Rows::node_type node);
  void forEachInHistory(const std::function<void(const WorkRecord&)>& visit) const;

  // A row's completion key: the table's number in the process above, the row's below (2^40 rows).
  static constexpr uint64_t completionKey(uint64_t instance, uint64_t id) { return (instance << 40) | (id + 1); }
  const uint64_t instance_;  // this table's number among the process's tables
  mutable std::mutex mutex_;
  std::function<void(const Finished&)> onFinished_;  // under mutex_
  std::string group_;
  const int rank_;
  const int size_;
  uint64_t nextId_ = 0;
  uint64_t collectives_ = 0;
  uint64_t pointToPoint_ = 0;
  Rows live_;  // by issue order
  // The last kHistory rows finished and waited for, a ring: the oldest at historyNext_ once it is full.
  std::vector<Rows::node_type> history_;
  size_t historyNext_ = 0;
  std::vector<Rows::node_type> spare_;
  size_t unwaitedKept_ = 0;
  size_t unwaitedDropped_ = 0;
};

// Where timeout dumps go: HIER_DUMP_DIR, by default /tmp/hier-dumps.
std::string dumpDirectory();
// JSON string literal for `text`, quotes included.
std::string jsonString(const std::string& text);

}  // namespace hier::registry
