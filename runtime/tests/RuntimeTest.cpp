//===- RuntimeTest.cpp - JSON, SHA-256, plan validation, input files ------===//

#include "llmopt-runtime/data.h"
#include "llmopt-runtime/executor.h"
#include "llmopt-runtime/file.h"
#include "llmopt-runtime/json.h"
#include "llmopt-runtime/kernel_registry.h"
#include "llmopt-runtime/layouts.h"
#include "llmopt-runtime/plan.h"
#include "llmopt-runtime/schedule.h"
#include "llmopt-runtime/sha256.h"

#include "gtest/gtest.h"
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>

using namespace llmopt::runtime;

namespace {

/// The shared pipeline schedules: every pass once, a micro-batch's backward
/// after its forward, each chunk's backwards in micro-batch order; 1F1B keeps
/// (stages - stage) micro-batches in flight, GPipe all; inputs no schedule
/// runs give no order.
TEST(Schedule, EveryPassOnceInAValidOrder) {
  using namespace llmopt::schedule;
  for (Kind kind : {Kind::Sequential, Kind::GPipe, Kind::OneFOneB, Kind::Interleaved})
    for (int64_t stages = 1; stages <= 4; ++stages)
      for (int64_t stage = 0; stage < stages; ++stage)
        for (int64_t chunks = 1; chunks <= (kind == Kind::Interleaved ? 3 : 1); ++chunks)
          for (int64_t micro = 1; micro <= 9; ++micro) {
            std::vector<Pass> order = stageOrder(kind, micro, stages, stage, chunks);
            SCOPED_TRACE(std::string(name(kind)) + " micro " + std::to_string(micro) + " stage " +
                         std::to_string(stage) + "/" + std::to_string(stages) + " chunks " +
                         std::to_string(chunks));
            if (kind == Kind::Interleaved && micro % stages) {
              EXPECT_TRUE(order.empty());
              continue;
            }
            ASSERT_EQ(int64_t(order.size()), 2 * micro * chunks);
            using Key = std::tuple<int64_t, int64_t, bool>;
            std::map<Key, int> seen;
            std::map<int64_t, int64_t> lastBackward; // chunk -> micro-batch
            for (const Pass &p : order) {
              EXPECT_EQ(seen[Key(p.microBatch, p.chunk, p.backward)]++, 0);
              if (p.backward) {
                EXPECT_EQ(seen.count(Key(p.microBatch, p.chunk, false)), 1u);
                auto it = lastBackward.find(p.chunk);
                if (it != lastBackward.end()) {
                  EXPECT_LT(it->second, p.microBatch);
                }
                lastBackward[p.chunk] = p.microBatch;
              }
            }
            int64_t inFlight = maxInFlight(order, chunks);
            if (kind == Kind::OneFOneB) {
              EXPECT_EQ(inFlight, std::min(micro, stages - stage));
            }
            if (kind == Kind::GPipe) {
              EXPECT_EQ(inFlight, micro);
            }
            if (kind == Kind::Sequential) {
              EXPECT_EQ(inFlight, 1);
            }
          }
  // The textbook 1F1B order of the first of 4 stages, 6 micro-batches.
  std::vector<Pass> f = stageOrder(Kind::OneFOneB, 6, 4, 0, 1);
  std::string text;
  for (const Pass &p : f)
    text += (p.backward ? "b" : "f") + std::to_string(p.microBatch) + " ";
  EXPECT_EQ(text, "f0 f1 f2 f3 b0 f4 b1 f5 b2 b3 b4 b5 ");
  EXPECT_TRUE(stageOrder(Kind::OneFOneB, 4, 2, 2, 1).empty()); // no stage 2 of 2
  EXPECT_TRUE(stageOrder(Kind::OneFOneB, 4, 2, 0, 2).empty()); // chunks: interleaved only
  EXPECT_TRUE(stageOrder(Kind::GPipe, 0, 2, 0, 1).empty());
  Kind k;
  EXPECT_TRUE(parse("interleaved", k) && k == Kind::Interleaved);
  EXPECT_FALSE(parse("zero-bubble", k));
}

/// The layouts every backend moves a collective's blocks with: each rank's
/// rows land once in the whole (the ranks' places are a permutation of the
/// sequence; context parallelism's rank r holds chunks r and 2 parts - 1 -
/// r), a block goes to the whole and back unchanged, and the experts'
/// share holds rank i's rows of expert e at (e parts + i).
TEST(Layouts, SequenceAndExpertBlocks) {
  for (bool balanced : {false, true})
    for (int64_t parts : {1, 2, 3, 4}) {
      const int64_t batch = 2, c = 6, h = 3, seq = parts * c;
      std::vector<float> whole(size_t(batch * seq * h));
      for (size_t i = 0; i < whole.size(); ++i)
        whole[i] = float(i);
      std::vector<int> seen(size_t(seq), 0);
      std::vector<float> back(whole.size(), -1.0f);
      for (int64_t r = 0; r < parts; ++r) {
        std::vector<float> block(size_t(batch * c * h), -1.0f);
        runCopies(block.data(), whole.data(),
                  sequenceCopies(r, parts, batch, c, h, balanced, false));
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t i = 0; i < c; ++i) {
            // The position this row came from (its first element's value).
            float v = block[size_t((b * c + i) * h)];
            int64_t pos = int64_t(v) / h - b * seq;
            ASSERT_GE(pos, 0);
            ASSERT_LT(pos, seq);
            if (b == 0)
              ++seen[size_t(pos)];
            int64_t chunk = pos / (balanced ? c / 2 : c);
            if (balanced)
              EXPECT_TRUE(chunk == r || chunk == 2 * parts - 1 - r) << r << " " << pos;
            else
              EXPECT_EQ(chunk, r);
            for (int64_t k = 0; k < h; ++k)
              EXPECT_EQ(block[size_t((b * c + i) * h + k)], whole[size_t((b * seq + pos) * h + k)]);
          }
        runCopies(back.data(), block.data(), sequenceCopies(r, parts, batch, c, h, balanced, true));
      }
      for (int n : seen)
        EXPECT_EQ(n, 1);
      EXPECT_EQ(back, whole);
    }
  const int64_t parts = 3, local = 2, ch = 5;
  std::vector<float> blocks(size_t(parts * local * ch)), share(blocks.size()), again(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i)
    blocks[i] = float(i);
  runCopies(share.data(), blocks.data(), expertCopies(parts, local, ch, true));
  for (int64_t i = 0; i < parts; ++i)
    for (int64_t e = 0; e < local; ++e)
      for (int64_t k = 0; k < ch; ++k)
        EXPECT_EQ(share[size_t((e * parts + i) * ch + k)],
                  blocks[size_t((i * local + e) * ch + k)]);
  runCopies(again.data(), share.data(), expertCopies(parts, local, ch, false));
  EXPECT_EQ(again, blocks);
}

TEST(Executor, SixteenBitConversions) {
  auto bf = [](float f) {
    return CpuExecutor::fromStorage(DType::BF16, CpuExecutor::toStorage(DType::BF16, f));
  };
  auto half = [](float f) {
    return CpuExecutor::fromStorage(DType::F16, CpuExecutor::toStorage(DType::F16, f));
  };
  // bf16: 8 significant bits; ties to even.
  EXPECT_EQ(bf(1.0f), 1.0f);
  EXPECT_EQ(bf(1.00390625f), 1.0f);      // 1 + 2^-8: a tie, to even
  EXPECT_EQ(bf(1.01171875f), 1.015625f); // 1 + 3 * 2^-8: a tie, to even (up)
  EXPECT_TRUE(std::isinf(bf(3.4e38f)));
  EXPECT_TRUE(std::isnan(bf(NAN)));
  // fp16: 11 significant bits, largest 65504, subnormals down to 2^-24.
  EXPECT_EQ(half(1.0f), 1.0f);
  EXPECT_EQ(half(1.00048828125f), 1.0f); // 1 + 2^-11: a tie, to even
  EXPECT_EQ(half(-2.5f), -2.5f);
  EXPECT_EQ(half(65504.0f), 65504.0f);
  EXPECT_EQ(half(65510.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(half(65520.0f)));
  EXPECT_EQ(half(std::ldexp(1.0f, -24)), std::ldexp(1.0f, -24));
  EXPECT_EQ(half(std::ldexp(3.0f, -26)), std::ldexp(1.0f, -24)); // 0.75 ulp -> 1 ulp
  EXPECT_EQ(half(std::ldexp(1.0f, -26)), 0.0f);
  EXPECT_EQ(half(std::ldexp(1023.0f, -24)), std::ldexp(1023.0f, -24)); // largest subnormal
  EXPECT_EQ(half(std::ldexp(1.0f, -14)), std::ldexp(1.0f, -14));       // smallest normal
  EXPECT_TRUE(std::isnan(half(NAN)));
  // Every fp16 bit pattern survives the round trip (NaNs aside).
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    float f = CpuExecutor::fromStorage(DType::F16, uint16_t(bits));
    if (!std::isnan(f)) {
      ASSERT_EQ(CpuExecutor::toStorage(DType::F16, f), uint16_t(bits)) << bits;
    }
  }
}

TEST(Executor, EveryKernelHasACpuImplementation) {
  EXPECT_TRUE(CpuExecutor::implementsEveryKernel());
}

TEST(Executor, EveryKernelHasADefinition) {
  for (const llmopt::kernels::KernelInfo &k : llmopt::kernels::kKernels) {
    const KernelDef &d = kernelDef(k.id);
    EXPECT_EQ(d.info, &k) << k.name;
    EXPECT_NE(d.check, nullptr) << k.name;
  }
  // The GEMMs and attention report FLOPs to --profile.
  for (const char *name : {"linear_fwd", "linear_bwd", "attention_fwd", "attention_bwd"})
    EXPECT_NE(kernelDef(llmopt::kernels::findKernel(name)->id).cost, nullptr) << name;
}

TEST(Json, ParsesValues) {
  json::Value v;
  std::string e;
  ASSERT_TRUE(
      json::parse(R"({"a": [1, -2.5, true, null, "x\n\u00e9\ud83d\ude00"], "b": {}})", v, e))
      << e;
  const json::Value *a = v.get("a");
  ASSERT_TRUE(a && a->isArray());
  EXPECT_EQ(a->array[0].integer, 1);
  EXPECT_TRUE(a->array[0].isInteger);
  EXPECT_DOUBLE_EQ(a->array[1].number, -2.5);
  EXPECT_FALSE(a->array[1].isInteger);
  EXPECT_TRUE(a->array[2].boolean);
  EXPECT_EQ(a->array[4].string, "x\n\xc3\xa9\xf0\x9f\x98\x80");
}

TEST(Json, ErrorsSayWhere) {
  json::Value v;
  std::string e;
  EXPECT_FALSE(json::parse("{\n  \"a\" 1\n}", v, e));
  EXPECT_EQ(e, "line 2, column 7: expected ':'");
  EXPECT_FALSE(json::parse("[1, 2", v, e));
  EXPECT_NE(e.find("expected ',' or ']'"), std::string::npos);
  EXPECT_FALSE(json::parse(R"({"a": 1, "a": 2})", v, e));
  EXPECT_NE(e.find("duplicate key 'a'"), std::string::npos);
  EXPECT_FALSE(json::parse(std::string(1000, '[') + std::string(1000, ']'), v, e));
  EXPECT_NE(e.find("nested deeper than 256 levels"), std::string::npos);
  EXPECT_FALSE(json::parse("{} x", v, e));
  EXPECT_FALSE(json::parse("1e999", v, e));
}

TEST(Sha256, KnownVectors) {
  // FIPS 180-4 examples.
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/// A minimal valid plan: one rank, fill then global_norm, and one parameter
/// updated by AdamW.
std::string minimalPlan() {
  return R"({
  "format": "llm-opt-plan", "version": 1, "world_size": 1,
  "mesh": {"dp": 1},
  "inputs": [{"name": "tokens", "shape": [1, 2], "dtype": "i32"},
             {"name": "labels", "shape": [1, 2], "dtype": "i32"}],
  "params": [{"name": "w", "shape": [4], "dtype": "f32", "init": "ones"}],
  "programs": [{"name": "train_step", "ranks": [0], "arena_bytes": 32, "num_micro_batches": 1,
    "outputs": {"loss": {"space": "arena", "offset": 0, "shape": [], "dtype": "f32"},
                "grad_norm": {"space": "arena", "offset": 4, "shape": [], "dtype": "f32"}},
    "micro_batch_instructions": [],
    "step_instructions": [
      {"kernel": "fill", "ins": [], "outs": [{"space": "arena", "offset": 16, "shape": [4], "dtype": "f32"}], "params": {"value": 1.0}},
      {"kernel": "global_norm", "ins": [{"space": "arena", "offset": 16, "shape": [4], "dtype": "f32"}],
       "outs": [{"space": "arena", "offset": 4, "shape": [], "dtype": "f32"}], "params": {}},
      {"kernel": "adamw", "ins": [{"space": "arena", "offset": 16, "shape": [4], "dtype": "f32"},
                                  {"space": "arena", "offset": 4, "shape": [], "dtype": "f32"}],
       "outs": [], "params": {"param": "w", "lr": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                              "weight_decay": 0.0, "max_norm": 1.0}}
    ]}]
})";
}

std::string validate(std::string text) {
  json::Value v;
  std::string e;
  if (!json::parse(text, v, e))
    return "json: " + e;
  Plan p;
  return parsePlan(v, p, e) ? "ok" : e;
}

void replace(std::string &s, const std::string &from, const std::string &to) {
  size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
}

TEST(Plan, ValidatesEverything) {
  EXPECT_EQ(validate(minimalPlan()), "ok");
  struct Case {
    std::string from, to, message;
  };
  const Case cases[] = {
      {R"("version": 1)", R"("version": 2)", "version: is 2; this runtime reads version 1"},
      {R"("format": "llm-opt-plan")", R"("format": "onnx")", "format: is 'onnx'"},
      {R"("kernel": "fill")", R"("kernel": "fill_all")",
       "programs[0].step_instructions[0].kernel: unknown kernel 'fill_all'"},
      {R"("offset": 16, "shape": [4], "dtype": "f32"}], "params": {"value")",
       R"("offset": 24, "shape": [4], "dtype": "f32"}], "params": {"value")",
       "programs[0].step_instructions[0].outs[0]: buffer [24, 40) overruns the 32-byte arena"},
      {R"("param": "w")", R"("param": "v")",
       "programs[0].step_instructions[2].params.param: no parameter named 'v'"},
      {R"("ranks": [0])", R"("ranks": [1])", "rank 1 is outside the world or listed twice"},
      {R"("init": "ones")", R"("init": "normal")", "params[0].std: normal initialization needs"},
      {R"("shape": [4], "dtype": "f32", "init")", R"("shape": [0], "dtype": "f32", "init")",
       "params[0].shape: must be at least 1"},
      {R"("dtype": "f32", "init")", R"("dtype": "f64", "init")", "unknown dtype 'f64'"},
      // Kernel parameters are typed and checked against the kernel ABI.
      {R"("params": {"value": 1.0})", R"("params": {"value": "1"})",
       "programs[0].step_instructions[0].params.value: must be a finite number"},
      {R"("params": {"value": 1.0})", R"("params": {"value": 1.0, "eps": 1e-5})",
       "step_instructions[0].params.eps: 'fill' takes no parameter 'eps' (it takes value)"},
      {R"("params": {})", R"("params": {"shard": "tp"})",
       "step_instructions[1].params.shard: 'global_norm' takes no parameter 'shard' (it "
       "takes none)"},
      {R"("weight_decay": 0.0)", R"("weight_decay": 0.0, "shard": "tp")",
       "step_instructions[2].params.shard: no mesh axis 'tp'"},
      {R"("max_norm": 1.0)", R"("max_norm": true)",
       "step_instructions[2].params.max_norm: must be a finite number"},
      {R"("params": {})", R"("params": [])", "step_instructions[1].params: must be an object"},
  };
  for (const Case &c : cases) {
    std::string text = minimalPlan();
    replace(text, c.from, c.to);
    std::string got = validate(text);
    EXPECT_NE(got.find(c.message), std::string::npos) << "got: " << got;
  }
}

/// Every parameter a kernel lists in abi.h is one of LLMOPT_KERNEL_PARAMS and
/// its written default decodes; a kernel's defaults are what a call without
/// them gets.
TEST(Plan, KernelParametersAreDeclaredAndDefaulted) {
  for (const llmopt::kernels::KernelInfo &k : llmopt::kernels::kKernels) {
    KernelArgs args;
    std::string where, why;
    EXPECT_TRUE(decodeKernelArgs(k, nullptr, args, where, why)) << k.name << ": " << why;
    std::string list = k.params;
    for (size_t start = 0; start < list.size();) {
      size_t comma = list.find(',', start);
      std::string name = list.substr(start, comma == std::string::npos ? comma : comma - start);
      name = name.substr(0, name.find('='));
      start = comma == std::string::npos ? list.size() : comma + 1;
      // A parameter of the kernel's own list is accepted by name.
      json::Value params;
      ASSERT_TRUE(json::parse("{}", params, why));
      json::Value v;
      for (const char *text : {"1", "true", "\"dp\""}) {
        ASSERT_TRUE(json::parse(text, v, why));
        params.object[name] = v;
        if (decodeKernelArgs(k, &params, args, where, why))
          break;
      }
      EXPECT_EQ(why.find("takes no parameter"), std::string::npos) << k.name << ": " << why;
    }
  }
  auto defaults = [](const char *name) {
    KernelArgs a;
    std::string where, why;
    decodeKernelArgs(*llmopt::kernels::findKernel(name), nullptr, a, where, why);
    return a;
  };
  EXPECT_EQ(defaults("scale").factor, 1.0);
  EXPECT_EQ(defaults("rotary").factor, 0.0); // no Llama 3 scaling
  EXPECT_EQ(defaults("rotary").high_freq_factor, 4.0);
  EXPECT_EQ(defaults("rotary").original_max_positions, 8192.0);
  EXPECT_EQ(defaults("cross_entropy_fwd").ignore_index, -100);
  EXPECT_EQ(defaults("vp_ce_bwd").ignore_index, -100);
  EXPECT_EQ(defaults("moe_router_bwd").aux_scale, 1.0);
}

TEST(Plan, LoadChecksTheChecksum) {
  std::string dir = ::testing::TempDir() + "/llmopt-plan-test";
  std::system(("mkdir -p " + dir).c_str());
  std::string text = minimalPlan();
  std::ofstream(dir + "/plan.json") << text;
  std::ofstream(dir + "/checksums.sha256") << sha256Hex(text) << "  plan.json\n";
  Plan p;
  std::string e;
  ASSERT_TRUE(loadPlan(dir, p, e)) << e;
  EXPECT_EQ(p.programs.size(), 1u);
  std::ofstream(dir + "/plan.json") << text.substr(0, text.size() - 10);
  EXPECT_FALSE(loadPlan(dir, p, e));
  EXPECT_NE(e.find("checksum mismatch: the file is truncated or was modified"), std::string::npos)
      << e;
  std::remove((dir + "/checksums.sha256").c_str());
  EXPECT_FALSE(loadPlan(dir, p, e));
  EXPECT_NE(e.find("missing; refusing an unchecked plan"), std::string::npos) << e;
  EXPECT_FALSE(loadPlan(dir + "/nowhere", p, e));
  EXPECT_NE(e.find("cannot read it"), std::string::npos) << e;
}

/// Inputs that are not regular files are refused before a byte is read: a
/// FIFO no one writes used to block the reader for ever, /dev/zero to read
/// without end. (A regression hangs the test; ctest's timeout ends it.)
TEST(Files, OnlyRegularFilesAreRead) {
  std::string dir = ::testing::TempDir() + "/llmopt-file-test";
  std::system(("rm -rf " + dir + " && mkdir -p " + dir + " && mkfifo " + dir + "/fifo").c_str());
  std::string out, e;
  EXPECT_FALSE(readRegularFile(dir + "/fifo", out, e));
  EXPECT_EQ(e, "is a FIFO, not a regular file");
  EXPECT_FALSE(readRegularFile("/dev/zero", out, e));
  EXPECT_EQ(e, "is a character device, not a regular file");
  EXPECT_FALSE(readRegularFile(dir, out, e));
  EXPECT_EQ(e, "is a directory, not a regular file");
  EXPECT_FALSE(readRegularFile(dir + "/nowhere", out, e));
  EXPECT_EQ(e, "cannot open it: No such file or directory");
  std::ofstream(dir + "/file") << "some text";
  ASSERT_TRUE(readRegularFile(dir + "/file", out, e)) << e;
  EXPECT_EQ(out, "some text");

  // plan.json a FIFO; a token shard a FIFO or a device.
  std::system(("mkdir -p " + dir + "/plan && mkfifo " + dir + "/plan/plan.json").c_str());
  Plan p;
  EXPECT_FALSE(loadPlan(dir + "/plan", p, e));
  EXPECT_NE(e.find("plan/plan.json: is a FIFO, not a regular file"), std::string::npos) << e;
  TokenData data;
  EXPECT_FALSE(data.open({dir + "/fifo"}, e));
  EXPECT_NE(e.find("fifo: is a FIFO, not a regular file"), std::string::npos) << e;
  EXPECT_FALSE(data.open({"/dev/zero"}, e));
  EXPECT_NE(e.find("/dev/zero: is a character device"), std::string::npos) << e;
}

/// A shard's claimed token count is checked against its size before the
/// tokens are allocated: 2^31 - 1 claimed (8 GB of uint32) with 3 held is
/// refused at once, and a count the file does hold still reads.
TEST(Files, ShardCountIsCheckedAgainstTheSize) {
  std::string path = ::testing::TempDir() + "/llmopt-claims.bin";
  auto write = [&](int32_t count, int held) {
    int32_t header[256] = {kShardMagic, 2, count};
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char *>(header), sizeof(header));
    for (uint32_t t = 0; t < uint32_t(held); ++t)
      f.write(reinterpret_cast<const char *>(&t), 4);
  };
  write(0x7fffffff, 3);
  TokenData data;
  std::string e;
  EXPECT_FALSE(data.open({path}, e));
  EXPECT_NE(e.find("truncated: the header promises 2147483647 tokens, the file holds 3"),
            std::string::npos)
      << e;
  write(3, 3);
  ASSERT_TRUE(data.open({path}, e)) << e;
  EXPECT_EQ(data.size(), 3);
  EXPECT_EQ(data.maxToken(), 2);
}

} // namespace
