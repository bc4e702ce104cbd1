// Package blas multiplies single-precision matrices: the GEMM behind every
// linear layer's forward and backward pass on the CPU backend.
//
// Vocabulary:
//
//   - GEMM: C = alpha·op(A)·op(B) + beta·C, where op(X) is X or its transpose
//     Xᵀ, op(A) is m×k, op(B) is k×n and C is m×n. With beta = 1 it
//     accumulates (gradient accumulation); with beta = 0 it overwrites, and
//     whatever C held before (NaN included) is ignored.
//   - Row-major with a leading dimension: element (i, j) of a stored matrix
//     X is X[i*ldx + j]. The leading dimension ldx is the distance between
//     rows and may exceed the row width, so a GEMM can read or write a block
//     of a larger matrix. A stored matrix with r rows and w columns needs
//     ldx ≥ max(1, w) and len(X) ≥ (r-1)·ldx + w. With transA, A is stored
//     k×m; with transB, B is stored n×k.
//   - Engine: something that computes a GEMM (Sgemm) and says what it is
//     (Name, Description). Callers define the one-method interface they use
//     (a Gemmer) and any Engine satisfies it.
//   - Backend: which engine New should build. OpenBLAS is any shared
//     library with a CBLAS cblas_sgemm — libopenblas.so.0 from the Debian
//     package libopenblas0-pthread first — loaded at run time with dlopen,
//     so the binary builds and runs without it. Gonum is the pure-Go
//     gonum.org/v1/gonum/blas/gonum implementation. Auto takes OpenBLAS when
//     it loads and gonum otherwise, and the Description says which and why:
//     the choice is never silent.
//
// Errors and panics: New returns an error for a configuration that cannot
// be met (a requested library that does not load, a bad thread count); such
// a failure is a *LibraryError when the library is missing. Sgemm validates
// its arguments once, before any work, and panics when they are impossible
// (negative sizes, a leading dimension smaller than the row, a slice too
// short for the matrix it describes): those are programmer errors, and an
// unchecked call into C would read or write out of bounds.
//
// Process-wide state: the dynamic loader keeps one copy of a library however
// often it is opened, and New never closes it, so a loaded library lives as
// long as the process. OpenBLAS's thread count (Options.Threads) and its
// kernels belong to that one copy and therefore to the whole process. The
// package's one variable is the mutex that serialises re-tuning them.
//
// Concurrency: Sgemm may be called from many goroutines at once on either
// engine. Gonum parallelises each call over GOMAXPROCS; OpenBLAS uses its own
// thread pool, sized by Options.Threads or OPENBLAS_NUM_THREADS.
//
// Kernels: OpenBLAS's DYNAMIC_ARCH build picks its kernels for the CPU at
// load time, and the environment variable OPENBLAS_CORETYPE overrides the
// choice; the Description names the kernels in use ("... Cooperlake ...").
// OpenBLAS detects by the CPU's family and model and falls back to Prescott
// (SSE3) on a model it does not know, as a virtual machine's generic
// "Intel(R) Xeon(R) Processor" may be: then, unless OPENBLAS_CORETYPE is set,
// New switches the library to the kernels of the CPU's features (RetuneCore:
// Cooperlake, SkylakeX or Haswell) before its first GEMM, and the
// Description says so. On this project's 2-core VM (2026-12-04, which
// OpenBLAS 0.3.21 takes for a Prescott) BenchmarkSgemm n=512 gave 29–32
// GFLOP/s with OPENBLAS_CORETYPE=PRESCOTT and 142–144 re-tuned.
// On a CPU with full-width AVX-512 forcing an AVX2 core type (Haswell) about
// halves the speed.
//
// Measured with BenchmarkSgemm (2026-11-30; 2-core AMD EPYC, family 26, with
// AVX-512; OpenBLAS 0.3.21 from Debian 12 with its Cooperlake kernels; one
// thread; best of 15 on a loaded machine): n = 256, 512, 1024 give 201, 194,
// 184 GFLOP/s through Engine.Sgemm and 202, 195, 186 calling cblas_sgemm
// directly from C (ours ÷ direct 0.997, 0.995, 0.994); gonum on one core
// gives 13, 12, 6 GFLOP/s. With OPENBLAS_CORETYPE=Haswell OpenBLAS gives
// about 105 GFLOP/s.
package blas
