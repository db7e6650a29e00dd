//===- checkpoint.cpp - atomic, checksummed, resumable checkpoints --------===//

#include "llmopt-runtime/checkpoint.h"
#include "llmopt-runtime/json.h"
#include "llmopt-runtime/sha256.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace llmopt::runtime {

namespace {

// Version 2: AdamW moments may be this rank's ZeRO chunk, with its own count.
constexpr char kMagic[8] = {'L', 'L', 'M', 'C', 'K', 'P', 'T', '2'};

std::string stepName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

bool readAll(const std::string &path, std::string &out) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
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
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

bool makeDir(const std::string &path) {
  return ::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST;
}

/// Removes a directory of plain files (a stale partial checkpoint).
void removeDir(const std::string &path) {
  std::string cmd = "rm -rf '" + path + "'";
  (void)std::system(cmd.c_str());
}

void put(std::string &out, const void *p, size_t n) {
  out.append(static_cast<const char *>(p), n);
}

bool barrier(Communicator &comm, std::string &error) {
  float x = 0;
  return comm.allReduce("world", &x, 1, false, error);
}

} // namespace

bool saveCheckpoint(const std::string &dir, const CpuExecutor &exe, const Plan &plan,
                    const std::string &planSha256, Communicator &comm, std::string &error) {
  int rank = comm.rank();
  std::string name = stepName(exe.steps);
  std::string partial = dir + "/." + name + ".partial";
  if (rank == 0) {
    if (!makeDir(dir)) {
      error = dir + ": cannot create the checkpoint directory: " + std::strerror(errno);
      return false;
    }
    removeDir(partial);
    if (!makeDir(partial)) {
      error = partial + ": cannot create: " + std::strerror(errno);
      return false;
    }
  }
  if (!barrier(comm, error))
    return false;

  // This rank's state, in the plan's parameter order.
  std::string blob;
  put(blob, kMagic, 8);
  int64_t step = exe.steps, count = int64_t(plan.params.size());
  put(blob, &step, 8);
  put(blob, &count, 8);
  for (const ParamSpec &p : plan.params) {
    const ParamState &st = exe.params.at(p.name);
    uint32_t len = uint32_t(p.name.size());
    put(blob, &len, 4);
    put(blob, p.name.data(), len);
    int64_t n = int64_t(st.value.size()), shard[2] = {st.shard.begin, st.shard.end};
    put(blob, &n, 8);
    put(blob, shard, 16);
    for (const std::vector<float> *v : {&st.value, &st.m, &st.v})
      put(blob, v->data(), v->size() * sizeof(float));
  }
  std::string file = "rank-" + std::to_string(rank) + ".bin";
  if (!writeAll(partial + "/" + file, blob)) {
    error = partial + "/" + file + ": write failed";
    return false;
  }
  if (!barrier(comm, error))
    return false;

  if (rank == 0) {
    std::string manifest = "{\n  \"format\": \"llm-opt-checkpoint\",\n  \"version\": 1,\n"
                           "  \"step\": " + std::to_string(step) +
                           ",\n  \"world_size\": " + std::to_string(comm.size()) +
                           ",\n  \"plan_sha256\": \"" + planSha256 + "\",\n  \"files\": {";
    for (int r = 0; r < comm.size(); ++r) {
      std::string f = "rank-" + std::to_string(r) + ".bin", data;
      if (!readAll(partial + "/" + f, data)) {
        error = partial + "/" + f + ": missing after every rank wrote";
        return false;
      }
      manifest += std::string(r ? "," : "") + "\n    \"" + f + "\": \"" + sha256Hex(data) + "\"";
    }
    manifest += "\n  }\n}\n";
    std::string final = dir + "/" + name;
    if (!writeAll(partial + "/manifest.json", manifest)) {
      error = partial + "/manifest.json: write failed";
      return false;
    }
    removeDir(final);
    if (std::rename(partial.c_str(), final.c_str()) != 0) {
      error = final + ": cannot move the checkpoint into place: " + std::strerror(errno);
      return false;
    }
    if (!writeAll(dir + "/LATEST", name + "\n")) {
      error = dir + "/LATEST: write failed";
      return false;
    }
  }
  return barrier(comm, error);
}

bool loadCheckpoint(const std::string &dir, CpuExecutor &exe, const Plan &plan,
                    const std::string &planSha256, int rank, int worldSize,
                    std::string &error) {
  std::string latest;
  if (!readAll(dir + "/LATEST", latest)) {
    error = dir + "/LATEST: no checkpoint to resume from";
    return false;
  }
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' '))
    latest.pop_back();
  if (latest.rfind("step-", 0) != 0 || latest.find('/') != std::string::npos) {
    error = dir + "/LATEST: malformed ('" + latest + "')";
    return false;
  }
  std::string stepDir = dir + "/" + latest, text;
  if (!readAll(stepDir + "/manifest.json", text)) {
    error = stepDir + "/manifest.json: missing: the checkpoint is incomplete";
    return false;
  }
  json::Value m;
  if (!json::parse(text, m, error)) {
    error = stepDir + "/manifest.json: " + error;
    return false;
  }
  const json::Value *format = m.get("format"), *world = m.get("world_size"),
                    *planHash = m.get("plan_sha256"), *files = m.get("files"),
                    *stepV = m.get("step");
  if (!format || !format->isString() || format->string != "llm-opt-checkpoint" || !world ||
      !world->isInteger || !planHash || !planHash->isString() || !files ||
      !files->isObject() || !stepV || !stepV->isInteger) {
    error = stepDir + "/manifest.json: not an llm-opt checkpoint manifest";
    return false;
  }
  if (world->integer != worldSize || planHash->string != planSha256) {
    error = stepDir + ": written under another plan (world size " +
            std::to_string(world->integer) +
            "); resuming needs the same plan: resharding between plans is not supported yet";
    return false;
  }
  std::string file = "rank-" + std::to_string(rank) + ".bin", blob;
  const json::Value *want = files->get(file);
  if (!want || !want->isString() || !readAll(stepDir + "/" + file, blob)) {
    error = stepDir + "/" + file + ": missing";
    return false;
  }
  if (sha256Hex(blob) != want->string) {
    error = stepDir + "/" + file + ": checksum mismatch: the checkpoint is corrupt";
    return false;
  }
  size_t at = 0;
  auto take = [&](void *p, size_t n) {
    if (at + n > blob.size())
      return false;
    std::memcpy(p, blob.data() + at, n);
    at += n;
    return true;
  };
  char magic[8];
  int64_t step = 0, count = 0;
  if (!take(magic, 8) || std::memcmp(magic, kMagic, 8) != 0 || !take(&step, 8) ||
      !take(&count, 8) || count != int64_t(plan.params.size()) || step != stepV->integer) {
    error = stepDir + "/" + file + ": does not match the plan's parameters";
    return false;
  }
  for (const ParamSpec &p : plan.params) {
    uint32_t len = 0;
    if (!take(&len, 4) || len != p.name.size()) {
      error = stepDir + "/" + file + ": parameter order differs from the plan";
      return false;
    }
    std::string name(len, '\0');
    int64_t n = 0;
    if (!take(name.data(), len) || name != p.name || !take(&n, 8) || n != p.elements) {
      error = stepDir + "/" + file + ": parameter '" + p.name + "' does not match the plan";
      return false;
    }
    ParamState &st = exe.params[p.name];
    int64_t shard[2] = {0, 0};
    if (!take(shard, 16) || shard[0] != st.shard.begin || shard[1] != st.shard.end) {
      error = stepDir + "/" + file + ": parameter '" + p.name +
              "' was saved with a different optimizer sharding (ZeRO stage or dp degree) "
              "than this plan's";
      return false;
    }
    for (std::vector<float> *v : {&st.value, &st.m, &st.v}) {
      size_t count = v == &st.value ? size_t(n) : size_t(st.shard.size());
      v->resize(count);
      if (!take(v->data(), count * sizeof(float))) {
        error = stepDir + "/" + file + ": truncated";
        return false;
      }
    }
  }
  exe.steps = step;
  return true;
}

} // namespace llmopt::runtime
