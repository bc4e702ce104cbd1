//go:build !mpi

package main

// mpiBuilt: this binary lacks the Open MPI backend (no build tag mpi).
const mpiBuilt = false
