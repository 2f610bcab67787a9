// What the store's programs (//tools:mooncake_store, //tools:mooncake_master,
// //tools:mooncake_http_metadata_server) share around the servers they run:
//
//   PrecheckFlags   every argument checked against the defined flags before
//                   abseil parses them, so that a bad flag exits 2 (abseil
//                   exits 1) and flags the program refuses by name (another
//                   implementation's flags it does not implement) say so
//   StopSignals     SIGINT, SIGTERM and SIGHUP taken synchronously by the
//                   main thread; a second one during the shutdown exits at once
//   ReadyFile, LogLine  the ready file and running lines (with their UTC
//                   time unless SetLogTimestamps(false))
//
// Exit codes: 0 after a graceful shutdown, kExitCannotStart (1) when a server
// cannot start, kExitBadFlags (2) for bad flags, 128 + the signal when a
// second signal cuts a shutdown short.
//
// Thread-safety: PrecheckFlags, SetLogTimestamps and the StopSignals
// constructor from main() before any thread starts; the rest from the main
// thread.
#ifndef MOONCAKE_STORE_NODE_PROGRAM_H_
#define MOONCAKE_STORE_NODE_PROGRAM_H_

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/store/node/status_line.h"

namespace mooncake::node {

inline constexpr int kExitCannotStart = 1;
inline constexpr int kExitBadFlags = 2;

// A flag a program refuses by name: `why` says what to do instead.
struct RefusedFlag {
  std::string_view name;
  std::string_view why;
};

[[noreturn]] inline void ExitBadFlags(std::string_view program, std::string_view why) {
  std::fprintf(stderr, "%.*s: %.*s\n(see --help)\n", static_cast<int>(program.size()),
               program.data(), static_cast<int>(why.size()), why.data());
  std::exit(kExitBadFlags);
}

// What PrecheckFlags does with abseil's built-in flags not named in `builtins`.
enum class OtherBuiltins {
  kUnknown,  // refused as unknown flags: no flag reaches the program unchecked
  kChecked,  // checked like the program's own flags (--nohelp, --helpon=X pass)
};

// Exits 2 with a message for: a positional argument, a flag in `refused`
// (also as --noNAME), an unknown flag, a flag without its value, a value the
// flag's type does not parse. abseil's built-in flags named in `builtins`
// (e.g. "help", "version") pass as they are; the others (--flagfile,
// --undefok, ...) as `others` says.
inline void PrecheckFlags(std::string_view program, int argc, char** argv,
                          std::span<const RefusedFlag> refused,
                          std::span<const std::string_view> builtins,
                          OtherBuiltins others = OtherBuiltins::kUnknown) {
  MC_ASSERT(argc >= 1 && argv != nullptr, "PrecheckFlags needs main's argv");
  auto bad = [program](const std::string& why) { ExitBadFlags(program, why); };
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") bad("unexpected arguments after --");
    if (!arg.starts_with("-") || arg == "-") {
      bad(absl::StrCat("unexpected argument \"", AbslView(arg),
                       "\" (flags look like --name=value)"));
    }
    arg.remove_prefix(arg.starts_with("--") ? 2 : 1);
    const size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    for (const RefusedFlag& r : refused) {
      if (name == r.name ||
          (name.starts_with("no") && std::string_view(name).substr(2) == r.name)) {
        bad(absl::StrCat("--", AbslView(r.name), " is a Mooncake flag this program does not ",
                         "implement: ", AbslView(r.why)));
      }
    }
    if (std::find(builtins.begin(), builtins.end(), name) != builtins.end()) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    const bool negated = flag == nullptr && name.starts_with("no");
    if (negated) flag = absl::FindCommandLineFlag(name.substr(2));
    // abseil's own flags (flagfile, fromenv, ...) are registered too: only
    // those in `builtins` pass.
    static constexpr std::string_view kAbslBuiltins[] = {
        "help",    "helpfull",        "helpshort", "helppackage", "helpon",     "helpmatch",
        "version", "only_check_args", "flagfile",  "fromenv",     "tryfromenv", "undefok"};
    const std::string_view base = negated ? std::string_view(name).substr(2) : name;
    const bool builtin = others == OtherBuiltins::kUnknown &&
                         std::find(std::begin(kAbslBuiltins), std::end(kAbslBuiltins), base) !=
                             std::end(kAbslBuiltins);
    if (flag == nullptr || builtin || (negated && !flag->IsOfType<bool>())) {
      bad(absl::StrCat("unknown flag --", name));
    }
    if (negated || (eq == std::string_view::npos && flag->IsOfType<bool>())) continue;
    std::string value;
    if (eq != std::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      bad(absl::StrCat("--", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) bad(absl::StrCat("--", name, "=", value, ": ", error));
  }
}

inline const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
  }
  return "a signal";
}

// Prints `line` and flushes (a supervisor reading a pipe sees it at once).
inline void Say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

namespace program_internal {
// relaxed: set once by main() before any thread starts.
inline std::atomic<bool> log_timestamps{true};
}  // namespace program_internal

// Whether LogLine starts its lines with their UTC time (default true; false
// for a supervisor that stamps lines itself). From main(), before any thread.
inline void SetLogTimestamps(bool on) {
  program_internal::log_timestamps.store(on, std::memory_order_relaxed);
}

// A running line (an event, a status, a shutdown step), with its UTC time
// unless SetLogTimestamps(false).
inline void LogLine(const std::string& line) {
  if (!program_internal::log_timestamps.load(std::memory_order_relaxed)) return Say(line);
  Say(absl::StrCat(LogTimestamp(absl::Now()), " ", line));
}

class StopSignals {
 public:
  // Blocks SIGINT, SIGTERM and SIGHUP (SIGHUP only if it was not ignored at
  // start: nohup and supervisors keep their setting) in this thread and so in
  // every thread started later; ignores SIGPIPE.
  StopSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    struct sigaction hup = {};
    if (sigaction(SIGHUP, nullptr, &hup) != 0 || hup.sa_handler != SIG_IGN) {
      sigaddset(&set_, SIGHUP);
    }
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    signal(SIGPIPE, SIG_IGN);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Waits at most `timeout` for a stop signal: returns it, or 0.
  int Wait(absl::Duration timeout) {
    const timespec ts = absl::ToTimespec(std::max(timeout, absl::Milliseconds(1)));
    const int sig = sigtimedwait(&set_, nullptr, &ts);
    return sig > 0 ? sig : 0;
  }

  // From now on, a second stop signal logs, runs `before_exit` and exits
  // 128 + the signal, unless Done() came first (a signal after a finished
  // shutdown must not turn its exit 0 into 128 + signal).
  void ExitOnSecondSignal(std::function<void()> before_exit) {
    std::thread([set = set_, done = done_, before_exit = std::move(before_exit)] {
      int again = 0;
      while (sigwait(&set, &again) != 0) {
      }
      // acquire: pairs with Done's release.
      if (done->load(std::memory_order_acquire)) return;
      LogLine(absl::StrCat("received ", SignalName(again), " again: exiting now"));
      if (before_exit) before_exit();
      std::_Exit(128 + again);
    }).detach();
  }

  void Done() { done_->store(true, std::memory_order_release); }

 private:
  sigset_t set_;
  // Shared with the detached watcher, which may outlive this object.
  std::shared_ptr<std::atomic<bool>> done_ = std::make_shared<std::atomic<bool>>(false);
};

// Writes `text` to `path` through a temporary file and rename: a reader sees
// nothing or everything. Errors: PERMISSION_DENIED naming the file.
inline absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

// A program's --ready_file: written once it serves, removed when it stops
// (also by a second signal's exit: that watcher keeps a copy). An empty path
// is no file.
class ReadyFile {
 public:
  explicit ReadyFile(std::string path) : path_(std::move(path)) {}

  // Errors: as WriteFileAtomically.
  absl::Status Write(const std::string& text) const {
    return path_.empty() ? absl::OkStatus() : WriteFileAtomically(path_, text);
  }
  void Remove() const {
    if (!path_.empty()) std::remove(path_.c_str());
  }

 private:
  std::string path_;
};

// A program's shutdown after the first stop signal: runs `shut_down` while a
// second signal exits at once (128 + the signal, `ready` removed), then
// removes `ready`.
inline void RunShutdown(StopSignals& signals, const ReadyFile& ready,
                        const std::function<void()>& shut_down) {
  MC_ASSERT(shut_down != nullptr, "RunShutdown needs the shutdown to run");
  signals.ExitOnSecondSignal([ready] { ready.Remove(); });
  shut_down();
  signals.Done();
  ready.Remove();
}

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_PROGRAM_H_
