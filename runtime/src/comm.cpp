//===- comm.cpp - collectives between ranks -------------------------------===//

#include "llmopt-runtime/comm.h"

#include <cstdio>

namespace llmopt::runtime {

namespace {
/// "3" or "3, 5, 7".
std::string rankList(const std::vector<int> &ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}
} // namespace

std::string Communicator::watchdogError(const std::string &what,
                                        const WatchdogFindings &found) const {
  char limit[32];
  std::snprintf(limit, sizeof(limit), "%g s", timeoutS);
  std::string out = what + " did not complete within " + limit +
                    " (the collective watchdog, --collective-timeout): ";
  std::vector<std::string> parts;
  if (!found.silent.empty())
    parts.push_back("rank(s) " + rankList(found.silent) +
                    " did not arrive (stopped, hung or dead)");
  for (const auto &[r, s] : found.stopped)
    parts.push_back("rank " + std::to_string(r) + " did not run for " + seconds(s) +
                    " while it waited in it (stopped, as by SIGSTOP, or not scheduled)");
  for (const WatchdogFindings::Late &l : found.late)
    parts.push_back("rank " + std::to_string(l.rank) + " came to " +
                    (l.what.empty() ? std::string("it") : l.what) + " " + seconds(l.seconds) +
                    " after " + (l.after < 0 ? "this rank" : "rank " + std::to_string(l.after)) +
                    " (stopped, hung or slow before it)");
  for (const auto &[r, s] : found.before)
    parts.push_back("rank " + std::to_string(r) + " was in it " + seconds(s) +
                    " before this rank came (this rank was stopped, hung or slow before it)");
  for (const auto &[r, where] : found.gaveUp)
    parts.push_back("rank " + std::to_string(r) + "'s watchdog fired in " + where +
                    " before this rank came to it (this rank was stopped, hung or slow before it)");
  for (const auto &[r, s] : found.slow)
    parts.push_back("rank " + std::to_string(r) + " said where it waits only " + seconds(s) +
                    " after the watchdog's first message (stopped, hung or busy until then)");
  for (const auto &[r, where] : found.elsewhere)
    parts.push_back("rank " + std::to_string(r) + " waits in " + where);
  if (!found.behind.empty())
    parts.push_back("rank(s) " + rankList(found.behind) +
                    ", which the ranks named wait for, did not answer (stopped, hung or dead)");
  if (parts.empty())
    return out + "every rank of the group is in it (a rank is slow or the network stalls)";
  for (size_t i = 0; i < parts.size(); ++i)
    out += (i ? "; " : "") + parts[i];
  return out;
}

bool agreeOnLaunch(Communicator &comm, const std::vector<LaunchSetting> &mine, std::string &error) {
  const int n = comm.size();
  if (n <= 1)
    return true;
  // Each value as four 16-bit pieces, each exact in a float.
  const int64_t count = int64_t(mine.size()) * 4;
  std::vector<float> all(size_t(count * n)), own(static_cast<size_t>(count));
  for (size_t i = 0; i < mine.size(); ++i)
    for (int k = 0; k < 4; ++k)
      own[i * 4 + size_t(k)] = float((uint64_t(mine[i].value) >> (16 * k)) & 0xffff);
  if (!comm.allGatherBlocks("world", own.data(), all.data(), count, error)) {
    error = "comparing the ranks' launch settings: " + error;
    return false;
  }
  auto valueOf = [&](int rank, size_t i) {
    uint64_t v = 0;
    for (int k = 0; k < 4; ++k)
      v |= uint64_t(all[size_t(rank * count) + i * 4 + size_t(k)]) << (16 * k);
    return int64_t(v);
  };
  auto shown = [&](size_t i, int64_t v) {
    char buf[32];
    if (mine[i].hash)
      std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
    else
      std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
    return std::string(buf);
  };
  for (size_t i = 0; i < mine.size(); ++i) {
    std::vector<int> differ;
    for (int r = 1; r < n; ++r)
      if (valueOf(r, i) != valueOf(0, i))
        differ.push_back(r);
    if (differ.empty())
      continue;
    const char *what = mine[i].hash ? " (a hash)" : "";
    error = "the ranks were not launched alike: " + mine[i].name + " is " +
            shown(i, valueOf(0, i)) + what + " on rank 0 but ";
    for (size_t d = 0; d < differ.size() && d < 4; ++d)
      error += (d ? ", " : "") + shown(i, valueOf(differ[d], i)) + " on rank " +
               std::to_string(differ[d]);
    if (differ.size() > 4)
      error += " and " + std::to_string(differ.size() - 4) + " more rank(s)";
    error += "; launch every rank with the same ";
    for (size_t j = 0; j < mine.size(); ++j)
      error += (j ? (j + 1 == mine.size() ? " and " : ", ") : "") + mine[j].name;
    return false;
  }
  return true;
}

class ThreadRank final : public Communicator {
public:
  ThreadRank(ThreadGroup &g, int rank) : g(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g.size_; }

  bool allReduce(const std::string &, float *data, int64_t count, bool average,
                 std::string &error) override {
    std::unique_lock<std::mutex> lock(g.mu);
    // Wait until the previous reduction's results have been read.
    g.cv.wait(lock, [&] { return g.readers == 0; });
    if (g.arrived == 0)
      g.sum.assign(count, 0.0);
    if (int64_t(g.sum.size()) != count) {
      error = "ranks all-reduce buffers of different sizes";
      return false;
    }
    // Reduce in rank order for determinism: accumulate per rank slot.
    for (int64_t i = 0; i < count; ++i)
      g.sum[i] += data[i];
    int64_t gen = g.generation;
    if (++g.arrived == g.size_) {
      g.result.resize(count);
      for (int64_t i = 0; i < count; ++i)
        g.result[i] = float(average ? g.sum[i] / g.size_ : g.sum[i]);
      g.arrived = 0;
      g.readers = g.size_;
      ++g.generation;
      g.cv.notify_all();
    } else {
      g.cv.wait(lock, [&] { return g.generation != gen; });
    }
    for (int64_t i = 0; i < count; ++i)
      data[i] = g.result[i];
    if (--g.readers == 0)
      g.cv.notify_all();
    return true;
  }

private:
  ThreadGroup &g;
  int rank_;
};

std::unique_ptr<Communicator> ThreadGroup::member(int rank) {
  return std::make_unique<ThreadRank>(*this, rank);
}

} // namespace llmopt::runtime
