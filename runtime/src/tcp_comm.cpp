//===- tcp_comm.cpp - collectives over TCP ---------------------------------===//
//
// See tcp_comm.h. Frames: a 16-byte header (channel, tag, payload bytes)
// then the payload. Channel 0 carries point-to-point transfers (their tag is
// the plan's); channel 1 + k carries collectives over axis k, tagged with
// that axis' collective count, which every member of a group advances in the
// same order.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/tcp_comm.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace llmopt::runtime {
namespace {

using Clock = std::chrono::steady_clock;

struct Header {
  uint32_t channel;
  int32_t tag;
  uint64_t bytes;
};

bool writeAll(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0)
      return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

bool readAll(int fd, void *p, size_t n) {
  char *c = static_cast<char *>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r <= 0)
      return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

/// Waits until `fd` is readable or the deadline passes.
bool waitReadable(int fd, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      return false;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (r > 0)
      return true;
  }
}

void noDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/// A listening socket on `port` (0: any free port); its port in `bound`.
int listenOn(int port, int &bound, std::string &error) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    error = "socket() failed";
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(uint16_t(port));
  if (::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0 || ::listen(fd, 128) != 0) {
    error = "cannot listen on port " + std::to_string(port) + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  bound = ntohs(a.sin_port);
  return fd;
}

/// Connects to host:port, retrying until the deadline (the listener may
/// start later).
int connectTo(uint32_t hostOrder, int port, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(hostOrder);
    a.sin_port = htons(uint16_t(port));
    if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0) {
      noDelay(fd);
      return fd;
    }
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

const char *const kAxes[] = {"world", "dp", "tp", "pp", "cp", "ep", "edp", "pp_tied"};
/// The watchdog's messages (where a timed-out rank waits).
constexpr uint32_t kWatchdogChannel = 0xffffffffu;

class TcpCommunicator final : public Communicator {
public:
  TcpCommunicator(int rank, int world) : rank_(rank), world_(world), links(size_t(world)) {}

  ~TcpCommunicator() override {
    std::string ignored;
    flush(ignored);
    for (auto &l : links)
      if (l) {
        {
          std::lock_guard<std::mutex> g(l->m);
          l->stop = true;
        }
        l->cv.notify_all();
        ::shutdown(l->fd, SHUT_RDWR);
      }
    for (auto &l : links)
      if (l) {
        l->writer.join();
        l->reader.join();
        ::close(l->fd);
      }
  }

  bool join(const std::string &master, int port, double timeoutS, std::string &error) {
    auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeoutS * 1000));
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (::getaddrinfo(master.c_str(), nullptr, &hints, &res) != 0 || !res) {
      error = "cannot resolve MASTER_ADDR '" + master + "'";
      return false;
    }
    uint32_t masterHost = ntohl(reinterpret_cast<sockaddr_in *>(res->ai_addr)->sin_addr.s_addr);
    ::freeaddrinfo(res);
    // Every rank's address: rank 0 learns them at the rendezvous and tells
    // everyone.
    std::vector<uint32_t> hosts(static_cast<size_t>(world_));
    std::vector<int32_t> ports(static_cast<size_t>(world_));
    std::vector<int> fds(static_cast<size_t>(world_), -1);
    int myPort = 0;
    int lfd = listenOn(rank_ == 0 ? port : 0, myPort, error);
    if (lfd < 0)
      return false;
    auto accept = [&](int &peerRank, int32_t &peerPort, uint32_t &peerHost) -> int {
      if (!waitReadable(lfd, deadline))
        return -1;
      sockaddr_in a{};
      socklen_t len = sizeof(a);
      int fd = ::accept(lfd, reinterpret_cast<sockaddr *>(&a), &len);
      if (fd < 0)
        return -1;
      noDelay(fd);
      int32_t hello[2];
      if (!waitReadable(fd, deadline) || !readAll(fd, hello, sizeof(hello))) {
        ::close(fd);
        return -1;
      }
      peerRank = hello[0];
      peerPort = hello[1];
      peerHost = ntohl(a.sin_addr.s_addr);
      return fd;
    };
    if (rank_ == 0) {
      for (int n = 1; n < world_; ++n) {
        int r = 0;
        int32_t p = 0;
        uint32_t h = 0;
        int fd = accept(r, p, h);
        if (fd < 0) {
          error = "rendezvous: only " + std::to_string(n) + " of " + std::to_string(world_) +
                  " ranks connected to port " + std::to_string(port) + " within " +
                  std::to_string(int(timeoutS)) + " s";
          ::close(lfd);
          return false;
        }
        if (r <= 0 || r >= world_ || fds[size_t(r)] >= 0) {
          error = "rendezvous: a process announced rank " + std::to_string(r) +
                  " (duplicate or outside WORLD_SIZE " + std::to_string(world_) + ")";
          ::close(fd);
          ::close(lfd);
          return false;
        }
        fds[size_t(r)] = fd;
        hosts[size_t(r)] = h;
        ports[size_t(r)] = p;
      }
      for (int r = 1; r < world_; ++r)
        if (!writeAll(fds[size_t(r)], hosts.data(), hosts.size() * 4) ||
            !writeAll(fds[size_t(r)], ports.data(), ports.size() * 4)) {
          error = "rendezvous: cannot send the rank table to rank " + std::to_string(r);
          return false;
        }
    } else {
      int fd = connectTo(masterHost, port, deadline);
      int32_t hello[2] = {rank_, myPort};
      if (fd < 0 || !writeAll(fd, hello, sizeof(hello)) || !waitReadable(fd, deadline) ||
          !readAll(fd, hosts.data(), hosts.size() * 4) ||
          !readAll(fd, ports.data(), ports.size() * 4)) {
        error = "rendezvous: cannot reach rank 0 at " + master + ":" + std::to_string(port) +
                " within " + std::to_string(int(timeoutS)) + " s";
        ::close(lfd);
        return false;
      }
      fds[0] = fd;
      // The mesh: connect to the ranks below (except 0), accept the ones above.
      for (int r = 1; r < rank_; ++r) {
        int c = connectTo(hosts[size_t(r)], ports[size_t(r)], deadline);
        int32_t me[2] = {rank_, myPort};
        if (c < 0 || !writeAll(c, me, sizeof(me))) {
          error = "cannot connect to rank " + std::to_string(r);
          ::close(lfd);
          return false;
        }
        fds[size_t(r)] = c;
      }
      for (int n = rank_ + 1; n < world_; ++n) {
        int r = 0;
        int32_t p = 0;
        uint32_t h = 0;
        int c = accept(r, p, h);
        if (c < 0 || r <= rank_ || r >= world_ || fds[size_t(r)] >= 0) {
          error = "mesh: rank " + std::to_string(rank_) + " did not hear from every rank above it";
          ::close(lfd);
          return false;
        }
        fds[size_t(r)] = c;
      }
    }
    ::close(lfd);
    for (int r = 0; r < world_; ++r)
      if (r != rank_)
        start(r, fds[size_t(r)]);
    return true;
  }

  int rank() const override { return rank_; }
  int size() const override { return world_; }

  bool useMesh(int pp, int dp, int cp, int tp, std::string &error) override {
    if (pp * dp * cp * tp != world_) {
      error = "a " + std::to_string(pp) + " x " + std::to_string(dp) + " x " + std::to_string(cp) +
              " x " + std::to_string(tp) + " mesh needs " + std::to_string(pp * dp * cp * tp) +
              " ranks, not " + std::to_string(world_);
      return false;
    }
    pp_ = pp, dp_ = dp, cp_ = cp, tp_ = tp;
    return true;
  }

  bool useExpertAxes(int ep, std::string &error) override {
    if (dp_ % ep != 0) {
      error = "ep " + std::to_string(ep) + " does not divide dp " + std::to_string(dp_);
      return false;
    }
    ep_ = ep;
    return true;
  }

  void axisPosition(const std::string &axis, int &index, int &size) const override {
    std::vector<int> g = group(axis);
    size = int(g.size());
    index = 0;
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] == rank_)
        index = int(i);
  }

  // Collectives exchange blocks directly between the group's members: each
  // rank sends and receives about the data once per phase (a reduce-scatter
  // then an all-gather for an all-reduce), never the whole buffer to every
  // member. Sums add the members' blocks in group order starting from zero,
  // so every rank (and every run) gets the same bits.

  bool allReduce(const std::string &axis, float *data, int64_t count, bool average,
                 std::string &error) override {
    // Each member sums (and scales) its chunk, then the chunks are gathered.
    return reduceScatter(axis, data, count, average, error) && allGather(axis, data, count, error);
  }

  bool allGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                       std::string &error) override {
    Group g = groupOf(axis);
    std::copy(mine, mine + count, all + count * g.me);
    if (g.n <= 1)
      return true;
    int32_t tag = g.nextTag(counter);
    for (int j = 0; j < g.n; ++j)
      if (j != g.me)
        post(g.ranks[size_t(j)], g.channel, tag, mine, size_t(count) * sizeof(float));
    return gatherFrom(
        g, tag, "all-gather",
        [&](int i) {
          return Chunk{count * i, count * (i + 1)};
        },
        all, error);
  }

  bool reduceScatterBlocks(const std::string &axis, const float *all, float *mine, int64_t count,
                           std::string &error) override {
    Group g = groupOf(axis);
    if (g.n <= 1) {
      std::copy(all, all + count, mine);
      return true;
    }
    int32_t tag = g.nextTag(counter);
    for (int j = 0; j < g.n; ++j)
      if (j != g.me)
        post(g.ranks[size_t(j)], g.channel, tag, all + count * j, size_t(count) * sizeof(float));
    std::vector<float> sum;
    if (!sumInOrder(g, tag, "reduce-scatter", all + count * g.me, count, sum, error))
      return false;
    std::copy(sum.begin(), sum.end(), mine);
    return true;
  }

  bool allToAllBlocks(const std::string &axis, const float *send, float *recv, int64_t count,
                      std::string &error) override {
    Group g = groupOf(axis);
    std::copy(send + count * g.me, send + count * (g.me + 1), recv + count * g.me);
    if (g.n <= 1)
      return true;
    int32_t tag = g.nextTag(counter);
    for (int j = 0; j < g.n; ++j)
      if (j != g.me)
        post(g.ranks[size_t(j)], g.channel, tag, send + count * j, size_t(count) * sizeof(float));
    return gatherFrom(
        g, tag, "all-to-all",
        [&](int i) {
          return Chunk{count * i, count * (i + 1)};
        },
        recv, error);
  }

  bool reduceScatter(const std::string &axis, float *data, int64_t count, bool average,
                     std::string &error) override {
    Group g = groupOf(axis);
    if (g.n <= 1)
      return true;
    int32_t tag = g.nextTag(counter);
    for (int j = 0; j < g.n; ++j) {
      Chunk c = shardChunk(count, g.n, j);
      if (j != g.me)
        post(g.ranks[size_t(j)], g.channel, tag, data + c.begin, size_t(c.size()) * sizeof(float));
    }
    Chunk mine = shardChunk(count, g.n, g.me);
    std::vector<float> sum;
    if (!sumInOrder(g, tag, "reduce-scatter", data + mine.begin, mine.size(), sum, error))
      return false;
    for (size_t i = 0; i < sum.size(); ++i)
      data[mine.begin + int64_t(i)] = average ? sum[i] * (1.0f / float(g.n)) : sum[i];
    return true;
  }

  bool allGather(const std::string &axis, float *data, int64_t count, std::string &error) override {
    Group g = groupOf(axis);
    if (g.n <= 1)
      return true;
    int32_t tag = g.nextTag(counter);
    Chunk mine = shardChunk(count, g.n, g.me);
    for (int j = 0; j < g.n; ++j)
      if (j != g.me)
        post(g.ranks[size_t(j)], g.channel, tag, data + mine.begin,
             size_t(mine.size()) * sizeof(float));
    return gatherFrom(
        g, tag, "all-gather", [&](int i) { return shardChunk(count, g.n, i); }, data, error);
  }

  bool send(int peer, int tag, const float *data, int64_t count, std::string &error) override {
    if (!links[size_t(peer)]) {
      error = "no link to rank " + std::to_string(peer);
      return false;
    }
    post(peer, 0, tag, data, size_t(count) * sizeof(float));
    return true;
  }

  bool recv(int peer, int tag, float *data, int64_t count, std::string &error) override {
    std::vector<float> buf;
    if (!take(peer, 0, tag, buf, size_t(count) * sizeof(float),
              "receive from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")",
              {peer}, error))
      return false;
    std::memcpy(data, buf.data(), size_t(count) * sizeof(float));
    return true;
  }

  bool flush(std::string &error) override {
    for (size_t r = 0; r < links.size(); ++r) {
      Link *l = links[r].get();
      if (!l)
        continue;
      // The peer may close right after taking our last bytes: only a write
      // that failed means data was lost.
      std::unique_lock<std::mutex> g(l->m);
      if (!waitFor(g, l->cv, [&] { return l->outbox.empty() || l->writeFailed; })) {
        g.unlock();
        std::string what = "sending to rank " + std::to_string(r);
        error = timedOut(what, {int(r)});
        return false;
      }
      if (!l->outbox.empty()) {
        error = "rank " + std::to_string(r) + " closed its connection before taking our data";
        return false;
      }
    }
    return true;
  }

private:
  struct Frame {
    Header h;
    std::vector<char> data;
  };
  struct Link {
    int fd = -1;
    std::thread reader, writer;
    std::mutex m;
    std::condition_variable cv;
    std::deque<Frame> outbox;
    std::map<std::pair<uint32_t, int32_t>, std::deque<std::vector<char>>> inbox;
    bool closed = false, stop = false, writeFailed = false;
  };

  void start(int r, int fd) {
    links[size_t(r)] = std::make_unique<Link>();
    Link *l = links[size_t(r)].get();
    l->fd = fd;
    l->writer = std::thread([l] {
      for (;;) {
        Frame f;
        {
          std::unique_lock<std::mutex> g(l->m);
          l->cv.wait(g, [&] { return !l->outbox.empty() || l->stop; });
          if (l->outbox.empty())
            return;
          f = std::move(l->outbox.front());
        }
        bool ok =
            writeAll(l->fd, &f.h, sizeof(f.h)) && writeAll(l->fd, f.data.data(), f.data.size());
        std::lock_guard<std::mutex> g(l->m);
        if (!ok) {
          l->writeFailed = true;
          l->cv.notify_all();
          return;
        }
        l->outbox.pop_front();
        l->cv.notify_all();
      }
    });
    l->reader = std::thread([l] {
      for (;;) {
        Header h;
        std::vector<char> data;
        bool ok = readAll(l->fd, &h, sizeof(h));
        if (ok && h.bytes < (uint64_t(1) << 40)) {
          data.resize(size_t(h.bytes));
          ok = readAll(l->fd, data.data(), data.size());
        } else {
          ok = false;
        }
        std::lock_guard<std::mutex> g(l->m);
        if (!ok) {
          l->closed = true;
          l->cv.notify_all();
          return;
        }
        l->inbox[{h.channel, h.tag}].push_back(std::move(data));
        l->cv.notify_all();
      }
    });
  }

  /// A collective's group: its world ranks in axis order, this rank's
  /// index, and the channel whose count tags the collective's frames.
  struct Group {
    std::vector<int> ranks;
    int n = 1, me = 0;
    uint32_t channel = 0;
    int32_t nextTag(std::map<uint32_t, uint64_t> &counters) const {
      return int32_t(counters[channel]++ & 0x7fffffff);
    }
  };
  Group groupOf(const std::string &axis) const {
    Group g;
    g.ranks = group(axis);
    g.n = int(g.ranks.size());
    for (int i = 0; i < g.n; ++i)
      if (g.ranks[size_t(i)] == rank_)
        g.me = i;
    g.channel = channelOf(axis);
    return g;
  }

  /// 0 + block 0 + block 1 + ... over the group's members, in group order:
  /// this rank's block is `own`, the others' arrive tagged `tag`.
  bool sumInOrder(const Group &g, int32_t tag, const char *kind, const float *own, int64_t count,
                  std::vector<float> &sum, std::string &error) {
    sum.assign(size_t(count), 0.0f);
    std::vector<float> part;
    for (int i = 0; i < g.n; ++i) {
      const float *x = own;
      if (i != g.me) {
        if (!take(g.ranks[size_t(i)], g.channel, tag, part, size_t(count) * sizeof(float),
                  label(g, tag, kind), others(g), error))
          return false;
        x = part.data();
      }
      for (int64_t k = 0; k < count; ++k)
        sum[size_t(k)] += x[k];
    }
    return true;
  }

  /// The other members' blocks, tagged `tag`, into `out` at `at(i)`.
  template <typename At>
  bool gatherFrom(const Group &g, int32_t tag, const char *kind, At at, float *out,
                  std::string &error) {
    std::vector<float> part;
    for (int i = 0; i < g.n; ++i) {
      if (i == g.me)
        continue;
      Chunk c = at(i);
      if (!take(g.ranks[size_t(i)], g.channel, tag, part, size_t(c.size()) * sizeof(float),
                label(g, tag, kind), others(g), error))
        return false;
      std::copy(part.begin(), part.end(), out + c.begin);
    }
    return true;
  }

  void post(int r, uint32_t channel, int32_t tag, const void *data, size_t bytes) {
    Link *l = links[size_t(r)].get();
    Frame f{{channel, tag, bytes},
            std::vector<char>(static_cast<const char *>(data),
                              static_cast<const char *>(data) + bytes)};
    std::lock_guard<std::mutex> g(l->m);
    l->outbox.push_back(std::move(f));
    l->cv.notify_all();
  }

  /// The collective `kind` numbered `tag` on its group's axis: members
  /// count their collectives alike, so equal labels mean the same one.
  std::string label(const Group &g, int32_t tag, const char *kind) const {
    return std::string(kind) + " #" + std::to_string(int64_t(tag) + 1) + " over " +
           kAxes[g.channel - 1];
  }
  std::vector<int> others(const Group &g) const {
    std::vector<int> o;
    for (int r : g.ranks)
      if (r != rank_)
        o.push_back(r);
    return o;
  }

  /// cv.wait under the watchdog: false when timeout() passes first.
  template <typename Pred>
  bool waitFor(std::unique_lock<std::mutex> &g, std::condition_variable &cv, Pred done) {
    if (timeoutS <= 0) {
      cv.wait(g, done);
      return true;
    }
    return cv.wait_for(g, std::chrono::milliseconds(int64_t(timeoutS * 1000)), done);
  }

  /// The watchdog's error for `what` (Communicator::watchdogError): which of
  /// `members` did not arrive at it: this rank tells every
  /// rank where it waits and listens to the members for a few seconds (their reader
  /// threads take the message even while they wait themselves); a rank that
  /// says nothing is stopped, hung or dead, one that waits elsewhere is
  /// named with where.
  std::string timedOut(const std::string &what, const std::vector<int> &members) {
    // Every rank hears it: one waiting on this rank elsewhere learns where.
    for (int r = 0; r < world_; ++r)
      if (r != rank_)
        post(r, kWatchdogChannel, 0, what.data(), what.size());
    auto until = Clock::now() + std::chrono::milliseconds(int64_t(1000 * watchdogListenSeconds()));
    std::vector<int> silent;
    std::vector<std::pair<int, std::string>> elsewhere;
    for (int r : members) {
      Link *l = links[size_t(r)].get();
      std::unique_lock<std::mutex> g(l->m);
      auto key = std::make_pair(kWatchdogChannel, int32_t(0));
      bool heard = l->cv.wait_until(g, until, [&] {
        auto it = l->inbox.find(key);
        return (it != l->inbox.end() && !it->second.empty()) || l->closed;
      });
      auto it = l->inbox.find(key);
      if (!heard || it == l->inbox.end() || it->second.empty()) {
        silent.push_back(r);
        continue;
      }
      std::string theirs(it->second.front().begin(), it->second.front().end());
      if (theirs != what)
        elsewhere.push_back({r, theirs});
    }
    return watchdogError(what, silent, elsewhere);
  }

  bool take(int r, uint32_t channel, int32_t tag, std::vector<float> &out, size_t bytes,
            const std::string &what, const std::vector<int> &members, std::string &error) {
    Link *l = links[size_t(r)].get();
    std::unique_lock<std::mutex> g(l->m);
    auto key = std::make_pair(channel, tag);
    if (!waitFor(g, l->cv, [&] {
          auto it = l->inbox.find(key);
          return (it != l->inbox.end() && !it->second.empty()) || l->closed;
        })) {
      g.unlock();
      error = timedOut(what, members);
      return false;
    }
    auto it = l->inbox.find(key);
    if (it == l->inbox.end() || it->second.empty()) {
      error = "rank " + std::to_string(r) + " closed its connection (it failed or exited)";
      return false;
    }
    std::vector<char> data = std::move(it->second.front());
    it->second.pop_front();
    if (data.size() != bytes) {
      error = "rank " + std::to_string(r) + " sent " + std::to_string(data.size()) +
              " bytes where " + std::to_string(bytes) + " were expected";
      return false;
    }
    out.resize(bytes / sizeof(float));
    std::memcpy(out.data(), data.data(), bytes);
    return true;
  }

  uint32_t channelOf(const std::string &axis) const {
    for (uint32_t i = 0; i < sizeof(kAxes) / sizeof(kAxes[0]); ++i)
      if (axis == kAxes[i])
        return 1 + i;
    return 1; // the world
  }

  /// World ranks of this rank's group on `axis`, in axis order
  /// (rank = ((pp x dp + dp) x cp + cp) x tp + tp; ep and edp split dp).
  std::vector<int> group(const std::string &axis) const {
    int stageSize = dp_ * cp_ * tp_;
    int stage = rank_ / stageSize, d = (rank_ / (cp_ * tp_)) % dp_, c = (rank_ / tp_) % cp_,
        t = rank_ % tp_;
    auto at = [&](int s, int dd, int cc, int tt) { return ((s * dp_ + dd) * cp_ + cc) * tp_ + tt; };
    std::vector<int> g;
    if (axis == "tp")
      for (int i = 0; i < tp_; ++i)
        g.push_back(at(stage, d, c, i));
    else if (axis == "dp")
      for (int i = 0; i < dp_; ++i)
        g.push_back(at(stage, i, c, t));
    else if (axis == "cp")
      for (int i = 0; i < cp_; ++i)
        g.push_back(at(stage, d, i, t));
    else if (axis == "pp")
      for (int i = 0; i < pp_; ++i)
        g.push_back(at(i, d, c, t));
    else if (axis == "pp_tied") {
      if (pp_ > 1 && (stage == 0 || stage == pp_ - 1)) {
        g.push_back(at(0, d, c, t));
        g.push_back(at(pp_ - 1, d, c, t));
      }
    } else if (axis == "ep")
      for (int i = 0; i < ep_; ++i)
        g.push_back(at(stage, (d / ep_) * ep_ + i, c, t));
    else if (axis == "edp")
      for (int i = 0; i < dp_ / ep_; ++i)
        g.push_back(at(stage, i * ep_ + d % ep_, c, t));
    else
      for (int i = 0; i < world_; ++i)
        g.push_back(i);
    return g;
  }

  int rank_, world_;
  int pp_ = 1, dp_ = 1, cp_ = 1, tp_ = 1, ep_ = 1;
  std::vector<std::unique_ptr<Link>> links;
  std::map<uint32_t, uint64_t> counter;
};

} // namespace

std::unique_ptr<Communicator> makeTcpCommunicator(int rank, int world,
                                                  const std::string &masterAddr, int port,
                                                  double timeoutS, std::string &error) {
  if (world < 1 || rank < 0 || rank >= world) {
    error = "RANK " + std::to_string(rank) + " is outside WORLD_SIZE " + std::to_string(world);
    return nullptr;
  }
  if (port <= 0 || port > 65535) {
    error = "MASTER_PORT " + std::to_string(port) + " is not a TCP port";
    return nullptr;
  }
  auto comm = std::make_unique<TcpCommunicator>(rank, world);
  if (!comm->join(masterAddr, port, timeoutS, error))
    return nullptr;
  return comm;
}

} // namespace llmopt::runtime
