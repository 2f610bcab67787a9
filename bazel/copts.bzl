"""Shared compiler flags and hardware gates for every mooncake target."""

MOONCAKE_DEFAULT_COPTS = [
    "-std=c++20",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-missing-field-initializers",
]

# Tests and benchmarks: same warnings; gtest's macros trip -Wsign-compare in
# ways that say nothing about our code.
MOONCAKE_TEST_COPTS = MOONCAKE_DEFAULT_COPTS + [
    "-Wno-sign-compare",
]

# target_compatible_with values: a target that needs libibverbs or the CUDA
# runtime builds only under --config=rdma / --config=cuda and is skipped
# (not failed) by `bazel build //...` otherwise.
REQUIRES_RDMA = select({
    "//bazel:rdma_enabled": [],
    "//conditions:default": ["@platforms//os:none"],
})

REQUIRES_CUDA = select({
    "//bazel:cuda_enabled": [],
    "//conditions:default": ["@platforms//os:none"],
})
