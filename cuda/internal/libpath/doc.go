// Package libpath finds the CUDA shared libraries on a machine without
// running anything: it lists, in a fixed order, every file that could be
// the library, and the caller opens them one after another until one
// loads. The order is what a CUDA user expects:
//
//  1. the directories of --cuda-lib-dir (Env.LibDirs), as given;
//  2. LD_LIBRARY_PATH, left to right;
//  3. the dynamic loader's cache, /etc/ld.so.cache (parsed here, see
//     ReadLDCache), which is where ldconfig put the driver;
//  4. the folder the driver (libcuda.so.1) was found in, for the other
//     libraries (Env.DriverDir);
//  5. /usr/local/nvidia/lib64 (NVIDIA container toolkit),
//     /usr/lib/x86_64-linux-gnu (distribution packages), /usr/local/cuda*/lib64
//     (toolkit installs, newest version first);
//  6. the nvidia/*/lib folders of the CUDA wheels of every Python
//     environment found: $VIRTUAL_ENV, $CONDA_PREFIX, pyenv versions, the
//     prefix of each python3 on $PATH, ~/.local and the system
//     site-packages. CUDA 13 wheels put libnvrtc, libcublasLt and
//     libcublas in nvidia/cu13/lib; CUDA 12 wheels use one folder per
//     library (nvidia/cuda_nvrtc/lib, nvidia/cublas/lib).
//
// A Lib names its files by patterns (libnvrtc.so.* matches every
// versioned name); within one folder the highest version comes first.
// Every candidate the search produced, found or not, is kept with where it
// came from (Candidate.Source), so that an error can list every path
// tried. Nothing here opens a library: that is the loader's job, and
// nothing reads the process environment except FromOS, so tests build an
// Env by hand.
package libpath
