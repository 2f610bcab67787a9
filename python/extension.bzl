"""mooncake_py_extension: one pybind11 extension module of the package."""

load("//bazel:copts.bzl", "MOONCAKE_DEFAULT_COPTS")

def mooncake_py_extension(name, srcs, deps):
    """A shared object `name` (e.g. "mooncake/store.so") importable with python/ on sys.path.

    Args:
      name: the module's path under python/, ending in .so.
      srcs: the binding's sources (argument conversion only).
      deps: the C++ libraries it binds; the Python headers are added.
    """
    native.cc_binary(
        name = name,
        srcs = srcs,
        copts = MOONCAKE_DEFAULT_COPTS + [
            "-fvisibility=hidden",
            # pybind11 2.10's headers trip these; our code is checked without them.
            "-Wno-unused-parameter",
            "-Wno-missing-field-initializers",
        ],
        linkshared = True,
        linkstatic = True,
        visibility = ["//visibility:public"],
        deps = deps + ["@python3//:python_headers"],
    )
