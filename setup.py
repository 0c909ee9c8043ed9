"""Builds the flashtrain Python package and its PyTorch extension with CMake (one build system for
the C++ library, the CUDA kernels and the binding).

    pip install --no-build-isolation .

needs torch installed in the same environment (it is the build's torch). CMake gets
-DFLASHTRAIN_TORCH=ON, torch's CMake prefix, and CUDA when torch has CUDA and nvcc is found.
Environment: FLASHTRAIN_CUDA=0/1 forces the CUDA backend off/on; FLASHTRAIN_CUDA_ARCHS and
FLASHTRAIN_HDIMS pass through to CMake; FLASHTRAIN_BUILD_DIR picks the CMake build directory;
MAX_JOBS caps parallel compile jobs.
"""
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBRARY_NAME = "libflashtrain_torch.so"  # python/flashtrain/_load.py loads this name
EXTENSION = "flashtrain.libflashtrain_torch"
PASS_THROUGH = ("FLASHTRAIN_CUDA_ARCHS", "FLASHTRAIN_HDIMS")


def _find_nvcc():
    nvcc = shutil.which("nvcc")
    if nvcc:
        return nvcc
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
            return os.path.join(home, "bin", "nvcc")
    return None


class CMakeBuild(build_ext):
    """Configures and builds the flashtrain_torch CMake target, then places the library where
    the package loads it from."""

    def get_ext_filename(self, fullname):
        # Called with the dotted name or its last part; either way the file keeps its plain
        # name (no Python ABI suffix): it is loaded by torch.ops.load_library, not imported.
        parts = fullname.split(".")
        if parts[-1] == EXTENSION.split(".")[-1]:
            return os.path.join(*parts[:-1], LIBRARY_NAME)
        return super().get_ext_filename(fullname)

    def build_extension(self, ext):
        import torch

        build_dir = os.environ.get("FLASHTRAIN_BUILD_DIR") or os.path.join(ROOT, "build-python")
        nvcc = _find_nvcc()
        forced = os.environ.get("FLASHTRAIN_CUDA")
        cuda = forced == "1" if forced in ("0", "1") else bool(torch.version.cuda and nvcc)
        # The torch package directory first, so its own libtorch is found before any system one.
        prefix = [os.path.dirname(torch.__file__), torch.utils.cmake_prefix_path]
        args = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                "-DFLASHTRAIN_TORCH=ON", "-DFLASHTRAIN_TESTS=OFF",
                "-DFLASHTRAIN_CUDA=" + ("ON" if cuda else "OFF"),
                "-DCMAKE_PREFIX_PATH=" + ";".join(prefix)]
        if cuda and nvcc:
            args.append("-DCMAKE_CUDA_COMPILER=" + nvcc)
        for name in PASS_THROUGH:
            if os.environ.get(name):
                args.append("-D%s=%s" % (name, os.environ[name]))
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
        subprocess.check_call(args)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "flashtrain_torch",
                               "-j", jobs])
        built = os.path.join(build_dir, "python", "flashtrain", LIBRARY_NAME)
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


setup(
    name="flashtrain",
    version="0.1.0",
    description="FlashAttention-style attention for training: C++/CUDA with a PyTorch drop-in",
    package_dir={"": "python"},
    packages=["flashtrain", "flashtrain.integrations"],
    ext_modules=[Extension(EXTENSION, sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' staging tree stays out of "build", which scripts/test.sh uses for CMake.
    options={"build": {"build_base": os.path.join("build-python", "setuptools")}},
    python_requires=">=3.8",
    zip_safe=False,
)
