//===- StagedCommTest.cpp - the host-staged communicator ------------------===//
//
// Two ranks (threads) whose "device" memory the host communicator must never
// see: every collective of the staged communicator reaches the host one on
// host copies only, and writes its results back to the device buffers when
// it completes (for the non-blocking ones: at the wait, not before).
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/staged_comm.h"

#include "gtest/gtest.h"

#include <map>
#include <mutex>
#include <thread>
#include <vector>

using namespace llmopt::runtime;

namespace {

/// Device memory: ranges the host communicator must not be handed.
struct FakeDevice {
  std::mutex mu;
  std::vector<std::pair<const float *, const float *>> ranges;
  std::vector<float> &alloc(std::vector<float> &v) {
    std::lock_guard<std::mutex> lock(mu);
    ranges.push_back({v.data(), v.data() + v.size()});
    return v;
  }
  bool holds(const float *p) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto [b, e] : ranges)
      if (p >= b && p < e)
        return true;
    return false;
  }
};

/// Copies that count themselves (and can fail), on host memory the staging
/// hands out itself (as the CUDA staging's page-locked buffers).
class CountingStaging final : public Staging {
public:
  explicit CountingStaging(FakeDevice &dev) : dev(dev) {}
  int toHostCalls = 0, toDeviceCalls = 0;
  bool fail = false, failAlloc = false;
  /// Host buffers handed out and not given back.
  std::map<const float *, size_t> live;
  float *allocHost(size_t count) override {
    if (failAlloc)
      return nullptr;
    float *p = Staging::allocHost(count);
    live[p] = count;
    return p;
  }
  void freeHost(float *p, size_t count) override {
    auto it = live.find(p);
    EXPECT_TRUE(it != live.end() && it->second == count);
    live.erase(p);
    Staging::freeHost(p, count);
  }
  bool ours(const float *host, int64_t count) const {
    for (auto [p, n] : live)
      if (host >= p && host + count <= p + n)
        return true;
    return false;
  }
  bool toHost(float *host, const float *device, int64_t count, std::string &error) override {
    ++toHostCalls;
    if (fail)
      return (error = "injected staging failure", false);
    EXPECT_TRUE(dev.holds(device));
    EXPECT_FALSE(dev.holds(host));
    EXPECT_TRUE(ours(host, count));
    std::copy_n(device, count, host);
    return true;
  }
  bool toDevice(float *device, const float *host, int64_t count, std::string &error) override {
    ++toDeviceCalls;
    EXPECT_TRUE(dev.holds(device));
    EXPECT_TRUE(ours(host, count));
    std::copy_n(host, count, device);
    return true;
  }

private:
  FakeDevice &dev;
};

/// A host communicator that refuses device pointers, over a thread rank.
class CheckedHost final : public Communicator {
public:
  CheckedHost(std::unique_ptr<Communicator> inner, FakeDevice &dev)
      : inner(std::move(inner)), dev(dev) {}
  int rank() const override { return inner->rank(); }
  int size() const override { return inner->size(); }
  bool host(const float *p, std::string &error) {
    if (dev.holds(p))
      return (error = "the host communicator was handed device memory", false);
    return true;
  }
  bool allReduce(const std::string &axis, float *data, int64_t count, bool average,
                 std::string &error) override {
    return host(data, error) && inner->allReduce(axis, data, count, average, error);
  }
  bool allReduceMax(const std::string &axis, float *data, int64_t count,
                    std::string &error) override {
    return host(data, error) && Communicator::allReduceMax(axis, data, count, error);
  }
  bool startAllReduce(const std::string &axis, float *data, int64_t count, bool average, int bucket,
                      std::string &error) override {
    return host(data, error) &&
           Communicator::startAllReduce(axis, data, count, average, bucket, error);
  }
  bool allGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                       std::string &error) override {
    return host(mine, error) && host(all, error) &&
           Communicator::allGatherBlocks(axis, mine, all, count, error);
  }
  bool reduceScatterBlocks(const std::string &axis, const float *all, float *mine, int64_t count,
                           std::string &error) override {
    return host(mine, error) && host(all, error) &&
           Communicator::reduceScatterBlocks(axis, all, mine, count, error);
  }
  bool allToAllBlocks(const std::string &axis, const float *send, float *recv, int64_t count,
                      std::string &error) override {
    return host(send, error) && host(recv, error) &&
           Communicator::allToAllBlocks(axis, send, recv, count, error);
  }
  bool reduceScatter(const std::string &axis, float *data, int64_t count, bool average,
                     std::string &error) override {
    return host(data, error) && Communicator::reduceScatter(axis, data, count, average, error);
  }
  bool allGather(const std::string &axis, float *data, int64_t count, std::string &error) override {
    return host(data, error) && Communicator::allGather(axis, data, count, error);
  }

private:
  std::unique_ptr<Communicator> inner;
  FakeDevice &dev;
};

/// Runs `body(rank, staged, device, staging)` on two thread ranks.
template <typename F> void onTwoRanks(F body) {
  ThreadGroup group(2);
  FakeDevice dev;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      CheckedHost host(group.member(r), dev);
      CountingStaging staging(dev);
      {
        StagedCommunicator staged(host, staging);
        body(r, staged, dev, staging);
        EXPECT_EQ(staged.inFlight(), 0u);
      }
      // Every host copy came from the staging and went back to it.
      EXPECT_TRUE(staging.live.empty());
    });
  for (std::thread &t : threads)
    t.join();
}

} // namespace

TEST(StagedComm, AllReduceReachesTheHostOnCopiesOnly) {
  onTwoRanks([](int r, StagedCommunicator &c, FakeDevice &dev, CountingStaging &s) {
    std::vector<float> buf = {float(r + 1), 10.0f * float(r + 1), -1.0f};
    dev.alloc(buf);
    std::string error;
    ASSERT_TRUE(c.allReduce("dp", buf.data(), 3, /*average=*/false, error)) << error;
    EXPECT_EQ(buf, (std::vector<float>{3, 30, -2}));
    ASSERT_TRUE(c.allReduce("dp", buf.data(), 3, /*average=*/true, error)) << error;
    EXPECT_EQ(buf, (std::vector<float>{3, 30, -2}));
    std::vector<float> mx = {float(r), float(1 - r)};
    dev.alloc(mx);
    ASSERT_TRUE(c.allReduceMax("tp", mx.data(), 2, error)) << error;
    EXPECT_EQ(mx, (std::vector<float>{1, 1}));
    EXPECT_EQ(s.toHostCalls, 3);
    EXPECT_EQ(s.toDeviceCalls, 3);
  });
}

TEST(StagedComm, NonBlockingResultsLandAtTheWait) {
  onTwoRanks([](int r, StagedCommunicator &c, FakeDevice &dev, CountingStaging &) {
    std::string error;
    // A bucket of two gradients.
    std::vector<float> a = {float(r), 1}, b = {2, float(2 * r)};
    dev.alloc(a);
    dev.alloc(b);
    ASSERT_TRUE(c.startAllReduce("dp", a.data(), 2, false, /*bucket=*/3, error)) << error;
    ASSERT_TRUE(c.startAllReduce("dp", b.data(), 2, false, /*bucket=*/3, error)) << error;
    EXPECT_EQ(c.inFlight(), 2u);
    // The host reduction ran at once (thread ranks): the device buffers
    // still hold their own values until the wait.
    EXPECT_EQ(a, (std::vector<float>{float(r), 1}));
    ASSERT_TRUE(c.waitAllReduce(3, error)) << error;
    EXPECT_EQ(a, (std::vector<float>{1, 2}));
    EXPECT_EQ(b, (std::vector<float>{4, 2}));
    // A ZeRO-3 prefetch: blocks of 2 from each rank.
    std::vector<float> mine = {float(10 * r), float(10 * r + 1)}, all(4, -7.0f);
    dev.alloc(mine);
    dev.alloc(all);
    ASSERT_TRUE(c.startAllGatherBlocks("dp", mine.data(), all.data(), 2, /*event=*/5, error))
        << error;
    EXPECT_EQ(all, (std::vector<float>(4, -7.0f)));
    ASSERT_TRUE(c.waitAllGather(5, error)) << error;
    EXPECT_EQ(all, (std::vector<float>{0, 1, 10, 11}));
    // A ZeRO-2 gradient scatter: rank r keeps block r of the sum.
    std::vector<float> grads = {1, 2, 3, float(4 + r)}, chunk(2, -7.0f);
    dev.alloc(grads);
    dev.alloc(chunk);
    ASSERT_TRUE(
        c.startReduceScatterBlocks("dp", grads.data(), chunk.data(), 2, /*handle=*/0, error))
        << error;
    EXPECT_EQ(chunk, (std::vector<float>(2, -7.0f)));
    ASSERT_TRUE(c.waitReduceScatter(0, error)) << error;
    EXPECT_EQ(chunk, r == 0 ? (std::vector<float>{2, 4}) : (std::vector<float>{6, 9}));
  });
}

TEST(StagedComm, BlockCollectivesAndChunks) {
  onTwoRanks([](int r, StagedCommunicator &c, FakeDevice &dev, CountingStaging &) {
    std::string error;
    // Expert all-to-all: block j goes to rank j.
    std::vector<float> send = {float(10 * r), float(10 * r + 1)}, recv(2, -1.0f);
    dev.alloc(send);
    dev.alloc(recv);
    ASSERT_TRUE(c.allToAllBlocks("ep", send.data(), recv.data(), 1, error)) << error;
    EXPECT_EQ(recv, r == 0 ? (std::vector<float>{0, 10}) : (std::vector<float>{1, 11}));
    std::vector<float> mine = {float(r + 1)}, all(2, 0.0f);
    dev.alloc(mine);
    dev.alloc(all);
    ASSERT_TRUE(c.allGatherBlocks("cp", mine.data(), all.data(), 1, error)) << error;
    EXPECT_EQ(all, (std::vector<float>{1, 2}));
    std::vector<float> whole = {1, 2, 3, float(r)}, part(2, 0.0f);
    dev.alloc(whole);
    dev.alloc(part);
    ASSERT_TRUE(c.reduceScatterBlocks("tp", whole.data(), part.data(), 2, error)) << error;
    EXPECT_EQ(part, r == 0 ? (std::vector<float>{2, 4}) : (std::vector<float>{6, 1}));
    // ZeRO-1 parameters: each rank's chunk of 3 elements gathered in place.
    std::vector<float> p = r == 0 ? std::vector<float>{1, 2, 99} : std::vector<float>{99, 99, 3};
    dev.alloc(p);
    ASSERT_TRUE(c.allGather("dp", p.data(), 3, error)) << error;
    EXPECT_EQ(p, (std::vector<float>{1, 2, 3}));
    std::vector<float> g = {1, 1, float(r)};
    dev.alloc(g);
    ASSERT_TRUE(c.reduceScatter("dp", g.data(), 3, /*average=*/true, error)) << error;
    Chunk own = shardChunk(3, 2, r);
    for (int64_t i = own.begin; i < own.end; ++i)
      EXPECT_EQ(g[size_t(i)], i == 2 ? 0.5f : 1.0f);
  });
}

TEST(StagedComm, StagingFailuresAreReported) {
  FakeDevice dev;
  SingleRank one;
  CountingStaging staging(dev);
  StagedCommunicator c(one, staging);
  std::vector<float> buf = {1, 2};
  dev.alloc(buf);
  std::string error;
  staging.fail = true;
  EXPECT_FALSE(c.allReduce("dp", buf.data(), 2, false, error));
  EXPECT_EQ(error, "injected staging failure");
  EXPECT_FALSE(c.send(1, 0, buf.data(), 2, error));
  EXPECT_EQ(c.inFlight(), 0u);
  // A world of one has no peer: the host communicator's refusal comes
  // through, and nothing is left held after the flush.
  staging.fail = false;
  error.clear();
  EXPECT_FALSE(c.send(1, 0, buf.data(), 2, error));
  EXPECT_NE(error.find("point-to-point"), std::string::npos) << error;
  ASSERT_TRUE(c.flush(error));
  EXPECT_EQ(c.inFlight(), 0u);
  EXPECT_TRUE(staging.live.empty());
  // No host memory for a copy: refused by name, nothing held or copied.
  staging.failAlloc = true;
  int copies = staging.toHostCalls;
  EXPECT_FALSE(c.allReduce("dp", buf.data(), 2, false, error));
  EXPECT_EQ(error, "out of host memory for 8 bytes of a staged collective");
  EXPECT_FALSE(c.startAllReduce("dp", buf.data(), 2, false, /*bucket=*/0, error));
  EXPECT_EQ(staging.toHostCalls, copies);
  // A started collective that could not start holds nothing.
  EXPECT_EQ(c.inFlight(), 0u);
  std::vector<float> all(2);
  dev.alloc(all);
  EXPECT_FALSE(c.startAllGatherBlocks("dp", buf.data(), all.data(), 2, /*event=*/0, error));
  EXPECT_FALSE(c.startReduceScatterBlocks("dp", buf.data(), all.data(), 2, /*handle=*/0, error));
  EXPECT_EQ(c.inFlight(), 0u);
  staging.failAlloc = false;
  staging.fail = true;
  EXPECT_FALSE(c.startAllReduce("dp", buf.data(), 2, false, /*bucket=*/0, error));
  EXPECT_EQ(error, "injected staging failure");
  EXPECT_EQ(c.inFlight(), 0u);
  EXPECT_TRUE(staging.live.empty());
}

/// agreeOnLaunch on `n` thread ranks, rank r passing settings(r): each
/// rank's result and error.
template <typename F> std::vector<std::pair<bool, std::string>> agreeOn(int n, F settings) {
  ThreadGroup group(n);
  std::vector<std::pair<bool, std::string>> out(size_t(n), {false, ""});
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> c = group.member(r);
      out[size_t(r)].first = agreeOnLaunch(*c, settings(r), out[size_t(r)].second);
    });
  for (std::thread &t : threads)
    t.join();
  return out;
}

TEST(LaunchAgreement, AlikeRanksPassAndOthersAreNamedOnEveryRank) {
  // Values past a float's 24 bits travel exactly (four 16-bit pieces).
  const int64_t big = int64_t(0x7edcba9876543210);
  auto alike = agreeOn(3, [&](int) {
    return std::vector<LaunchSetting>{{"plan", big, true}, {"--seed", -5}};
  });
  for (auto &[ok, error] : alike)
    EXPECT_TRUE(ok) << error;
  auto unlike = agreeOn(3, [&](int r) {
    return std::vector<LaunchSetting>{{"plan", r == 2 ? big + 1 : big, true},
                                      {"--seed", r == 1 ? 7 : 42}};
  });
  // The first setting that differs, the same words on every rank.
  for (auto &[ok, error] : unlike) {
    EXPECT_FALSE(ok);
    EXPECT_EQ(error, "the ranks were not launched alike: plan is 7edcba9876543210 (a hash) on "
                     "rank 0 but 7edcba9876543211 on rank 2; launch every rank with the same "
                     "plan and --seed");
  }
  auto seeds = agreeOn(7, [&](int r) {
    return std::vector<LaunchSetting>{{"--seed", r < 1 ? 42 : r}};
  });
  EXPECT_EQ(seeds[3].second, "the ranks were not launched alike: --seed is 42 on rank 0 but 1 on "
                             "rank 1, 2 on rank 2, 3 on rank 3, 4 on rank 4 and 2 more rank(s); "
                             "launch every rank with the same --seed");
  // A world of one has no one to disagree with.
  SingleRank one;
  std::string error;
  EXPECT_TRUE(agreeOnLaunch(one, {{"--seed", 1}}, error));
}
