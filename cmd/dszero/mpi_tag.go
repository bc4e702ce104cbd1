//go:build mpi

package main

// mpiBuilt: this binary has the Open MPI backend (build tag mpi).
const mpiBuilt = true
