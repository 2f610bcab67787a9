"""cuda_configure: the CUDA toolkit as a repository, or an empty stand-in.

A fresh Debian machine has no /usr/local/cuda. The default build never needs
CUDA (CUDA targets are incompatible unless --config=cuda), but Bazel still
loads the repository of every label it sees, so the repository must exist
everywhere. With the toolkit present it exposes its headers and libcudart;
without it, `@cuda//:cudart` is an empty library and `@cuda//:available`
says so (a CUDA build then fails at compile time naming cuda_runtime.h).
"""

def _cuda_configure_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    header = ctx.path(root + "/include/cuda_runtime.h")
    if header.exists:
        ctx.symlink(root + "/include", "include")
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

# CUDA runtime API (host code only; no device kernels need nvcc).
cc_library(
    name = "cudart",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp"]),
    includes = ["include"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lcudart"],
)

""".format(root = root))
    else:
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

# No CUDA toolkit at {root}: an empty stand-in.
cc_library(name = "cudart")
""".format(root = root))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
