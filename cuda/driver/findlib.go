package driver

import "github.com/dszero/dszero/cuda/internal/libpath"

// LibCandidate is one file a library search proposes (see FindLib).
type LibCandidate = libpath.Candidate

// FindLib lists, in the order Load searches for the CUDA libraries, every
// file that may be another GPU library that dszero loads at run time (NCCL
// in package comm/nccl): the libDirs first (--cuda-lib-dir), then
// LD_LIBRARY_PATH, the loader cache, the system and toolkit folders, the
// nvidia/<wheel> folders of every Python environment, and last the sonames
// for the dynamic loader's own search. files are name patterns
// ("libnccl.so.*"), wheels the folders under site-packages/nvidia
// ("nccl/lib"). Nothing is opened.
func FindLib(files, wheels, sonames []string, libDirs ...string) []LibCandidate {
	return libpath.FromOS(libDirs...).Candidates(libpath.Lib{Files: files, Wheels: wheels, Sonames: sonames})
}
