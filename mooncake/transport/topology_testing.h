// Topology fixtures for tests: a sysfs tree written as one text manifest.
//
// Bazel labels cannot name files with ':' (every PCI address has two), and
// symlinks do not survive in testdata, so a fixture under
// mooncake/transport/testdata/topology/ is a manifest, one entry a line:
//
//   # comment
//   file PATH CONTENT    a file at PATH (root-relative) holding CONTENT (the rest
//                        of the line, possibly empty) and a newline
//   link PATH TARGET     a sysfs link at PATH to the root-relative TARGET
//
// MaterializeSysfs() writes it under a directory, which then serves as a
// sysfs root for DiscoverTopology(). Links become real symlinks
// (LinkStyle::kSymlink) or PATH.link files (LinkStyle::kLinkFile), the two
// forms the reader accepts (topology.h). tools/capture_topology.sh captures a
// live host in this format.
#ifndef MOONCAKE_TRANSPORT_TOPOLOGY_TESTING_H_
#define MOONCAKE_TRANSPORT_TOPOLOGY_TESTING_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace mooncake::transport {

enum class LinkStyle { kSymlink, kLinkFile };

// Reads a file of the test's runfiles (path relative to the workspace root).
inline absl::StatusOr<std::string> ReadTestData(const std::string& rel) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  const std::string path =
      srcdir != nullptr && ws != nullptr ? absl::StrCat(srcdir, "/", ws, "/", rel) : rel;
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read test data ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes the manifest under `dir` (created). Errors name the line.
inline absl::Status MaterializeSysfs(std::string_view manifest, const std::string& dir,
                                     LinkStyle style) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", ec.message()));
  std::istringstream in{std::string(manifest)};
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    const size_t sp1 = line.find(' ');
    const std::string kind = line.substr(0, sp1);
    const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
    const std::string path = sp1 == std::string::npos ? "" : line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string rest = sp2 == std::string::npos ? "" : line.substr(sp2 + 1);
    if (path.empty() || (kind != "file" && kind != "link") || (kind == "link" && rest.empty())) {
      return absl::InvalidArgumentError(absl::StrCat("manifest line ", line_no, ": ", line));
    }
    const fs::path full = fs::path(dir) / path;
    fs::create_directories(full.parent_path(), ec);
    if (ec)
      return absl::InternalError(absl::StrCat("mkdir for line ", line_no, ": ", ec.message()));
    if (kind == "link" && style == LinkStyle::kSymlink) {
      fs::create_directories(fs::path(dir) / rest, ec);  // the target, if nothing made it yet
      fs::create_directory_symlink(fs::path(dir) / rest, full, ec);
      if (ec)
        return absl::InternalError(absl::StrCat("symlink line ", line_no, ": ", ec.message()));
      continue;
    }
    std::ofstream out(kind == "link" ? full.string() + ".link" : full.string());
    out << rest << "\n";
    if (!out) return absl::InternalError(absl::StrCat("write for line ", line_no));
  }
  return absl::OkStatus();
}

// Materializes testdata/topology/<name>.sysfs under a fresh directory in
// TEST_TMPDIR and returns that root.
inline absl::StatusOr<std::string> MaterializeFixture(const std::string& name, LinkStyle style) {
  absl::StatusOr<std::string> manifest =
      ReadTestData(absl::StrCat("mooncake/transport/testdata/topology/", name, ".sysfs"));
  if (!manifest.ok()) return manifest.status();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/sysfs_", name, "_",
                                       style == LinkStyle::kSymlink ? "symlink" : "linkfile");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  absl::Status s = MaterializeSysfs(*manifest, dir, style);
  if (!s.ok()) return s;
  return dir;
}

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_TOPOLOGY_TESTING_H_
