// StoreConfig: what MooncakeDistributedStore.setup takes, and where its
// values come from: setup's arguments, a dict of the same keys, the
// environment variables Mooncake's integrations read, and the JSON file
// MOONCAKE_CONFIG_PATH names.
//
// Sizes are integers or text: "16777216", "16MB", "16 MB", "1GB", "1.5 GiB",
// "64K" (K/M/G/T with or without B or iB, binary multiples, case-insensitive).
// A percentage ("50%") and anything else is INVALID_ARGUMENT.
//
// Precedence for a key (ResolveStoreConfig): an explicit value > the
// environment variable > the JSON file > the default.
//   key                  environment                    JSON file key(s)
//   local_hostname       MOONCAKE_LOCAL_HOSTNAME        local_hostname
//   metadata_server      MOONCAKE_TE_META_DATA_SERVER   metadata_server
//   global_segment_size  MOONCAKE_GLOBAL_SEGMENT_SIZE   global_segment_size
//   local_buffer_size    MOONCAKE_LOCAL_BUFFER_SIZE     local_buffer_size
//   protocol             MOONCAKE_PROTOCOL              protocol
//   rdma_devices         MOONCAKE_DEVICE                rdma_devices, device_name
//   master_server_addr   MOONCAKE_MASTER                master_server_addr,
//                                                       master_server_address
//
// Thread-safety: pure functions (they read the environment and the file).
#ifndef MOONCAKE_STORE_COMPAT_STORE_CONFIG_H_
#define MOONCAKE_STORE_COMPAT_STORE_CONFIG_H_

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace mooncake::compat {

// Mooncake's defaults for a config that names no size (its integrations'
// DEFAULT_GLOBAL_SEGMENT_SIZE and DEFAULT_LOCAL_BUFFER_SIZE).
inline constexpr uint64_t kDefaultGlobalSegmentBytes = 3355443200;  // 3.125 GiB
inline constexpr uint64_t kDefaultLocalBufferBytes = uint64_t{1} << 30;

struct StoreConfig {
  std::string local_hostname = "localhost";  // "host" or "host:port"
  std::string metadata_server = "P2PHANDSHAKE";
  uint64_t global_segment_size = kDefaultGlobalSegmentBytes;  // bytes this client adds to the pool
  uint64_t local_buffer_size = kDefaultLocalBufferBytes;      // the staging buffer
  std::string protocol = "tcp";                               // "tcp" or "rdma"
  std::string rdma_devices;
  std::string master_server_addr = "127.0.0.1:50051";
};

// The keys setup(config: dict) and the JSON file may carry, as text.
using ConfigMap = std::map<std::string, std::string, std::less<>>;

inline absl::StatusOr<uint64_t> ParseSizeText(std::string_view key, std::string_view text) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(key), "='", AbslView(text), "': ", AbslView(why)));
  };
  std::string s(absl::StripAsciiWhitespace(AbslView(text)));
  if (s.empty()) return bad("empty size");
  if (s.find('%') != std::string::npos) return bad("percentages are not supported; give bytes");
  size_t num_end = 0;
  while (num_end < s.size() &&
         (absl::ascii_isdigit(static_cast<unsigned char>(s[num_end])) || s[num_end] == '.')) {
    ++num_end;
  }
  if (num_end == 0) return bad("want a number with an optional unit (e.g. 16MB, 1 GB)");
  double number = 0;
  if (!absl::SimpleAtod(s.substr(0, num_end), &number) || !std::isfinite(number)) {
    return bad("not a number");
  }
  std::string unit = absl::AsciiStrToUpper(
      absl::StripAsciiWhitespace(AbslView(std::string_view(s).substr(num_end))));
  if (unit.ends_with("IB")) {
    unit.resize(unit.size() - 2);
  } else if (unit.size() > 1 && unit.ends_with("B")) {
    unit.resize(unit.size() - 1);
  }
  double mult = 1;
  if (unit.empty() || unit == "B") {
    mult = 1;
  } else if (unit == "K") {
    mult = 1024.0;
  } else if (unit == "M") {
    mult = 1024.0 * 1024;
  } else if (unit == "G") {
    mult = 1024.0 * 1024 * 1024;
  } else if (unit == "T") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return bad("unknown unit; want B, KB, MB, GB or TB");
  }
  const double bytes = number * mult;
  if (bytes >= 18446744073709551615.0) return bad("too large");
  if (unit.empty() && s.find('.') != std::string::npos) return bad("a byte count is an integer");
  return static_cast<uint64_t>(bytes);
}

// Reads the JSON object at `path` into text values (numbers as their digits).
inline absl::StatusOr<ConfigMap> ReadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("config file '", path, "' cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file '", path, "' is not a JSON object"));
  }
  ConfigMap out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it->is_string()) {
      out[it.key()] = it->get<std::string>();
    } else if (it->is_number_unsigned() || it->is_number_integer()) {
      out[it.key()] = it->dump();
    } else if (it->is_boolean()) {
      out[it.key()] = it->get<bool>() ? "true" : "false";
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("config file '", path, "': key '", it.key(), "' is not a string or number"));
    }
  }
  return out;
}

// Applies `values` over `config`. Unknown keys are INVALID_ARGUMENT (a typo
// must not pass silently).
inline absl::Status ApplyConfigMap(const ConfigMap& values, StoreConfig* config) {
  for (const auto& [k, v] : values) {
    if (k == "local_hostname") {
      config->local_hostname = v;
    } else if (k == "metadata_server") {
      config->metadata_server = v;
    } else if (k == "global_segment_size") {
      ASSIGN_OR_RETURN(config->global_segment_size, ParseSizeText(k, v));
    } else if (k == "local_buffer_size") {
      ASSIGN_OR_RETURN(config->local_buffer_size, ParseSizeText(k, v));
    } else if (k == "protocol") {
      config->protocol = v;
    } else if (k == "rdma_devices" || k == "device_name") {
      config->rdma_devices = v;
    } else if (k == "master_server_addr" || k == "master_server_address") {
      config->master_server_addr = v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown setup key '", k, "'"));
    }
  }
  return absl::OkStatus();
}

// The values the environment gives (MOONCAKE_*), as a ConfigMap.
inline ConfigMap ConfigFromEnvironment() {
  static constexpr std::pair<const char*, const char*> kEnv[] = {
      {"MOONCAKE_LOCAL_HOSTNAME", "local_hostname"},
      {"MOONCAKE_TE_META_DATA_SERVER", "metadata_server"},
      {"MOONCAKE_GLOBAL_SEGMENT_SIZE", "global_segment_size"},
      {"MOONCAKE_LOCAL_BUFFER_SIZE", "local_buffer_size"},
      {"MOONCAKE_PROTOCOL", "protocol"},
      {"MOONCAKE_DEVICE", "rdma_devices"},
      {"MOONCAKE_MASTER", "master_server_addr"},
  };
  ConfigMap out;
  for (const auto& [env, key] : kEnv) {
    if (const char* v = std::getenv(env); v != nullptr && *v != '\0') out[key] = v;
  }
  return out;
}

// Defaults < MOONCAKE_CONFIG_PATH's file < the environment < `explicit_values`.
inline absl::StatusOr<StoreConfig> ResolveStoreConfig(const ConfigMap& explicit_values) {
  StoreConfig config;
  if (const char* path = std::getenv("MOONCAKE_CONFIG_PATH"); path != nullptr && *path != '\0') {
    ASSIGN_OR_RETURN(ConfigMap file, ReadConfigFile(path));
    RETURN_IF_ERROR(ApplyConfigMap(file, &config));
  }
  RETURN_IF_ERROR(ApplyConfigMap(ConfigFromEnvironment(), &config));
  RETURN_IF_ERROR(ApplyConfigMap(explicit_values, &config));
  return config;
}

}  // namespace mooncake::compat

#endif  // MOONCAKE_STORE_COMPAT_STORE_CONFIG_H_
