//===- schedule.cpp - the order a pipeline stage runs its passes ----------===//

#include "llmopt-runtime/schedule.h"

#include <algorithm>
#include <map>

using namespace llmopt::schedule;

const char *llmopt::schedule::name(Kind kind) {
  switch (kind) {
  case Kind::Sequential:
    return "sequential";
  case Kind::GPipe:
    return "gpipe";
  case Kind::OneFOneB:
    return "1f1b";
  case Kind::Interleaved:
    return "interleaved";
  }
  return "?";
}

bool llmopt::schedule::parse(const std::string &text, Kind &kind) {
  for (Kind k : {Kind::Sequential, Kind::GPipe, Kind::OneFOneB, Kind::Interleaved})
    if (text == name(k)) {
      kind = k;
      return true;
    }
  return false;
}

std::vector<Pass> llmopt::schedule::stageOrder(Kind kind, int64_t micro, int64_t stages,
                                               int64_t stage, int64_t chunks) {
  std::vector<Pass> order;
  if (micro < 1 || stages < 1 || stage < 0 || stage >= stages || chunks < 1 ||
      (chunks > 1 && kind != Kind::Interleaved && kind != Kind::Sequential))
    return order;
  // All chunks of micro-batch m, forward (chunk order) or backward (reverse).
  auto whole = [&](int64_t m, bool backward) {
    for (int64_t c = 0; c < chunks; ++c)
      order.push_back({m, backward ? chunks - 1 - c : c, backward});
  };
  switch (kind) {
  case Kind::Sequential:
    for (int64_t m = 0; m < micro; ++m) {
      whole(m, false);
      whole(m, true);
    }
    return order;
  case Kind::Interleaved: {
    if (micro % stages)
      return order;
    const int64_t total = micro * chunks;
    auto mb = [&](int64_t k) { return (k / (stages * chunks)) * stages + k % stages; };
    auto chunk = [&](int64_t k) { return (k / stages) % chunks; };
    const int64_t warmup = std::min(total, (stages - stage - 1) * 2 + (chunks - 1) * stages);
    for (int64_t k = 0; k < warmup; ++k)
      order.push_back({mb(k), chunk(k), false});
    for (int64_t k = warmup; k < total; ++k) {
      order.push_back({mb(k), chunk(k), false});
      order.push_back({mb(k - warmup), chunks - 1 - chunk(k - warmup), true});
    }
    for (int64_t k = total - warmup; k < total; ++k)
      order.push_back({mb(k), chunks - 1 - chunk(k), true});
    return order;
  }
  case Kind::GPipe:
  case Kind::OneFOneB: {
    const int64_t warmup = kind == Kind::GPipe ? micro : std::min(micro, stages - stage) - 1;
    for (int64_t m = 0; m < warmup; ++m)
      whole(m, false);
    for (int64_t m = warmup; m < micro; ++m) {
      whole(m, false);
      whole(m - warmup, true);
    }
    for (int64_t m = std::max<int64_t>(0, micro - warmup); m < micro; ++m)
      whole(m, true);
    return order;
  }
  }
  return order;
}

int64_t llmopt::schedule::maxInFlight(const std::vector<Pass> &order, int64_t chunks) {
  std::map<int64_t, int64_t> left; // micro-batch -> passes still to run
  int64_t most = 0;
  for (const Pass &p : order) {
    auto it = left.find(p.microBatch);
    if (it == left.end())
      it = left.emplace(p.microBatch, 2 * chunks).first;
    most = std::max<int64_t>(most, int64_t(left.size()));
    if (--it->second == 0)
      left.erase(it);
  }
  return most;
}
