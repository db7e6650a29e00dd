//===- checkpoint.cpp - atomic, checksummed, resumable checkpoints --------===//

#include "llmopt-runtime/checkpoint.h"
#include "llmopt-runtime/json.h"
#include "llmopt-runtime/sha256.h"
#include "llmopt-runtime/shard.h"

#include <map>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

namespace llmopt::runtime {

namespace {
/// A float written so that reading it back gives the same float.
std::string exactFloat(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", double(v));
  return buf;
}

bool isHex(const std::string &s, size_t digits) {
  return s.size() == digits && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

/// A new run's id: 128 random bits as 32 hex digits (the OS's entropy,
/// mixed with the time and the process id where that is weak).
std::string newRunId() {
  Sha256 h;
  try {
    std::random_device rd;
    uint32_t words[8];
    for (uint32_t &w : words)
      w = rd();
    h.update(words, sizeof(words));
  } catch (...) {
  }
  int64_t now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
  int64_t pid = int64_t(::getpid());
  h.update(&now, sizeof(now));
  h.update(&pid, sizeof(pid));
  return h.hex().substr(0, 32);
}
} // namespace

namespace {

// Rank files. Version 3 (under version-2 manifests): headed by the step, the
// writing rank and the world size, so that a file renamed or swapped with
// another rank's is refused. Version 2 (version-1 manifests, still read):
// AdamW moments may be this rank's ZeRO chunk, with its own count.
constexpr char kMagic[8] = {'L', 'L', 'M', 'C', 'K', 'P', 'T', '3'};
constexpr char kMagicV2[8] = {'L', 'L', 'M', 'C', 'K', 'P', 'T', '2'};
/// The manifest this runtime writes (it reads 1 and 2).
constexpr int64_t kManifestVersion = 2;

std::string stepName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

/// Forces `path` (a file or a directory) to stable storage: a rename is
/// only as durable as the data it names and the directory that records it
/// (process death is survived without; a power loss is not).
bool syncPath(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

std::string parentOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

bool writeAll(const std::string &path, const std::string &data) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f || !f.write(data.data(), std::streamsize(data.size())))
      return false;
    f.flush();
    if (!f)
      return false;
  }
  return syncPath(tmp) && std::rename(tmp.c_str(), path.c_str()) == 0 && syncPath(parentOf(path));
}

bool makeDir(const std::string &path) {
  return ::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST;
}

/// Removes a directory of plain files (a stale partial checkpoint), without
/// a shell: no fork() in a process that MPI (and its registered memory)
/// may own.
void removeDir(const std::string &path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

/// One parameter of a rank file: its value and its chunk of the moments.
struct Saved {
  int64_t begin = 0, end = 0;
  bool valueChunk = false; // ZeRO-3: the value is the chunk too
  std::vector<float> value, m, v;
};

/// What a rank file must say of itself: the checkpoint's step, format and
/// world size, and the rank it is named for.
struct RankHeader {
  int64_t version = kManifestVersion; // the manifest's
  int64_t step = 0, rank = 0, world = 1;
};

/// Parses a rank file written under plan `of`, read through `take` (false
/// when the file has fewer bytes).
bool parseRank(const std::function<bool(void *, size_t)> &take, const Plan &of,
               const RankHeader &want, const std::string &where, std::map<std::string, Saved> &out,
               std::string &error) {
  char magic[8];
  bool v3 = want.version >= 2;
  if (!take(magic, 8) || std::memcmp(magic, v3 ? kMagic : kMagicV2, 8) != 0) {
    error = where + ": not a rank file of a version-" + std::to_string(want.version) +
            " checkpoint (it does not begin with " + std::string(v3 ? kMagic : kMagicV2, 8) + ")";
    return false;
  }
  int64_t savedStep = 0, savedRank = 0, savedWorld = 0, count = 0;
  if (!take(&savedStep, 8) || (v3 && (!take(&savedRank, 8) || !take(&savedWorld, 8)))) {
    error = where + ": truncated";
    return false;
  }
  if (savedStep != want.step) {
    error = where + ": holds step " + std::to_string(savedStep) + ", but the manifest is of step " +
            std::to_string(want.step) + ": the file belongs to another checkpoint";
    return false;
  }
  if (v3 && savedRank != want.rank) {
    error = where + ": holds rank " + std::to_string(savedRank) + "'s state, not rank " +
            std::to_string(want.rank) +
            "'s: the rank files were renamed or swapped; restore the checkpoint's own files";
    return false;
  }
  if (v3 && savedWorld != want.world) {
    error = where + ": written by a job of " + std::to_string(savedWorld) +
            " ranks, but the manifest says " + std::to_string(want.world) +
            ": the file belongs to another checkpoint";
    return false;
  }
  if (!take(&count, 8) || count < 0 || count > int64_t(of.params.size())) {
    error = where + ": does not match its plan's parameters";
    return false;
  }
  for (int64_t i = 0; i < count; ++i) {
    uint32_t len = 0;
    if (!take(&len, 4) || len > 4096) {
      error = where + ": malformed parameter entry";
      return false;
    }
    std::string name(len, '\0');
    int64_t n = 0, shard[2] = {0, 0};
    const ParamSpec *p = nullptr;
    if (!take(name.data(), len) || !(p = of.param(name)) || !take(&n, 8) || !take(shard, 16) ||
        shard[0] < 0 || shard[1] < shard[0] || shard[1] > p->elements ||
        (n != p->elements && n != shard[1] - shard[0]) || out.count(name)) {
      error = where + ": parameter '" + name + "' does not match the plan";
      return false;
    }
    Saved &sv = out[name];
    sv.begin = shard[0];
    sv.end = shard[1];
    sv.valueChunk = n != p->elements;
    for (std::vector<float> *v : {&sv.value, &sv.m, &sv.v}) {
      size_t c = v == &sv.value ? size_t(n) : size_t(shard[1] - shard[0]);
      v->resize(c);
      if (!take(v->data(), c * sizeof(float))) {
        error = where + ": truncated";
        return false;
      }
    }
  }
  return true;
}

bool barrier(Communicator &comm, std::string &error) {
  float x = 0;
  return comm.allReduce("world", &x, 1, false, error);
}

/// The run id in a step directory's manifest, or "" (none, unreadable).
std::string runIdOf(const std::string &stepDir) {
  std::string text, ignored;
  json::Value m;
  if (!readFile(stepDir + "/manifest.json", text) || !json::parse(text, m, ignored))
    return "";
  const json::Value *id = m.get("run_id");
  return id && id->isString() ? id->string : "";
}

/// After `name` (of run `runId`) is committed: what `options` says goes.
void applyRetention(const std::string &dir, const std::string &name, const std::string &runId,
                    const SaveOptions &options) {
  if (options.keepLast <= 0 && !options.replaceOtherRuns)
    return;
  // The step directories, by step (past step 99999999 the names are longer
  // and no longer sort as text).
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  for (const auto &e : std::filesystem::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step-", 0) == 0 && n.size() >= 13 && n.size() <= 24 &&
        n.find_first_not_of("0123456789", 5) == std::string::npos)
      steps.emplace_back(std::strtoll(n.c_str() + 5, nullptr, 10), n);
  }
  std::sort(steps.begin(), steps.end());
  int64_t saved = std::strtoll(name.c_str() + 5, nullptr, 10);
  std::vector<std::string> kept;
  for (const auto &[at, n] : steps) {
    if (n == name) {
      kept.push_back(n);
      continue;
    }
    // --overwrite: the run this one replaces (its id is not ours, or it has
    // none) goes, now that LATEST names this run's checkpoint. A later step
    // under retention is a continuation this run abandoned (it resumed an
    // earlier step): it would otherwise count as newest and outlive this
    // run's own checkpoints.
    if ((options.replaceOtherRuns && runIdOf(dir + "/" + n) != runId) ||
        (options.keepLast > 0 && at > saved))
      removeDir(dir + "/" + n);
    else
      kept.push_back(n);
  }
  if (options.keepLast > 0)
    for (size_t k = 0; k + size_t(options.keepLast) < kept.size(); ++k)
      if (kept[k] != name)
        removeDir(dir + "/" + kept[k]);
}

} // namespace

bool saveCheckpoint(const std::string &dir, ParamStore &store, const Plan &plan, Communicator &comm,
                    std::string &error, const SaveOptions &options) {
  if (plan.text.empty()) {
    error = "checkpoints need a plan loaded from its directory (loadPlan)";
    return false;
  }
  const std::string &planSha256 = plan.sha256;
  int rank = comm.rank();
  // A fresh run's first save names the run (rank 0 writes the manifest).
  if (rank == 0 && store.runId.empty())
    store.runId = newRunId();
  std::string name = stepName(store.steps);
  std::string partial = dir + "/." + name + ".partial";
  if (rank == 0) {
    if (!makeDir(dir)) {
      error = dir + ": cannot create the checkpoint directory: " + std::strerror(errno);
      return false;
    }
    // What failed or crashed saves left (hidden, never named by LATEST, but
    // a checkpoint's worth of disk each) goes before a new one is written.
    std::error_code ec;
    for (const auto &e : std::filesystem::directory_iterator(dir, ec)) {
      std::string n = e.path().filename().string();
      auto ends = [&](const char *tail) {
        size_t k = std::strlen(tail);
        return n.size() > k && n.compare(n.size() - k, k, tail) == 0;
      };
      if (n.rfind(".step-", 0) == 0 && (ends(".partial") || ends(".old")))
        removeDir(e.path().string());
    }
    if (!makeDir(partial)) {
      error = partial + ": cannot create: " + std::strerror(errno);
      return false;
    }
  }
  // A save that fails on this rank takes its part of the partial checkpoint
  // with it (rank 0: the whole of it).
  auto failed = [&](const std::string &why) {
    error = why;
    if (rank == 0)
      removeDir(partial);
    return false;
  };
  if (!barrier(comm, error))
    return failed(error);

  // This rank's state, in the plan's parameter order, streamed to its file
  // and hashed as it goes (no copy of the state in memory), the digest in a
  // side file for rank 0's manifest. The header names the step, this rank
  // and the world size: a file renamed or swapped with another rank's is
  // refused on resume.
  int64_t step = store.steps, count = 0, rankNo = rank, world = comm.size();
  for (const ParamSpec &p : plan.params)
    count += store.holds(p.name);
  std::string file = "rank-" + std::to_string(rank) + ".bin", path = partial + "/" + file;
  {
    std::ofstream f(path + ".tmp", std::ios::binary | std::ios::trunc);
    Sha256 hash;
    auto put = [&](const void *p, size_t n) {
      f.write(static_cast<const char *>(p), std::streamsize(n));
      hash.update(p, n);
    };
    put(kMagic, 8);
    put(&step, 8);
    put(&rankNo, 8);
    put(&world, 8);
    put(&count, 8);
    // The parameters this rank holds (a pipeline stage holds its own).
    // One tensor at a time through the store (param_store.h): a device
    // store never copies the whole state to host memory.
    std::string readError;
    for (const ParamSpec &p : plan.params) {
      if (!store.holds(p.name))
        continue;
      ParamState st;
      if (!store.read(p.name, st, readError))
        break;
      uint32_t len = uint32_t(p.name.size());
      put(&len, 4);
      put(p.name.data(), len);
      int64_t n = int64_t(st.value.size()), shard[2] = {st.shard.begin, st.shard.end};
      put(&n, 8);
      put(shard, 16);
      for (const std::vector<float> *v : {&st.value, &st.m, &st.v})
        put(v->data(), v->size() * sizeof(float));
    }
    f.flush();
    if (!readError.empty()) {
      f.close();
      std::remove((path + ".tmp").c_str());
      return failed(path + ": " + readError);
    }
    if (!f || (f.close(), !f) || !syncPath(path + ".tmp") ||
        std::rename((path + ".tmp").c_str(), path.c_str()) != 0 ||
        !writeAll(path + ".sha256", hash.hex())) {
      for (const std::string &f : {path + ".tmp", path, path + ".sha256"})
        std::remove(f.c_str());
      return failed(path + ": write failed");
    }
  }
  if (!barrier(comm, error))
    return failed(error);

  if (rank == 0) {
    std::string manifest =
        "{\n  \"format\": \"llm-opt-checkpoint\",\n  \"version\": " +
        std::to_string(kManifestVersion) + ",\n  \"run_id\": \"" + store.runId +
        "\",\n  \"step\": " + std::to_string(step) +
        ",\n  \"loss_scale\": " + exactFloat(store.lossScale.scale) +
        ",\n  \"loss_scale_good_steps\": " + std::to_string(store.lossScale.goodSteps) +
        ",\n  \"skipped_steps\": " + std::to_string(store.lossScale.skipped) +
        ",\n  \"world_size\": " + std::to_string(comm.size()) + ",\n  \"plan_sha256\": \"" +
        planSha256 + "\",\n  \"files\": {";
    for (int r = 0; r < comm.size(); ++r) {
      std::string f = "rank-" + std::to_string(r) + ".bin", digest;
      std::string side = partial + "/" + f + ".sha256";
      if (!readFile(side, digest) || digest.size() != 64 ||
          ::access((partial + "/" + f).c_str(), R_OK) != 0) {
        return failed(partial + "/" + f + ": missing after every rank wrote");
      }
      std::remove(side.c_str());
      manifest += std::string(r ? "," : "") + "\n    \"" + f + "\": \"" + digest + "\"";
    }
    manifest += "\n  }\n}\n";
    // The plan travels with the checkpoint, so that another plan can reshard
    // it; checksums.sha256 holds its digest and the manifest's (which holds
    // the rank files'), so that every byte of the checkpoint is checked.
    std::string final = dir + "/" + name;
    if (!writeAll(partial + "/plan.json", plan.text))
      return failed(partial + "/plan.json: write failed");
    if (!writeAll(partial + "/manifest.json", manifest))
      return failed(partial + "/manifest.json: write failed");
    if (!writeAll(partial + "/checksums.sha256",
                  planSha256 + "  plan.json\n" + sha256Hex(manifest) + "  manifest.json\n"))
      return failed(partial + "/checksums.sha256: write failed");
    // A checkpoint of the same step already there (a resumed --steps 0, a
    // rerun) is swapped out atomically, so that LATEST never names a missing
    // or half-written directory; where the file system cannot swap, it is
    // moved aside first.
    struct stat st;
    if (::stat(final.c_str(), &st) == 0) {
      if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, final.c_str(), RENAME_EXCHANGE) == 0) {
        removeDir(partial); // now the old checkpoint
      } else {
        std::string aside = dir + "/." + name + ".old";
        removeDir(aside);
        if (std::rename(final.c_str(), aside.c_str()) != 0 ||
            std::rename(partial.c_str(), final.c_str()) != 0) {
          error = final + ": cannot move the checkpoint into place: " + std::strerror(errno);
          return false;
        }
        removeDir(aside);
      }
    } else if (std::rename(partial.c_str(), final.c_str()) != 0) {
      error = final + ": cannot move the checkpoint into place: " + std::strerror(errno);
      return false;
    }
    // The step directory's entries and its place in `dir` are durable
    // before LATEST names it.
    if (!syncPath(final) || !syncPath(dir)) {
      error = final + ": cannot sync to storage: " + std::strerror(errno);
      return false;
    }
    if (!writeAll(dir + "/LATEST", name + "\n")) {
      error = dir + "/LATEST: write failed";
      return false;
    }
    applyRetention(dir, name, store.runId, options);
  }
  return barrier(comm, error);
}

namespace {
/// The newest checkpoint in a directory, its manifest verified and checked.
struct Opened {
  std::string stepDir;
  json::Value manifest;
  int64_t version = 0, step = 0, world = 0;
  std::string planHash, runId, manifestSha256;
  LossScaleState lossScale;
};

/// The digest checksums.sha256 in `stepDir` lists for `name` ("" when the
/// file or the line is absent; false when it is malformed).
bool listedDigest(const std::string &stepDir, const std::string &name, std::string &digest,
                  std::string &error) {
  digest.clear();
  std::string sums;
  if (!readFile(stepDir + "/checksums.sha256", sums))
    return true;
  size_t at = 0;
  while (at < sums.size()) {
    size_t end = sums.find('\n', at);
    std::string line = sums.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? sums.size() : end + 1;
    if (line.empty())
      continue;
    size_t sep = line.find("  ");
    std::string hex = line.substr(0, sep);
    if (sep == std::string::npos || !isHex(hex, 64)) {
      error = stepDir + "/checksums.sha256: malformed line '" + line + "'";
      return false;
    }
    if (line.substr(sep + 2) != name)
      continue;
    if (!digest.empty()) {
      error = stepDir + "/checksums.sha256: lists '" + name + "' twice";
      return false;
    }
    digest = hex;
  }
  return true;
}

/// The manifest's numbers: what a checkpoint this runtime wrote can hold.
/// Loss scaling starts at 2^16 and only halves or doubles, so its scale is a
/// power of two; past 2^127 it is not a float, below 2^-126 its inverse (the
/// unscaling factor) is not (every step would overflow and be skipped).
bool checkNumbers(Opened &o, std::string &error) {
  const json::Value &m = o.manifest;
  std::string where = o.stepDir + "/manifest.json: ";
  auto bad = [&](const std::string &field, const std::string &is, const std::string &must) {
    error = where + field + " is " + is + "; it must be " + must +
            ": the checkpoint is corrupt or was edited";
    return false;
  };
  if (o.step < 0)
    return bad("step", std::to_string(o.step), "0 or more");
  if (o.world < 1 || o.world > (1 << 24))
    return bad("world_size", std::to_string(o.world), "from 1 to 16777216");
  LossScaleState &ls = o.lossScale;
  ls = LossScaleState();
  // Version 1 manifests may predate loss scaling (the defaults then);
  // version 2 ones always carry it.
  const json::Value *scale = m.get("loss_scale"), *good = m.get("loss_scale_good_steps"),
                    *skipped = m.get("skipped_steps");
  if (o.version >= 2 && (!scale || !good || !skipped)) {
    error = where + "loss_scale, loss_scale_good_steps or skipped_steps is missing: the "
                    "checkpoint is corrupt or was edited";
    return false;
  }
  if (scale) {
    int exponent = 0;
    double mantissa = scale->isNumber() ? std::frexp(scale->number, &exponent) : 0;
    if (!scale->isNumber() || !std::isfinite(scale->number) || mantissa != 0.5 ||
        exponent - 1 < -126 || exponent - 1 > 127) {
      char shown[32];
      std::snprintf(shown, sizeof(shown), "%g", scale->number);
      return bad("loss_scale", scale->isNumber() ? shown : "not a number",
                 "a power of two from 2^-126 to 2^127 (dynamic loss scaling starts at 2^16 and "
                 "only halves or doubles)");
    }
    ls.scale = float(scale->number);
  }
  if (skipped) {
    if (!skipped->isInteger || skipped->integer < 0 || skipped->integer > o.step)
      return bad("skipped_steps",
                 skipped->isInteger ? std::to_string(skipped->integer) : "not an integer",
                 "from 0 to the step (" + std::to_string(o.step) + ")");
    ls.skipped = skipped->integer;
  }
  if (good) {
    // The clean steps since the scale last changed: it doubles (and the
    // count restarts) at kGrowthInterval.
    int64_t most = LossScaleState::kGrowthInterval - 1;
    if (!good->isInteger || good->integer < 0 || good->integer > most)
      return bad("loss_scale_good_steps",
                 good->isInteger ? std::to_string(good->integer) : "not an integer",
                 "from 0 to " + std::to_string(most) +
                     " (the clean steps since the scale last changed)");
    ls.goodSteps = good->integer;
  }
  return true;
}

bool openCheckpoint(const std::string &dir, Opened &o, std::string &error) {
  std::string latest;
  if (!readFile(dir + "/LATEST", latest)) {
    error = dir + "/LATEST: no checkpoint to resume from";
    return false;
  }
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' '))
    latest.pop_back();
  if (latest.rfind("step-", 0) != 0 || latest.find('/') != std::string::npos) {
    error = dir + "/LATEST: malformed ('" + latest + "')";
    return false;
  }
  o.stepDir = dir + "/" + latest;
  std::string text;
  if (!readFile(o.stepDir + "/manifest.json", text)) {
    error = o.stepDir + "/manifest.json: missing: the checkpoint is incomplete";
    return false;
  }
  // The manifest's own checksum first: nothing it says is read unchecked.
  std::string listed;
  if (!listedDigest(o.stepDir, "manifest.json", listed, error))
    return false;
  o.manifestSha256 = sha256Hex(text);
  if (!listed.empty() && listed != o.manifestSha256) {
    error = o.stepDir +
            "/manifest.json: checksum mismatch (checksums.sha256): the checkpoint is corrupt "
            "or was edited";
    return false;
  }
  if (!json::parse(text, o.manifest, error)) {
    error = o.stepDir + "/manifest.json: " + error;
    return false;
  }
  const json::Value &m = o.manifest;
  const json::Value *format = m.get("format"), *world = m.get("world_size"),
                    *planHash = m.get("plan_sha256"), *files = m.get("files"),
                    *stepV = m.get("step");
  if (!format || !format->isString() || format->string != "llm-opt-checkpoint" || !world ||
      !world->isInteger || !planHash || !planHash->isString() || !files || !files->isObject() ||
      !stepV || !stepV->isInteger) {
    error = o.stepDir + "/manifest.json: not an llm-opt checkpoint manifest";
    return false;
  }
  // A manifest of another version is a format this runtime does not know.
  const json::Value *version = m.get("version");
  if (!version || !version->isInteger || version->integer < 1 ||
      version->integer > kManifestVersion) {
    error = o.stepDir + "/manifest.json: checkpoint format version " +
            (version && version->isInteger ? std::to_string(version->integer)
                                           : std::string("missing")) +
            "; this llm-run reads versions 1 and 2";
    return false;
  }
  o.version = version->integer;
  o.step = stepV->integer;
  o.world = world->integer;
  o.planHash = planHash->string;
  if (o.version >= 2) {
    if (listed.empty()) {
      error = o.stepDir + "/checksums.sha256: does not list manifest.json: the checkpoint is "
                          "incomplete or was edited";
      return false;
    }
    const json::Value *runId = m.get("run_id");
    if (!runId || !runId->isString() || !isHex(runId->string, 32)) {
      error = o.stepDir + "/manifest.json: run_id must be 32 hex digits: the checkpoint is "
                          "corrupt or was edited";
      return false;
    }
    o.runId = runId->string;
  }
  if (!isHex(o.planHash, 64)) {
    error = o.stepDir + "/manifest.json: plan_sha256 is not a SHA-256: the checkpoint is corrupt";
    return false;
  }
  if (!checkNumbers(o, error))
    return false;
  // One file per rank of the world that wrote it, each with its digest.
  if (int64_t(files->object.size()) != o.world) {
    error = o.stepDir + "/manifest.json: lists " + std::to_string(files->object.size()) +
            " rank files for a world of " + std::to_string(o.world) +
            " ranks: the checkpoint is corrupt or was edited";
    return false;
  }
  for (int64_t r = 0; r < o.world; ++r) {
    const json::Value *digest = files->get("rank-" + std::to_string(r) + ".bin");
    if (!digest || !digest->isString() || !isHex(digest->string, 64)) {
      error = o.stepDir + "/manifest.json: files lacks rank-" + std::to_string(r) +
              ".bin's SHA-256: the checkpoint is corrupt or was edited";
      return false;
    }
  }
  return true;
}

bool readRank(const Opened &o, int r, const Plan &of, std::map<std::string, Saved> &out,
              std::string &error) {
  std::string file = "rank-" + std::to_string(r) + ".bin";
  const json::Value *want = o.manifest.get("files")->get(file);
  std::ifstream f(o.stepDir + "/" + file, std::ios::binary);
  if (!want || !want->isString() || !f) {
    error = o.stepDir + "/" + file + ": missing";
    return false;
  }
  // Parsed as it is read and hashed (no copy of the file in memory); the
  // digest is checked once the whole file is read.
  Sha256 hash;
  auto take = [&](void *p, size_t n) {
    if (n && !f.read(static_cast<char *>(p), std::streamsize(n)))
      return false;
    hash.update(p, n);
    return true;
  };
  std::map<std::string, Saved> parsed;
  std::string parseError;
  RankHeader header;
  header.version = o.version;
  header.step = o.step;
  header.rank = r;
  header.world = o.world;
  bool ok = parseRank(take, of, header, o.stepDir + "/" + file, parsed, parseError);
  // The rest of the file (a parse that stopped early, or bytes past the
  // last parameter) still counts in the digest.
  bool trailing = false;
  std::vector<char> rest(1 << 16);
  f.clear();
  while (f.read(rest.data(), std::streamsize(rest.size())) || f.gcount() > 0) {
    hash.update(rest.data(), size_t(f.gcount()));
    trailing = true;
  }
  if (hash.hex() != want->string) {
    error = o.stepDir + "/" + file + ": checksum mismatch: the checkpoint is corrupt";
    return false;
  }
  if (!ok || trailing) {
    error = ok ? o.stepDir + "/" + file + ": does not match its plan's parameters" : parseError;
    return false;
  }
  for (auto &[name, sv] : parsed)
    out[name] = std::move(sv);
  return true;
}

/// Every whole tensor of an opened checkpoint, from its stored plan.
bool readWhole(const Opened &o, Plan &src, std::vector<WholeTensor> &out, std::string &error) {
  std::string planError;
  if (!loadPlan(o.stepDir, src, planError)) {
    error = o.stepDir + ": written under another plan (world size " + std::to_string(o.world) +
            ") and its plan cannot be read: " + planError;
    return false;
  }
  // The manifest names the plan the ranks' files were written under; the
  // stored copy must be that plan.
  if (src.sha256 != o.planHash) {
    error = o.stepDir + "/manifest.json: plan_sha256 names neither this run's plan nor the "
                        "stored plan.json: the checkpoint is inconsistent";
    return false;
  }
  if (src.worldSize != o.world) {
    error = o.stepDir + "/plan.json: world size disagrees with the manifest";
    return false;
  }
  std::vector<std::map<std::string, Saved>> ranks(size_t(src.worldSize));
  for (int r = 0; r < src.worldSize; ++r)
    if (!readRank(o, r, src, ranks[size_t(r)], error))
      return false;
  int srcTp = src.axisSize("tp"), srcDp = src.axisSize("dp"), srcCp = src.axisSize("cp");
  for (const ParamSpec &sp : src.params) {
    // Parts of a sharded parameter: over tp (consecutive ranks) or over ep
    // (the first ep data-parallel ranks, each holding whole optimizer state).
    bool experts = sp.shardDim >= 0 && sp.shardAxis == "ep";
    int parts = experts ? sp.shardParts : srcTp, stride = experts ? srcCp * srcTp : 1;
    // The pipeline stage holding the parameter: the first rank that saved it.
    int base = -1;
    for (int r = 0; r < src.worldSize && base < 0; ++r)
      if (ranks[size_t(r)].count(sp.name))
        base = r - r % (srcDp * srcCp * srcTp);
    if (base < 0) {
      error = o.stepDir + ": no rank saved parameter '" + sp.name + "'";
      return false;
    }
    WholeTensor w;
    w.name = sp.name;
    w.shape = sp.shape;
    if (sp.shardDim >= 0)
      w.shape[size_t(sp.shardDim)] = sp.wholeDim();
    std::vector<float> *whole[3] = {&w.value, &w.m, &w.v};
    for (std::vector<float> *x : whole)
      x->assign(size_t(wholeElements(sp)), 0.0f);
    for (int j = 0; j < parts; ++j) {
      std::vector<float> part[3];
      const Saved &first = ranks[size_t(base + j * stride)].at(sp.name);
      for (int k : {0, 1, 2}) {
        if (k == 0 && !first.valueChunk) {
          part[0] = first.value;
          continue;
        }
        // Optimizer chunks (ZeRO): over dp, or for experts over the ranks
        // holding the same experts (edp: dp index = i x ep + part).
        part[k].assign(size_t(sp.elements), 0.0f);
        int chunks = experts ? srcDp / sp.shardParts : srcDp;
        for (int i = 0; i < chunks; ++i) {
          int owner = experts ? base + (i * sp.shardParts + j) * srcCp * srcTp
                              : base + i * srcCp * srcTp + j;
          const Saved &sv = ranks[size_t(owner)].at(sp.name);
          const std::vector<float> &chunk = k == 0 ? sv.value : k == 1 ? sv.m : sv.v;
          std::copy(chunk.begin(), chunk.end(), part[k].begin() + sv.begin);
        }
      }
      for (int k = 0; k < 3; ++k)
        copyPart(sp, j, whole[k]->data(), part[k].data(), /*toPart=*/false);
    }
    out.push_back(std::move(w));
  }
  return true;
}
} // namespace

bool readWholeCheckpoint(const std::string &dir, Plan &plan, int64_t &step,
                         std::vector<WholeTensor> &tensors, std::string &error,
                         ResumedCheckpoint *info) {
  Opened o;
  if (!openCheckpoint(dir, o, error) || !readWhole(o, plan, tensors, error))
    return false;
  step = o.step;
  if (info) {
    info->stepDir = o.stepDir;
    info->manifestSha256 = o.manifestSha256;
    info->runId = o.runId;
    info->step = o.step;
  }
  return true;
}

bool inspectCheckpoint(const std::string &dir, ResumedCheckpoint &info, std::string &error) {
  Opened o;
  if (!openCheckpoint(dir, o, error))
    return false;
  info.stepDir = o.stepDir;
  info.manifestSha256 = o.manifestSha256;
  info.runId = o.runId;
  info.step = o.step;
  return true;
}

bool loadCheckpoint(const std::string &dir, ParamStore &store, const Plan &plan, int rank,
                    int worldSize, std::string &error, bool *changed, ResumedCheckpoint *resumed) {
  bool ignored = false;
  if (!changed)
    changed = &ignored;
  *changed = false;
  Opened o;
  if (!openCheckpoint(dir, o, error))
    return false;
  // What is restored besides the tensors: the step, the loss scaling, the
  // run; and which checkpoint it was (for the ranks to compare).
  auto restored = [&]() {
    store.steps = o.step;
    store.lossScale = o.lossScale;
    store.runId = o.runId;
    if (resumed) {
      resumed->stepDir = o.stepDir;
      resumed->manifestSha256 = o.manifestSha256;
      resumed->runId = o.runId;
      resumed->step = o.step;
    }
    return true;
  };
  if (o.world == worldSize && o.planHash == plan.sha256) {
    // The same plan: this rank's file holds exactly its state, which
    // replaces the initialized one (released first, so that the state is
    // in memory once, not twice; a failed load fails the run anyway).
    *changed = true;
    store.release();
    std::map<std::string, Saved> saved;
    if (!readRank(o, rank, plan, saved, error))
      return false;
    for (const ParamSpec &p : plan.params) {
      if (!store.holds(p.name))
        continue;
      if (!saved.count(p.name)) {
        error = o.stepDir + ": parameter '" + p.name + "' is missing from this rank's file";
        return false;
      }
      ParamState st;
      store.layout(p.name, st.shard, st.valueChunked);
      Saved &sv = saved[p.name];
      if (sv.begin != st.shard.begin || sv.end != st.shard.end ||
          sv.valueChunk != st.valueChunked) {
        error = o.stepDir + ": parameter '" + p.name +
                "' was saved with a different optimizer sharding than this plan's";
        return false;
      }
      st.value = std::move(sv.value);
      st.m = std::move(sv.m);
      st.v = std::move(sv.v);
      if (!store.write(p.name, std::move(st), error)) {
        error = o.stepDir + ": " + error;
        return false;
      }
    }
    return restored();
  }

  // Another plan (other dp / tp / ZeRO): rebuild every whole tensor from the
  // saved parts and chunks, then cut this rank's.
  Plan src;
  std::vector<WholeTensor> tensors;
  if (!readWhole(o, src, tensors, error))
    return false;
  std::map<std::string, const WholeTensor *> byName;
  for (const WholeTensor &w : tensors)
    byName[w.name] = &w;
  // The checkpoint and the plan hold the same model: the same parameters
  // (every rank checks all of them, not only its stage's, so that all refuse
  // alike), of the same whole shapes. A parameter the plan lacks would be
  // dropped without a word (a layer more in the checkpoint).
  for (const ParamSpec &p : plan.params) {
    std::vector<int64_t> shape = p.shape;
    if (p.shardDim >= 0)
      shape[size_t(p.shardDim)] = p.wholeDim();
    auto it = byName.find(p.name);
    if (it == byName.end() || it->second->shape != shape) {
      error = o.stepDir + ": parameter '" + p.name +
              "' is missing or has another shape: the checkpoint is of another model";
      return false;
    }
  }
  for (const WholeTensor &w : tensors)
    if (!plan.param(w.name)) {
      error = o.stepDir + ": the checkpoint holds parameter '" + w.name +
              "', which this plan's model does not have: the checkpoint is of another model";
      return false;
    }
  // Every tensor this rank holds is checked before any is replaced.
  for (const ParamSpec &p : plan.params) {
    if (!store.holds(p.name))
      continue;
    int part = 0, parts = 1;
    if (p.shardDim >= 0 && !plan.place(p.shardAxis, rank, part, parts)) {
      error = "parameter '" + p.name + "' is sharded over axis '" + p.shardAxis +
              "', which this plan's mesh cannot place";
      return false;
    }
  }
  *changed = true;
  for (const ParamSpec &p : plan.params) {
    if (!store.holds(p.name))
      continue;
    const WholeTensor &w = *byName.at(p.name);
    const std::vector<float> *whole[3] = {&w.value, &w.m, &w.v};
    ParamState st;
    store.layout(p.name, st.shard, st.valueChunked);
    std::vector<float> mine[3];
    int part = 0, parts = 1;
    if (p.shardDim >= 0 && !plan.place(p.shardAxis, rank, part, parts)) {
      error = "parameter '" + p.name + "' is sharded over axis '" + p.shardAxis +
              "', which this plan's mesh cannot place";
      return false;
    }
    for (int k = 0; k < 3; ++k) {
      mine[k].assign(size_t(p.elements), 0.0f);
      copyPart(p, part, const_cast<float *>(whole[k]->data()), mine[k].data(),
               /*toPart=*/true);
    }
    if (st.valueChunked)
      st.value.assign(mine[0].begin() + st.shard.begin, mine[0].begin() + st.shard.end);
    else
      st.value = std::move(mine[0]);
    st.m.assign(mine[1].begin() + st.shard.begin, mine[1].begin() + st.shard.end);
    st.v.assign(mine[2].begin() + st.shard.begin, mine[2].begin() + st.shard.end);
    if (!store.write(p.name, std::move(st), error))
      return false;
  }
  return restored();
}

} // namespace llmopt::runtime
