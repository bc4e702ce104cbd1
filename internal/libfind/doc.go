// Package libfind finds shared libraries the way a user would look for
// them before anything loads them: on LD_LIBRARY_PATH, in the dynamic
// loader's cache (/etc/ld.so.cache, what ldconfig -p lists), in the
// system library directories, in CUDA toolkits (/usr/local/cuda*/lib64,
// $CUDA_HOME) and in the lib directories of pip's nvidia-* wheels
// (site-packages/nvidia/*/lib).
//
// Nothing is opened with dlopen: a library is a file, its version is what
// its name says. A soname such as libcuda.so.1 is usually a symlink to the
// real file (libcuda.so.535.104.05); Found.Version is the part of the real
// file's name after ".so." — the driver version for libcuda, the release
// for libnccl (2.18.3) and libcublasLt (12.2.5.6), libtool's interface
// version for libmpi (40.30.4).
//
// A Finder takes its environment and a root directory, so tests build a
// fake tree (and a fake loader cache, see WriteCache) and search it as if
// it were the machine's.
package libfind
