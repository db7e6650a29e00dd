//===- HTMLReport.cpp - the search as one self-contained web page ---------===//
//
// The page (ReportPage.html, compiled in) carries its own CSS and a small
// script that draws the charts as SVG from data embedded in the page: the
// JSON report and the pipeline timeline of each top plan. One implementation
// serves llm-opt and the Python frontend (which asks llm-opt for the page);
// the page needs no network, so it can be mailed, archived or attached to a
// ticket as it is.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Planner/Planner.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>

using namespace llmopt;
using namespace llmopt::cost;
using namespace llmopt::planner;
namespace json = llvm::json;

/// The page template, generated from ReportPage.html by CMake.
static const char kReportPage[] =
#include "ReportPage.inc"
    ;

/// Micro-batches laid out per timeline (at least two rounds of the pipeline
/// are); the steady state repeats after that.
static constexpr int64_t kTimelineMicroBatches = 8;

/// About the most blocks a page draws per timeline. Deep pipelines show a
/// subset of their stages (the first, the last and evenly spaced ones
/// between), simulated with all of them.
static constexpr int64_t kTimelineBlocks = 6000;
static constexpr int kTimelineMaxStages = 16;

/// Times are integers on a grid of a millionth of the makespan: exact enough
/// for any screen, and a third of the size of 17-digit doubles.
static constexpr double kTimeTicks = 1e6;

static json::Value timelineJSON(const PlanEval &plan) {
  PipelineTimeline t = pipelineTimeline(plan, kTimelineMicroBatches);
  if (t.stages <= 0 || t.blocks.empty())
    return json::Object{{"blocks", json::Array{}}};
  const int64_t perStage = 2 * t.microBatches * t.chunks;
  int shown = int(std::clamp<int64_t>(kTimelineBlocks / std::max<int64_t>(1, perStage), 2,
                                      std::min(t.stages, kTimelineMaxStages)));
  shown = std::min(shown, t.stages);
  std::vector<bool> keep(size_t(t.stages), false);
  json::Array stages;
  for (int i = 0; i < shown; ++i) {
    int s = shown == 1 ? 0 : int(std::lround(double(i) * (t.stages - 1) / (shown - 1)));
    if (!keep[size_t(s)]) {
      keep[size_t(s)] = true;
      stages.push_back(s);
    }
  }
  const double unit = t.makespan > 0 ? t.makespan / kTimeTicks : 1.0;
  auto ticks = [&](double sec) { return int64_t(std::llround(sec / unit)); };
  json::Array blocks;
  for (const PipelineBlock &b : t.blocks)
    if (keep[size_t(b.stage)])
      blocks.push_back(json::Array{b.stage, b.chunk, b.microBatch, b.backward ? 1 : 0,
                                   ticks(b.start), ticks(b.end)});
  return json::Object{
      {"schedule", toString(t.schedule)},
      {"stages", t.stages},
      {"shown_stages", std::move(stages)},
      {"chunks", t.chunks},
      {"micro_batches", t.microBatches},
      {"total_micro_batches", t.totalMicroBatches},
      {"time_unit_s", unit},
      {"makespan", ticks(t.makespan)},
      {"blocks", std::move(blocks)},
  };
}

/// JSON placed inside <script>: every `<` becomes `\u003c`, so neither
/// `</script>` nor `<!--` in a string (a model name, an example) can end or
/// change the element. `<` occurs only inside JSON strings, where the escape
/// means the same character.
static std::string scriptSafe(llvm::StringRef jsonText) {
  std::string out;
  out.reserve(jsonText.size());
  for (char ch : jsonText) {
    if (ch == '<')
      out += "\\u003c";
    else
      out += ch;
  }
  return out;
}

static std::string htmlEscape(llvm::StringRef text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += ch;
    }
  }
  return out;
}

void llmopt::planner::printHTMLReport(llvm::raw_ostream &os, const ModelDesc &model,
                                      const ClusterSpec &cluster, const JobSpec &job,
                                      const SearchResult &result) {
  json::Array timelines;
  for (const PlanEval &p : result.plans)
    timelines.push_back(timelineJSON(p));
  json::Value data = json::Object{
      {"report", reportJSON(model, cluster, job, result)},
      {"timelines", std::move(timelines)},
  };
  std::string dataText = scriptSafe(llvm::formatv("{0}", data).str());
  std::string title = htmlEscape(llvm::formatv("llm-opt plan: {0} on {1} x {2}", model.name,
                                               cluster.totalGpus(), cluster.gpu.name)
                                     .str());

  llvm::StringRef page(kReportPage);
  for (auto [marker, value] :
       {std::pair<llvm::StringRef, llvm::StringRef>{"__LLMOPT_TITLE__", title},
        {"__LLMOPT_DATA__", dataText}}) {
    size_t at = page.find(marker);
    os << page.take_front(at) << value;
    page = page.drop_front(at + marker.size());
  }
  os << page;
}
