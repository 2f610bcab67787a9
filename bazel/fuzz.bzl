"""mooncake_fuzz_test: a *_fuzz.cc target run as a bounded, deterministic test."""

load("//bazel:copts.bzl", "MOONCAKE_TEST_COPTS")

def mooncake_fuzz_test(name, srcs, deps = [], args = [], **kwargs):
    """A cc_test that drives LLVMFuzzerTestOneInput with //mooncake/base:fuzz_main.

    The target defines `extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t)`
    and optionally `std::vector<std::string> mooncake::FuzzSeeds()`.
    """
    native.cc_test(
        name = name,
        srcs = srcs,
        copts = MOONCAKE_TEST_COPTS,
        deps = deps + ["//mooncake/base:fuzz_main"],
        args = args,
        linkstatic = True,
        **kwargs
    )
