//===- mpi_comm.cpp - collectives over MPI --------------------------------===//

#include "llmopt-runtime/mpi_comm.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#ifdef LLMOPT_HAVE_MPI
#include <mpi.h>
#endif

namespace llmopt::runtime {

#ifdef LLMOPT_HAVE_MPI
namespace {
class MPICommunicator final : public Communicator {
  /// A non-blocking collective started and not yet waited for.
  struct InFlight {
    MPI_Request request;
    MPI_Comm comm;
    std::string what;
  };

public:
  MPICommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool useMesh(int pp, int dp, int cp, int tp, std::string &error) override {
    if (pp * dp * cp * tp != size_) {
      error = "a " + std::to_string(pp) + " x " + std::to_string(dp) + " x " + std::to_string(cp) +
              " x " + std::to_string(tp) + " mesh needs " + std::to_string(pp * dp * cp * tp) +
              " ranks, not " + std::to_string(size_);
      return false;
    }
    dp_ = dp, cp_ = cp, tp_ = tp;
    int stageSize = dp * cp * tp;
    int stage = rank_ / stageSize, dpIndex = (rank_ / (cp * tp)) % dp, cpIndex = (rank_ / tp) % cp,
        tpIndex = rank_ % tp;
    // Colors: the coordinates on every other axis.
    if (MPI_Comm_split(MPI_COMM_WORLD, rank_ / tp, tpIndex, &tpComm) != MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, (stage * dp + dpIndex) * tp + tpIndex, cpIndex, &cpComm) !=
            MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, (stage * cp + cpIndex) * tp + tpIndex, dpIndex, &dpComm) !=
            MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, rank_ % stageSize, stage, &ppComm) != MPI_SUCCESS ||
        // The first and last stage, for weights they share.
        MPI_Comm_split(MPI_COMM_WORLD,
                       pp > 1 && (stage == 0 || stage == pp - 1) ? rank_ % stageSize
                                                                 : MPI_UNDEFINED,
                       stage, &tiedComm) != MPI_SUCCESS) {
      error = "MPI_Comm_split failed";
      return false;
    }
    return true;
  }

  bool useExpertAxes(int ep, std::string &error) override {
    if (ep == 1)
      return true;
    if (dp_ % ep != 0) {
      error = "ep " + std::to_string(ep) + " does not divide dp " + std::to_string(dp_);
      return false;
    }
    // Within a dp group (same stage and tp index): consecutive dp ranks form
    // an ep group; ranks with the same ep index form an edp group.
    int stageSize = dp_ * cp_ * tp_;
    int group = ((rank_ / stageSize) * cp_ + (rank_ / tp_) % cp_) * tp_ + rank_ % tp_,
        dpIndex = (rank_ / (cp_ * tp_)) % dp_;
    if (MPI_Comm_split(MPI_COMM_WORLD, group * dp_ + dpIndex / ep, dpIndex % ep, &epComm) !=
            MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, group * dp_ + dpIndex % ep, dpIndex / ep, &edpComm) !=
            MPI_SUCCESS) {
      error = "MPI_Comm_split failed";
      return false;
    }
    return true;
  }

  bool startAllReduce(const std::string &axis, float *data, int64_t count, bool average, int bucket,
                      std::string &error) override {
    MPI_Comm comm = commFor(axis);
    Started &st = buckets[bucket];
    st.comm = comm;
    st.what = label("all-reduce", axis) + " (gradient bucket " + std::to_string(bucket) + ")";
    for (int64_t at = 0; at < count;) {
      int len = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      MPI_Request r;
      int rc = MPI_Iallreduce(MPI_IN_PLACE, data + at, len, MPI_FLOAT, MPI_SUM, comm, &r);
      if (rc != MPI_SUCCESS) {
        error = "MPI_Iallreduce failed with code " + std::to_string(rc);
        return false;
      }
      st.requests.push_back(r);
      at += len;
    }
    if (average) {
      int n = 1;
      MPI_Comm_size(comm, &n);
      st.scale.push_back({data, count, n});
    }
    return true;
  }

  bool waitAllReduce(int bucket, std::string &error) override {
    auto it = buckets.find(bucket);
    if (it == buckets.end())
      return true;
    Started &st = it->second;
    if (!wait(st.requests, st.what, st.comm, error))
      return false;
    for (const Scale &s : st.scale)
      for (int64_t i = 0; i < s.count; ++i)
        s.data[i] /= float(s.ranks);
    buckets.erase(it);
    return true;
  }

  bool allToAllBlocks(const std::string &axis, const float *send, float *recv, int64_t count,
                      std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::allToAllBlocks(axis, send, recv, count, error);
    MPI_Request r;
    int rc =
        MPI_Ialltoall(send, int(count), MPI_FLOAT, recv, int(count), MPI_FLOAT, commFor(axis), &r);
    return started(rc, "MPI_Ialltoall", error) &&
           wait(r, label("all-to-all", axis), commFor(axis), error);
  }

  bool send(int peer, int tag, const float *data, int64_t count, std::string &error) override {
    // Non-blocking from a private copy: the caller may reuse its buffer at
    // once, and two stages sending to each other cannot deadlock.
    pending.push_back(
        Pending{std::vector<float>(data, data + count),
                {},
                "send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")",
                peer});
    Pending &p = pending.back();
    for (int64_t at = 0; at < count;) {
      int len = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      MPI_Request r;
      if (MPI_Isend(p.data.data() + at, len, MPI_FLOAT, peer, tag, MPI_COMM_WORLD, &r) !=
          MPI_SUCCESS) {
        error = "MPI_Isend to rank " + std::to_string(peer) + " failed";
        return false;
      }
      p.requests.push_back(r);
      at += len;
    }
    return true;
  }

  bool flush(std::string &error) override {
    for (Pending &p : pending)
      if (!wait(p.requests, p.what, MPI_COMM_WORLD, error, p.peer))
        return false;
    pending.clear();
    return true;
  }

  bool recv(int peer, int tag, float *data, int64_t count, std::string &error) override {
    for (int64_t at = 0; at < count;) {
      int len = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      MPI_Request r;
      if (!started(MPI_Irecv(data + at, len, MPI_FLOAT, peer, tag, MPI_COMM_WORLD, &r), "MPI_Irecv",
                   error) ||
          !wait(r,
                "receive from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")",
                MPI_COMM_WORLD, error, peer))
        return false;
      at += len;
    }
    return true;
  }

  void axisPosition(const std::string &axis, int &index, int &size) const override {
    MPI_Comm comm = commFor(axis);
    MPI_Comm_rank(comm, &index);
    MPI_Comm_size(comm, &size);
  }

  bool allGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                       std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::allGatherBlocks(axis, mine, all, count, error);
    MPI_Request r;
    int rc =
        MPI_Iallgather(mine, int(count), MPI_FLOAT, all, int(count), MPI_FLOAT, commFor(axis), &r);
    return started(rc, "MPI_Iallgather", error) &&
           wait(r, label("all-gather", axis), commFor(axis), error);
  }

  bool startAllGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                            int event, std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::allGatherBlocks(axis, mine, all, count, error);
    MPI_Request r;
    int rc =
        MPI_Iallgather(mine, int(count), MPI_FLOAT, all, int(count), MPI_FLOAT, commFor(axis), &r);
    return track(gathers, event, r, rc, commFor(axis),
                 label("all-gather", axis) + " (parameters, event " + std::to_string(event) + ")",
                 error);
  }

  bool waitAllGather(int event, std::string &error) override {
    return finish(gathers, event, error);
  }

  bool startReduceScatterBlocks(const std::string &axis, const float *all, float *mine,
                                int64_t count, int handle, std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::reduceScatterBlocks(axis, all, mine, count, error);
    MPI_Request r;
    int rc =
        MPI_Ireduce_scatter_block(all, mine, int(count), MPI_FLOAT, MPI_SUM, commFor(axis), &r);
    return track(scatters, handle, r, rc, commFor(axis),
                 label("reduce-scatter", axis) + " (gradients, handle " + std::to_string(handle) +
                     ")",
                 error);
  }

  bool waitReduceScatter(int handle, std::string &error) override {
    return finish(scatters, handle, error);
  }

  /// A non-blocking collective `what` over `comm` just started as `r` (MPI
  /// code `rc`), kept under `handle` until finish() waits for it.
  static bool track(std::map<int, InFlight> &pending, int handle, MPI_Request r, int rc,
                    MPI_Comm comm, const std::string &what, std::string &error) {
    if (rc != MPI_SUCCESS) {
      error = "starting the " + what + " failed with MPI code " + std::to_string(rc);
      return false;
    }
    if (!pending.emplace(handle, InFlight{r, comm, what}).second) {
      error = what + " started twice";
      return false;
    }
    return true;
  }

  bool finish(std::map<int, InFlight> &pending, int handle, std::string &error) {
    auto it = pending.find(handle);
    if (it == pending.end())
      return true; // ran at once
    if (!wait(it->second.request, it->second.what, it->second.comm, error))
      return false;
    pending.erase(it);
    return true;
  }

  bool reduceScatterBlocks(const std::string &axis, const float *all, float *mine, int64_t count,
                           std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::reduceScatterBlocks(axis, all, mine, count, error);
    MPI_Request r;
    int rc =
        MPI_Ireduce_scatter_block(all, mine, int(count), MPI_FLOAT, MPI_SUM, commFor(axis), &r);
    return started(rc, "MPI_Ireduce_scatter_block", error) &&
           wait(r, label("reduce-scatter", axis), commFor(axis), error);
  }

  bool allReduce(const std::string &axis, float *data, int64_t count, bool average,
                 std::string &error) override {
    MPI_Comm comm = commFor(axis);
    int n = 1;
    MPI_Comm_size(comm, &n);
    // Chunks below 2^31 elements (MPI counts are int).
    for (int64_t at = 0; at < count;) {
      int len = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      MPI_Request r;
      int rc = MPI_Iallreduce(MPI_IN_PLACE, data + at, len, MPI_FLOAT, MPI_SUM, comm, &r);
      if (!started(rc, "MPI_Iallreduce", error) || !wait(r, label("all-reduce", axis), comm, error))
        return false;
      at += len;
    }
    if (average)
      for (int64_t i = 0; i < count; ++i)
        data[i] /= float(n);
    return true;
  }

  bool allReduceMax(const std::string &axis, float *data, int64_t count,
                    std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::allReduceMax(axis, data, count, error);
    MPI_Request r;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_MAX, commFor(axis), &r);
    return started(rc, "MPI_Iallreduce", error) &&
           wait(r, label("all-reduce (max)", axis), commFor(axis), error);
  }

  bool reduceScatter(const std::string &axis, float *data, int64_t count, bool average,
                     std::string &error) override {
    MPI_Comm comm = commFor(axis);
    int size = 1, rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    int64_t c = (count + size - 1) / size;
    if (c * size > (int64_t(1) << 30))
      return Communicator::reduceScatter(axis, data, count, average, error);
    std::vector<float> padded(size_t(c * size), 0.0f);
    std::vector<float> mine(size_t(c), 0.0f);
    std::copy(data, data + count, padded.begin());
    MPI_Request r;
    int rc =
        MPI_Ireduce_scatter_block(padded.data(), mine.data(), int(c), MPI_FLOAT, MPI_SUM, comm, &r);
    if (!started(rc, "MPI_Ireduce_scatter_block", error) ||
        !wait(r, label("reduce-scatter", axis), comm, error))
      return false;
    Chunk own = shardChunk(count, size, rank);
    for (int64_t i = 0; i < own.size(); ++i)
      data[own.begin + i] = average ? mine[size_t(i)] / float(size) : mine[size_t(i)];
    return true;
  }

  bool allGather(const std::string &axis, float *data, int64_t count, std::string &error) override {
    MPI_Comm comm = commFor(axis);
    int size = 1;
    MPI_Comm_size(comm, &size);
    int64_t c = (count + size - 1) / size;
    if (c * size > (int64_t(1) << 30))
      return Communicator::allGather(axis, data, count, error);
    std::vector<float> padded(size_t(c * size), 0.0f);
    std::copy(data, data + count, padded.begin());
    MPI_Request r;
    int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, padded.data(), int(c), MPI_FLOAT,
                            comm, &r);
    if (!started(rc, "MPI_Iallgather", error) || !wait(r, label("all-gather", axis), comm, error))
      return false;
    std::copy(padded.begin(), padded.begin() + count, data);
    return true;
  }

private:
  using Clock = std::chrono::steady_clock;
  /// Tag of the watchdog's messages on MPI_COMM_WORLD (plan transfers stay
  /// below 32000, ring attention uses 32000).
  static constexpr int kWatchdogTag = 32001;
  static constexpr int kWhereBytes = 160;

  /// The collective `what` over `axis`, numbered per axis: members of a
  /// group count their collectives alike, so equal labels mean the same one.
  std::string label(const std::string &what, const std::string &axis) {
    std::string a = axis.empty() ? "world" : axis;
    return what + " #" + std::to_string(++counts[a]) + " over " + a;
  }
  std::map<std::string, int64_t> counts;

  static bool started(int rc, const char *call, std::string &error) {
    if (rc == MPI_SUCCESS)
      return true;
    error = std::string(call) + " failed with MPI code " + std::to_string(rc);
    return false;
  }

  bool wait(MPI_Request &r, const std::string &what, MPI_Comm comm, std::string &error,
            int peer = -1) {
    std::vector<MPI_Request> one{r};
    bool ok = wait(one, what, comm, error, peer);
    r = one[0];
    return ok;
  }

  /// A gap between two polls of a wait longer than this: the rank did not
  /// run in between (stopped, as by SIGSTOP or a debugger, or not
  /// scheduled). That time does not count against the timeout (a job
  /// stopped and continued as a whole goes on), and a rank that finds the
  /// others' watchdog fired while it was away says it was the one stopped.
  static constexpr std::chrono::milliseconds kAbsence{500};

  /// Completes `requests` (the operation `what` among the ranks of `comm`,
  /// or with world rank `peer` for a transfer) under the watchdog: polled (a
  /// sleeping wait after the first millisecond, not a core spinning), and
  /// failed after timeout() seconds naming the ranks that did not arrive.
  /// After the first millisecond it also listens for the watchdog messages
  /// of other ranks: once one has fired, this rank tells every rank where
  /// it waits, so that the rank that timed out first can name the rank the
  /// others wait for before its abort ends the job.
  bool wait(std::vector<MPI_Request> &requests, const std::string &what, MPI_Comm comm,
            std::string &error, int peer = -1) {
    Clock::time_point start = Clock::now(), last = start;
    Clock::duration absent{};
    bool told = false;
    for (int polls = 0;; ++polls) {
      int done = 0;
      if (MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE) !=
          MPI_SUCCESS) {
        error = what + " failed";
        return false;
      }
      if (done)
        return true;
      Clock::time_point now = Clock::now();
      if (now - last > kAbsence)
        absent += now - last;
      last = now;
      Clock::duration waited = now - start;
      if (waited <= std::chrono::milliseconds(1))
        continue;
      hearWatchdogs();
      if (alarm && absent > kAbsence) {
        error = stoppedIn(what, comm, peer, start, absent);
        return false;
      }
      if (alarm && !told) {
        tell(what, members(comm, peer), start, absent, /*fired=*/false);
        told = true;
      }
      if (timeoutS > 0 && waited - absent > std::chrono::duration<double>(timeoutS)) {
        error = timedOut(what, members(comm, peer), start, absent);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 20 : 200));
    }
  }

  /// Where a rank waits, as its watchdog message says.
  struct Whereabouts {
    std::string what;
    /// The world ranks taking part in it.
    std::vector<int> members;
    /// When the rank came to it, on this rank's clock (when the message
    /// came less how long the rank had waited).
    Clock::time_point entered;
    /// Seconds of its wait the rank did not run.
    double absentS = 0;
    /// Its own watchdog fired (else it answers another rank's).
    bool fired = false;
    /// When its first message came, and when one saying its watchdog fired
    /// came (if one did), on this rank's clock.
    Clock::time_point firstHeard, firedHeard;
    bool firedSeen = false;
  };
  /// A watchdog message on the wire: this header, then `count` int32 world
  /// ranks (the members).
  struct WireHeader {
    double waitedS, absentS;
    int32_t fired, count;
    char what[kWhereBytes];
  };
  /// The latest whereabouts each rank has sent.
  std::map<int, Whereabouts> heard;
  /// Some rank's watchdog fired (this rank's or one it heard), and since
  /// when this rank knows.
  bool alarm = false;
  std::optional<Clock::time_point> alarmSince;
  /// Messages sent, kept until the job ends (their sends are not waited for).
  std::list<std::vector<char>> sentMessages;
  std::vector<MPI_Request> sentRequests;

  /// The world ranks of `comm`, or this rank and `peer` for a transfer.
  std::vector<int> members(MPI_Comm comm, int peer) const {
    if (peer >= 0)
      return {rank_, peer};
    int n = 1;
    MPI_Comm_size(comm, &n);
    std::vector<int> local(static_cast<size_t>(n)), world(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      local[size_t(i)] = i;
    MPI_Group g, wg;
    MPI_Comm_group(comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_translate_ranks(g, n, local.data(), wg, world.data());
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    return world;
  }

  /// Tells every other rank that this rank waits in `what` (since `start`,
  /// `absent` of it not running).
  void tell(const std::string &what, const std::vector<int> &with, Clock::time_point start,
            Clock::duration absent, bool fired) {
    alarm = true;
    if (!alarmSince)
      alarmSince = Clock::now();
    WireHeader h{};
    h.waitedS = std::chrono::duration<double>(Clock::now() - start).count();
    h.absentS = std::chrono::duration<double>(absent).count();
    h.fired = fired;
    h.count = int32_t(with.size());
    std::strncpy(h.what, what.c_str(), kWhereBytes - 1);
    std::vector<char> &buf = sentMessages.emplace_back(sizeof(h) + with.size() * sizeof(int32_t));
    std::memcpy(buf.data(), &h, sizeof(h));
    for (size_t i = 0; i < with.size(); ++i) {
      int32_t r = with[i];
      std::memcpy(buf.data() + sizeof(h) + i * sizeof(int32_t), &r, sizeof(r));
    }
    for (int r = 0; r < size_; ++r) {
      MPI_Request s;
      if (r != rank_ && MPI_Isend(buf.data(), int(buf.size()), MPI_BYTE, r, kWatchdogTag,
                                  MPI_COMM_WORLD, &s) == MPI_SUCCESS)
        sentRequests.push_back(s);
    }
  }

  /// Takes the watchdog messages that have come (into `heard`).
  void hearWatchdogs() {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kWatchdogTag, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS ||
          !flag)
        return;
      int bytes = 0;
      MPI_Get_count(&st, MPI_BYTE, &bytes);
      std::vector<char> buf(size_t(std::max(bytes, 0)));
      MPI_Recv(buf.data(), bytes, MPI_BYTE, st.MPI_SOURCE, kWatchdogTag, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      WireHeader h{};
      if (buf.size() < sizeof(h))
        continue;
      std::memcpy(&h, buf.data(), sizeof(h));
      if (h.count < 0 || buf.size() != sizeof(h) + size_t(h.count) * sizeof(int32_t))
        continue;
      Whereabouts w;
      w.what.assign(h.what, strnlen(h.what, kWhereBytes));
      for (int32_t i = 0; i < h.count; ++i) {
        int32_t r = 0;
        std::memcpy(&r, buf.data() + sizeof(h) + size_t(i) * sizeof(int32_t), sizeof(r));
        w.members.push_back(r);
      }
      w.entered = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(h.waitedS));
      w.absentS = h.absentS;
      w.fired = h.fired != 0;
      Clock::time_point now = Clock::now();
      auto was = heard.find(st.MPI_SOURCE);
      w.firstHeard = was == heard.end() ? now : was->second.firstHeard;
      bool firedBefore = was != heard.end() && was->second.firedSeen;
      w.firedSeen = w.fired || firedBefore;
      w.firedHeard = firedBefore ? was->second.firedHeard : now;
      if (!alarmSince || now < *alarmSince)
        alarmSince = now;
      heard[st.MPI_SOURCE] = std::move(w);
      alarm = true;
    }
  }

  /// The error of a rank that did not run for `absent` of its wait in
  /// `what` while another rank's watchdog fired: it was the rank stopped.
  std::string stoppedIn(const std::string &what, MPI_Comm comm, int peer, Clock::time_point start,
                        Clock::duration absent) {
    tell(what, members(comm, peer), start, absent, /*fired=*/false);
    char limit[32];
    std::snprintf(limit, sizeof(limit), "%g s", timeoutS);
    char away[32];
    std::snprintf(away, sizeof(away), "%.1f s", std::chrono::duration<double>(absent).count());
    std::string out = what + ": this rank did not run for " + away +
                      " while it waited in it (stopped, as by SIGSTOP or a debugger, or not "
                      "scheduled), and meanwhile the collective watchdog (--collective-timeout " +
                      limit + ") fired on";
    int shown = 0;
    for (const auto &[r, w] : heard)
      if (w.firedSeen && shown++ < 4)
        out += std::string(shown > 1 ? "," : "") + " rank " + std::to_string(r) + " (in " + w.what +
               ")";
    if (shown == 0)
      out += " another rank";
    else if (shown > 4)
      out += " and " + std::to_string(shown - 4) + " more rank(s)";
    return out + ": the other ranks waited for this rank";
  }

  /// The watchdog's error for `what` (Communicator::watchdogError), whose
  /// world ranks are `with`: this rank tells every rank where it waits and
  /// listens for a few seconds for the ranks it waits for, and for the
  /// ranks those wait for in turn where they wait elsewhere; a rank that
  /// says nothing is stopped, hung or dead. Every rank waiting under the
  /// watchdog answers (wait()), so the first rank to time out names the
  /// stopped rank even where it is not a member of the operation.
  std::string timedOut(const std::string &what, const std::vector<int> &with,
                       Clock::time_point start, Clock::duration absent) {
    tell(what, with, start, absent, /*fired=*/true);
    // An operation is its label and its ranks: labels are numbered per
    // axis, so two groups of one axis have operations of the same label.
    std::vector<int> mine = with;
    std::sort(mine.begin(), mine.end());
    auto inThisOne = [&](const Whereabouts &w) {
      if (w.what != what)
        return false;
      std::vector<int> theirs = w.members;
      std::sort(theirs.begin(), theirs.end());
      return theirs == mine;
    };
    // The ranks this one waits for, directly or through others waiting
    // elsewhere; those not heard from yet.
    std::vector<bool> reached;
    auto unheard = [&] {
      std::vector<bool> &seen = reached;
      seen.assign(static_cast<size_t>(size_), false);
      std::vector<int> todo, missing;
      for (int r : with)
        if (r != rank_ && !seen[size_t(r)])
          seen[size_t(r)] = true, todo.push_back(r);
      while (!todo.empty()) {
        int r = todo.back();
        todo.pop_back();
        auto it = heard.find(r);
        if (it == heard.end()) {
          missing.push_back(r);
          continue;
        }
        if (inThisOne(it->second))
          continue;
        for (int m : it->second.members)
          if (m >= 0 && m < size_ && m != rank_ && !seen[size_t(m)])
            seen[size_t(m)] = true, todo.push_back(m);
      }
      std::sort(missing.begin(), missing.end());
      return missing;
    };
    Clock::time_point until =
        Clock::now() + std::chrono::milliseconds(int64_t(1000 * watchdogListenSeconds()));
    std::vector<int> missing;
    for (;;) {
      hearWatchdogs();
      missing = unheard();
      if (missing.empty() || Clock::now() >= until)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    WatchdogFindings found;
    const double half = timeoutS / 2;
    auto secondsBetween = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    for (int r : with) {
      if (r == rank_)
        continue;
      auto it = heard.find(r);
      if (it == heard.end()) {
        found.silent.push_back(r);
        continue;
      }
      const Whereabouts &w = it->second;
      if (w.absentS > std::chrono::duration<double>(kAbsence).count())
        found.stopped.push_back({r, w.absentS});
      if (w.firedSeen && w.firedHeard < start)
        found.gaveUp.push_back({r, w.what});
      if (!inThisOne(w)) {
        found.elsewhere.push_back({r, w.what});
        continue;
      }
      double after = secondsBetween(start, w.entered);
      if (after > half)
        found.late.push_back({r, "", after, -1});
      else if (-after > half)
        found.before.push_back({r, -after});
    }
    // The operations members wait in elsewhere, and the ones their members
    // wait in: a rank that came to one long after another rank of it (a
    // rank stopped outside any wait and continued since) is named too.
    std::map<std::pair<std::string, std::vector<int>>, std::vector<int>> ops;
    for (const auto &[r, w] : heard) {
      std::vector<int> key = w.members;
      std::sort(key.begin(), key.end());
      if (!inThisOne(w) && std::binary_search(key.begin(), key.end(), r))
        ops[{w.what, key}].push_back(r);
    }
    for (const auto &[key, ranks] : ops) {
      int first = ranks.front();
      for (int r : ranks)
        if (heard[r].entered < heard[first].entered)
          first = r;
      for (int r : ranks) {
        double after = secondsBetween(heard[first].entered, heard[r].entered);
        if (after > half)
          found.late.push_back({r, key.first, after, first});
      }
    }
    for (int r : missing)
      if (std::find(with.begin(), with.end(), r) == with.end())
        found.behind.push_back(r);
    // Ranks that said where they wait only long after the watchdog's first
    // message reached this rank (one stopped outside any wait and continued
    // since, or busy outside the collectives): a rank waiting under the
    // watchdog answers within milliseconds.
    const double slowAnswer = watchdogListenSeconds() / 2;
    for (const auto &[r, w] : heard) {
      double after = secondsBetween(*alarmSince, w.firstHeard);
      bool named = std::any_of(found.late.begin(), found.late.end(),
                               [&](const WatchdogFindings::Late &l) { return l.rank == r; }) ||
                   std::any_of(found.stopped.begin(), found.stopped.end(),
                               [&](const std::pair<int, double> &p) { return p.first == r; });
      if (after > slowAnswer && !named && reached[size_t(r)])
        found.slow.push_back({r, after});
    }
    // Requests to silent ranks stay posted: the job ends now.
    return watchdogError(what, found);
  }

  struct Pending {
    std::vector<float> data;
    std::vector<MPI_Request> requests;
    std::string what;
    int peer;
  };

  std::list<Pending> pending;
  struct Scale {
    float *data;
    int64_t count;
    int ranks;
  };
  struct Started {
    std::vector<MPI_Request> requests;
    std::vector<Scale> scale;
    MPI_Comm comm = MPI_COMM_WORLD;
    std::string what;
  };
  std::map<int, Started> buckets;
  std::map<int, InFlight> gathers;  // prefetched parameter gathers
  std::map<int, InFlight> scatters; // gradient chunks in flight
  int rank_ = 0, size_ = 1, dp_ = 1, cp_ = 1, tp_ = 1;
  MPI_Comm dpComm = MPI_COMM_WORLD, tpComm = MPI_COMM_WORLD, ppComm = MPI_COMM_WORLD,
           tiedComm = MPI_COMM_NULL, epComm = MPI_COMM_WORLD, edpComm = MPI_COMM_WORLD,
           cpComm = MPI_COMM_WORLD;
  MPI_Comm commFor(const std::string &axis) const {
    return axis == "tp"        ? tpComm
           : axis == "dp"      ? dpComm
           : axis == "pp"      ? ppComm
           : axis == "pp_tied" ? tiedComm
           : axis == "cp"      ? cpComm
           : axis == "ep"      ? epComm
           : axis == "edp"     ? edpComm
                               : MPI_COMM_WORLD;
  }
};
} // namespace

bool haveMPI() { return true; }

std::unique_ptr<Communicator> makeMPICommunicator(int *argc, char ***argv, std::string &error) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized && MPI_Init(argc, argv) != MPI_SUCCESS) {
    error = "MPI_Init failed";
    return nullptr;
  }
  return std::make_unique<MPICommunicator>();
}

void abortAll(int code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void finalizeMPI() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    MPI_Finalize();
}
#else
bool haveMPI() { return false; }
std::unique_ptr<Communicator> makeMPICommunicator(int *, char ***, std::string &error) {
  error = "this llm-run was built without MPI (install libopenmpi-dev and rebuild)";
  return nullptr;
}
void abortAll(int code) { std::exit(code); }
void finalizeMPI() {}
#endif

} // namespace llmopt::runtime
