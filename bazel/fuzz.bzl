"""mooncake_fuzz_test: a *_fuzz.cc target run as a bounded, deterministic test."""

load("//bazel:copts.bzl", "MOONCAKE_TEST_COPTS")

def mooncake_fuzz_test(name, srcs, deps = [], args = [], coverage_ignorelist = None, **kwargs):
    """A cc_test that drives LLVMFuzzerTestOneInput with //mooncake/base:fuzz_main.

    The target defines `extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t)`
    and optionally `std::vector<std::string> mooncake::FuzzSeeds()`.

    Args:
      name: the target.
      srcs: the *_fuzz.cc file.
      deps: its libraries.
      args: test arguments.
      coverage_ignorelist: a clang sanitizer special-case list (a *.inc file) of functions libFuzzer
        builds (--config=libfuzzer) do not instrument for coverage (they keep ASan and
        UBSan): code another target fuzzes, whose coverage feedback would only slow
        this one down.
      **kwargs: passed to cc_test.
    """
    copts = MOONCAKE_TEST_COPTS
    if coverage_ignorelist:
        copts = copts + select({
            "//mooncake/base:libfuzzer_enabled": [
                "-fsanitize-coverage-ignorelist=$(location %s)" % coverage_ignorelist,
            ],
            "//conditions:default": [],
        })
        # In srcs (named *.inc, a header to Bazel) so that every compile action has it.
        srcs = srcs + [coverage_ignorelist]
    native.cc_test(
        name = name,
        srcs = srcs,
        copts = copts,
        deps = deps + ["//mooncake/base:fuzz_main"],
        args = args,
        linkstatic = True,
        **kwargs
    )
