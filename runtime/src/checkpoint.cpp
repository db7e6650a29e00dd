//===- checkpoint.cpp - atomic, checksummed, resumable checkpoints --------===//

#include "llmopt-runtime/checkpoint.h"
#include "llmopt-runtime/json.h"
#include "llmopt-runtime/sha256.h"
#include "llmopt-runtime/shard.h"

#include <map>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
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

/// The loss-scaling state a checkpoint's manifest carries (absent in older
/// checkpoints: the defaults).
void readLossScale(const json::Value &m, LossScaleState &st) {
  st = LossScaleState();
  if (const json::Value *v = m.get("loss_scale"); v && v->isNumber())
    st.scale = float(v->number);
  if (const json::Value *v = m.get("loss_scale_good_steps"); v && v->isNumber())
    st.goodSteps = v->integer;
  if (const json::Value *v = m.get("skipped_steps"); v && v->isNumber())
    st.skipped = v->integer;
}
} // namespace

namespace {

// Version 2: AdamW moments may be this rank's ZeRO chunk, with its own count.
constexpr char kMagic[8] = {'L', 'L', 'M', 'C', 'K', 'P', 'T', '2'};

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

/// Parses a rank file written under plan `of`, read through `take` (false
/// when the file has fewer bytes).
bool parseRank(const std::function<bool(void *, size_t)> &take, const Plan &of, int64_t step,
               const std::string &where, std::map<std::string, Saved> &out, std::string &error) {
  char magic[8];
  int64_t savedStep = 0, count = 0;
  if (!take(magic, 8) || std::memcmp(magic, kMagic, 8) != 0 || !take(&savedStep, 8) ||
      !take(&count, 8) || count < 0 || count > int64_t(of.params.size()) || savedStep != step) {
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

} // namespace

bool saveCheckpoint(const std::string &dir, const ParamStore &store, const Plan &plan,
                    Communicator &comm, std::string &error, int64_t keepLast) {
  if (plan.text.empty()) {
    error = "checkpoints need a plan loaded from its directory (loadPlan)";
    return false;
  }
  const std::string &planSha256 = plan.sha256;
  int rank = comm.rank();
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
  // side file for rank 0's manifest.
  int64_t step = store.steps, count = 0;
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
        "{\n  \"format\": \"llm-opt-checkpoint\",\n  \"version\": 1,\n"
        "  \"step\": " +
        std::to_string(step) + ",\n  \"loss_scale\": " + exactFloat(store.lossScale.scale) +
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
    // The plan travels with the checkpoint, so that another plan can reshard it.
    if (!writeAll(partial + "/plan.json", plan.text) ||
        !writeAll(partial + "/checksums.sha256", planSha256 + "  plan.json\n")) {
      return failed(partial + "/plan.json: write failed");
    }
    std::string final = dir + "/" + name;
    if (!writeAll(partial + "/manifest.json", manifest)) {
      return failed(partial + "/manifest.json: write failed");
    }
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
    // Retention: the newest keepLast step directories stay (names sort by
    // step: step-%08lld).
    if (keepLast > 0) {
      std::vector<std::string> steps;
      std::error_code ec;
      for (const auto &e : std::filesystem::directory_iterator(dir, ec)) {
        std::string n = e.path().filename().string();
        if (e.is_directory() && n.rfind("step-", 0) == 0 && n.size() == 13)
          steps.push_back(n);
      }
      std::sort(steps.begin(), steps.end());
      for (size_t k = 0; k + size_t(keepLast) < steps.size(); ++k)
        if (steps[k] != name)
          removeDir(dir + "/" + steps[k]);
    }
  }
  return barrier(comm, error);
}

namespace {
/// The newest checkpoint in a directory, its manifest checked.
struct Opened {
  std::string stepDir;
  json::Value manifest;
  int64_t step = 0, world = 0;
  std::string planHash;
};

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
  if (!version || !version->isInteger || version->integer != 1) {
    error = o.stepDir + "/manifest.json: checkpoint format version " +
            (version && version->isInteger ? std::to_string(version->integer)
                                           : std::string("missing")) +
            "; this llm-run reads version 1";
    return false;
  }
  o.step = stepV->integer;
  o.world = world->integer;
  o.planHash = planHash->string;
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
  bool ok = parseRank(take, of, o.step, o.stepDir + "/" + file, parsed, parseError);
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
                         std::vector<WholeTensor> &tensors, std::string &error) {
  Opened o;
  if (!openCheckpoint(dir, o, error) || !readWhole(o, plan, tensors, error))
    return false;
  step = o.step;
  return true;
}

bool loadCheckpoint(const std::string &dir, ParamStore &store, const Plan &plan, int rank,
                    int worldSize, std::string &error, bool *changed) {
  bool ignored = false;
  if (!changed)
    changed = &ignored;
  *changed = false;
  Opened o;
  if (!openCheckpoint(dir, o, error))
    return false;
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
    store.steps = o.step;
    readLossScale(o.manifest, store.lossScale);
    return true;
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
  // Every tensor this rank holds is checked before any is replaced.
  for (const ParamSpec &p : plan.params) {
    if (!store.holds(p.name))
      continue;
    std::vector<int64_t> shape = p.shape;
    if (p.shardDim >= 0)
      shape[size_t(p.shardDim)] = p.wholeDim();
    auto it = byName.find(p.name);
    if (it == byName.end() || it->second->shape != shape) {
      error = o.stepDir + ": parameter '" + p.name +
              "' is missing or has another shape: the checkpoint is of another model";
      return false;
    }
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
  store.steps = o.step;
  readLossScale(o.manifest, store.lossScale);
  return true;
}

} // namespace llmopt::runtime
