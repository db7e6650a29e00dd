//===- layouts.h - where a collective's blocks go, for every backend -*- C++ -*-===//
//
// The collectives inside a computation exchange blocks in rank order; the
// activations they come from or go to are laid out otherwise. The moves
// between the two are strided copies, described once here and carried out
// by each backend: the CPU with host copies (runCopies), the CUDA backend
// with one cudaMemcpy2DAsync each. So the layouts the GPU uses are the ones
// the CPU backend's tests prove.
//
//  - Sequence and context parallelism: rank r's block [batch][c][h] and the
//    position-ordered whole [batch][seq = parts c][h]; row i of the block is
//    at position r c + i, or (context parallelism's balanced halves) the
//    first half at r c / 2 + i and the second at (2 parts - 1 - r) c / 2 +
//    i - c / 2.
//  - Expert parallelism: the blocks [parts][local][C h] an all-to-all sends
//    or receives, and the experts' share [local][parts][C h] (rank i's rows
//    of local expert e at (e parts + i) C h).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_LAYOUTS_H
#define LLMOPT_RUNTIME_LAYOUTS_H

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace llmopt::runtime {

/// `rows` rows of `width` floats from src + `src` (rows `srcPitch` floats
/// apart) to dst + `dst` (rows `dstPitch` apart).
struct StridedCopy {
  int64_t dst = 0, dstPitch = 0, src = 0, srcPitch = 0, width = 0, rows = 0;
};

/// The position of row i of rank r's chunk of `local` rows in the whole
/// sequence of `parts` chunks (balanced: context parallelism's halves).
inline int64_t wholeRow(bool balanced, int64_t r, int64_t i, int64_t local, int64_t parts) {
  if (!balanced)
    return r * local + i;
  int64_t half = local / 2;
  return i < half ? r * half + i : (2 * parts - 1 - r) * half + (i - half);
}

/// Whether a context-parallel chunk of `local` positions splits into its two
/// halves; false with `error` set otherwise.
inline bool contextChunkHalves(int64_t local, std::string &error) {
  if (local % 2 == 0)
    return true;
  error =
      "a context-parallel sequence chunk of " + std::to_string(local) + " positions does not halve";
  return false;
}

/// The positions in the whole sequence of context-parallel rank r's `local`
/// rows (its balanced halves), as the attention, rotary and position
/// kernels take them.
inline std::vector<int32_t> contextPositions(int64_t r, int64_t local, int64_t parts) {
  std::vector<int32_t> positions(static_cast<size_t>(std::max<int64_t>(local, 0)));
  for (int64_t i = 0; i < local; ++i)
    positions[static_cast<size_t>(i)] = int32_t(wholeRow(true, r, i, local, parts));
  return positions;
}

/// Rank r's rows between its block [batch][c][h] and the whole [batch][parts
/// c][h]: from the block to the whole (`toWhole`; dst is the whole, src the
/// block) or back.
inline std::vector<StridedCopy> sequenceCopies(int64_t r, int64_t parts, int64_t batch, int64_t c,
                                               int64_t h, bool balanced, bool toWhole) {
  std::vector<StridedCopy> copies;
  int64_t half = balanced ? c / 2 : c, blockPitch = c * h, wholePitch = parts * c * h;
  auto piece = [&](int64_t first, int64_t count) {
    if (count <= 0)
      return;
    int64_t block = first * h, whole = wholeRow(balanced, r, first, c, parts) * h;
    StridedCopy s;
    s.width = count * h;
    s.rows = batch;
    if (toWhole) {
      s.dst = whole, s.dstPitch = wholePitch, s.src = block, s.srcPitch = blockPitch;
    } else {
      s.dst = block, s.dstPitch = blockPitch, s.src = whole, s.srcPitch = wholePitch;
    }
    copies.push_back(s);
  };
  piece(0, half);
  if (balanced)
    piece(half, c - half);
  return copies;
}

/// Between the blocks [parts][local][ch] and the share [local][parts][ch]:
/// into the share (`toShare`; dst is the share, src the blocks) or back.
inline std::vector<StridedCopy> expertCopies(int64_t parts, int64_t local, int64_t ch,
                                             bool toShare) {
  std::vector<StridedCopy> copies;
  for (int64_t i = 0; i < parts; ++i) {
    StridedCopy s;
    s.width = ch;
    s.rows = local;
    if (toShare) {
      s.dst = i * ch, s.dstPitch = parts * ch, s.src = i * local * ch, s.srcPitch = ch;
    } else {
      s.dst = i * local * ch, s.dstPitch = ch, s.src = i * ch, s.srcPitch = parts * ch;
    }
    copies.push_back(s);
  }
  return copies;
}

/// Carries the copies out in host memory.
inline void runCopies(float *dst, const float *src, const std::vector<StridedCopy> &copies) {
  for (const StridedCopy &c : copies)
    for (int64_t row = 0; row < c.rows; ++row)
      std::copy_n(src + c.src + row * c.srcPitch, c.width, dst + c.dst + row * c.dstPitch);
}

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_LAYOUTS_H
