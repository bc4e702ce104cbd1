// host_launch.cpp: runs a kernel of the host-compiled sources as CUDA
// would: every block of the grid in turn, each with blockDim.x threads
// started together, __syncthreads a barrier among them. __shared__ is
// static storage, shared by a block's threads as on a GPU. Compiled with
// -include cuda_shim.h, which declares what is defined here.
#include <pthread.h>
#include <thread>
#include <vector>

thread_local dim3_ threadIdx, blockIdx;
dim3_ blockDim, gridDim;
static pthread_barrier_t barrier;

void __syncthreads() { pthread_barrier_wait(&barrier); }

typedef void (*thunk_t)(const unsigned long long*);

extern "C" void host_launch(thunk_t thunk, const unsigned long long* args, unsigned gx, unsigned gy, unsigned gz, unsigned bx) {
    gridDim = {gx, gy, gz};
    blockDim = {bx, 1, 1};
    for (unsigned z = 0; z < gz; z++)
        for (unsigned y = 0; y < gy; y++)
            for (unsigned x = 0; x < gx; x++) {
                pthread_barrier_init(&barrier, nullptr, bx);
                std::vector<std::thread> ts;
                for (unsigned t = 0; t < bx; t++) {
                    ts.emplace_back([=] {
                        blockIdx = {x, y, z};
                        threadIdx = {t, 0, 0};
                        thunk(args);
                    });
                }
                for (auto& th : ts) th.join();
                pthread_barrier_destroy(&barrier);
            }
}
